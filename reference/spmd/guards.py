"""The two SPMD guard rails, gated by ``NEURON_LIBTORCH_SPMD_STRICT``.

- :func:`check_rank_constants` (the body of ``RankConstantCheckPass``) looks at the graph for the
  *cause* of per-rank divergence: a small integer constant tensor (``torch.tensor([[c]])``,
  ``torch.full``) built while a runtime ``rank`` input is in the graph.
- :func:`check_single_artifact` (the single-artifact check of ``parallel_compile``) looks at the
  *outcome*: for every distinct graph, the hash directories being compiled and the ranks that
  staged each. Every rank that staged anything should appear in each graph's one directory; a
  directory missing ranks is a per-rank splinter.

Both warn (:class:`SPMDWarning`) by default and raise (:class:`RankConstantError`,
:class:`SplinterError`) when the strict flag is set. The flag is handed to them (``strict=``):
a compile passes its request's, ``parallel_compile`` and the seeds' keyword entry of the passes
(``run_passes(gm, **kwargs)``) read ``NEURON_LIBTORCH_SPMD_STRICT`` when they are called.
"""

from __future__ import annotations

import logging
import re
import warnings
from dataclasses import dataclass
from typing import Iterable, Mapping

import torch

from reference.spmd.errors import RankConstantError, SplinterError

log = logging.getLogger(__name__)

#: Largest element count of a constant that still looks like a baked rank value.
SMALL_CONSTANT_NUMEL = 16
_RANK_NAME = re.compile(r"(^|_)rank$")
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)')
_CONSTANT_BUILDERS = {"tensor", "full", "as_tensor", "scalar_tensor"}


class SPMDWarning(UserWarning):
    """A guard rail found per-rank divergence and tolerated it (the strict flag is not set)."""


@dataclass(frozen=True)
class RankConstant:
    node: str
    builder: str
    value: object
    source: str  # "file:line in function: code", or "" when the graph carries no stack trace

    def describe(self) -> str:
        where = f" at {self.source}" if self.source else " (no source line recorded)"
        return f"node {self.node!r} ({self.builder} -> {self.value!r}){where}"


def _example(node: torch.fx.Node):
    val = node.meta.get("example_value", node.meta.get("val"))
    return val if isinstance(val, torch.Tensor) else None


def rank_placeholders(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """Graph inputs that are the runtime rank: named ``rank`` (Dynamo: ``L_rank_``), integer, at most one element."""
    found = []
    for node in gm.graph.find_nodes(op="placeholder"):
        name = node.name.lower()
        name = re.sub(r"^l_", "", name).strip("_")
        if not _RANK_NAME.search(name):
            continue
        val = _example(node)
        if val is not None and (val.dtype.is_floating_point or val.dtype.is_complex or val.numel() > 1):
            continue
        found.append(node)
    return found


def _builder(node: torch.fx.Node) -> str | None:
    if node.op != "call_function":
        return None
    target = node.target
    name = getattr(target, "__name__", None) or str(target)
    module = getattr(target, "__module__", "") or ""
    if module.startswith("torch") or name in ("tensor",) or str(target).startswith("aten."):
        base = str(target).split(".")[-2] if str(target).startswith("aten.") else name
        if base in _CONSTANT_BUILDERS:
            return f"torch.{base}"
    return None


def _constant_args(node: torch.fx.Node) -> bool:
    found = []
    torch.fx.map_arg((node.args, node.kwargs), lambda n: found.append(n))
    return not found


def source_line(node: torch.fx.Node) -> str:
    trace = node.meta.get("stack_trace") or ""
    frames = _FRAME.findall(trace)
    if not frames:
        return ""
    path, line, func, code = frames[-1]
    return f"{path}:{line} in {func}: {code.strip()}"


def find_rank_constants(gm: torch.fx.GraphModule) -> list[RankConstant]:
    """Small integer constant tensors in a graph that has a runtime rank input (else ``[]``)."""
    if not rank_placeholders(gm):
        return []
    found = []
    for node in gm.graph.nodes:
        builder = _builder(node)
        if builder is None or not _constant_args(node):
            continue
        val = _example(node)
        if val is None or val.dtype.is_floating_point or val.dtype.is_complex or val.dtype == torch.bool:
            continue
        if val.numel() > SMALL_CONSTANT_NUMEL:
            continue
        value = node.args[0] if builder in ("torch.tensor", "torch.as_tensor", "torch.scalar_tensor") and node.args else (
            node.args[1] if len(node.args) > 1 else node.kwargs.get("fill_value")
        )
        found.append(RankConstant(node.name, builder, value, source_line(node)))
    return found


def check_rank_constants(gm: torch.fx.GraphModule, *, graph_name: str = "<graph>", strict: bool) -> list[RankConstant]:
    """Warn about (or, ``strict``, raise :class:`RankConstantError` for) baked rank constants.
    ``strict``: the caller's strict-SPMD flag (a compile request's; the seeds' keyword entry of the
    passes reads ``NEURON_LIBTORCH_SPMD_STRICT``); this module never reads the environment."""
    found = find_rank_constants(gm)
    if not found:
        return found
    lines = "\n".join(f"  - {f.describe()}" for f in found)
    message = (
        f"graph {graph_name!r} has a runtime rank input but builds {len(found)} small integer constant "
        f"tensor(s), the signature of a baked rank value that makes each rank compile its own graph:\n{lines}\n"
        "Derive the value from the rank tensor instead (e.g. ((rank % (ep * tp)) // tp).view(1, 1)); see docs/spmd.md."
    )
    if strict:
        raise RankConstantError(message + "\n(raised because NEURON_LIBTORCH_SPMD_STRICT=1)", graph_name=graph_name, findings=found)
    warnings.warn(SPMDWarning(message), stacklevel=2)
    log.warning("%s", message)
    return found


@dataclass(frozen=True)
class Splinter:
    graph: str
    key: str
    ranks: tuple[int, ...]
    missing: tuple[int, ...]

    def describe(self) -> str:
        return f"graph {self.graph!r}: hash {self.key} staged by ranks {list(self.ranks)}, missing ranks {list(self.missing)}"


def find_splinters(staged: Mapping[str, Mapping[str, Iterable[int]]]) -> list[Splinter]:
    """``staged[graph][hash] = ranks that staged that hash``; returns the per-rank splinters.

    The expected rank set is the union of the ranks over every hash directory being compiled; a
    graph is checked on its own, so a model with several distinct graphs (prefill, decode buckets,
    an encoder) passes as long as each graph collapsed to one directory holding every rank.
    """
    every: set[int] = set()
    for hashes in staged.values():
        for ranks in hashes.values():
            every.update(int(r) for r in ranks)
    splinters = []
    for graph in sorted(staged):
        for key in sorted(staged[graph]):
            ranks = tuple(sorted({int(r) for r in staged[graph][key]}))
            missing = tuple(sorted(every - set(ranks)))
            if missing:
                splinters.append(Splinter(graph, key, ranks, missing))
    return splinters


def first_difference(a: str, b: str) -> tuple[int, str, str] | None:
    """The first line (1-based) where two graph texts differ, and that line in each; ``None`` when
    they are equal."""
    left, right = a.splitlines(), b.splitlines()
    for i in range(max(len(left), len(right))):
        la = left[i] if i < len(left) else "<end of text>"
        lb = right[i] if i < len(right) else "<end of text>"
        if la != lb:
            return i + 1, la.strip(), lb.strip()
    return None


def check_single_artifact(
    staged: Mapping[str, Mapping[str, Iterable[int]]], *, strict: bool, texts: Mapping[str, str] | None = None
) -> list[Splinter]:
    """Warn about (or, strict, raise :class:`SplinterError` for) per-rank splinters.

    ``texts`` (hash -> the graph text staged under it), when given, lets the message name where two
    directories of one graph first differ: the op that carries the per-rank value."""
    splinters = find_splinters(staged)
    if not splinters:
        return splinters
    lines = "\n".join(f"  - {s.describe()}" for s in splinters)
    for graph in sorted({s.graph for s in splinters}):
        keys = sorted(k for k in staged[graph] if texts and k in texts)
        diff = first_difference(texts[keys[0]], texts[keys[1]]) if len(keys) > 1 else None
        if diff is not None:
            line, a, b = diff
            lines += (f"\n  graph {graph!r}: hashes {keys[0]} and {keys[1]} first differ at line {line} of the staged "
                      f"text:\n      {a}\n      {b}")
    hashes = sorted({s.key for s in splinters})
    message = (
        f"{len(hashes)} hash director{'y' if len(hashes) == 1 else 'ies'} compiled for only some ranks "
        f"(per-rank splinters: the graph differs per rank, so the compiler runs once per rank):\n{lines}\n"
        "Find the rank-dependent value with RankConstantCheckPass or by diffing two ranks' HLO; see docs/spmd.md."
    )
    if strict:
        raise SplinterError(message + "\n(raised because NEURON_LIBTORCH_SPMD_STRICT=1)", splinters=splinters)
    warnings.warn(SPMDWarning(message), stacklevel=2)
    log.warning("%s", message)
    return splinters


def gather_staged(keys_by_graph: Mapping[str, str], group=None) -> dict[str, dict[str, list[int]]]:
    """Every rank's ``{graph name: key}`` gathered into ``staged[graph][key] = [ranks]`` (collective)."""
    import torch.distributed as dist

    world = dist.get_world_size(group)
    gathered: list = [None] * world
    dist.all_gather_object(gathered, (dist.get_rank(), dict(keys_by_graph)), group=group)
    staged: dict[str, dict[str, list[int]]] = {}
    for rank, mapping in gathered:
        for graph, key in mapping.items():
            staged.setdefault(graph, {}).setdefault(key, []).append(rank)
    return staged


RANKS_DIR = "ranks"


def staged_ranks(entry) -> set[int]:
    """The ranks that staged one hash directory: a marker file per rank under ``<dir>/ranks/``,
    plus any recorded in the entry's metadata (``extra["ranks"]``, ``rank``)."""
    import os

    ranks: set[int] = set()
    path = getattr(entry, "path", None)
    marker_dir = os.path.join(path, RANKS_DIR) if path else None
    if marker_dir and os.path.isdir(marker_dir):
        ranks.update(int(n) for n in os.listdir(marker_dir) if n.isdigit())
    meta = getattr(entry, "metadata", None)
    if meta is not None:
        ranks.update(int(r) for r in (getattr(meta, "extra", None) or {}).get("ranks", []))
        if getattr(meta, "rank", None) is not None:
            ranks.add(int(meta.rank))
    return ranks


def mark_staged_rank(entry_dir: str, rank: int) -> None:
    """Record that ``rank`` staged the hash directory ``entry_dir`` (an empty marker file; safe
    when several ranks stage the same directory at once)."""
    import os

    os.makedirs(os.path.join(entry_dir, RANKS_DIR), exist_ok=True)
    with open(os.path.join(entry_dir, RANKS_DIR, str(int(rank))), "w", encoding="utf-8"):
        pass


def check_staged_groups(groups, *, strict: bool) -> list[Splinter]:
    """The single-artifact check over ``parallel_compile``'s staged groups
    (``{graph name: [staged entries]}``; an entry has ``key`` and ``path``/``metadata``).
    Entries that carry no rank information are left out (a single-process capture)."""
    staged: dict[str, dict[str, list[int]]] = {}
    texts: dict[str, str] = {}
    for graph, entries in groups.items():
        for entry in entries:
            ranks = staged_ranks(entry)
            if ranks:
                staged.setdefault(graph, {}).setdefault(entry.key, []).extend(sorted(ranks))
                if isinstance(getattr(entry, "hlo", None), str):
                    texts[entry.key] = entry.hlo
    return check_single_artifact(staged, strict=strict, texts=texts) if staged else []

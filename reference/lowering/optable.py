"""The table of ops that break the graph because they do not compile and run, checked in.

An op is in the table when, called alone on a small input with the backend's decomposition table,
it fails any step of the real path: torch-mlir cannot lower it to StableHLO, the installed compiler
rejects the StableHLO, the runtime fails to run the artifact, or the result differs from eager.
The reason says which step failed. Ops not in the table compiled and matched eager.

The table is data (``optable.json`` beside this module), generated from the installed tools by

    python -m reference.lowering.optable --write

and read by the graph-break rules with :func:`break_ops`, which only loads the file: nothing is
probed at import or while Dynamo traces. The file records the fingerprint of what decided it
(torch, torch-mlir, the compiler and runtime, the decomposition table, the probe); ``--check``
regenerates it and names the ops whose status changed, which is what the table's test does when
the installed tools no longer match the fingerprint.

Probing is batched: the ops that lower are compiled several to a graph, and a graph that fails to
compile or run is split in halves until the failing ops are alone.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import importlib.metadata as md
import json
import logging
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from reference.compiler.driver import CompilerConfig, CompilerDriver
from reference.core.errors import LoweringError, NEFFCompilationError
from reference.lowering.stablehlo import decomposition_table, lower_to_stablehlo
from reference.runtime import LoadedArtifact

log = logging.getLogger(__name__)

TABLE_PATH = Path(__file__).with_name("optable.json")
PROBE_VERSION = "4"  # bump when the probe below changes what it decides
BATCH = 24

# Ops whose first operand must be sorted along its last dimension (on unsorted rows the result is
# undefined, and a correct lowering differs from eager's binary search).
_SORTED_FIRST = ("searchsorted",)

# Ops whose result is not a function of their inputs: the probe compares shape and dtype only.
_UNDEFINED_VALUES = ("empty_like", "new_empty", "new_empty_strided")


# --- what decided the table --------------------------------------------------------------------


def _dist_version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "unknown"


def fingerprint(decomps: dict | None = None) -> dict[str, str]:
    """Everything the table depends on; a table whose fingerprint differs is stale."""
    decomps = decomposition_table() if decomps is None else decomps
    names = "\n".join(sorted(str(k) for k in decomps))
    return {
        "probe": PROBE_VERSION,
        "torch": torch.__version__,
        "torch_mlir": _dist_version("torch-mlir"),
        "iree_compiler": _dist_version("iree-base-compiler"),
        "iree_runtime": _dist_version("iree-base-runtime"),
        "decompositions": hashlib.sha256(names.encode()).hexdigest()[:16],
    }


# --- the checked-in table ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def load_table(path: str | None = None) -> dict[str, Any]:
    """The checked-in table: ``{"fingerprint": {...}, "ops": {name: reason}, "probed": n}``."""
    with open(path or TABLE_PATH, encoding="utf-8") as f:
        return json.load(f)


@functools.lru_cache(maxsize=1)
def break_ops() -> Mapping[str, str]:
    """``{op name: reason}`` of every op that breaks the graph, read once from the checked-in
    table (read-only: Dynamo's hook consults it on every traced call)."""
    return MappingProxyType(dict(load_table()["ops"]))


# --- probing one op -----------------------------------------------------------------------------


#: The submodules whose functions are ATen ops named ``<prefix>_<name>``: ``torch.special.erfcx`` is
#: ``aten.special_erfcx``, and its ``__name__`` (what the graph-break rule reads) is ``special_erfcx``.
SUBMODULES = ("special", "linalg", "fft")


def _function(name: str) -> Callable | None:
    """The public function of ATen op ``name``: ``torch.<name>``, ``torch.special.<rest>`` for
    ``special_<rest>`` (and linalg, fft), else ``None``."""
    fn = getattr(torch, name, None)
    if callable(fn):
        return fn
    prefix, _, rest = name.partition("_")
    if prefix in SUBMODULES and rest:
        fn = getattr(getattr(torch, prefix), rest, None)
        if callable(fn) and getattr(fn, "__name__", None) == name:
            return fn
    return None


def candidate_names() -> list[str]:
    """ATen op names a user reaches as ``torch.<name>``, ``torch.special.<name>`` (and linalg, fft)
    or ``Tensor.<name>``, functional only."""
    names = []
    for name in dir(torch.ops.aten):
        if name.startswith("_") or name.endswith("_"):
            continue  # private ops; in-place variants (AOT Autograd functionalizes them)
        if _function(name) is not None or callable(getattr(torch.Tensor, name, None)):
            names.append(name)
    return sorted(names)


def _returns_tensors(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (tuple, list)) and value:
        return all(isinstance(v, torch.Tensor) for v in value)
    return False


@dataclass
class Sample:
    """One op's probe call: ``fn(*args)`` with its eager result."""

    name: str
    fn: Callable
    args: tuple
    expected: Any


def sample_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    # Inside (0.1, 0.9): in the domain of log, sqrt, acos, atanh, ... so results are finite.
    return torch.rand(4, 4, generator=g) * 0.8 + 0.1, torch.rand(4, 4, generator=g) * 0.8 + 0.1


def make_samples(name: str) -> list[Sample]:
    """The calls of op ``name`` that run eagerly on small float tensors: unary, binary, and with a
    Python scalar as second operand (``fmod(x, 4)`` takes another path than ``fmod(x, y)``); when
    none of those runs, with a dimension (``cumprod(x, 1)``: 2 is out of range for the 4x4 input).
    Empty when none runs or the op returns no tensors (a metadata query that Dynamo answers
    itself)."""
    fn = _function(name)
    if fn is None:
        method = getattr(torch.Tensor, name)
        fn = lambda t, *a, _m=method: _m(t, *a)  # noqa: E731
    x, y = sample_inputs()
    if name in _SORTED_FIRST:
        x = x.sort(-1).values
    samples = []
    for args, dimension_form in (((x,), False), ((x, y), False), ((x, 2), False), ((x, 1), True)):
        if dimension_form and samples:
            break  # the dimension form only for an op no other form reached
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                expected = fn(*args)
        except Exception:
            continue
        if not _returns_tensors(expected):
            return []
        samples.append(Sample(name, fn, args, expected))
        if len(args) == 1:
            break  # a unary op: the other forms would only pass extra arguments through
    return samples


def _flat(value: Any) -> list[torch.Tensor]:
    return [value] if isinstance(value, torch.Tensor) else list(value)


def _tensors(samples: Sequence[Sample]) -> list[torch.Tensor]:
    return [a for s in samples for a in s.args if isinstance(a, torch.Tensor)]


def _nondeterministic(gm: torch.fx.GraphModule) -> bool:
    for node in gm.graph.nodes:
        tags = getattr(node.target, "tags", ())
        if torch.Tag.nondeterministic_seeded in tags:
            return True
    return False


#: How close a compiled half-type result must be to eager's: one or two steps of the type (the
#: suite's tolerances for the dtype). A float32 tolerance for them rejected decompositions that
#: round once where eager's kernel rounds twice (bfloat16 ``addmv``, half batch norm).
_TOLERANCE = {torch.float16: (1e-2, 1e-3), torch.bfloat16: (2e-2, 1e-2)}


def _matches(name: str, got: Sequence[torch.Tensor], want: Sequence[torch.Tensor], random: bool) -> str | None:
    """``None`` when the compiled outputs match eager, else why not."""
    if len(got) != len(want):
        return f"the compiled graph returned {len(got)} outputs, eager {len(want)}"
    for g, w in zip(got, want):
        if tuple(g.shape) != tuple(w.shape) or g.dtype != w.dtype:
            return f"the compiled result is {g.dtype}{list(g.shape)}, eager {w.dtype}{list(w.shape)}"
        if random or name in _UNDEFINED_VALUES:
            continue
        if w.is_floating_point() or w.is_complex():
            rtol, atol = _TOLERANCE.get(w.dtype, (1e-3, 1e-4))
            if not torch.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True):
                err = (g - w).abs().nan_to_num(float("inf")).max().item()
                return f"the compiled result differs from eager (max abs error {err:.3g})"
        elif not torch.equal(g, w):
            return "the compiled result differs from eager"
    return None


def _first_error(text: str) -> str:
    for line in text.splitlines():
        if "error:" in line:
            return line.split("error:", 1)[1].strip()[:200]
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[0][:200] if lines else "no diagnostics"


#: ATen ops a probe's odd call form can produce although the probed op is fine in its usual
#: forms: ``where(x)`` (one argument) is ``nonzero``, which has no static-shape lowering.
_CALL_FORM_OPS = ("torch.aten.nonzero", "torch.aten.nonzero_numpy")


def _blamable(op: str) -> bool:
    return op not in _CALL_FORM_OPS


class Prober:
    """Lower, compile and run op samples with the installed tools."""

    def __init__(self) -> None:
        self.decomps = decomposition_table()

    def trace(self, samples: Sequence[Sample]) -> torch.fx.GraphModule:
        """One graph calling every sample; tensors are its inputs, Python scalars constants."""

        def many(*tensors):
            out, it = [], iter(tensors)
            for s in samples:
                args = [next(it) if isinstance(a, torch.Tensor) else a for a in s.args]
                out.extend(_flat(s.fn(*args)))
            return tuple(out)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return make_fx(many, decomposition_table=self.decomps)(*_tensors(samples))

    def lower(self, sample: Sample) -> tuple[str | None, bool]:
        """``(reason, probed)``: why the op does not lower (``None`` if it does); ``probed`` is
        false when the sample could not even be traced (nothing is said about the op then)."""
        try:
            gm = self.trace([sample])
        except Exception:
            return None, False
        try:
            lower_to_stablehlo(gm, graph_name=f"probe_{sample.name}")
        except LoweringError as exc:
            # Only an ATen op that fails to legalize condemns the op; a failure on a constant says
            # the probe's call form was odd (e.g. the one-argument form of where), not the op.
            aten = [op for op in exc.ops if op.startswith("torch.aten.")]
            if aten:
                return "torch-mlir has no StableHLO lowering for " + ", ".join(aten), True
            # Only constants failed: torch-mlir left the ATen op that takes them unconverted (it
            # has no pattern for it) and named its first operand. The op is to blame when it is
            # the probed op itself (``diagonal``) or what the probed op decomposes to (``trace``:
            # ``aten.diagonal``), as long as it is no op the probe's own call form made up.
            users = [u for u in getattr(exc, "constant_users", ()) if _blamable(u)]
            if users:
                return "torch-mlir has no StableHLO lowering for " + ", ".join(users) + " (its scalar operands stay unconverted)", True
            return None, False
        except Exception as exc:  # noqa: BLE001 - a probe that cannot run says nothing about the op
            log.debug("lowering probe of %s did not run: %s", sample.name, exc)
            return None, False
        return None, True

    def compile_and_run(self, samples: Sequence[Sample]) -> list[str | None]:
        """Why each sample (one that lowers) fails to compile, run or match eager (``None``: it
        passed); batched, a failing batch split in halves until the failing samples are alone."""
        gm = self.trace(samples)
        args = _tensors(samples)
        try:
            lowered = lower_to_stablehlo(gm, graph_name="probe_batch")
            artifact = CompilerDriver().compile(lowered.hlo, CompilerConfig.from_args(None), graph_name="probe_batch").artifact
            loaded = LoadedArtifact(artifact, graph_name="probe_batch", input_specs=lowered.input_specs,
                                    output_specs=lowered.output_specs)
            outputs = _flat(loaded(*args))
        except Exception as exc:  # noqa: BLE001 - any failure: narrow it down, then name it
            if len(samples) > 1:
                half = len(samples) // 2
                return self.compile_and_run(samples[:half]) + self.compile_and_run(samples[half:])
            if isinstance(exc, NEFFCompilationError) and exc.compiler_log:
                return ["the compiler rejects it: " + _first_error(exc.compiler_log)]
            what = "the compiler rejects it" if isinstance(exc, NEFFCompilationError) else "the compiled graph fails to run"
            return [f"{what}: {_first_error(str(exc))}"]
        random = _nondeterministic(gm)
        result: list[str | None] = []
        i = 0
        for s in samples:
            want = _flat(s.expected)
            got = outputs[i:i + len(want)]
            i += len(want)
            result.append(_matches(s.name, got, want, random and len(samples) == 1))
        if random and len(samples) > 1 and any(result):
            # a random op in the batch: recheck each mismatch alone, where its randomness is known
            for j, reason in enumerate(result):
                if reason:
                    result[j] = self.compile_and_run([samples[j]])[0]
        return result


def generate(names: Iterable[str] | None = None, *, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Probe every candidate op (or ``names``) and return the table document. An op breaks when
    any of its probed call forms fails; the reason is the first failure's."""
    prober = Prober()
    say = progress or (lambda _msg: None)
    ops: dict[str, str] = {}
    lowered: list[Sample] = []
    probed = 0
    for name in names if names is not None else candidate_names():
        counted = False
        for sample in make_samples(name):
            reason, ok = prober.lower(sample)
            if not ok:
                continue  # this form could not be traced: it says nothing about the op
            counted = True
            if reason:
                ops.setdefault(name, reason)
            else:
                lowered.append(sample)
        probed += counted
    lowered = [s for s in lowered if s.name not in ops]
    say(f"{probed} ops probed, {len(ops)} do not lower; compiling {len(lowered)} call forms")
    for start in range(0, len(lowered), BATCH):
        batch = lowered[start:start + BATCH]
        for sample, reason in zip(batch, prober.compile_and_run(batch)):
            if reason:
                ops.setdefault(sample.name, reason)
        say(f"compiled {min(start + BATCH, len(lowered))}/{len(lowered)}")
    return {"fingerprint": fingerprint(prober.decomps), "probed": probed, "ops": dict(sorted(ops.items()))}


def diff(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """One line per op whose status or reason changed between two tables."""
    lines = []
    for name in sorted(set(old) | set(new)):
        if name not in new:
            lines.append(f"{name}: now compiles (was: {old[name]})")
        elif name not in old:
            lines.append(f"{name}: now breaks: {new[name]}")
        elif old[name] != new[name]:
            lines.append(f"{name}: {old[name]} -> {new[name]}")
    return lines


def write(doc: dict[str, Any], path: Path = TABLE_PATH) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reference.lowering.optable", description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help=f"regenerate and write {TABLE_PATH.name}")
    parser.add_argument("--check", action="store_true", help="regenerate and compare; exit 1 naming the changed ops")
    args = parser.parse_args(argv)
    old = load_table() if TABLE_PATH.exists() else {"ops": {}, "fingerprint": {}}
    if not (args.write or args.check):
        installed = fingerprint()
        print(json.dumps({"checked_in": old["fingerprint"], "installed": installed}, indent=1))
        return 0 if old["fingerprint"] == installed else 1
    doc = generate(progress=lambda msg: print(msg, file=sys.stderr))
    changes = diff(old["ops"], doc["ops"])
    print("\n".join(changes) if changes else "no op changed status")
    if args.write:
        write(doc)
        print(f"wrote {TABLE_PATH} ({len(doc['ops'])} ops break, {doc['probed']} probed)")
        return 0
    return 1 if changes or doc["fingerprint"] != old["fingerprint"] else 0


if __name__ == "__main__":
    sys.exit(main())

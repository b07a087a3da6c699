"""SPMD scenarios, run inside every rank that :mod:`conformance.harness.launcher` starts.

``run(impl_spec, names)`` loads the implementation under test, runs the named scenarios in order
and returns ``{name: result}``. A scenario that raises is recorded (type, message, traceback) rather
than ending the rank, so the other scenarios still report; ``NotSupported`` is recorded as a skip.
Scenarios talk to the implementation only through the adapter.
"""

from __future__ import annotations

import os
import traceback
import warnings
from typing import Any, Callable

import torch
import torch.distributed as dist

from conformance.harness import env
from conformance.harness.implementation import Implementation, NotSupported, helper_api, load_implementation

STRICT_VAR = "NEURON_LIBTORCH_SPMD_STRICT"


def _strict(value: str | None):
    return env.override({STRICT_VAR: value})


def _contiguous(world: int, size: int) -> list[list[int]]:
    return [list(range(s, s + size)) for s in range(0, world, size)]


def _new_graphs(before: dict, after: dict) -> dict[str, str]:
    return {g: k for g, k in after["graphs"].items() if g not in before["graphs"]}


def _decoder(impl: Implementation, rank: int, world: int, mode: str) -> dict[str, Any]:
    from neuron_fixtures.spmd import sharded_decoder

    group = impl.spmd().process_group(_contiguous(world, world))
    sharded, dense, local, full = sharded_decoder(rank, world, group, mode=mode)
    before = impl.spmd().compile_stats()
    from neuron_fixtures.models import seeded

    b, t = local[0].shape
    step_ids = torch.randint(0, dense.vocab, (b, 1), generator=seeded(77))
    step_pos = torch.full((b, 1), t, dtype=torch.long)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = impl.compile(sharded)
        out = compiled(*local, rank=impl.spmd().rank_tensor(rank))  # prefill: one graph
        expected = dense(*full)
        step = compiled(step_ids, step_pos, local[2], local[3], rank=impl.spmd().rank_tensor(rank))  # decode: another
        expected_step = dense(step_ids, step_pos, full[2], full[3])
    after = impl.spmd().compile_stats()
    # dense caches, cut to this rank's heads, are what the sharded run must have written
    exp_k = [sharded.shard_cache(c) for c in full[2]]
    return {
        "out": out,
        "expected": expected,
        "decode_out": step,
        "decode_expected": expected_step,
        "k_caches": local[2],
        "expected_k_caches": exp_k,
        "graphs": _new_graphs(before, after),
        "invocations": after["compiler_invocations"] - before["compiler_invocations"],
        "warnings": [str(w.message) for w in caught],
    }


def decoder_spmd(impl, rank, world):
    result = _decoder(impl, rank, world, "spmd")
    from neuron_fixtures.spmd import sharded_decoder

    group = impl.spmd().process_group(_contiguous(world, world))
    sharded, _, local, _ = sharded_decoder(rank, world, group, mode="spmd")
    result["texts"] = impl.spmd().lower(sharded, local, {"rank": impl.spmd().rank_tensor(rank)})
    return result


def decoder_mpmd_default(impl, rank, world):
    with _strict("0"):
        return _decoder(impl, rank, world, "mpmd")


def decoder_mpmd_strict(impl, rank, world):
    with _strict("1"):
        try:
            _decoder(impl, rank, world, "mpmd")
        except BaseException as exc:  # noqa: BLE001 - the test checks the type
            violation = impl.spmd().violation_errors()
            chain = [exc]
            while chain[-1].__cause__ is not None or chain[-1].__context__ is not None:
                chain.append(chain[-1].__cause__ or chain[-1].__context__)
            return {
                "raised": True,
                "is_violation": any(isinstance(e, violation) for e in chain),
                "error": type(exc).__name__,
                "message": "\n".join(str(e) for e in chain),
            }
        return {"raised": False}


def _all_four(x: torch.Tensor, rank: torch.Tensor, group) -> tuple[torch.Tensor, torch.Tensor]:
    import torch.distributed._functional_collectives as funcol

    y = funcol.all_reduce(x * 2 + rank, "sum", group)
    z = funcol.all_gather_single(y, 0, group)
    s = funcol.reduce_scatter_single(torch.tanh(z), "sum", 0, group)
    a = funcol.all_to_all_single(s * 3, None, None, group)
    return a + 1, funcol.all_reduce(y.amax(dim=0), "max", group)


def collectives(impl, rank, world):
    """All four collectives over tensor-parallel pairs: a 2-D mesh from 4 ranks up."""
    size = 2 if world >= 2 else 1
    group = impl.spmd().process_group(_contiguous(world, size))
    x = torch.arange(16, dtype=torch.float32).view(8, 2) / 7 + rank
    r = impl.spmd().rank_tensor(rank)

    def fn(x, rank):
        return _all_four(x, rank, group)

    helper = _helper_metrics(impl, before=True)  # resets the helper's records (and counters): before the counts below
    before = impl.spmd().compile_stats()
    expected = fn(x, r)
    out = impl.compile(fn)(x, r)
    after = impl.spmd().compile_stats()
    return {
        "out": out,
        "expected": expected,
        "graphs": _new_graphs(before, after),
        "invocations": after["compiler_invocations"] - before["compiler_invocations"],
        "texts": impl.spmd().lower(fn, (x, r)),
        "group_name": getattr(group, "group_name", None),
        "helper": helper or _helper_metrics(impl),
    }


def _helper_metrics(impl: Implementation, *, before: bool = False) -> dict[str, Any] | None:
    """What the helper API says in this rank: ``get_rank()`` and, after the compile, each metrics
    record's ``has_collectives`` (``{"skip": reason}`` without the helper API). ``before``: reset
    the records so that only the collective graph's are read."""
    try:
        api = helper_api(impl, "get_rank", "get_dynamo_metrics", "reset_dynamo_metrics")
    except NotSupported as exc:
        return {"skip": str(exc)}
    if before:
        api.reset_dynamo_metrics()
        return None
    return {"get_rank": api.get_rank(),
            "records": [{"graph_name": m.graph_name, "has_collectives": m.has_collectives} for m in api.get_dynamo_metrics()]}


def layers(impl, rank, world):
    """Each parallel layer on the SPMD path, compiled, against its dense counterpart."""
    from torch import nn

    from neuron_fixtures.models import init_deterministic, seeded
    from neuron_fixtures.spmd import (
        ColumnParallelLinear,
        ExpertParallelMoE,
        RowParallelLinear,
        VocabParallelEmbedding,
        dense_moe,
    )

    group = impl.spmd().process_group(_contiguous(world, world))
    r = impl.spmd().rank_tensor(rank)
    x = torch.randn(2, 3, 64, generator=seeded(41))
    ids = torch.randint(0, 128, (2, 5), generator=seeded(42))
    lin = init_deterministic(nn.Linear(64, 32), seed=43)
    emb = init_deterministic(nn.Embedding(128, 64), seed=44)
    moe = dense_moe()
    cases = {
        "column_parallel": (ColumnParallelLinear(lin, rank, world, group, gather_output=True), lin, x),
        "row_parallel": (RowParallelLinear(lin, rank, world, group, input_is_parallel=False), lin, x),
        "vocab_parallel_embedding": (VocabParallelEmbedding(emb, rank, world, group), emb, ids),
        "expert_parallel_moe": (ExpertParallelMoE(moe, rank, world, group), moe, x),
    }
    out = {}
    with torch.no_grad():
        for name, (layer, dense, inp) in cases.items():
            impl.reset()
            compiled = impl.compile(layer)
            out[name] = {"out": compiled(inp, rank=r), "expected": dense(inp)}
        # The row-parallel twin slices its input statically: no constant tensor for the graph
        # check to see, but a different graph per rank for the single-artifact check.
        impl.reset()
        before = impl.spmd().compile_stats()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            twin = impl.compile(RowParallelLinear(lin, rank, world, group, input_is_parallel=False, mpmd=True))
            twin_out = twin(x, rank=r)
        twin_graphs = _new_graphs(before, impl.spmd().compile_stats())
    return {
        "layers": out,
        "row_twin": {"out": twin_out, "expected": lin(x), "graphs": twin_graphs, "warnings": [str(w.message) for w in caught]},
    }


def _environ(values: dict[str, str]):
    return env.override(values)


def _host() -> tuple[int, int]:
    """This rank's host and its rank on that host, as the launcher set them (torchrun: ``GROUP_RANK``
    and ``LOCAL_RANK``); the suite's launcher starts every rank on one host."""
    ranks = env.rank_variables()
    return int(ranks.get("GROUP_RANK") or 0), int(ranks.get("LOCAL_RANK") or dist.get_rank())


def _from_host_leader(value: Any) -> Any:
    """The ``value`` of the first rank on this host (collective: every rank calls it)."""
    host, local = _host()
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, (host, local, value))
    return next(v for h, lr, v in gathered if h == host and lr == 0)


def _host_dir() -> str:
    """A fresh directory every rank on this host sees (made by the host's first rank). Ranks on
    other hosts get their own: nothing assumes a filesystem shared between hosts."""
    import tempfile

    return str(_from_host_leader(tempfile.mkdtemp(prefix="spmd-deferred-") if _host()[1] == 0 else None))


def _capture_everywhere(impl: Implementation, rank: int, world: int, mode: str, staged: str) -> None:
    from neuron_fixtures.spmd import sharded_decoder

    group = impl.spmd().process_group(_contiguous(world, world))
    sharded, _, local, _ = sharded_decoder(rank, world, group, mode=mode)
    impl.reset()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the MPMD twin's rank constants warn here; the check below is the subject
        impl.capture().capture_in_process(sharded, cache_dir=staged)(*local, rank=impl.spmd().rank_tensor(rank))
    dist.barrier()


def _compile_once(impl: Implementation, staged: str, strict: str) -> dict[str, Any]:
    """The first rank of each host builds every graph its host staged (under the strict flag
    given); the others wait and get its result."""
    result: dict[str, Any] = {}
    if _host()[1] == 0:
        with _strict(strict):
            try:
                result["graphs"] = impl.capture().parallel_compile(staged, workers=2)
                result["raised"] = None
            except impl.spmd().violation_errors() as exc:
                result["raised"] = f"{type(exc).__name__}: {exc}"
    return _from_host_leader(result)


def deferred_decoder(impl, rank, world):
    """The deferred flow on the sharded decoder (TP + EP): capture on every rank, build once per host
    (once for the world on one host), serve on every rank from the cache with a miss being an
    error; then the MPMD twin, captured the same way, which the single-artifact check must refuse
    under the strict flag. Each host keeps its staged graphs and caches in its own directory."""
    from neuron_fixtures.spmd import sharded_decoder

    root = _host_dir()
    spmd_dir, mpmd_dir = os.path.join(root, "staged-spmd"), os.path.join(root, "staged-mpmd")
    with _environ(dict(impl.cache().env(os.path.join(root, "caches")))):
        _capture_everywhere(impl, rank, world, "spmd", spmd_dir)
        built = _compile_once(impl, spmd_dir, strict="1")
        group = impl.spmd().process_group(_contiguous(world, world))
        sharded, dense, local, full = sharded_decoder(rank, world, group, mode="spmd")
        impl.reset()
        before = impl.spmd().compile_stats()
        with _environ({"NEURON_LIBTORCH_ASSERT_CACHE_HIT": "1"}), torch.no_grad():
            out = impl.compile(sharded)(*local, rank=impl.spmd().rank_tensor(rank))
            expected = dense(*full)
        after = impl.spmd().compile_stats()
        # The twin is captured with the flag off: under it the graph-level guard (the rank-constant
        # pass) refuses the trace already, and the subject here is the build's single-artifact check.
        with _strict(None):
            _capture_everywhere(impl, rank, world, "mpmd", mpmd_dir)
        twin = _compile_once(impl, mpmd_dir, strict="1")
    return {
        "built": built,
        "out": out,
        "expected": expected,
        "served_graphs": _new_graphs(before, after),
        "invocations": after["compiler_invocations"] - before["compiler_invocations"],
        "twin": twin,
    }


class _BakedRank(torch.nn.Module):
    """Adds its rank as a baked constant: each rank traces (and stages) its own graph."""

    def __init__(self, rank: int) -> None:
        super().__init__()
        self.rank = rank

    def forward(self, x, rank):
        return x + rank + torch.tensor([[self.rank]], dtype=torch.int32)


def deferred_guard(impl, rank, world):
    """``parallel_compile``'s single-artifact check with the eager fallback on and off: every rank
    stages its own graph of a small MPMD model (with the flag off); rank 0 builds them under the
    strict flag (the violation itself must come out, whatever the fallback setting) and without it
    (tolerated: a warning, and every entry built). Per host, like the deferred flow."""
    staged = os.path.join(_host_dir(), "staged")
    result: dict[str, Any] = {}
    with _environ(dict(impl.cache().env(os.path.join(os.path.dirname(staged), "caches")))):
        impl.reset()
        with _strict("0"), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            impl.capture().capture_in_process(_BakedRank(rank), cache_dir=staged)(torch.ones(2, 2, dtype=torch.int32), rank=impl.spmd().rank_tensor(rank))
        dist.barrier()
        if _host()[1] == 0:
            for strict in ("1", "0"):
                for fallback in ("on", "off"):
                    outcome: dict[str, Any] = {}
                    flags = {"TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION": "0" if fallback == "on" else "1"}
                    with _strict(strict), _environ(flags), warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        try:
                            outcome["graphs"] = impl.capture().parallel_compile(staged, workers=1)
                            outcome["raised"] = None
                        except BaseException as exc:  # noqa: BLE001 - the test checks the type
                            outcome["raised"] = type(exc).__name__
                            outcome["is_violation"] = isinstance(exc, impl.spmd().violation_errors())
                            outcome["message"] = str(exc)
                    outcome["warnings"] = [str(w.message) for w in caught]
                    result[f"{'strict' if strict == '1' else 'warn'}-fallback_{fallback}"] = outcome
        dist.barrier()
    return result


SCENARIOS: dict[str, Callable[[Implementation, int, int], dict]] = {
    "deferred_guard": deferred_guard,
    "deferred_decoder": deferred_decoder,
    "decoder_spmd": decoder_spmd,
    "decoder_mpmd_default": decoder_mpmd_default,
    "decoder_mpmd_strict": decoder_mpmd_strict,
    "collectives": collectives,
    "layers": layers,
}


def run(impl_spec: str | None, names: list[str]) -> dict[str, dict]:
    impl = load_implementation(impl_spec)
    rank, world = dist.get_rank(), dist.get_world_size()
    results: dict[str, dict] = {}
    for name in names:
        impl.reset()
        try:
            results[name] = {"status": "ok", **SCENARIOS[name](impl, rank, world)}
        except NotSupported as exc:
            results[name] = {"status": "skip", "reason": str(exc)}
        except Exception as exc:  # noqa: BLE001 - reported to the test that reads this scenario
            results[name] = {"status": "error", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        dist.barrier()
    return results

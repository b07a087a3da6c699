"""ATOM's per-rank folders in a real two-rank world: each rank writes its compile cache and its debug
dump under ``rank_<i>``, the rank ``get_rank()`` gives (``torch.distributed``, gloo on loopback)."""

from __future__ import annotations

import multiprocessing
import os
import traceback

import pytest
import torch

pytestmark = pytest.mark.slow  # two forked ranks joining a gloo group


def _rank(rank: int, world: int, store: str, root: str, results) -> None:
    try:
        import torch.distributed as dist

        import torch._inductor.config as inductor_config

        import reference
        import reference.atom as atom

        # Inductor compiles this rank's pieces on its own thread: a forked child has none of the
        # parent's compile-pool threads, and a worker that ran Inductor before forks with the
        # pool's bookkeeping but not its threads (its kernels' futures then never complete).
        inductor_config.compile_threads = 1

        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
        try:
            config = atom.Config(max_num_seqs=8, compilation_config=atom.CompilationConfig(
                level=3, cudagraph_capture_sizes=[1, 2], cache_dir=os.path.join(root, "cache"),
                debug_dump_path=os.path.join(root, "dump"), splitting_ops=[]))
            backend = atom.VllmBackend(config)
            torch._dynamo.reset()
            model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
            x = torch.randn(2, 4)
            with torch.no_grad():
                out = torch.compile(model, backend=backend, fullgraph=True)(x)
                torch.testing.assert_close(out, model(x))
            results.put((rank, reference.get_rank(), backend.cache_dir))
        finally:
            dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - reported to the parent
        results.put((rank, None, traceback.format_exc()))


@pytest.mark.spec("004.cache.rank-dir", "004.config.debug-dump-rank-0", "001.helper.get-rank-distributed")
def test_each_rank_of_a_two_rank_world_writes_under_its_own_rank_folder(tmp_path):
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, 2, str(tmp_path / "store"), str(tmp_path), results)) for r in range(2)]
    for p in procs:
        p.start()
    got = {}
    try:
        for _ in procs:
            rank, seen, where = results.get(timeout=240)
            assert seen is not None, f"rank {rank} failed:\n{where}"
            got[rank] = (seen, where)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert {r: seen for r, (seen, _) in got.items()} == {0: 0, 1: 1}
    for rank, (_, cache_dir) in got.items():
        assert f"{os.sep}rank_{rank}{os.sep}" in cache_dir + os.sep, cache_dir
        assert os.path.isfile(os.path.join(cache_dir, "vllm_compile_cache.py")), os.listdir(cache_dir)
        assert os.listdir(tmp_path / "dump" / f"rank_{rank}"), f"rank {rank} dumped nothing"

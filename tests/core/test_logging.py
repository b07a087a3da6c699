"""Watchable compiles: the per-graph log line, progress of long compiles and lock waits,
``parallel_compile``'s progress display, warnings attributed to the user's line, and what a
process prints by default and under ``TORCH_LOGS``."""

from __future__ import annotations

import io
import logging
import os
import re
import subprocess
import sys
import textwrap
import time
import warnings

import pytest
import torch

from reference.cache.neff_cache import NeffCache
from reference.core import diagnostics
from reference.core.diagnostics import Heartbeat
from reference.flows.staged_build import CompiledGraphRecord, Progress

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _cube_plus(x):
    return x * x * x + 1


def test_one_info_line_per_graph_says_compiled_then_cache_hit(caplog):
    x = torch.randn(5, 3) + 17.0  # a shape and function of this test only: the first compile misses
    with caplog.at_level(logging.INFO, logger="reference"):
        torch.compile(_cube_plus, backend="neuron")(x)
        torch._dynamo.reset()
        torch.compile(_cube_plus, backend="neuron")(x)
    lines = [r.getMessage() for r in caplog.records if r.name == "reference.pipeline"]
    pattern = r"graph (\S+) key ([0-9a-f]{12}): (compiled \(cache miss\)|cache hit) in \d+\.\d\d s \(lowering \d+\.\d\d s\)"
    found = [re.fullmatch(pattern, line) for line in lines]
    assert len(found) == 2 and all(found), lines
    assert found[0].group(3) == "compiled (cache miss)" and found[1].group(3) == "cache hit"
    assert found[0].group(2) == found[1].group(2)  # the same key


def test_a_heartbeat_logs_while_a_block_runs_and_not_after(caplog):
    with caplog.at_level(logging.INFO, logger=diagnostics.PROGRESS):
        with Heartbeat(lambda s: f"still busy ({s:.1f} s)", every=0.05):
            time.sleep(0.3)
        count = len(caplog.records)
        time.sleep(0.15)
        with Heartbeat(lambda s: "never", every=5.0):
            pass
    assert count >= 2 and len(caplog.records) == count
    assert all(re.fullmatch(r"still busy \(\d+\.\d s\)", r.getMessage()) for r in caplog.records)


def test_a_long_compile_says_it_is_still_compiling(caplog, monkeypatch):
    monkeypatch.setattr(diagnostics, "PROGRESS_EVERY_S", 0.05)
    x = torch.randn(7, 2) - 3.0
    with caplog.at_level(logging.INFO, logger="reference"):
        torch.compile(lambda t: torch.tanh(t) * 3 - t, backend="neuron")(x)
    progress = [r.getMessage() for r in caplog.records if r.name == diagnostics.PROGRESS]
    assert progress and all(re.fullmatch(r"still compiling graph \S+_inference_\d+ \(\d+ s\)", m) for m in progress)


def test_a_wait_for_another_process_lock_names_key_and_holder(tmp_path, caplog, monkeypatch):
    # A real second process holds the key's compile lock for a while.
    monkeypatch.setattr(diagnostics, "PROGRESS_EVERY_S", 0.1)
    key = "ab" * 16
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from reference.cache.neff_cache import NeffCache
            lock = NeffCache({str(tmp_path / 'neff')!r}, {str(tmp_path / 'local')!r}).acquire({key!r}, graph_name="g")
            print("locked", flush=True)
            time.sleep(1.0)
            lock.release()
        """)],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": REPO},
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        cache = NeffCache(str(tmp_path / "neff"), str(tmp_path / "local"), lock_timeout=60)
        with caplog.at_level(logging.INFO, logger=diagnostics.PROGRESS):
            with cache.acquire(key, graph_name="g"):
                pass
    finally:
        holder.wait(timeout=60)
    waits = [r.getMessage() for r in caplog.records if r.name == diagnostics.PROGRESS]
    assert waits, "no line while waiting for the lock"
    assert f"waiting for the lock on key {key} held by pid {holder.pid}" in waits[0], waits
    # a line made as the holder lets go may find its note gone already
    assert all(m.startswith(f"waiting for the lock on key {key} held by ") for m in waits), waits


def _record(name: str, ok: bool = True, hit: bool = False) -> CompiledGraphRecord:
    return CompiledGraphRecord(name, "s" * 8, "k" * 32, [], "recorded", ok=ok, cache_hit=hit,
                               error=None if ok else "NEFFCompilationError: bad")


def test_parallel_compile_progress_is_plain_lines_off_a_terminal():
    out = io.StringIO()
    progress = Progress(out, terminal=False)
    progress(1, 3, _record("g1"), 1.0)
    progress(2, 3, _record("g2", hit=True), 0.1)
    progress(3, 3, _record("g3", ok=False), 0.5)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and "\r" not in out.getvalue()
    assert lines[0].startswith("parallel_compile [1/3] g1 (kkkk") and "compiled" in lines[0] and "s left" in lines[0]
    assert "[2/3] g2" in lines[1] and "cache hit" in lines[1]
    assert "[3/3] g3" in lines[2] and "FAILED: NEFFCompilationError: bad" in lines[2] and "left" not in lines[2]


def test_parallel_compile_progress_rewrites_one_line_on_a_terminal():
    out = io.StringIO()
    progress = Progress(out, terminal=True)
    progress(1, 3, _record("g1"), 1.0)
    progress(2, 3, _record("g2", ok=False), 0.5)
    progress(3, 3, _record("g3"), 0.5)
    text = out.getvalue()
    assert text.count("\r\x1b[K") == 3 and text.endswith("\n")
    shown = [seg for seg in text.split("\r\x1b[K") if seg]
    assert not shown[0].endswith("\n")  # rewritten in place by the next one
    assert shown[1].endswith("\n") and "FAILED" in shown[1]  # a failure keeps its own line


def test_a_warning_points_at_the_users_line_and_is_not_also_logged(caplog):
    with caplog.at_level(logging.DEBUG, logger="reference"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.compile(_cube_plus, backend="neuron", options={"bogus_option": 1})(torch.ones(2))  # this line
    mine = [w for w in caught if "bogus_option" in str(w.message)]
    assert len(mine) == 1
    assert mine[0].filename == __file__
    assert "this line" in open(__file__).read().splitlines()[mine[0].lineno - 1]
    assert not [r for r in caplog.records if "bogus_option" in r.getMessage()]


_CHILD = textwrap.dedent("""
    import torch
    from reference.core import diagnostics
    diagnostics.PROGRESS_EVERY_S = 0.05
    torch.compile(lambda t: torch.sin(t) * 5 + t, backend="neuron")(torch.randn(6, 5))
""")


def _run_child(tmp_path, **extra_env) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TORCH_LOGS"}
    env.update(PYTHONPATH=REPO, TORCH_NEURONX_NEFF_CACHE_DIR=str(tmp_path / "neff"),
               TORCH_NEURONX_HLO_CACHE_DIR=str(tmp_path / "hlo"), TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR=str(tmp_path / "local"),
               TORCH_NEURONX_DEBUG_DIR=str(tmp_path / "debug"), **extra_env)
    done = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stderr


def test_by_default_a_process_prints_progress_but_not_the_per_graph_line(tmp_path):
    err = _run_child(tmp_path)
    assert re.search(r"^\[reference\] still compiling graph \S+ \(\d+ s\)$", err, re.M), err[-2000:]
    assert "compiled (cache miss)" not in err


def test_torch_logs_reference_shows_the_per_graph_line(tmp_path):
    err = _run_child(tmp_path, TORCH_LOGS="reference")
    assert re.search(r"graph \S+ key [0-9a-f]{12}: compiled \(cache miss\) in", err), err[-2000:]
    assert "[reference] " not in err  # torch's handler and format, not the default one

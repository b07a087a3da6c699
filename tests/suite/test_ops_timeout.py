"""The op lane's per-row bound (conformance/harness/opinfo.py: ``row_deadline``, ``RowTimedOut``).

These tests do not hang a real op: no OpInfo entry hangs on demand. They use fake slow ops (a
Python loop that sleeps; and one that swallows the soft stop, which stands in for a loop in native
code that never returns to Python), with bounds of a fraction of a second.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import pytest
import torch

from conformance.adapters.torch_builtin import aot_eager
from conformance.harness import opinfo

_ROOT = Path(__file__).resolve().parents[2]

def _slow(*_args, **_kwargs):
    """A fake op that never ends on its own (what a hung row looks like from Python)."""
    while True:
        time.sleep(0.01)


def test_a_row_past_its_bound_is_stopped_and_the_process_goes_on():
    started = time.monotonic()
    with pytest.raises(opinfo.RowTimedOut) as info:
        with opinfo.row_deadline(0.3, grace=30):
            _slow()
    assert 0.25 < time.monotonic() - started < 5
    assert info.value.seconds == 0.3
    # the timer and the handler are gone: the process runs on as before
    with opinfo.row_deadline(0.3, grace=30):
        time.sleep(0.05)
    time.sleep(0.4)  # past the old bound: nothing fires
    row = opinfo.timed_out("masked.sum", "float32", 0.3)
    assert row.verdict == opinfo.ERROR and "RowTimedOut" in row.detail and "0.3 s" in row.detail


def test_no_bound_leaves_the_block_alone():
    with opinfo.row_deadline(None):
        time.sleep(0.01)
    with opinfo.row_deadline(0):
        time.sleep(0.01)


def test_the_timeout_passes_through_the_lanes_own_except_clauses():
    """run_op treats an exception of eager's as "eager rejects the sample" (not supported) and one
    of the compiled call as an error; the timeout must reach the caller as itself, not as either."""
    fake = types.SimpleNamespace(
        name="fake_slow_op", variant_test_name="", decorators=(), op=_slow,
        sample_inputs=lambda device, dtype, requires_grad=False: iter(
            [types.SimpleNamespace(input=torch.ones(2, dtype=dtype), args=(), kwargs={})]),
    )
    with pytest.raises(opinfo.RowTimedOut):
        with opinfo.row_deadline(0.5, grace=30):
            opinfo.run_op(aot_eager(), fake, "float32")


_LANE = textwrap.dedent('''
    import time
    from conformance.harness import opinfo

    def test_native_hang():
        out = "{out}"
        def record():
            with open(out, "w") as fh:
                fh.write(opinfo.timed_out("fake", "float32", 0.3, ended_process=True).detail)
        with opinfo.row_deadline(0.3, grace=0.3, on_hard_expiry=record):
            while True:
                try:
                    time.sleep(0.01)
                except opinfo.RowTimedOut:
                    pass  # the fake op swallows the soft stop, as a loop in native code never sees it

    def test_next_row():
        assert True
''')


def test_a_row_that_will_not_stop_ends_its_worker_with_its_verdict_and_the_lane_goes_on(tmp_path):
    """The hard stop: the row's verdict is written, the xdist worker ends, xdist starts another
    and runs the next row. A small pytest run of its own (no torch, no suite plugin)."""
    out = tmp_path / "verdict.txt"
    (tmp_path / "test_lane.py").write_text(_LANE.format(out=out), encoding="utf-8")
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONPATH": str(_ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "xdist", "-n", "1", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
         "--rootdir", str(tmp_path), str(tmp_path / "test_lane.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    text = proc.stdout + proc.stderr
    assert "RowTimedOut" in out.read_text() and "process running it was ended" in out.read_text()
    assert "crashed" in text, text[-2000:]
    assert "1 failed, 1 passed" in text, text[-2000:]

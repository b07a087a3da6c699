"""The project's run order (the root conftest.py): longest modules first, each module whole."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]


def _conftest():
    spec = importlib.util.spec_from_file_location("project_conftest", ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _items(*ids):
    return [SimpleNamespace(nodeid=i) for i in ids]


def test_modules_move_whole_longest_first_and_unrecorded_ones_last():
    order = _conftest()
    seconds = order.module_seconds({"a.py::t1": 1.0, "a.py::t2": 2.0, "b.py::t1": 5.0, "c.py::t[x]@g": 0.5})
    assert seconds == {"a.py": 3.0, "b.py": 5.0, "c.py": 0.5}
    items = _items("a.py::t1", "a.py::t2", "new.py::t", "c.py::t[x]", "b.py::t1", "b.py::t2")
    got = [i.nodeid for i in order.longest_modules_first(items, seconds)]
    assert got == ["b.py::t1", "b.py::t2", "a.py::t1", "a.py::t2", "c.py::t[x]", "new.py::t"]


def test_the_checked_in_record_times_the_modules_that_take_longest():
    order = _conftest()
    seconds = order.module_seconds(json.loads((ROOT / ".test_durations").read_text()))
    for module in ("tests/suite/test_selfcheck.py", "conformance/tests/test_cache_reliability.py",
                   "conformance/tests/test_compiler_args_flows.py"):
        assert (ROOT / module).is_file() and seconds[module] > 30, module

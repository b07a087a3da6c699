"""Contract: lowering is a pure function of the model and its input specs.

Two fresh processes, started with different ``PYTHONHASHSEED`` values and working directories,
lower every fixture to byte-identical StableHLO, and that text carries no file path or source
location (it is what the cache key and the snapshots are made from).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

import neuron_fixtures
from conformance.harness.child import raise_if_not_supported
from conformance.plugin import SUITE

NAMES = neuron_fixtures.names()
# The module fixture starts two lowering processes: --dist=loadgroup keeps the module on one xdist
# worker, so a run starts them once.
pytestmark = pytest.mark.xdist_group("hlo_determinism")


def _lower_in_child(impl_spec: str, tmp_path, seed: str, tag: str) -> dict:
    workdir = tmp_path / f"cwd-{tag}"
    workdir.mkdir()
    out = tmp_path / f"hlo-{tag}.json"
    # each child has an HLO cache of its own: lowering goes through the path users run (HLO cache
    # included), and a text one child read from the other's cache would prove nothing
    env = {**os.environ, "PYTHONHASHSEED": seed, "TORCH_NEURONX_HLO_CACHE_DIR": str(tmp_path / f"hlo-cache-{tag}")}
    cmd = [sys.executable, "-m", "conformance.tests._lower_child", "--impl", impl_spec, "--out", str(out), *NAMES]
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=600)
    raise_if_not_supported(proc.returncode, proc.stderr, "lowering child")
    assert proc.returncode == 0, f"lowering child failed:\n{proc.stderr[-4000:]}"
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def two_processes(pytestconfig, tmp_path_factory):
    spec = pytestconfig.stash[SUITE].spec
    tmp = tmp_path_factory.mktemp("determinism")
    with ThreadPoolExecutor(2) as pool:
        a = pool.submit(_lower_in_child, spec, tmp, "0", "a")
        b = pool.submit(_lower_in_child, spec, tmp, "12345", "b")
        return a.result(), b.result()


@pytest.mark.parametrize("name", NAMES)
def test_fresh_processes_lower_to_identical_text(two_processes, name):
    a, b = two_processes
    assert len(a[name]) >= 1, f"{name}: no graph was lowered"
    assert a[name] == b[name], f"{name}: StableHLO differs between two fresh processes"


@pytest.mark.parametrize("name", NAMES)
def test_in_process_lowering_matches_fresh_process(impl, two_processes, name):
    model, args = neuron_fixtures.build(name)
    assert impl.lower(model, args) == two_processes[0][name]


_PATHISH = re.compile(r"(loc\(|\.py\b|/home/|/tmp/|/usr/|site-packages|[A-Za-z]:\\\\)")


@pytest.mark.parametrize("name", NAMES)
def test_text_has_no_paths_or_locations(impl, name):
    # the text lowered here; the test above holds it equal to the fresh processes' text
    model, args = neuron_fixtures.build(name)
    for i, text in enumerate(impl.lower(model, args)):
        found = _PATHISH.findall(text)
        assert not found, f"{name} graph {i}: text contains location or path fragments {sorted(set(found))}"

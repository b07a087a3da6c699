"""``child_preload()``: what the cache tests' fork server imports before it forks a child."""

from __future__ import annotations

import subprocess
import sys

from conformance.adapters.reference import make
from conformance.harness.implementation import Implementation


def test_the_default_preloads_nothing():
    assert tuple(Implementation().child_preload()) == ()


def test_the_references_preload_is_third_party_and_leaves_the_environment_and_the_reference_alone():
    names = tuple(make().child_preload())
    assert names and not any(n == "reference" or n.startswith("reference.") for n in names), names
    # in a fresh interpreter: each imports, none asks for a variable of the backend's (os.environ.get and
    # os.getenv, watched) nor imports the reference
    probe = (
        "import os, sys\n"
        "seen = []\n"
        "real = os.environ.get\n"
        "os.environ.get = lambda k, d=None: (seen.append(k), real(k, d))[1]\n"
        f"for n in {names!r}:\n"
        "    __import__(n)\n"
        "ours = [k for k in seen if k.startswith(('TORCH_NEURONX_', 'NEURON_'))]\n"
        "assert not ours, ours\n"
        "assert not [m for m in sys.modules if m == 'reference' or m.startswith('reference.')], 'reference imported'\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]

"""What a process imports decides how fast it starts: importing the backend loads no compiler,
lowering or runtime, and a warm start loads no lowering either.

Each case runs in a fresh interpreter (``sys.modules`` of this test process says nothing about a
new one). The modules named below are the ones whose import the start-up work removed from these
paths: torch-mlir and ``iree.compiler`` (lowering and compiling), ``iree.runtime``'s package
(which imports ``ml_dtypes``, 0.6-0.9 s on the CI machine; the runtime binds IREE's native module
instead), and Inductor's scheduler and debug modules (imported by the ``aot_autograd()`` wrapper).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

HEAVY = ("torch_mlir", "iree.compiler", "iree.runtime", "ml_dtypes", "torch._inductor.scheduler",
         "torch._inductor.debug", "transformers")

PROBE = """
import json, sys
{body}
print(json.dumps({{"loaded": [m for m in {heavy!r} if m in sys.modules], "extra": extra}}))
"""


def _fresh(body: str, env: dict[str, str] | None = None) -> dict:
    code = PROBE.format(body=body, heavy=HEAVY)
    full_env = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    proc = subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_importing_the_backend_loads_no_compiler_lowering_or_runtime():
    seen = _fresh("import reference, reference.backends.neuron, reference.pipeline\nextra = None")
    assert seen["loaded"] == [], f"importing the backend loaded {seen['loaded']}"


WARM_START = """
import torch, neuron_fixtures
from reference.core.metrics import METRICS
model, args = neuron_fixtures.build("mlp")
with torch.no_grad():
    out = torch.compile(model, backend="neuron")(*args)
counters = METRICS.counters()
extra = {"compiled": counters.get("compiler_invocations", 0), "plan_hits": counters.get("plan_cache_hits", 0),
         "sum": float(out.double().sum())}
"""


def test_a_warm_start_loads_no_lowering_and_no_iree_python_package(tmp_path):
    env = {
        "TORCH_NEURONX_NEFF_CACHE_DIR": str(tmp_path / "neff"),
        "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR": str(tmp_path / "local"),
        "TORCH_NEURONX_HLO_CACHE_DIR": str(tmp_path / "hlo"),
    }
    cold = _fresh(WARM_START, env)
    assert cold["extra"]["compiled"] == 1
    assert "torch_mlir" in cold["loaded"], "the cold start lowered without torch-mlir? the probe is broken"
    warm = _fresh(WARM_START, env)
    assert warm["extra"]["compiled"] == 0 and warm["extra"]["plan_hits"] == 1, warm
    assert warm["extra"]["sum"] == cold["extra"]["sum"]
    # iree.compiler is imported for its version string only (the key's tool versions): allowed
    assert [m for m in warm["loaded"] if m != "iree.compiler"] == [], f"the warm start loaded {warm['loaded']}"

#!/usr/bin/env bash
# The ATOM graph-capture contract on a CUDA machine, with torch.cuda.CUDAGraph as the recorder, all
# in one process (a capture after another, as a serving process does): token and request graphs
# with Dynamo's eager backend and Inductor; the production default, a level-3 decoder (Inductor
# pieces) captured by ModelRunner.capture_cudagraph() under TR_HYBRID (graph, live attention, graph)
# and FULL; the production-shaped decoder (a mutating attention op reading the forward context, one
# live and one recorded inline) under FULL, FULL_DECODE_ONLY, TR_HYBRID and FULL_AND_TR_HYBRID; a
# capture after every earlier graph is gone. Each replay is checked against eager.
# Needs torch built with CUDA, pytest and this repository; nothing else (no compiler toolchain of
# the reference, no network). Without a GPU (as in CI) the tests are skipped with the reason.
# Usage: scripts/gpu_check.sh [extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
if ! "$PY" -c 'import torch, pytest' 2>/dev/null; then
    echo "gpu_check: $PY cannot import torch and pytest; set PYTHON to an interpreter that has them" >&2
    exit 2
fi
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "gpu_check: torch sees no CUDA device here; run this on a GPU machine" >&2
    exit 2
fi
"$PY" -c 'import torch; print(f"gpu_check: torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name(0)}")'
# -p no:conformance: the suite's plugin is not needed here; -o addopts="": no xdist or grouping.
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" -m pytest -p no:conformance -o addopts="" -m cuda \
    tests/atom/test_atom_graphs_cuda.py -v -rs "$@"

"""Run in a fresh process by the determinism tests: lower fixtures through the adapter.

``python -m conformance.tests._lower_child --impl SPEC --out FILE fixture [fixture ...]`` writes
``{fixture: [hlo text of each graph]}`` as JSON.
"""

from __future__ import annotations

import argparse
import json

import neuron_fixtures
from conformance.harness import child
from conformance.harness.implementation import load_implementation


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", default=None)
    parser.add_argument("--out", required=True)
    parser.add_argument("names", nargs="+")
    ns = parser.parse_args()
    impl = load_implementation(ns.impl)
    result = {}
    for name in ns.names:
        model, args = neuron_fixtures.build(name)
        impl.reset()
        result[name] = impl.lower(model, args)
    with open(ns.out, "w", encoding="utf-8") as fh:
        json.dump(result, fh)


if __name__ == "__main__":
    child.run(main)

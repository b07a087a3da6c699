"""Run in a fresh process by the cache-key tests: compute keys through the adapter.

``python -m conformance.tests._key_child --impl SPEC IN OUT``: IN is a JSON list of cases
``{"hlo", "compiler_args", "input_specs", "replica_groups"}``; OUT receives the list of keys.
"""

from __future__ import annotations

import argparse
import json

from conformance.harness import child
from conformance.harness.implementation import load_implementation


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", default=None)
    parser.add_argument("inp")
    parser.add_argument("out")
    ns = parser.parse_args()
    impl = load_implementation(ns.impl)
    cases = json.load(open(ns.inp, encoding="utf-8"))
    keys = [
        impl.cache().hash(
            c["hlo"], c["compiler_args"], [tuple(s) for s in c["input_specs"]], replica_groups=c.get("replica_groups")
        )
        for c in cases
    ]
    with open(ns.out, "w", encoding="utf-8") as fh:
        json.dump(keys, fh)


if __name__ == "__main__":
    child.run(main)

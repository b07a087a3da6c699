"""docs/bad_inputs.md: every row names a test that exists, and the catalogue keeps its size."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "bad_inputs.md"
CITED = re.compile(r"`((?:tests|conformance)/[\w/]+\.py)::(\w+)(?:\[[^`]*\])?`")


def test_every_test_the_catalogue_cites_exists():
    text = DOC.read_text()
    cited = CITED.findall(text)
    assert len(cited) >= 40, f"the catalogue cites only {len(cited)} tests"
    missing = [f"{path}::{name}" for path, name in cited
               if not (ROOT / path).is_file() or f"def {name}(" not in (ROOT / path).read_text()]
    assert missing == [], f"docs/bad_inputs.md cites tests that do not exist: {missing}"


def test_every_row_of_a_table_cites_a_test():
    rows = [line for line in DOC.read_text().splitlines()
            if line.startswith("| ") and not line.startswith("| input ") and not line.startswith("|---")]
    uncited = [row for row in rows if not CITED.search(row)]
    assert uncited == [], f"rows without a test: {uncited}"

"""Print the requirements of some optional-dependency groups of pyproject.toml, one a line.

    python scripts/extra_requirements.py scoreboard scoreboard-test > requirements.txt

For a virtual environment that needs an extra's pinned packages but not the project's own
dependencies (the scoreboard's: Jinja2 and the browser test's tools, no torch). Exits 2 naming the
group pyproject.toml lacks.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def requirements(groups: list[str], path: Path = PYPROJECT) -> list[str]:
    extras = tomllib.loads(path.read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    missing = [g for g in groups if g not in extras]
    if missing:
        raise KeyError(f"{path}: no optional-dependencies group {', '.join(missing)} (it has {', '.join(sorted(extras))})")
    return list(dict.fromkeys(req for g in groups for req in extras[g]))


def main(argv: list[str]) -> int:
    try:
        print("\n".join(requirements(argv)))
    except KeyError as exc:
        print(f"extra_requirements: {exc.args[0]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

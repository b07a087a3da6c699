"""The documentation a newcomer finds: the README starts with use and stays short, docs/README.md
lists every page, and every relative link (and its #anchor) in them leads somewhere."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README_MAX_LINES = 160
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md")), *sorted((DOCS / "support").glob("*.md"))]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(line.lstrip("#")) for line in page.read_text(encoding="utf-8").splitlines() if line.startswith("#")}


def test_the_readme_is_short_starts_with_use_and_keeps_measurements_elsewhere():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail to a page under docs/"
    first_screen = "\n".join(lines[:40])
    for command in ("make conformance", "make test", "python -m conformance new-adapter"):
        assert command in first_screen, f"README.md's first screen does not show {command!r}"
    timings = [line for line in lines if re.search(r"\d+ min \d+ s|\d+(\.\d+)? s wall", line)]
    assert not timings, f"measured times belong in docs/ci.md, not README.md: {timings}"


def test_the_docs_index_lists_every_page():
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    linked = {target.split("#")[0] for target in _LINK.findall(index)}
    pages = {p.name for p in DOCS.glob("*.md") if p.name != "README.md"} | {"support/"}
    missing = sorted(pages - linked)
    assert not missing, f"docs/README.md does not link {missing}; add each with one line on what it is for"


def test_every_relative_link_and_anchor_resolves():
    broken = []
    for page in _pages():
        for target in _LINK.findall(page.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{page.relative_to(ROOT)} -> {target} (no such heading)")
    assert not broken, "broken links: " + "; ".join(broken)

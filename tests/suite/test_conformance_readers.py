"""Optional answers are read through the suite's readers, in every conformance module.

An optional member of a capability group may answer "I have none" with ``NotSupported`` or with
an empty answer (``{}``, ``[]``, ``HelperApi()``). A test that calls such a member itself tends to
handle one form and not the other, and then fails an implementation for an honest answer. The
readers in ``conformance.harness.implementation`` (``HONEST_READERS``) turn both forms into the
same skip, so the conformance modules must never read those members directly. This check parses
the modules (no import, no torch): a new module that reads ``forced_graph_breaks()`` itself fails
here, in ``make test``, instead of in a user's run.
"""

from __future__ import annotations

import ast
import importlib
import textwrap
from pathlib import Path

import conformance
from conformance.harness import capabilities
from conformance.harness.implementation import HONEST_READERS

SUITE = Path(conformance.__file__).resolve().parent
# What the suite runs against an implementation: its test modules, their conftest and child
# scripts, and the models and plugin their fixtures come from. The harness (the readers themselves),
# the adapters (which implement the members) and the reports are the other side of the seam.
SCANNED = [SUITE / "tests", SUITE / "models", SUITE / "plugin.py"]


def direct_reads(path: Path) -> list[str]:
    """``path:line: .member -> reader`` for each direct read of an optional answer in ``path``:
    an attribute named like the member (``impl.backend().helper_api()``, or the method itself
    passed along) or ``getattr(obj, "member")``."""
    found = []
    for node in sorted(ast.walk(ast.parse(path.read_text(), str(path))), key=lambda n: getattr(n, "lineno", 0)):
        name = None
        if isinstance(node, ast.Attribute):
            name = node.attr
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)):
            name = node.args[1].value
        if name in HONEST_READERS:
            found.append(f"{path}:{node.lineno}: reads .{name} directly; use {HONEST_READERS[name]}(...) "
                         "from conformance.harness.implementation")
    return found


def _modules(roots: list[Path]) -> list[Path]:
    return sorted(p for root in roots for p in ([root] if root.is_file() else root.rglob("*.py")))


def _reader_calls(paths: list[Path]) -> int:
    """Calls of a reader by its own name (the scan's evidence that it sees the tests)."""
    readers = {r for r in HONEST_READERS.values() if "." not in r}
    return sum(1 for p in paths for node in ast.walk(ast.parse(p.read_text()))
               if isinstance(node, ast.Name) and node.id in readers)


def test_no_conformance_module_reads_an_optional_answer_directly():
    paths = _modules(SCANNED)
    assert len([p for p in paths if p.name.startswith("test_")]) >= 15, [p.name for p in paths]
    assert _reader_calls(paths) >= 20, "the scan does not see the readers being used"
    bad = [line for p in paths for line in direct_reads(p)]
    assert not bad, "\n".join(bad)


def test_the_check_fails_on_a_module_that_reads_a_member_directly(tmp_path):
    planted = tmp_path / "test_planted.py"
    planted.write_text(textwrap.dedent("""\
        import pytest
        from conformance.harness.implementation import NotSupported, helper_api


        @pytest.fixture
        def contract(impl):
            try:
                return dict(impl.backend().forced_graph_breaks())
            except NotSupported as exc:
                pytest.skip(str(exc))


        def test_rank(impl):
            assert helper_api(impl, "get_rank").get_rank() == 0  # through the reader: fine


        def test_artifact(impl, root, key):
            hook = getattr(impl.cache(), "entry_files")
            return open(hook(root, key)[0]).read()
        """))
    found = direct_reads(planted)
    assert [line.split(": ", 1)[0] for line in found] == [f"{planted}:8", f"{planted}:18"], found
    assert "reads .forced_graph_breaks directly; use forced_graph_break(...)" in found[0]
    assert "reads .entry_files directly; use cache_entry_file(...)" in found[1]


def test_every_reader_exists_and_every_member_is_one_a_group_declares():
    declared = {m for kind in (capabilities.BackendCapability, capabilities.FxPassesCapability,
                               capabilities.CacheCapability) for m in capabilities.members(kind)}
    assert set(HONEST_READERS) <= declared, set(HONEST_READERS) - declared
    for reader in HONEST_READERS.values():
        module, _, name = reader.rpartition(".")
        assert callable(getattr(importlib.import_module(module or "conformance.harness.implementation"), name)), reader

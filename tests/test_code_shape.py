"""The shape of the code, held by reading it: rules a reviewer would otherwise check by eye.

- no import circle in ``reference`` or ``conformance`` (imports inside functions count too: a lazy
  import that only dodges a circle marks a misplaced definition).
"""

from __future__ import annotations

import grimp

PACKAGES = ("reference", "conformance")


def test_no_import_circle():
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    circles = sorted(
        f"{module} -> {imported} -> ... -> {module}"
        for module in graph.modules
        for imported in graph.find_modules_directly_imported_by(module)
        if graph.chain_exists(imported, module)
    )
    assert not circles, "import circles:\n" + "\n".join(circles)

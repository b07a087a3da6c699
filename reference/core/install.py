"""Whether this environment has the reference's compiler stack.

The project installs in two shapes: the conformance suite alone (its dependencies only), and the
suite with the reference (the ``reference`` extra: torch-mlir and the IREE compiler and runtime).
The ``neuron*`` backend names are registered either way (one entry-point table), so a compile
checks the stack before it starts and names the extra to install, instead of failing half-way
with an import error from deep inside the lowering.
"""

from __future__ import annotations

import importlib.util
import sys

from reference.core.errors import CompilerStackMissingError

#: The import each part of the stack provides, and the distribution that installs it.
COMPILER_STACK = (
    ("torch_mlir", "torch-mlir"),
    ("iree.compiler", "iree-base-compiler"),
    ("iree.runtime", "iree-base-runtime"),
)


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that is absent, or a module without a spec
        return False


def missing_compiler_stack() -> list[str]:
    """The distributions of the compiler stack that cannot be imported here (empty: all present).
    Finds the modules without importing them: no MLIR library is loaded."""
    return [dist for module, dist in COMPILER_STACK if not _importable(module)]


def require_compiler_stack() -> None:
    """Raise :class:`CompilerStackMissingError`, naming the missing distributions and the extra
    that installs them, when the compiler stack is not complete."""
    missing = missing_compiler_stack()
    if missing:
        raise CompilerStackMissingError(missing, sys.prefix)

"""Single-file syrupy extensions: one ``.mlir`` or ``.json`` file per test and implementation.

Snapshots live in ``conformance/__snapshots__/<implementation>/<test module>/<test name>.<ext>``,
so a pull request that changes lowering shows the HLO diff itself, and each implementation keeps
its own reviewed text. Invariants (determinism, rank invariance) are asserted separately and hold
for every implementation.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

_IMPL = {"name": "reference"}


def set_implementation(name: str) -> None:
    _IMPL["name"] = name


class _PerImplementation(SingleFileSnapshotExtension):
    _write_mode = WriteMode.TEXT

    @classmethod
    def dirname(cls, *, test_location) -> str:
        test_dir = Path(test_location.filepath).parent
        return str(test_dir / "__snapshots__" / _IMPL["name"] / test_location.basename)


class MlirSnapshotExtension(_PerImplementation):
    file_extension = "mlir"

    def serialize(self, data: Any, **kwargs) -> str:
        if not isinstance(data, str):
            raise TypeError(f"an .mlir snapshot takes module text (str), got {type(data).__name__}")
        return data if data.endswith("\n") else data + "\n"


class JsonSnapshotExtension(_PerImplementation):
    file_extension = "json"

    def serialize(self, data: Any, **kwargs) -> str:
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

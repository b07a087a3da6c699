"""The debug directory: what each compile leaves for inspection.

For every graph the backend compiles it writes, under ``TORCH_NEURONX_DEBUG_DIR``
(default ``<tmp>/neuron_backend_``), a folder named after the graph::

    <debug dir>/<graph_name>/fx_graph.py       the ATen FX graph handed to the lowering
    <debug dir>/<graph_name>/stablehlo.mlir    the StableHLO text that was compiled
    <debug dir>/<graph_name>/artifact.vmfb     the compiled artifact (the reference's "NEFF")

Graph names are built from the sanitized model name, so they never leave the directory. The
folders this process created are removed when it exits, unless
``TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS`` is true. A debug directory that cannot be created
or written raises :class:`EnvVarError` naming the variable before anything is compiled.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading

from reference.core import env
from reference.core.atomic import write_atomic
from reference.core.errors import EnvVarError


class DebugArtifacts:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._written: set[str] = set()

    def directory(self) -> str:
        """The debug directory, created and checked writable (raises :class:`EnvVarError`)."""
        path = env.get(env.DEBUG_DIR)
        try:
            os.makedirs(path, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=path, prefix=".probe-"):
                pass
        except OSError as exc:
            raise EnvVarError(
                env.DEBUG_DIR, path, f"a directory this process can create and write ({exc.strerror})",
                default_used=not env.is_set(env.DEBUG_DIR),
            ) from None
        return path

    def write(self, graph_name: str, *, fx_code: str, hlo: str | None, artifact: bytes | None) -> str:
        root = self.directory()
        folder = os.path.join(root, graph_name)
        if os.path.dirname(os.path.abspath(folder)) != os.path.abspath(root):
            raise ValueError(f"graph name {graph_name!r} would leave the debug directory")
        created = not os.path.exists(folder)
        os.makedirs(folder, exist_ok=True)
        files = {"fx_graph.py": fx_code.encode()}
        if hlo is not None:
            files["stablehlo.mlir"] = hlo.encode()
        if artifact is not None:
            files["artifact.vmfb"] = artifact
        for name, data in files.items():
            write_atomic(os.path.join(folder, name), data)
        if created:  # only what this process created is its to remove
            with self._lock:
                self._written.add(folder)
        return folder

    def written(self) -> list[str]:
        with self._lock:
            return sorted(self._written)

    def cleanup(self) -> None:
        """Remove this process's folders unless preservation is on."""
        try:
            preserve = env.get(env.PRESERVE_COMPILATION_ARTIFACTS)
        except EnvVarError:
            preserve = True  # never delete on a malformed setting
        if preserve:
            return
        with self._lock:
            folders, self._written = self._written, set()
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)


DEBUG_ARTIFACTS = DebugArtifacts()
atexit.register(DEBUG_ARTIFACTS.cleanup)

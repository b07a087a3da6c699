"""The debug directory: what each compile leaves for inspection.

For every graph the backend compiles it writes, under ``TORCH_NEURONX_DEBUG_DIR``
(default ``<tmp>/neuron-<uid>/neuron_backend_``, private to the user), a folder named after the graph::

    <debug dir>/<graph_name>/fx_graph.py       the ATen FX graph handed to the lowering
    <debug dir>/<graph_name>/stablehlo.mlir    the StableHLO text that was compiled
    <debug dir>/<graph_name>/artifact.vmfb     the compiled artifact (the reference's "NEFF")

Graph names are built from the sanitized model name, so they never leave the directory; the
check compares real paths, and a graph folder that is a symbolic link (planted to redirect the
writes) is refused, never followed (:class:`DebugFolderError`; the backend then warns and writes
nothing). The folders this process created are removed when it exits, unless
``TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS`` is true. A debug directory that cannot be created
or written raises :class:`EnvVarError` naming the variable before anything is compiled, and one
that other users could write raises :class:`~reference.core.folders.UntrustedFolderError`.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading

from reference.core import env
from reference.core.atomic import write_atomic
from reference.core.errors import EnvVarError, NeuronBackendError
from reference.core.folders import trusted_folder


class DebugFolderError(NeuronBackendError, ValueError):
    """A graph's debug folder that is not a plain folder inside the debug directory."""


class DebugArtifacts:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._written: set[str] = set()

    def directory(self) -> str:
        """The debug directory, created and checked writable (raises :class:`EnvVarError`)."""
        path = trusted_folder(env.DEBUG_DIR)
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
        if os.path.dirname(os.path.normpath(folder)) != os.path.normpath(root):
            raise DebugFolderError(f"graph name {graph_name!r} would leave the debug directory {root}")
        created = False
        try:
            os.mkdir(folder, 0o700)
            created = True
        except FileExistsError:
            pass
        real_root = os.path.realpath(root)
        if os.path.islink(folder) or not os.path.isdir(folder) or os.path.dirname(os.path.realpath(folder)) != real_root:
            raise DebugFolderError(
                f"{env.DEBUG_DIR}: {folder} is not a plain folder inside {real_root} (a symbolic link or a file); "
                "nothing is written through it. Remove it, or point the variable at a folder only you can write"
            )
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


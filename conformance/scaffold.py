"""``python -m conformance new-adapter NAME [--backend BACKEND]``: write a runnable adapter module.

The module (``NAME.py`` in the current directory, factory ``make``) has the core filled for a
``torch.compile`` backend registered under ``BACKEND``, and every capability group present as an
accessor that raises ``NotSupported`` with a reason, followed by a commented outline of what the
group's object provides. Its first run is therefore green or skipped: each group can then be
opened one at a time (docs/adapter.md describes every member). The outlines are made from
:data:`~conformance.harness.implementation.CAPABILITIES`, so a group or member added to the
protocol shows up in the next scaffold without editing this file.
"""

from __future__ import annotations

import argparse
import keyword
import re
import sys
from pathlib import Path
from typing import Sequence

from conformance.harness.implementation import CAPABILITIES

__all__ = ["ScaffoldError", "render", "write", "main"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ScaffoldError(ValueError):
    """The adapter cannot be written as asked; the message names the argument or the file."""


def _outline(name: str) -> list[str]:
    cap = CAPABILITIES[name]
    lines = [f"    # {cap.kind.__name__}: {cap.contract}.", f"    #   required: {', '.join(cap.required) or '-'}"]
    if cap.optional:
        lines.append(f"    #   optional (NotSupported, or None for a field, skips just their tests): {', '.join(cap.optional)}")
    return lines


def render(name: str, backend: str) -> str:
    """The adapter module's source for implementation ``name`` over backend ``backend``."""
    if not _NAME.match(name) or keyword.iskeyword(name):
        raise ScaffoldError(f"adapter name {name!r} must be a Python identifier (it names the module {name}.py)")
    if not backend or any(c.isspace() for c in backend):
        raise ScaffoldError(f"--backend {backend!r} must be the name torch.compile knows the backend by")
    groups = []
    for group in CAPABILITIES:
        groups += [
            "",
            f"    def {group}(self):",
            f'        raise NotSupported("{name} does not provide {group}() yet (see docs/adapter.md)")',
            *_outline(group),
        ]
    return "\n".join(
        [
            f'"""Conformance adapter for {name}, over the torch.compile backend {backend!r}.',
            "",
            "Written by `python -m conformance new-adapter`. Run the suite against it with",
            "",
            f"    pytest --pyargs conformance --conformance-impl {name}:make -n auto",
            "",
            "(with this file's directory on PYTHONPATH). The core is filled in; every capability group",
            "answers NotSupported, so its tests are skipped with the reason. Open one group at a time:",
            "return the group's object from its accessor (docs/adapter.md, conformance/harness/capabilities.py).",
            '"""',
            "",
            "from __future__ import annotations",
            "",
            "from typing import Any, Callable, Mapping, Sequence",
            "",
            "import torch",
            "",
            "from conformance import Implementation, NotSupported",
            "",
            f"BACKEND = {backend!r}",
            "",
            "",
            "class Adapter(Implementation):",
            f"    name = {name!r}",
            "",
            "    def versions(self) -> dict[str, str]:",
            "        # What shapes results; add your compiler's version here.",
            '        return {"torch": torch.__version__}',
            "",
            "    def compile(",
            "        self,",
            "        model: Callable,",
            "        *,",
            "        options: Mapping[str, Any] | None = None,",
            "        fullgraph: bool = False,",
            "        dynamic: bool | None = False,",
            "        mode: str | None = None,",
            "    ) -> Callable:",
            "        # torch.compile refuses options= and mode= together; the suite passes at most one.",
            '        kwargs: dict[str, Any] = {"fullgraph": fullgraph, "dynamic": dynamic}',
            "        if options:",
            '            kwargs["options"] = dict(options)',
            "        elif mode is not None:",
            '            kwargs["mode"] = mode',
            "        return torch.compile(model, backend=BACKEND, **kwargs)",
            "",
            "    def lower(self, model: Callable, args: Sequence[Any]) -> list[str]:",
            "        # The StableHLO text of each graph, without compiling; a backend with another IR says so.",
            f'        raise NotSupported("{name} shows no StableHLO text: its HLO snapshot and determinism tests are skipped")',
            "",
            "    # --- capability groups: each raises NotSupported until you return its object ---------",
            *groups,
            "",
            "",
            "def make() -> Adapter:",
            "    return Adapter()",
            "",
        ]
    )


def write(name: str, backend: str, directory: Path, *, force: bool = False) -> Path:
    """Write ``<directory>/<name>.py``; an existing file is kept unless ``force``."""
    path = Path(directory) / f"{name}.py"
    source = render(name, backend)
    if path.exists() and not force:
        raise ScaffoldError(f"{path} exists; pick another NAME or pass --force to overwrite it")
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(source)
    tmp.replace(path)  # all or nothing: no half-written adapter on an interrupted run
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance", description="Tools of the conformance suite.")
    sub = parser.add_subparsers(dest="command", required=True)
    new = sub.add_parser("new-adapter", help="write a runnable adapter module NAME.py in the current directory")
    new.add_argument("name", metavar="NAME", help="the adapter's name and module name (a Python identifier)")
    new.add_argument("--backend", default="aot_eager", help="the torch.compile backend name (default: aot_eager)")
    new.add_argument("--force", action="store_true", help="overwrite an existing NAME.py")
    opts = parser.parse_args(argv)
    try:
        path = write(opts.name, opts.backend, Path.cwd(), force=opts.force)
    except ScaffoldError as exc:
        parser.exit(2, f"new-adapter: {exc}\n")
    print(f"wrote {path}; run: pytest --pyargs conformance --conformance-impl {opts.name}:make -n auto")
    return 0


if __name__ == "__main__":
    sys.exit(main())

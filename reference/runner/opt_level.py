"""``with_optimization_level``: the pure helper a model policy uses to set a graph's ``-O`` level.

The compiler accepts the level in several spellings (``-O3``, ``--optlevel 3``, ``--optlevel=3``,
and any of those inside a list item that holds several flags, such as ``"-O1 --target trn2"``). The
helper replaces the level in whatever form it is written, at the position of its first occurrence,
drops any later occurrence, and keeps every other item exactly as it was and in order. With no
level in the list, ``-O<n>`` is appended.
"""

from __future__ import annotations

import shlex
from typing import Iterable

from reference.compiler.driver import OPT_LEVELS, OPT_SHORT, parse_compiler_args
from reference.core.errors import CompilerArgumentError

LEVELS = tuple(int(v) for v in OPT_LEVELS)


def _level_token(token: str) -> bool:
    """A token that states a level on its own (``-O3``, ``--optlevel=3``)."""
    return token in OPT_SHORT or token.startswith("--optlevel=") or (token.startswith("-O") and not token.startswith("--"))


def with_optimization_level(args: Iterable[str] | None, level: int) -> list[str]:
    """Return a new list: ``args`` with the optimization level set to ``level`` (1, 2 or 3).

    Raises :class:`CompilerArgumentError` for a level outside 1..3 (or not an int), for a malformed
    level already in ``args`` (``-O7``, ``--optlevel`` with no value), and for an item that is not
    a string. ``args`` itself is never modified.
    """
    if isinstance(level, bool) or not isinstance(level, int) or level not in LEVELS:
        raise CompilerArgumentError("-O", f"optimization level {level!r} is not valid", accepted=", ".join(OPT_LEVELS))
    if isinstance(args, str):
        args = [args]
    items = list(args or [])
    new = f"-O{level}"
    out: list[str] = []
    placed = False
    skip_value = False  # the previous item was a bare "--optlevel": this one is its value
    for item in items:
        if not isinstance(item, str):
            raise CompilerArgumentError(repr(item), "compiler arguments must be strings")
        if skip_value:
            _check_value(item.strip(), item)
            skip_value = False
            continue
        tokens = shlex.split(item) if item.strip() else []
        if not any(_level_token(t) or t == "--optlevel" for t in tokens):
            out.append(item)
            continue
        kept: list[str] = []
        i = 0
        while i < len(tokens):
            tok = tokens[i]
            i += 1
            if tok == "--optlevel":
                if i < len(tokens):
                    _check_value(tokens[i], item)
                    i += 1
                else:
                    skip_value = True  # the value is the next list item
            elif tok.startswith("--optlevel="):
                _check_value(tok.partition("=")[2], item)
            elif tok.startswith("-O") and not tok.startswith("--"):
                if tok not in OPT_SHORT:
                    raise CompilerArgumentError(tok, "unknown optimization level", accepted=", ".join(OPT_SHORT))
            else:
                kept.append(tok)
                continue
            if not placed:
                kept.append(new)
                placed = True
        if len(tokens) == 1 and kept == [new]:
            out.append(new)
        elif kept:
            out.append(" ".join(shlex.quote(t) for t in kept))
    if skip_value:
        raise CompilerArgumentError("--optlevel", "expects a value", accepted="|".join(OPT_LEVELS))
    if not placed:
        out.append(new)
    return out


def _check_value(value: str, item: str) -> None:
    if value not in OPT_LEVELS:
        raise CompilerArgumentError("--optlevel", f"value {value!r} is not accepted (in {item!r})", accepted="|".join(OPT_LEVELS))


def optimization_level(args: Iterable[str] | None) -> int | None:
    """The level ``args`` states (the last one wins, as in the compiler), or ``None``."""
    level = None
    for flag, value in parse_compiler_args(list(args or [])):
        if flag == "-O":
            level = int(value)
    return level

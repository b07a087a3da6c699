"""The per-graph compiler-argument scope, and the platform arguments every compile gets.

The scope is the only channel through which a runner gives one graph its own argument list: the
runner resolves the list (it calls the model's policy), opens ``scoped_compiler_args(args)`` around
the call that compiles, and every seam's compile request (:mod:`reference.compiler.request`) takes
the scope's list before the platform arguments and before the cache key
(:func:`apply_scoped_compiler_args` is the same step on an options dict). The backend never calls
model code. The scope holds the list as given (strings); the request parses it, with the platform
arguments, into the one :class:`~reference.compiler.driver.CompilerConfig` of the compile.

The scope is a ``contextvars.ContextVar``: nested scopes restore the outer value on exit (also on
an exception), and threads and asyncio tasks each see their own value.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Iterator, Mapping, Sequence

from reference.core import env
from reference.core.diagnostics import warn_user
from reference.compiler.driver import DEFAULT_TARGET, TARGETS, CompilerConfig, parse_compiler_args, split_args
from reference.core.errors import BackendOptionError, CompilerArgumentError

_scoped: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("neuron_scoped_compiler_args", default=None)


def _check_list(args: Any, what: str) -> list[str]:
    if isinstance(args, (str, bytes)) or not isinstance(args, Sequence) or not all(isinstance(a, str) for a in args):
        raise BackendOptionError(f"{what} must be a list of strings, got {args!r}")
    return list(args)


@contextlib.contextmanager
def scoped_compiler_args(compiler_args: Sequence[str] | None) -> Iterator[None]:
    """Compile graphs in this block with ``compiler_args``, a list of strings (``None``: no
    override); :class:`BackendOptionError` for anything else."""
    value = None if compiler_args is None else _check_list(compiler_args, "scoped_compiler_args")
    token = _scoped.set(value)
    try:
        yield
    finally:
        _scoped.reset(token)


def current_scoped_compiler_args() -> list[str] | None:
    value = _scoped.get()
    return None if value is None else list(value)


def apply_scoped_compiler_args(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Options with the scoped list as ``compiler_args``; unchanged (as a dict) with no scope."""
    options = dict(options or {})
    scoped = _scoped.get()
    if scoped is not None:
        options["compiler_args"] = list(scoped)
    return options


def apply_platform_compiler_args(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Append ``NEURON_CC_FLAGS`` and make the target explicit (see :func:`platform_compiler_config`);
    ``options["compiler_args"]`` becomes the resolved token list."""
    options = dict(options or {})
    options["compiler_args"] = list(platform_compiler_config(options).args)
    return options


def platform_compiler_config(options: Mapping[str, Any] | None) -> CompilerConfig:
    """The compiler configuration of ``options["compiler_args"]`` with the platform arguments:
    ``NEURON_CC_FLAGS`` appended and the target explicit. The list is parsed here, once.

    The target comes from ``NEURON_PLATFORM_TARGET_OVERRIDE``, else ``options["target"]``, else the
    default (``trn2``); a ``--target`` already in the list is kept (with a warning naming both when
    the variable asks for another). An unclosed quote raises :class:`CompilerArgumentError` naming
    where the text came from (the options, or ``NEURON_CC_FLAGS``).
    """
    options = options or {}
    given = options.get("compiler_args") or []
    try:
        args = split_args(given)
    except CompilerArgumentError as exc:
        exc.message += " (in the compiler arguments: torch.compile(options={'compiler_args': ...}) or the scope)"
        raise
    cc_flags = env.get(env.CC_FLAGS) or ""
    try:
        extra = split_args(cc_flags)
    except CompilerArgumentError as exc:
        exc.message += f" (in NEURON_CC_FLAGS={cc_flags!r}: fix or unset the variable)"
        raise
    args = args + extra
    try:
        pairs = parse_compiler_args(args)
    except CompilerArgumentError as exc:
        if extra:
            exc.message += f" (NEURON_CC_FLAGS={cc_flags!r} is part of the list)"
        raise
    override = env.get(env.PLATFORM_TARGET_OVERRIDE)
    in_args = [value for flag, value in pairs if flag == "--target"]
    if in_args and override and in_args[-1] != override:
        warn_user(
            f"NEURON_PLATFORM_TARGET_OVERRIDE={override!r} is ignored: the compiler arguments already say "
            f"--target {in_args[-1]} (from the options, the scope or NEURON_CC_FLAGS), which wins; remove "
            "--target from the arguments to use the variable, or unset the variable"
        )
    if not in_args:
        target = override or options.get("target") or DEFAULT_TARGET
        if target not in TARGETS:
            raise BackendOptionError(
                f"target {target!r} is not known; accepted: {', '.join(TARGETS)} "
                "(set by NEURON_PLATFORM_TARGET_OVERRIDE or options['target'])"
            )
        args = args + ["--target", target]
        pairs = pairs + [("--target", target)]
    return CompilerConfig.from_pairs(pairs, args)

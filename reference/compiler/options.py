"""The backend's options: ``torch.compile(model, backend="neuron", options={...})``.

One schema, with each option's type, what a value looks like, what it does and its default;
:func:`normalize_options` checks a dict against it at the seam, and the compile request reads each
value through :func:`option` (so a default lives here and nowhere else).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from reference.core.diagnostics import warn_user
from reference.core.errors import BackendOptionError


@dataclass(frozen=True)
class Option:
    """One option: the types it accepts, what a value looks like and what it does (both for the
    error message), and the value a compile uses when it is absent."""

    types: tuple[type, ...]
    shape: str
    meaning: str
    default: Any = None


#: The only keys the backend reads. ``target`` has no default of its own: without it the target
#: comes from ``NEURON_PLATFORM_TARGET_OVERRIDE``, else ``trn2`` (see
#: :func:`~reference.compiler.scope.platform_compiler_config`).
OPTIONS: dict[str, Option] = {
    "compiler_args": Option((list, tuple, str, type(None)), "a list of strings (or one string)", "the compiler flags"),
    "enable_fx_passes": Option((bool,), "True or False", "whether the FX pass stage runs; default True", True),
    "target_device": Option((str,), "a string", "the device the FX passes move graph constants to; default 'cpu'", "cpu"),
    "target": Option((str,), "a string", "the target platform: trn2 or trn3"),
}


def normalize_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Validate ``torch.compile(options=...)``: a dict or None; known keys of the right type. An
    unknown key is ignored with a warning naming the known ones; a known key of another type raises
    :class:`BackendOptionError` naming it."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise BackendOptionError(f"options must be a dict or None, got {type(options).__name__}")
    out = dict(options)
    unknown = sorted(k for k in out if k not in OPTIONS)
    if unknown:
        warn_user(
            f"neuron backend: options {unknown} are not read by this backend and are ignored; "
            f"known options: {sorted(OPTIONS)}"
        )
    for k, spec in OPTIONS.items():
        if k in out and not isinstance(out[k], spec.types):
            raise BackendOptionError(
                f"options[{k!r}] must be {spec.shape} ({spec.meaning}), got {type(out[k]).__name__} {out[k]!r}"
            )
    return out


def option(options: Mapping[str, Any], name: str) -> Any:
    """The value of option ``name`` in validated ``options``, or its default."""
    value = options.get(name)
    return OPTIONS[name].default if value is None else value

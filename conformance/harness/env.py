"""Every environment variable the suite reads, read here and nowhere else.

The plugin, the harness, the suite's models, reporting and tests ask this module; none of them reads
``os.environ`` itself (``tests/suite/test_conformance_env.py`` greps ``conformance/`` and names any read
outside this file). Building the environment of a child process (``{**os.environ, ...}``) and
setting a variable are not reads and stay where they happen; :func:`override` sets variables for a
block and restores them.

Read when asked, never at import: a test that sets a variable sees it on the next call. A value
that does not parse raises :class:`EnvironmentVariableError` naming the variable and what it takes.

The suite's own variables (``CONFORMANCE_*``):

========================================  =======================================================
``CONFORMANCE_IMPL``                       the implementation (``package.module:factory``) when
                                           ``--conformance-impl`` is not given
``CONFORMANCE_LANE``                       the report lane (``default``)
``CONFORMANCE_EXPECTATIONS``               the expectation file, instead of the adapter's
``CONFORMANCE_REPORT_DIR``                 where reports go (``reports/`` of the start directory)
``CONFORMANCE_SNAPSHOT_DIR``               the snapshot tree, instead of the adapter's
``CONFORMANCE_HYPOTHESIS_PROFILE``         the Hypothesis profile (else by ``CI``)
``CONFORMANCE_MODELS``                     ``all``: the model lane runs every model and part
``CONFORMANCE_OPS``                        ``all``: the op lane runs every OpInfo entry and dtype
                                           (else its sample); a comma list of dtypes limits it
``CONFORMANCE_OPS_PART``                   ``K/N``: of the rows selected, only part ``K`` of ``N``
                                           (by a hash of the row; ``make ops-drift-part``)
``CONFORMANCE_OPS_EDGES``                  ``1``: the op lane's edge variant runs too (each row's
                                           samples again, at the edges of its dtype)
``CONFORMANCE_TORCHRUN_NPROC``             ranks per host of the torchrun test (2)
``CONFORMANCE_RANK_THREADS``               intra-op threads of each launched rank (1)
========================================  =======================================================

Others it reads: ``CI``, pytest-xdist's ``PYTEST_XDIST_WORKER`` and ``PYTEST_XDIST_WORKER_COUNT``,
``XDG_CACHE_HOME``, ``PYTHONPATH``, torch.distributed's ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``, ``LOCAL_RANK`` and ``GROUP_RANK``, and (for the report's environment line and the
scratch caches) any variable by prefix or by name.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator, Mapping

IMPL = "CONFORMANCE_IMPL"
LANE = "CONFORMANCE_LANE"
EXPECTATIONS = "CONFORMANCE_EXPECTATIONS"
REPORT_DIR = "CONFORMANCE_REPORT_DIR"
SNAPSHOT_DIR = "CONFORMANCE_SNAPSHOT_DIR"
HYPOTHESIS_PROFILE = "CONFORMANCE_HYPOTHESIS_PROFILE"
MODELS = "CONFORMANCE_MODELS"
OPS = "CONFORMANCE_OPS"
OPS_EDGES = "CONFORMANCE_OPS_EDGES"
OPS_PART = "CONFORMANCE_OPS_PART"
TORCHRUN_NPROC = "CONFORMANCE_TORCHRUN_NPROC"
RANK_THREADS = "CONFORMANCE_RANK_THREADS"

#: what torch.distributed's launchers set for a rank (torchrun sets all of them; the suite's own
#: launcher the first four)
RANK_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "GROUP_RANK")


class EnvironmentVariableError(ValueError):
    """A variable is set to a value the suite cannot use; the message names it and what it takes."""


def _text(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The variable's value, ``None`` when it is unset or empty."""
    value = (os.environ if environ is None else environ).get(name)
    return value or None


def _positive_int(name: str, default: int, environ: Mapping[str, str] | None = None) -> int:
    raw = _text(name, environ)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise EnvironmentVariableError(f"environment variable {name}={raw!r}: expected a whole number of at least 1 "
                                       f"(unset: {default})")
    return value


def impl_spec() -> str | None:
    """``CONFORMANCE_IMPL``: the implementation spec, ``None`` when unset."""
    return _text(IMPL)


def lane() -> str | None:
    """``CONFORMANCE_LANE``: the report lane, ``None`` when unset."""
    return _text(LANE)


def expectations_file() -> str | None:
    """``CONFORMANCE_EXPECTATIONS``: an expectation file that replaces the adapter's."""
    return _text(EXPECTATIONS)


def report_dir() -> str | None:
    """``CONFORMANCE_REPORT_DIR``: the report directory, ``None`` when unset."""
    return _text(REPORT_DIR)


def snapshot_dir() -> str | None:
    """``CONFORMANCE_SNAPSHOT_DIR``: a snapshot tree that replaces the adapter's."""
    return _text(SNAPSHOT_DIR)


def hypothesis_profile() -> str | None:
    """``CONFORMANCE_HYPOTHESIS_PROFILE``: the Hypothesis profile chosen by name."""
    return _text(HYPOTHESIS_PROFILE)


def on_ci() -> bool:
    """``CI`` set to ``1``, ``true`` or ``yes`` (any case), as CI services do."""
    return (_text("CI") or "").lower() in ("1", "true", "yes")


def all_models() -> bool:
    """``CONFORMANCE_MODELS=all`` (any case): the model lane runs every model and part."""
    return (_text(MODELS) or "").lower() == "all"


def ops_selection() -> tuple[bool, tuple[str, ...]]:
    """``CONFORMANCE_OPS``: (every row?, the dtypes named, if any). ``all`` runs every row;
    ``all,float32`` every float32 row; unset, the op lane's sample."""
    words = [w.strip().lower() for w in (_text(OPS) or "").split(",") if w.strip()]
    return "all" in words, tuple(w for w in words if w != "all")


def ops_part(environ: Mapping[str, str] | None = None) -> tuple[int, int] | None:
    """``CONFORMANCE_OPS_PART=K/N``: the op lane runs part ``K`` (0 to N-1) of ``N`` of its rows;
    unset, every row it selects. Another value raises :class:`EnvironmentVariableError`."""
    raw = _text(OPS_PART, environ)
    if raw is None:
        return None
    k, _, n = raw.partition("/")
    try:
        part, parts = int(k), int(n)
    except ValueError:
        part, parts = -1, 0
    if parts < 1 or not 0 <= part < parts:
        raise EnvironmentVariableError(f"environment variable {OPS_PART}={raw!r}: expected K/N, two whole numbers with "
                                       "0 <= K < N (part K of N of the op lane's rows), or unset for every row")
    return part, parts


def ops_edges() -> bool:
    """``CONFORMANCE_OPS_EDGES``: ``1``/``true``/``yes`` runs the op lane's edge variant
    (``conformance/tests/test_ops_edges.py``), ``0``/``false``/``no`` or unset does not; another value
    raises :class:`EnvironmentVariableError`."""
    raw = (_text(OPS_EDGES) or "0").lower()
    if raw not in ("1", "true", "yes", "0", "false", "no"):
        raise EnvironmentVariableError(f"environment variable {OPS_EDGES}={raw!r}: expected 1/true/yes or 0/false/no")
    return raw in ("1", "true", "yes")


def torchrun_nproc() -> int:
    """``CONFORMANCE_TORCHRUN_NPROC``: ranks per host of the torchrun test (default 2)."""
    return _positive_int(TORCHRUN_NPROC, 2)


def rank_threads(environ: Mapping[str, str] | None = None) -> str:
    """``CONFORMANCE_RANK_THREADS`` in ``environ`` (a rank's environment being built; default this
    process's): the intra-op threads each launched rank gets (default 1: N ranks share the cores)."""
    return str(_positive_int(RANK_THREADS, 1, environ))


def xdist_worker() -> str | None:
    """``PYTEST_XDIST_WORKER``: this pytest-xdist worker's name (``gw0``, ...), ``None`` outside one."""
    return _text("PYTEST_XDIST_WORKER")


def xdist_worker_count() -> str | None:
    """``PYTEST_XDIST_WORKER_COUNT``, as pytest-xdist sets it in its workers."""
    return _text("PYTEST_XDIST_WORKER_COUNT")


def xdg_cache_home() -> str | None:
    """``XDG_CACHE_HOME``, ``None`` when unset."""
    return _text("XDG_CACHE_HOME")


def pythonpath(environ: Mapping[str, str] | None = None) -> list[str]:
    """The entries of ``PYTHONPATH`` in ``environ`` (default this process's), empty ones dropped."""
    return [p for p in (_text("PYTHONPATH", environ) or "").split(os.pathsep) if p]


def rank_variables() -> dict[str, str]:
    """The variables of :data:`RANK_VARIABLES` that are set (a launcher set them for this rank)."""
    return {name: os.environ[name] for name in RANK_VARIABLES if os.environ.get(name)}


def backend_variables(defaults: Mapping[str, str]) -> dict[str, str]:
    """The values of a backend's own variables as a compile reads them (``defaults`` gives each
    name and its value when unset): for the suite's stand-in backends, such as an honest adapter
    that declares the variables it reads."""
    return {name: os.environ.get(name, default) for name, default in defaults.items()}


def is_set(name: str) -> bool:
    """Whether ``name`` is in this process's environment (set, even to an empty value)."""
    return name in os.environ


def with_prefixes(prefixes: tuple[str, ...]) -> dict[str, str]:
    """Every variable whose name starts with one of ``prefixes``, sorted by name."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(prefixes)}


#: Prefixes of the variables through which coverage.py (``COVERAGE_PROCESS_CONFIG``, ...) and
#: pytest-cov (``COV_CORE_*``) measure the processes a measured run starts.
COVERAGE_PREFIXES = ("COVERAGE_", "COV_CORE_")


def unmeasured(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` for a child process that coverage must not measure (building an environment,
    not reading one): the same variables without :data:`COVERAGE_PREFIXES`."""
    return {k: v for k, v in environ.items() if not k.startswith(COVERAGE_PREFIXES)}


@contextlib.contextmanager
def override(values: Mapping[str, str | None]) -> Iterator[None]:
    """While the block runs, each variable of ``values`` is set (``None``: unset); afterwards each
    has its value from before again."""
    old = {name: os.environ.get(name) for name in values}
    try:
        for name, value in values.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in old.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

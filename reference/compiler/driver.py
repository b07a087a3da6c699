"""The compiler driver: neuronx-cc-style arguments in, a compiled artifact out.

The reference has no Neuron compiler. It stands one in with IREE: the driver takes the argument
list a Neuron runner would pass to ``neuronx-cc``, validates it against the flags it knows, maps
the ones with a CPU meaning onto ``iree-compile`` flags, and runs ``iree-compile`` as a separate
process (so a compile can be timed, logged, counted and killed like the real one).

Flag mapping (everything else is validated, recorded, and enters the cache key):

==============================  ==========================================================
neuronx-cc                      iree-compile
==============================  ==========================================================
``-O1`` ``-O2`` ``-O3``,         ``--iree-opt-level=O1|O2|O3`` plus the LLVM code-generation
``--optlevel N``                 options of :data:`LEVEL_CODEGEN` (default ``-O1``, as on Neuron)
``--auto-cast matmult|all``      ``--iree-global-opt-demote-contraction-inputs-operations``
``--auto-cast-type bf16|fp16``   ``--iree-global-opt-demote-contraction-inputs-type``
``--target trn2|trn3``           recorded only; the code is built for the host CPU
==============================  ==========================================================

IREE's global ``--iree-opt-level`` alone does not separate every level: on this release ``O2``
and ``O3`` produce byte-identical binaries for the fixture models, so a user asking for ``-O3``
would silently get ``-O2``. Each level therefore also sets LLVM code-generation options
(:data:`LEVEL_CODEGEN`), so each level compiles to a different binary (docs/compiler_args.md).

The artifact (the "NEFF" of the seeds) is an IREE VM flatbuffer (``.vmfb``) for the host CPU. The
compiler writes it to its standard output, which the driver reads: no temporary file, so a limit
on file sizes or a full temporary directory cannot truncate an artifact between compiler and cache.
"""

from __future__ import annotations

import ctypes
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from typing import Iterable, Sequence

from reference.core.errors import CompilerArgumentError, NEFFCompilationError
from reference.core import env

DEFAULT_OPTLEVEL = 1
#: The optimization levels, and their short flags: the one -O grammar (the runner's
#: with_optimization_level rewrites lists with these too).
OPT_LEVELS = ("1", "2", "3")
OPT_SHORT = {f"-O{v}": v for v in OPT_LEVELS}
DEFAULT_TARGET = "trn2"
TARGETS = ("trn1", "inf2", "trn2", "trn3")

# flag -> accepted values (None: bare flag; (): any non-empty value)
_VALUED: dict[str, tuple[str, ...]] = {
    "--target": TARGETS,
    "--optlevel": OPT_LEVELS,
    "--lnc": ("1", "2"),
    "--logical-nc-config": ("1", "2"),
    "--model-type": ("generic", "transformer", "unet-inference"),
    "--auto-cast": ("none", "matmult", "all"),
    "--auto-cast-type": ("bf16", "fp16", "tf32", "fp8_e4m3"),
    "--framework": ("XLA",),
    "--distribution-strategy": ("llm-training",),
    "--internal-hlo2tensorizer-options": (),
    "--internal-backend-options": (),
    "--tensorizer-options": (),
    "--verbose": ("debug", "info", "warning", "error"),
}
_BARE = frozenset(
    {
        "--enable-mixed-precision-accumulation",
        "--enable-saturate-infinity",
        "--enable-fast-loading-neuron-binaries",
        "--enable-fast-context-switch",
        "--disable-internal-io-dge",
        "--experimental-unsafe-fp8e4m3fn-as-fp8e4m3",
    }
)

#: LLVM code-generation options added per optimization level (on top of ``--iree-opt-level``).
#: ``-O3`` unrolls and interleaves loops and runs the SLP vectorizer, which ``-O2`` leaves off.
LEVEL_CODEGEN: dict[int, tuple[str, ...]] = {
    1: (),
    2: (),
    3: ("--iree-llvmcpu-loop-unrolling", "--iree-llvmcpu-loop-interleaving", "--iree-llvmcpu-slp-vectorization"),
}


def known_flags() -> list[str]:
    return sorted([*_VALUED, *_BARE, *OPT_SHORT])


def split_args(args: str | Iterable[str] | None) -> list[str]:
    """Tokenize an argument list given as a string or as a list (whose items may hold spaces)."""
    if args is None:
        return []
    if isinstance(args, str):
        return _shell_split(args)
    tokens: list[str] = []
    for item in args:
        if not isinstance(item, str):
            raise CompilerArgumentError(repr(item), "compiler arguments must be strings")
        if _FLAG_EQ.match(item):
            tokens.append(item.strip())  # "--flag=value with spaces" is one token already
        else:
            tokens.extend(_shell_split(item))
    return tokens


def _shell_split(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as exc:  # shlex's bare "No closing quotation" names nothing
        raise CompilerArgumentError(
            text, f"cannot be split into arguments ({exc}); close the quote, or escape it with a backslash"
        ) from None


_FLAG_EQ = re.compile(r"^\s*--[\w-]+=")


def parse_compiler_args(args: str | Iterable[str] | None) -> list[tuple[str, str | None]]:
    """Parse a loose argument list into ``(flag, value)`` pairs, in order (what a
    :class:`CompilerConfig` holds as ``pairs``).

    ``--flag=value`` and ``--flag value`` give the same pair; ``-O3`` gives ``("-O", "3")`` and so
    does ``--optlevel 3``. Raises :class:`CompilerArgumentError` for an unknown flag, a missing or
    unaccepted value, or a stray token.
    """
    if args is None:  # no list (the native key leaves the arguments out): nothing to parse
        return []
    return _parse_tokens(split_args(args))


def _parse_tokens(tokens: list[str]) -> list[tuple[str, str | None]]:
    """The one parser of the flag grammar (every list is parsed here, once per resolved list)."""
    pairs: list[tuple[str, str | None]] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if tok in OPT_SHORT:
            pairs.append(("-O", OPT_SHORT[tok]))
            continue
        if tok.startswith("-O") and not tok.startswith("--"):
            raise CompilerArgumentError(tok, "unknown optimization level", accepted=", ".join(OPT_SHORT))
        if tok in _BARE:
            pairs.append((tok, None))
            continue
        flag, eq, value = tok.partition("=")
        if flag in _VALUED:
            if not eq:
                if i >= len(tokens) or tokens[i].startswith("-"):
                    raise CompilerArgumentError(flag, "expects a value", accepted=_accepted(flag))
                value = tokens[i]
                i += 1
            allowed = _VALUED[flag]
            if (allowed and value not in allowed) or not value:
                raise CompilerArgumentError(flag, f"value {value!r} is not accepted", accepted=_accepted(flag))
            if flag == "--optlevel":
                pairs.append(("-O", value))
            elif flag == "--logical-nc-config":
                pairs.append(("--lnc", value))
            else:
                pairs.append((flag, value))
            continue
        if tok.startswith("-"):
            raise CompilerArgumentError(tok, "unknown compiler flag", accepted=", ".join(known_flags()))
        raise CompilerArgumentError(tok, "a value with no flag before it")
    return pairs


def _accepted(flag: str) -> str:
    allowed = _VALUED[flag]
    return "|".join(allowed) if allowed else "any non-empty value"


@dataclass(frozen=True)
class CompilerConfig:
    """An argument list, parsed once: its tokens (``args``, as resolved), their ``(flag, value)``
    pairs and what they mean (the last occurrence of a flag wins).

    A plain value: a compile request makes one (:func:`~reference.compiler.request.resolve_request`)
    and everything below it (the key, the driver, the metadata) takes it, reading ``pairs`` or
    ``args``; loose lists are parsed with :meth:`from_args` at the public edges. ``one_thread`` is
    how this compile runs (``--mlir-disable-threading``), not what it builds: it is in neither the
    pairs nor the key, and two configs that differ only in it are equal.
    """

    pairs: tuple[tuple[str, str | None], ...]
    optlevel: int = DEFAULT_OPTLEVEL
    target: str = DEFAULT_TARGET
    auto_cast: str = "none"
    auto_cast_type: str = "bf16"
    extra: dict = field(default_factory=dict, compare=False)
    args: tuple[str, ...] = ()
    one_thread: bool = field(default=False, compare=False)

    @classmethod
    def from_args(cls, args: str | Iterable[str] | None) -> "CompilerConfig":
        """Parse a loose argument list (a string, a list of strings, ``None`` for none)."""
        tokens = split_args(args)
        return cls.from_pairs(_parse_tokens(tokens), tokens)

    @classmethod
    def from_pairs(cls, pairs: Sequence[tuple[str, str | None]], tokens: Sequence[str]) -> "CompilerConfig":
        """The config of ``tokens`` whose parse is ``pairs`` (the caller parsed them)."""
        settings: dict[str, str | None] = {}
        for flag, value in pairs:
            settings[flag] = value
        return cls(
            pairs=tuple(pairs),
            optlevel=int(settings.get("-O") or DEFAULT_OPTLEVEL),
            target=settings.get("--target") or DEFAULT_TARGET,
            auto_cast=settings.get("--auto-cast") or "none",
            auto_cast_type=settings.get("--auto-cast-type") or "bf16",
            extra={k: v for k, v in settings.items() if k not in ("-O", "--target", "--auto-cast", "--auto-cast-type")},
            args=tuple(tokens),
        )

    def on_one_thread(self, on: bool = True) -> "CompilerConfig":
        """This config, compiled on one thread (a ``parallel_compile`` worker beside as many others
        as there are cores: measured on 2 cores, two threaded compiles side by side took 3.6 s, two
        one-thread compiles 3.3 s). MLIR's output is the same either way."""
        return replace(self, one_thread=on)

    def __repr__(self) -> str:
        return f"CompilerConfig({list(self.args)!r})"

    def iree_args(self) -> list[str]:
        args = [
            "--iree-input-type=stablehlo",
            "--iree-hal-target-backends=llvm-cpu",
            f"--iree-llvmcpu-target-cpu={host_cpu()}",
            f"--iree-opt-level=O{self.optlevel}",
            *LEVEL_CODEGEN[self.optlevel],
        ]
        if self.auto_cast != "none" and self.auto_cast_type in ("bf16", "fp16"):
            ops = "matmul" if self.auto_cast == "matmult" else "all"
            args += [
                f"--iree-global-opt-demote-contraction-inputs-operations={ops}",
                f"--iree-global-opt-demote-contraction-inputs-type={self.auto_cast_type.replace('fp16', 'f16')}",
            ]
        return args


def host_cpu() -> str:
    """The CPU the artifacts are built for. ``NEURON_REFERENCE_TARGET_CPU`` is not read: the
    reference always builds for the host, and the host's identity enters the tool versions."""
    return "host"


def _iree_compile_path() -> str:
    from iree.compiler.tools.binaries import find_tool

    return find_tool("iree-compile")


def compiler_version() -> str:
    """``iree.compiler.version.VERSION``, read from the file without importing the package: the
    ``iree.compiler`` import loads the MLIR libraries (0.1-0.3 s), which a process that finds every
    artifact in its cache never needs, and the cache keys need only this string."""
    loaded = sys.modules.get("iree.compiler.version")
    if loaded is not None:
        return loaded.VERSION
    import importlib.util

    spec = importlib.util.find_spec("iree")  # a namespace package: finding it runs no code
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        try:
            with open(os.path.join(folder, "compiler", "version.py"), encoding="utf-8") as fh:
                found = re.search(r"""^VERSION\s*=\s*["']([^"']+)["']""", fh.read(), re.M)
        except OSError:
            continue
        if found:
            return found.group(1)
    import iree.compiler.version as v  # laid out otherwise: import it

    return v.VERSION


def host_identity() -> str:
    """Machine architecture and CPU model: artifacts built for ``host`` only run on a like CPU.

    ``NEURON_REFERENCE_HOST_IDENTITY`` replaces what the machine reports: for a fleet whose CPUs
    run each other's code under different model strings, or to check that nothing checked in
    depends on the machine that made it. A wrong value makes a cache serve artifacts to a CPU
    that cannot run them, so set it only where that holds."""
    override = env.get(env.HOST_IDENTITY)
    if override:
        return override
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name") or line.startswith("CPU part"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{platform.machine()}:{model}"


_PR_SET_PDEATHSIG = 1


def _parent_death_signal():
    """A ``preexec_fn`` that makes the compiler receive SIGKILL when the process that started it
    dies (Linux ``prctl(PR_SET_PDEATHSIG)``), so a compiling process killed with SIGKILL leaves no
    compiler running on behind it. ``None`` where the platform has no such call.

    The C function is looked up here, in the parent, so the forked child only makes system calls
    (a ``preexec_fn`` must not take locks another thread may hold). The child checks its parent
    after arming the signal: a parent that died in between would otherwise never send it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    parent = os.getpid()
    kill = int(signal.SIGKILL)

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, kill, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return arm


@dataclass
class CompileResult:
    artifact: bytes
    command: list[str]
    log: str
    wall_us: int


class CompilerDriver:
    """Runs the stand-in compiler on StableHLO text."""

    def __init__(self, executable: str | None = None) -> None:
        self._exe = executable

    @property
    def executable(self) -> str:
        if self._exe is None:
            self._exe = _iree_compile_path()
        return self._exe

    def command_line(self, config: CompilerConfig) -> list[str]:
        """The compiler's command: StableHLO on standard input, the artifact on standard output."""
        threads = ["--mlir-disable-threading"] if config.one_thread else []
        return [self.executable, "-", *config.iree_args(), *threads, "-o", "-"]

    def compile(self, hlo_text: str, config: CompilerConfig, *, graph_name: str | None = None) -> CompileResult:
        """Compile StableHLO text under ``config`` (a compile request's, or
        ``CompilerConfig.from_args(...)``); raises :class:`NEFFCompilationError` with the compiler's
        output."""
        cmd = self.command_line(config)
        start = time.perf_counter()
        try:
            proc = subprocess.run(
                cmd, input=hlo_text.encode(), capture_output=True, check=False, preexec_fn=_parent_death_signal()
            )
        except OSError as exc:
            raise NEFFCompilationError(f"could not start the compiler: {exc}", graph_name=graph_name, command=cmd)
        wall_us = int((time.perf_counter() - start) * 1e6)
        log = proc.stderr.decode(errors="replace")
        if proc.returncode != 0 or not proc.stdout:
            raise NEFFCompilationError(
                f"compiler exited with status {proc.returncode}" + ("" if proc.stdout else " and wrote no artifact"),
                graph_name=graph_name,
                command=cmd,
                compiler_log=log,
            )
        return CompileResult(artifact=proc.stdout, command=cmd, log=log, wall_us=wall_us)

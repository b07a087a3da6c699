"""Compilation levels and the ATOM configuration: ``CompilationConfig`` and ``Config``.

``Config.__post_init__`` resolves a level-3 configuration in a fixed order: the splitting ops, the
capture sizes, the graph mode, then the compile sizes. Every check names the field it rejects, so
a bad value fails where the configuration is built, not inside a compile.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from reference import NeuronBackendError
from reference.atom.custom_ops import DEFAULT_NAMESPACE, is_registered_op
from reference.atom.graph_mode import CUDAGraphMode

__all__ = [
    "CompilationLevel",
    "CompilationConfig",
    "Config",
    "ConfigError",
    "PRESETS",
    "preset",
    "default_capture_sizes",
]

#: The string ``compile_sizes`` may hold to mean "every capture size".
CAPTURE_SIZES_ALIAS = "cudagraph_capture_sizes"
#: The op names (under the custom-op namespace) level 3 splits at unless told otherwise.
DEFAULT_SPLITTING_OP_NAMES = ("unified_attention_with_output", "mla_attention")


class ConfigError(NeuronBackendError, ValueError):
    """A configuration field with a value that cannot work; ``field`` names it."""

    def __init__(self, field_name: str, problem: str) -> None:
        super().__init__(f"{field_name}: {problem}")
        self.field = field_name


class CompilationLevel(enum.IntEnum):
    """How ``torch.compile`` is applied to a model."""

    NO_COMPILATION = 0  # eager, no Dynamo
    DYNAMO_AS_IS = 1  # Dynamo with the eager backend: a tracing check only
    DYNAMO_ONCE = 2  # Dynamo and Inductor, one graph, dispatched without guards after the first call
    PIECEWISE = 3  # split at the splitting ops, every piece compiled on its own


def default_capture_sizes(largest: int) -> list[int]:
    """The generated ladder for one ``cuda_graph_sizes`` value: 1..8, then every 16 up to it."""
    return list(range(1, 9)) + list(range(16, largest + 1, 16))


def _check_sizes(field_name: str, sizes: Any, *, allow_alias: bool = False) -> list:
    if not isinstance(sizes, (list, tuple)):
        raise ConfigError(field_name, f"must be a list of positive ints, got {type(sizes).__name__}")
    out: list = []
    for s in sizes:
        if allow_alias and s == CAPTURE_SIZES_ALIAS:
            out.append(s)
            continue
        if isinstance(s, bool) or not isinstance(s, int):
            known = f" or the string {CAPTURE_SIZES_ALIAS!r}" if allow_alias else ""
            raise ConfigError(field_name, f"entry {s!r} is neither a positive int{known}")
        if s <= 0:
            raise ConfigError(field_name, f"entry {s} is not positive; sizes are batch sizes >= 1")
        out.append(s)
    ints = [s for s in out if isinstance(s, int)]
    if len(set(ints)) != len(ints):
        dupes = sorted({s for s in ints if ints.count(s) > 1})
        raise ConfigError(field_name, f"repeats {dupes}; list each size once")
    return out


@dataclass
class CompilationConfig:
    """Every compilation setting; the defaults are level 0 (eager) with no sizes resolved."""

    level: int = 0
    use_cudagraph: bool = True
    cudagraph_capture_sizes: Optional[list[int]] = None
    cuda_graph_sizes: list[int] = field(default_factory=lambda: [512])
    cudagraph_mode: Optional[CUDAGraphMode] = None
    splitting_ops: Optional[list[str]] = None
    cudagraph_copy_inputs: bool = False
    use_inductor: bool = True
    compile_sizes: Optional[list[Union[int, str]]] = None
    inductor_compile_config: dict = field(default_factory=dict)
    debug_dump_path: str = ""
    cache_dir: str = ""
    # Not in the seed's table: which registry the custom ops and default splitting ops live in,
    # and which compiler compiles the pieces ("inductor" or "reference"; "" picks by torch version).
    custom_op_namespace: str = DEFAULT_NAMESPACE
    piece_compiler: str = ""
    #: Layers that run outside compilation, registered by the model as it is built (layer index or
    #: name -> layer); every forward context hands them to layers as ``no_compile_layers``. Not a
    #: setting: it does not enter the hash, the repr or equality.
    static_forward_context: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.level, bool) or not isinstance(self.level, int) or not 0 <= self.level <= 3:
            raise ConfigError("level", f"{self.level!r} is not a compilation level; use 0, 1, 2 or 3 (CompilationLevel)")
        self.level = CompilationLevel(self.level)
        if self.cudagraph_mode is not None:
            try:
                self.cudagraph_mode = CUDAGraphMode.parse(self.cudagraph_mode)
            except ValueError as exc:
                raise ConfigError("cudagraph_mode", str(exc)) from None
        self.cuda_graph_sizes = _check_sizes("cuda_graph_sizes", self.cuda_graph_sizes)
        if not self.cuda_graph_sizes:
            raise ConfigError("cuda_graph_sizes", "is empty; give one largest size or the list of sizes")
        if self.cudagraph_capture_sizes is not None:
            self.cudagraph_capture_sizes = _check_sizes("cudagraph_capture_sizes", self.cudagraph_capture_sizes)
        if self.compile_sizes is not None:
            self.compile_sizes = _check_sizes("compile_sizes", self.compile_sizes, allow_alias=True)
        if self.splitting_ops is not None:
            if isinstance(self.splitting_ops, str) or not all(isinstance(o, str) for o in self.splitting_ops):
                raise ConfigError("splitting_ops", f"must be a list of op names 'namespace.op', got {self.splitting_ops!r}")
            for op in self.splitting_ops:
                if not is_registered_op(op):
                    raise ConfigError(
                        "splitting_ops",
                        f"{op!r} is not a registered op; register it first (direct_register_custom_op) "
                        "or name an existing op as 'namespace.op'",
                    )
            self.splitting_ops = list(self.splitting_ops)
        if not isinstance(self.static_forward_context, dict):
            raise ConfigError("static_forward_context", "must be a dict of layer index or name to layer")
        if not isinstance(self.inductor_compile_config, dict):
            raise ConfigError("inductor_compile_config", "must be a dict of Inductor config names to values")
        if self.piece_compiler not in ("", "inductor", "inductor_standalone", "reference"):
            raise ConfigError("piece_compiler", f"{self.piece_compiler!r} is not known; use 'inductor', 'inductor_standalone', 'reference' or ''")
        # Resolved by init_with_cudagraph_sizes; kept apart from compile_sizes, which stays as given.
        self.resolved_compile_sizes: list[int] = []

    def set_splitting_ops_for_v1(self) -> None:
        """Level 3 splits at the attention ops unless ``splitting_ops`` was given."""
        if self.splitting_ops is None:
            self.splitting_ops = [f"{self.custom_op_namespace}.{name}" for name in DEFAULT_SPLITTING_OP_NAMES]

    def init_with_cudagraph_sizes(self, cudagraph_capture_sizes: list[int]) -> None:
        """Resolve ``compile_sizes`` (the alias expands to the capture sizes) into
        ``resolved_compile_sizes``, sorted and without repeats."""
        sizes: set[int] = set()
        for s in self.compile_sizes or []:
            if s == CAPTURE_SIZES_ALIAS:
                sizes.update(cudagraph_capture_sizes)
            else:
                sizes.add(s)
        self.resolved_compile_sizes = sorted(sizes)

    def compute_hash(self) -> str:
        """A short digest of every field that changes what is compiled (enters the cache dir)."""
        factors = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in ("debug_dump_path", "cache_dir", "static_forward_context")  # not what is compiled
        }
        factors["resolved_compile_sizes"] = self.resolved_compile_sizes
        text = json.dumps(factors, sort_keys=True, default=_jsonable)
        return hashlib.sha256(text.encode()).hexdigest()[:10]


def _jsonable(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.name
    return repr(value)


@dataclass
class Config:
    """The model-level settings the compilation half reads."""

    enforce_eager: bool = False
    capture_sizes: Optional[list[int]] = None
    compilation_config: CompilationConfig = field(default_factory=CompilationConfig)
    max_num_seqs: int = 512
    model: str = ""

    def __post_init__(self) -> None:
        cc = self.compilation_config
        if not isinstance(cc, CompilationConfig):
            raise ConfigError("compilation_config", f"must be a CompilationConfig, got {type(cc).__name__}")
        if isinstance(self.max_num_seqs, bool) or not isinstance(self.max_num_seqs, int) or self.max_num_seqs <= 0:
            raise ConfigError("max_num_seqs", f"must be a positive int, got {self.max_num_seqs!r}")
        if cc.level == CompilationLevel.PIECEWISE:
            cc.set_splitting_ops_for_v1()
            self._set_cudagraph_sizes()
            if cc.cudagraph_mode is None:
                cc.cudagraph_mode = CUDAGraphMode.TR_HYBRID
            cc.init_with_cudagraph_sizes(self.capture_sizes)
        elif cc.compile_sizes:
            # Below level 3 nothing is compiled per size; resolving still checks the alias's use.
            self._set_cudagraph_sizes()
            cc.init_with_cudagraph_sizes(self.capture_sizes)
        if cc.cudagraph_mode is None:
            cc.cudagraph_mode = CUDAGraphMode.NONE
        if self.enforce_eager:
            cc.cudagraph_mode = CUDAGraphMode.NONE

    def _set_cudagraph_sizes(self) -> None:
        """Capture sizes: ``cudagraph_capture_sizes`` if given, else generated from one
        ``cuda_graph_sizes`` value, else that list; sorted ascending, at most ``max_num_seqs``."""
        cc = self.compilation_config
        if cc.cudagraph_capture_sizes is not None:
            sizes, source = list(cc.cudagraph_capture_sizes), "cudagraph_capture_sizes"
        elif len(cc.cuda_graph_sizes) == 1:
            sizes, source = default_capture_sizes(cc.cuda_graph_sizes[0]), "cuda_graph_sizes"
        else:
            sizes, source = list(cc.cuda_graph_sizes), "cuda_graph_sizes"
        if not sizes:
            raise ConfigError(source, "leaves no capture size; give at least one batch size")
        if max(sizes) > self.max_num_seqs:
            raise ConfigError(
                source,
                f"largest capture size {max(sizes)} is above max_num_seqs={self.max_num_seqs}; "
                "lower the sizes or raise max_num_seqs",
            )
        self.capture_sizes = sorted(sizes)
        cc.cudagraph_capture_sizes = list(self.capture_sizes)

    def compute_hash(self) -> str:
        """The compilation config's digest plus the model name (both pick what is compiled)."""
        text = f"{self.model}|{self.enforce_eager}|{self.compilation_config.compute_hash()}"
        return hashlib.sha256(text.encode()).hexdigest()[:10]


def _presets() -> dict[str, dict[str, Any]]:
    # The decision tree's leaves, as CompilationConfig keyword arguments.
    return {
        "debug": {"level": CompilationLevel.NO_COMPILATION},
        "compatibility_check": {"level": CompilationLevel.DYNAMO_AS_IS},
        "inductor_only": {"level": CompilationLevel.DYNAMO_ONCE, "cudagraph_mode": CUDAGraphMode.NONE},
        "production": {"level": CompilationLevel.PIECEWISE, "cudagraph_mode": CUDAGraphMode.TR_HYBRID},
        "small_model_full": {"level": CompilationLevel.PIECEWISE, "cudagraph_mode": CUDAGraphMode.FULL},
        "pd_decode": {"level": CompilationLevel.PIECEWISE, "cudagraph_mode": CUDAGraphMode.FULL_DECODE_ONLY},
    }


PRESETS: tuple[str, ...] = tuple(_presets())


def preset(name: str, **overrides: Any) -> CompilationConfig:
    """A fresh ``CompilationConfig`` for a named leaf of the decision tree, with ``overrides``.

    ``debug`` (level 0), ``compatibility_check`` (level 1), ``inductor_only`` (level 2, no graphs),
    ``production`` (level 3, TR_HYBRID), ``small_model_full`` (level 3, FULL), ``pd_decode``
    (level 3, FULL_DECODE_ONLY). ``enforce_eager=True`` on ``Config`` is the unsupported-model leaf.
    """
    table = _presets()
    if name not in table:
        raise ConfigError("preset", f"{name!r} is not a preset; choose one of {', '.join(PRESETS)}")
    return CompilationConfig(**{**table[name], **overrides})

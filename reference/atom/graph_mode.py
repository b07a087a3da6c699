"""CUDA-graph modes: which recordings a step replays, per batch kind.

A mode is either one strategy for every step (``NONE``, ``TR_HYBRID``, ``FULL``) or a pair
``(decode, mixed)`` that treats pure-decode batches and mixed prefill-decode batches apart. The
pair modes are plain enum members whose value is a tuple of the single modes' values, so
``CUDAGraphMode((2, 0)) is CUDAGraphMode.FULL_DECODE_ONLY``.

The mode is independent of the compilation level: piecewise compilation decides how pieces are
compiled, the mode decides what gets recorded around them.
"""

from __future__ import annotations

import enum

__all__ = ["CUDAGraphMode"]


class CUDAGraphMode(enum.Enum):
    """Graph-capture strategy; see the helpers for how a runner reads it."""

    NONE = 0
    TR_HYBRID = 1
    FULL = 2
    # Inside the class body the names above are still their raw ints, so these are int pairs.
    FULL_DECODE_ONLY = (FULL, NONE)
    FULL_AND_TR_HYBRID = (FULL, TR_HYBRID)

    def separate_routine(self) -> bool:
        """True for the pair modes, which pick a strategy per batch kind."""
        return isinstance(self.value, tuple)

    def decode_mode(self) -> CUDAGraphMode:
        """The single mode a pure-decode batch uses (the pair's first element)."""
        return CUDAGraphMode(self.value[0]) if self.separate_routine() else self

    def mixed_mode(self) -> CUDAGraphMode:
        """The single mode a mixed prefill-decode batch uses (the pair's second element)."""
        return CUDAGraphMode(self.value[1]) if self.separate_routine() else self

    def max_cudagraph_mode(self) -> CUDAGraphMode:
        """The highest-valued single mode over both batch kinds."""
        return CUDAGraphMode(max(self.decode_mode().value, self.mixed_mode().value))

    def has_full_cudagraphs(self) -> bool:
        """True when either batch kind records the whole forward as one graph."""
        return self.max_cudagraph_mode() is CUDAGraphMode.FULL

    def uses_tr_hybrid(self) -> bool:
        """True when either batch kind records token graphs that break at eager regions."""
        return CUDAGraphMode.TR_HYBRID in (self.decode_mode(), self.mixed_mode())

    @classmethod
    def parse(cls, value: object) -> CUDAGraphMode:
        """Accept a member, its name (any case), or its value; ``ValueError`` lists the choices."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            member = cls.__members__.get(value.upper())
            if member is not None:
                return member
        elif not isinstance(value, bool):  # a bool is an int to Python, never a mode here
            try:
                return cls(tuple(value) if isinstance(value, list) else value)
            except (ValueError, TypeError):
                pass
        choices = ", ".join(cls.__members__)
        raise ValueError(f"unknown CUDA graph mode {value!r}; choose one of {choices}")

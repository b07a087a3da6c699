"""Process-wide backend settings that the helper API sets: the model name, the rank."""

from __future__ import annotations

import re
import threading

DEFAULT_MODEL_NAME = "model_default"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def sanitize_name(name: str) -> str:
    """A name safe to use as one path component: no separators, no leading dots, not empty."""
    cleaned = _UNSAFE.sub("_", name).lstrip(".")
    cleaned = cleaned.replace("..", "_")
    return cleaned[:128] or DEFAULT_MODEL_NAME


class _ModelName:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._name = DEFAULT_MODEL_NAME

    def set(self, name: str) -> None:
        if not isinstance(name, str):
            raise TypeError(f"set_model_name takes a str, got {type(name).__name__}")
        with self._lock:
            self._name = sanitize_name(name)

    def get(self) -> str:
        with self._lock:
            return self._name


_MODEL_NAME = _ModelName()


def set_model_name(name: str) -> None:
    """Name the model for graphs compiled after this call (sanitized for use in file names)."""
    _MODEL_NAME.set(name)


def get_model_name() -> str:
    return _MODEL_NAME.get()


def get_rank() -> int:
    """``torch.distributed`` rank when initialized; otherwise the device index (always 0 here)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return 0

"""The FX pass pipeline."""

from reference.fx_passes.base import FXPass, FXPassError
from reference.fx_passes.pass_manager import FXPassManager


def get_default_pass_manager() -> FXPassManager:
    """The default pass order (the passes themselves arrive with the FX pass issue)."""
    return FXPassManager()


__all__ = ["FXPass", "FXPassError", "FXPassManager", "get_default_pass_manager"]

"""The FX pass pipeline: the stage between Dynamo's FX graph and lowering.

``get_default_pass_manager()`` builds the default order; see :class:`FXPassManager` for why the
order is what it is.
"""

from reference.fx_passes.aliasing_pass import AliasingOutputRewritePass
from reference.fx_passes.backend_config_pass import NkiKernelWriteBackendConfigPass
from reference.fx_passes.base import FXPass, FXPassError, PassContext
from reference.fx_passes.device_rewriter import DeviceRewriterPass
from reference.fx_passes.inplace_rewrite_pass import InPlaceToOutOfPlacePass
from reference.fx_passes.pass_manager import FXPassManager
from reference.fx_passes.spmd_passes import CollectiveReplicaGroupsPass, RankConstantCheckPass


def get_default_pass_manager() -> FXPassManager:
    """A new manager holding the default passes, in the default order."""
    manager = FXPassManager()
    manager.add_pass(DeviceRewriterPass())
    manager.add_pass(AliasingOutputRewritePass())
    manager.add_pass(InPlaceToOutOfPlacePass())
    manager.add_pass(NkiKernelWriteBackendConfigPass())
    manager.add_pass(CollectiveReplicaGroupsPass())
    manager.add_pass(RankConstantCheckPass())
    return manager


__all__ = [
    "AliasingOutputRewritePass",
    "CollectiveReplicaGroupsPass",
    "DeviceRewriterPass",
    "FXPass",
    "FXPassError",
    "FXPassManager",
    "InPlaceToOutOfPlacePass",
    "NkiKernelWriteBackendConfigPass",
    "PassContext",
    "RankConstantCheckPass",
    "get_default_pass_manager",
]

"""The mesh registry: every process group registers its full mesh when it is created.

A *mesh* is the complete partition of the world into replica groups, e.g. tensor-parallel pairs on
four ranks ``((0, 1), (2, 3))``. A rank only belongs to one of the groups, and c10d names the
groups in creation order, so rank 0's group is ``"1"`` while rank 2's is ``"2"``: the name a
``_c10d_functional`` collective carries differs per rank. The mesh does not: every rank creates
the same groups in the same order, so every rank registers the same mesh with the same channel id.
Resolving a collective's group name to its mesh is what makes collectives rank-invariant.

``NeuronGroupCoordinator(replica_groups)`` creates every group of the partition (``new_group`` is
collective: all ranks must create all groups, in the same order), keeps the one this rank belongs
to and registers the mesh. The default (world) group resolves to the one-group mesh of the world.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Iterable, Sequence

from reference.spmd.errors import MeshError


@dataclass(frozen=True)
class Mesh:
    """A full partition of the world into replica groups, with a rank-independent channel id."""

    replica_groups: tuple[tuple[int, ...], ...]
    channel_id: int
    name: str = ""

    @property
    def world_size(self) -> int:
        return sum(len(g) for g in self.replica_groups)

    @property
    def group_size(self) -> int:
        return len(self.replica_groups[0])

    def group_of(self, rank: int) -> tuple[int, ...]:
        for g in self.replica_groups:
            if rank in g:
                return g
        raise MeshError(f"rank {rank} is in no replica group of mesh {self.replica_groups}")

    def as_json(self) -> dict:
        return {"replica_groups": [list(g) for g in self.replica_groups], "channel_id": self.channel_id}


def validate_partition(replica_groups: Iterable[Sequence[int]], world_size: int) -> tuple[tuple[int, ...], ...]:
    """Canonical form of a partition of ``range(world_size)`` into equal groups; raises MeshError."""
    groups = tuple(tuple(int(r) for r in g) for g in replica_groups)
    if not groups or any(not g for g in groups):
        raise MeshError(f"replica groups must be non-empty lists of ranks, got {groups}")
    sizes = {len(g) for g in groups}
    if len(sizes) != 1:
        raise MeshError(f"replica groups must all have the same size, got sizes {sorted(sizes)} in {groups}")
    flat = [r for g in groups for r in g]
    if sorted(flat) != list(range(world_size)):
        raise MeshError(
            f"replica groups {groups} are not a partition of the world 0..{world_size - 1}: every rank must "
            "appear in exactly one group (register the full mesh, not only this rank's group)"
        )
    return groups


class MeshRegistry:
    """Group name -> mesh, identical on every rank for the meshes it registered."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._meshes: list[Mesh] = []  # distinct partitions, in registration order
        self._by_group: dict[str, Mesh] = {}
        self._local_group: dict[int, object] = {}  # channel id -> this rank's ProcessGroup

    def register(self, replica_groups: Sequence[Sequence[int]], group_names: Sequence[str], local_group=None, *, name: str = "") -> Mesh:
        """Register a mesh; ``group_names[i]`` is the c10d name of ``replica_groups[i]`` (or of this
        rank's group only, where the others are unknown). Re-registering a partition reuses its
        channel id, so two coordinators over the same groups agree."""
        groups = tuple(tuple(g) for g in replica_groups)
        with self._lock:
            mesh = next((m for m in self._meshes if m.replica_groups == groups), None)
            if mesh is None:
                mesh = Mesh(groups, channel_id=len(self._meshes) + 1, name=name)
                self._meshes.append(mesh)
            for gname in group_names:
                if gname is not None:
                    self._by_group[str(gname)] = mesh
            if local_group is not None:
                self._local_group[mesh.channel_id] = local_group
            return mesh

    def resolve(self, group_name: str) -> Mesh:
        """The full mesh of the group a collective names; raises MeshError for unknown groups."""
        with self._lock:
            mesh = self._by_group.get(str(group_name))
        if mesh is not None:
            return mesh
        world = _default_group()
        if world is not None and str(group_name) == world.group_name:
            import torch.distributed as dist

            return self.register([tuple(range(dist.get_world_size()))], [world.group_name], world, name="world")
        raise MeshError(
            f"collective group {group_name!r} has no registered mesh; create process groups with "
            "reference.spmd.NeuronGroupCoordinator so that every rank registers the full partition"
        )

    def local_group(self, channel_id: int):
        """This rank's process group of the mesh with ``channel_id`` (for running its collectives)."""
        with self._lock:
            group = self._local_group.get(channel_id)
        if group is None:
            raise MeshError(f"no process group of mesh channel {channel_id} on this rank; was the mesh registered here?")
        return group

    def meshes(self) -> list[Mesh]:
        with self._lock:
            return list(self._meshes)

    def clear(self) -> None:
        with self._lock:
            self._meshes.clear()
            self._by_group.clear()
            self._local_group.clear()


MESH_REGISTRY = MeshRegistry()


def _default_group():
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.group.WORLD
    return None


class NeuronGroupCoordinator:
    """Creates the process groups of one mesh on this rank and registers the full mesh.

    Every rank constructs the coordinator with the same ``replica_groups`` (a partition of the
    world). ``group`` is the process group this rank belongs to, ``rank_in_group`` its index there.
    """

    def __init__(self, replica_groups: Sequence[Sequence[int]], *, name: str = "", registry: MeshRegistry | None = None) -> None:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise MeshError("NeuronGroupCoordinator needs an initialized torch.distributed process group")
        world = dist.get_world_size()
        rank = dist.get_rank()
        groups = validate_partition(replica_groups, world)
        self.name = name
        self.registry = registry or MESH_REGISTRY
        created = []
        for g in groups:  # collective: every rank creates every group, in the same order
            created.append(dist.new_group(list(g)))
        index = next(i for i, g in enumerate(groups) if rank in g)
        self.group = created[index]
        self.ranks = groups[index]
        self.rank_in_group = self.ranks.index(rank)
        self.world_size = len(self.ranks)
        names = [pg.group_name if pg is not None and pg != dist.GroupMember.NON_GROUP_MEMBER else None for pg in created]
        self.mesh = self.registry.register(groups, names, self.group, name=name)

    @property
    def group_name(self) -> str:
        return self.group.group_name

    @classmethod
    def contiguous(cls, group_size: int, *, name: str = "", registry: MeshRegistry | None = None) -> "NeuronGroupCoordinator":
        """Groups of ``group_size`` consecutive ranks (tensor parallel): ``[[0, 1], [2, 3]]``."""
        import torch.distributed as dist

        world = dist.get_world_size()
        if group_size < 1 or world % group_size:
            raise MeshError(f"group size {group_size} does not divide the world size {world}")
        return cls([list(range(s, s + group_size)) for s in range(0, world, group_size)], name=name, registry=registry)

    @classmethod
    def strided(cls, group_size: int, *, name: str = "", registry: MeshRegistry | None = None) -> "NeuronGroupCoordinator":
        """Groups of ranks ``world // group_size`` apart (data parallel over TP): ``[[0, 2], [1, 3]]``."""
        import torch.distributed as dist

        world = dist.get_world_size()
        if group_size < 1 or world % group_size:
            raise MeshError(f"group size {group_size} does not divide the world size {world}")
        stride = world // group_size
        return cls([list(range(s, world, stride)) for s in range(stride)], name=name, registry=registry)

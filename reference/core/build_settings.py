"""What the pipeline below the seam is told: the settings a compile request resolves once.

Everything the pipeline, the caches, the lowering, the runtime and the SPMD coordination depend on
that a user sets through the environment is read here, once, when a compile request is made
(:func:`BuildSettings.from_env`), and handed down as a frozen value. Nothing below the seam reads
the environment (an import-linter contract keeps :mod:`reference.core.env` out of those packages),
so a variable changed half-way through a compile cannot give one graph two configurations, and a
test or tool can build a graph under settings of its own without touching the environment.

Settings are required below the seam: a caller outside a compile (a tool, a test) reads them
itself with :meth:`BuildSettings.from_env`, the settings a compile request made at that moment
would carry, and hands them down in a ``reference.pipeline.BuildContext``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reference.core import env
from reference.core.folders import trusted_path


@dataclass(frozen=True)
class CacheRoots:
    """Where the caches live and how they are used, read from the environment once
    (:meth:`from_env`, when a compile request is made) and handed down: the caches below the seam
    take their folders from here, never from the environment.

    ``neff``/``hlo``/``local``: the folders of ``TORCH_NEURONX_NEFF_CACHE_DIR``,
    ``TORCH_NEURONX_HLO_CACHE_DIR`` and ``TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR`` (defaults: per-user
    folders); ``configured``: which of those variables the user set (a default folder is checked
    to be this user's alone, a configured one to be closed to other users); ``disabled``:
    ``TORCH_NEURONX_NEFF_DISABLE_CACHE``; ``lock_timeout_s``: ``TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT``;
    ``hmac_key``: ``TORCH_NEURONX_CACHE_HMAC_KEY`` as bytes (``None``: entries are not
    authenticated), kept out of the repr so that a logged request never shows it.
    """

    neff: str
    hlo: str
    local: str
    disabled: bool = False
    lock_timeout_s: int = 1200
    configured: frozenset[str] = frozenset()
    hmac_key: bytes | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls) -> "CacheRoots":
        """The roots the environment names now. Raises :class:`~reference.core.errors.EnvVarError`
        naming a malformed variable."""
        key = env.get(env.CACHE_HMAC_KEY)
        return cls(
            neff=env.get(env.NEFF_CACHE_DIR),
            hlo=env.get(env.HLO_CACHE_DIR),
            local=env.get(env.NEFF_LOCAL_CACHE_DIR),
            disabled=env.get(env.NEFF_DISABLE_CACHE),
            lock_timeout_s=env.get(env.NEFF_CACHE_LOCK_TIMEOUT),
            configured=frozenset(v for v in (env.NEFF_CACHE_DIR, env.HLO_CACHE_DIR, env.NEFF_LOCAL_CACHE_DIR) if env.is_set(v)),
            hmac_key=key.encode("utf-8") if key else None,
        )

    def folder(self, which: str) -> str:
        """The folder ``which`` (``"neff"``, ``"hlo"`` or ``"local"``), ready to use
        (:func:`trusted_path`); an untrusted one is refused naming its variable."""
        variable = {"neff": env.NEFF_CACHE_DIR, "hlo": env.HLO_CACHE_DIR, "local": env.NEFF_LOCAL_CACHE_DIR}[which]
        return trusted_path(getattr(self, which), variable, configured=variable in self.configured)


@dataclass(frozen=True)
class BuildSettings:
    """The part of a compile request the pipeline below the seam reads (see the module doc).

    ``cache``: the cache folders and their use; ``compile_only``: ``TORCH_NEURONX_COMPILE_ONLY``
    (build without loading); ``assert_cache_hit``: ``NEURON_LIBTORCH_ASSERT_CACHE_HIT`` (a miss
    raises); ``float64``: ``NEURON_REFERENCE_FLOAT64`` (``"narrow"`` or ``"error"``);
    ``nki_sdpa``: ``TORCH_NEURONX_ENABLE_NKI_SDPA`` (the fused attention decomposition);
    ``runtime_driver``: ``NEURON_REFERENCE_RUNTIME_DRIVER``; ``store_compile``/``store_wait_s``:
    ``NEURON_LIBTORCH_STORE_COMPILE`` and ``NEURON_LIBTORCH_STORE_WAIT_TIMEOUT``; ``spmd_strict``:
    ``NEURON_LIBTORCH_SPMD_STRICT`` (the guard rails raise).
    """

    cache: CacheRoots
    compile_only: bool = False
    assert_cache_hit: bool = False
    float64: str = "narrow"
    nki_sdpa: bool = True
    runtime_driver: str = "auto"
    store_compile: bool = False
    store_wait_s: int = 3600
    spmd_strict: bool = False

    @classmethod
    def from_env(cls) -> "BuildSettings":
        """The settings the environment gives now. Raises
        :class:`~reference.core.errors.EnvVarError` naming a malformed variable."""
        return cls(
            cache=CacheRoots.from_env(),
            compile_only=env.get(env.COMPILE_ONLY),
            assert_cache_hit=env.get(env.ASSERT_CACHE_HIT),
            float64=env.get(env.FLOAT64),
            nki_sdpa=env.get(env.ENABLE_NKI_SDPA),
            runtime_driver=env.get(env.RUNTIME_DRIVER),
            store_compile=env.get(env.STORE_COMPILE),
            store_wait_s=env.get(env.STORE_WAIT_TIMEOUT),
            spmd_strict=env.get(env.SPMD_STRICT),
        )

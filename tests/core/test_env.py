"""One module reads every environment variable: defaults, parsing, and errors that name the variable."""

from __future__ import annotations

import os

import pytest

from reference.core import env
from reference.core.errors import EnvVarError


@pytest.mark.parametrize("raw, value", [("1", True), ("true", True), ("YES", True), ("0", False), ("False", False), ("no", False), ("", False)])
@pytest.mark.spec("001.env.boolean-spellings")
def test_booleans(monkeypatch, raw, value):
    monkeypatch.setenv(env.COMPILE_ONLY, raw)
    assert env.get(env.COMPILE_ONLY) is value


@pytest.mark.parametrize("name, raw", [(env.COMPILE_ONLY, "maybe"), (env.NEFF_CACHE_LOCK_TIMEOUT, "soon"), (env.NEFF_CACHE_LOCK_TIMEOUT, "-5"), (env.NEFF_CACHE_DIR, " ")])
def test_invalid_values_name_the_variable_and_what_it_accepts(monkeypatch, name, raw):
    monkeypatch.setenv(name, raw)
    with pytest.raises(EnvVarError) as info:
        env.get(name)
    assert name in str(info.value) and "accepted" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_every_declared_variable_has_a_parseable_default(monkeypatch):
    for name in env.declared():
        monkeypatch.delenv(name, raising=False)
        env.get(name)  # raises if a default is malformed
    assert env.get(env.NEFF_CACHE_LOCK_TIMEOUT) == 1200
    assert env.get(env.DISABLE_FALLBACK_EXECUTION) is True
    assert env.get(env.ENABLE_NKI_SDPA) is True


def test_the_seeds_variables_are_all_declared():
    names = set(env.declared())
    for name in [
        "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "TORCH_NEURONX_DEBUG_DIR", "TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS",
        "TORCH_NEURONX_COMPILE_ONLY", "TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY", "TORCH_NEURONX_RETAIN_DEVICE_MODE",
        "NEURON_PLATFORM_TARGET_OVERRIDE", "NEURON_CC_FLAGS", "TORCH_NEURONX_ENABLE_NKI_SDPA",
        "TORCH_NEURONX_NEFF_CACHE_DIR", "TORCH_NEURONX_HLO_CACHE_DIR", "TORCH_NEURONX_NEFF_DISABLE_CACHE",
        "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR", "TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT", "TORCH_CACHING_PRECOMPILE",
        "TORCH_NEURONX_ENABLED_METRIC_TABLES", "TORCH_NEURONX_METRICS_DIR", "NEURON_LIBTORCH_SPMD_STRICT",
        "NEURON_LIBTORCH_ASSERT_CACHE_HIT",
    ]:
        assert name in names, name


def test_override_sets_and_restores(monkeypatch):
    monkeypatch.setenv(env.CC_FLAGS, "-O2")
    with env.override(**{env.CC_FLAGS: None, env.COMPILE_ONLY: True}):
        assert env.CC_FLAGS not in os.environ
        assert env.get(env.COMPILE_ONLY) is True
    assert os.environ[env.CC_FLAGS] == "-O2"
    assert env.COMPILE_ONLY not in os.environ


def test_unknown_names_are_refused():
    with pytest.raises(KeyError, match="not a variable"):
        env.get("TORCH_NEURONX_NO_SUCH_THING")

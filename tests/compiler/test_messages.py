"""Messages that name what the user must change: unclosed quotes in compiler arguments, a target
override the arguments contradict, a default directory the user never chose, an option of the
wrong type, a cache directory that is a file, and a variable PyTorch reads differently."""

from __future__ import annotations

import os
import tempfile
import warnings

import pytest
import torch

from reference.backends.debug_artifacts import DEBUG_ARTIFACTS
from reference.cache.errors import CacheFallbackWarning
from reference.compiler.scope import apply_platform_compiler_args
from reference.core import env
from reference.core.errors import BackendOptionError, CompilerArgumentError, EnvVarError


@pytest.fixture(autouse=True)
def _fresh_dynamo(monkeypatch):
    monkeypatch.delenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", raising=False)
    monkeypatch.delenv(env.CC_FLAGS, raising=False)
    monkeypatch.delenv(env.PLATFORM_TARGET_OVERRIDE, raising=False)
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _plus_seven(x):
    return x + 7


# --- unclosed quotes ------------------------------------------------------------------------------


def test_an_unclosed_quote_in_compiler_args_names_the_option():
    compiled = torch.compile(_plus_seven, backend="neuron", options={"compiler_args": ["-O2", '--verbose "info']})
    with pytest.raises(CompilerArgumentError) as caught:
        compiled(torch.ones(2))
    msg = str(caught.value)
    assert "'--verbose \"info'" in msg and "No closing quotation" in msg
    assert "close the quote" in msg and "options={'compiler_args'" in msg


def test_an_unclosed_quote_in_neuron_cc_flags_names_the_variable(monkeypatch):
    monkeypatch.setenv(env.CC_FLAGS, "--auto-cast 'matmult")
    with pytest.raises(CompilerArgumentError) as caught:
        apply_platform_compiler_args({"compiler_args": ["-O1"]})
    msg = str(caught.value)
    assert "NEURON_CC_FLAGS=\"--auto-cast 'matmult\"" in msg and "fix or unset the variable" in msg
    assert "close the quote" in msg


# --- the target override --------------------------------------------------------------------------


def test_a_target_override_the_arguments_contradict_warns_naming_both(monkeypatch):
    monkeypatch.setenv(env.PLATFORM_TARGET_OVERRIDE, "trn3")
    with pytest.warns(UserWarning) as caught:
        args = apply_platform_compiler_args({"compiler_args": ["--target", "trn2"]})["compiler_args"]
    assert args == ["--target", "trn2"]  # the arguments win, as before, but not silently
    msg = str(caught[0].message)
    assert "NEURON_PLATFORM_TARGET_OVERRIDE='trn3' is ignored" in msg and "--target trn2" in msg
    assert caught[0].filename == __file__


def test_a_target_override_that_agrees_or_fills_in_is_silent(monkeypatch):
    monkeypatch.setenv(env.PLATFORM_TARGET_OVERRIDE, "trn3")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert apply_platform_compiler_args({"compiler_args": ["--target", "trn3"]})["compiler_args"] == ["--target", "trn3"]
        assert apply_platform_compiler_args({"compiler_args": []})["compiler_args"] == ["--target", "trn3"]


# --- a default directory the user never set -------------------------------------------------------


def test_an_unusable_default_debug_directory_says_it_is_the_default_and_what_to_set(tmp_path, monkeypatch):
    # A default folder that cannot be made (say, another user's) stands as a default under a file:
    # creating it fails the same way, and this test runs as any user.
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(blocker))
    monkeypatch.delenv(env.DEBUG_DIR, raising=False)
    with pytest.raises(EnvVarError) as caught:
        DEBUG_ARTIFACTS.directory()
    msg = str(caught.value)
    assert msg.startswith(f"environment variable {env.DEBUG_DIR} is not set, and its default ")
    # the per-user default: <tmp>/neuron-<uid>/neuron_backend_
    assert str(blocker) in msg and "neuron_backend_" in msg
    assert f"set {env.DEBUG_DIR} to a directory this process can create and write" in msg
    assert caught.value.default_used


def test_an_unusable_debug_directory_the_user_set_is_named_as_set(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(env.DEBUG_DIR, str(blocker / "debug"))
    with pytest.raises(EnvVarError, match=rf"environment variable {env.DEBUG_DIR}='.*debug' is not valid"):
        DEBUG_ARTIFACTS.directory()


# --- options of the wrong type --------------------------------------------------------------------


def test_enable_fx_passes_as_a_string_says_what_it_must_be():
    compiled = torch.compile(_plus_seven, backend="neuron", options={"enable_fx_passes": "no"})
    with pytest.raises(BackendOptionError) as caught:
        compiled(torch.ones(2))
    assert str(caught.value) == (
        "options['enable_fx_passes'] must be True or False (whether the FX pass stage runs; default True), got str 'no'"
    )


# --- a cache directory that is a file ---------------------------------------------------------------


@pytest.mark.parametrize("variable", [env.NEFF_CACHE_DIR, env.NEFF_LOCAL_CACHE_DIR, env.HLO_CACHE_DIR])
def test_a_cache_directory_that_is_a_file_is_refused_naming_the_variable(tmp_path, monkeypatch, variable):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(variable, str(blocker))
    monkeypatch.delenv(env.NEFF_DISABLE_CACHE, raising=False)
    with warnings.catch_warnings(record=True) as caught, pytest.raises(EnvVarError) as refused:
        warnings.simplefilter("always")
        torch.compile(_plus_seven, backend="neuron")(torch.ones(3))
    assert str(refused.value) == (
        f"environment variable {variable}={str(blocker)!r} is not valid; accepted values: a directory "
        "(this path exists and is not one)"
    )
    # no false "evicted" or "not cached" on the way
    assert not [w for w in caught if issubclass(w.category, CacheFallbackWarning)]


def test_a_lock_directory_that_cannot_be_made_warns_truthfully_and_the_result_is_cached(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(env.NEFF_LOCAL_CACHE_DIR, str(blocker / "locks"))
    monkeypatch.setenv(env.NEFF_CACHE_DIR, str(tmp_path / "neff"))
    monkeypatch.delenv(env.NEFF_DISABLE_CACHE, raising=False)
    with pytest.warns(CacheFallbackWarning) as caught:
        out = torch.compile(lambda x: x * 5 - 2, backend="neuron")(torch.ones(3))
    torch.testing.assert_close(out, torch.full((3,), 3.0))
    msg = str(caught[0].message)
    assert "the compile lock could not be taken" in msg and "compiling without it" in msg
    assert "not cached" not in msg
    assert [d for d in os.listdir(tmp_path / "neff") if len(d) == 32]  # it was cached after all


# --- a variable PyTorch reads too -------------------------------------------------------------------


@pytest.mark.parametrize("value", ["true", "yes", "TRUE", "on"])
@pytest.mark.spec("001.cache.caching-precompile-booleans")
def test_torch_caching_precompile_takes_only_what_pytorch_takes(monkeypatch, value):
    monkeypatch.setenv(env.CACHING_PRECOMPILE, value)
    with pytest.raises(EnvVarError) as caught:
        env.get(env.CACHING_PRECOMPILE)
    assert str(caught.value) == (
        f"environment variable TORCH_CACHING_PRECOMPILE={value!r} is not valid; accepted values: 1 or 0 "
        "(PyTorch reads this variable too and takes only 1 as true)"
    )


@pytest.mark.parametrize("value, expected", [("1", True), ("0", False), ("", False)])
def test_torch_caching_precompile_reads_as_pytorch_does(monkeypatch, value, expected):
    monkeypatch.setenv(env.CACHING_PRECOMPILE, value)
    assert env.get(env.CACHING_PRECOMPILE) is expected
    assert expected == (value == "1")  # torch._dynamo.config: os.environ.get(...) == "1"

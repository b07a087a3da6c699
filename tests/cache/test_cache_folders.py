"""Cache and debug folders this process may trust: per-user defaults, refused shared folders, and
no writes through planted symbolic links. Unit tests of reference.core.folders and the debug
directory; the owner tests need root (to give a folder to another user) and skip without it."""

from __future__ import annotations

import os
import stat
import warnings

import pytest

from reference.backends.debug_artifacts import DebugArtifacts, DebugFolderError
from reference.core.build_settings import CacheRoots
from reference.core import env
from reference.core.folders import FOLDER_VARIABLES, UntrustedFolderError, trusted_folder, user_root

OTHER_UID = 54321
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")


@pytest.fixture
def tmp_root(tmp_path, monkeypatch):
    """A private temporary directory standing in for /tmp, so the per-user defaults land there."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    for var in FOLDER_VARIABLES:
        monkeypatch.delenv(var, raising=False)
    yield tmp_path
    tempfile.tempdir = None


@pytest.mark.parametrize("variable", FOLDER_VARIABLES)
def test_defaults_are_per_user_and_private(tmp_root, variable):
    path = trusted_folder(variable)
    assert path == os.path.join(str(tmp_root), f"neuron-{os.geteuid()}", os.path.basename(path))
    for folder in (user_root(), path):
        st = os.lstat(folder)
        assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()


def test_the_documented_default_is_the_same_for_every_user():
    shown = env.documented_default(env.NEFF_CACHE_DIR)
    assert shown.endswith(os.path.join("neuron-<uid>", "neff_cache")) and str(os.geteuid()) not in shown.replace("<uid>", "")
    assert env.documented_default(env.NEFF_CACHE_LOCK_TIMEOUT) == 1200


def test_a_planted_per_user_folder_that_is_a_link_is_refused(tmp_root):
    elsewhere = tmp_root / "attacker"
    elsewhere.mkdir(mode=0o700)
    os.symlink(elsewhere, user_root())
    with pytest.raises(UntrustedFolderError, match=r"TORCH_NEURONX_NEFF_CACHE_DIR: .*not a plain directory"):
        trusted_folder(env.NEFF_CACHE_DIR)
    assert os.listdir(elsewhere) == []


def test_a_per_user_folder_others_can_write_is_refused(tmp_root):
    os.mkdir(user_root(), 0o700)
    os.chmod(user_root(), 0o777)
    with pytest.raises(UntrustedFolderError, match=r"writable by others .*chmod 700"):
        trusted_folder(env.HLO_CACHE_DIR)


@needs_root
def test_a_per_user_folder_owned_by_another_user_is_refused(tmp_root):
    os.mkdir(user_root(), 0o700)
    os.chown(user_root(), OTHER_UID, OTHER_UID)
    with pytest.raises(UntrustedFolderError, match=f"owned by uid {OTHER_UID}"):
        trusted_folder(env.DEBUG_DIR)


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o757])
def test_a_configured_world_writable_folder_is_refused_naming_the_variable(tmp_path, monkeypatch, mode):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, mode)
    monkeypatch.setenv(env.NEFF_CACHE_DIR, str(shared))
    with pytest.raises(UntrustedFolderError) as info:
        trusted_folder(env.NEFF_CACHE_DIR)
    text = str(info.value)
    assert "TORCH_NEURONX_NEFF_CACHE_DIR" in text and "writable by every user" in text and "chmod o-w" in text


def test_a_configured_link_to_a_world_writable_folder_is_refused(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    os.symlink(shared, tmp_path / "mine")
    monkeypatch.setenv(env.HLO_CACHE_DIR, str(tmp_path / "mine"))
    with pytest.raises(UntrustedFolderError, match="really"):
        trusted_folder(env.HLO_CACHE_DIR)


@needs_root
def test_a_configured_folder_of_another_user_is_refused(tmp_path, monkeypatch):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    monkeypatch.setenv(env.NEFF_LOCAL_CACHE_DIR, str(theirs))
    with pytest.raises(UntrustedFolderError, match=r"TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR: .*owned by another user"):
        trusted_folder(env.NEFF_LOCAL_CACHE_DIR)


def test_a_configured_folder_of_ones_own_is_used_and_a_missing_one_created_private(tmp_path, monkeypatch):
    group = tmp_path / "group"
    group.mkdir()
    os.chmod(group, 0o770)  # a group-shared cache is a decision to trust the group
    monkeypatch.setenv(env.NEFF_CACHE_DIR, str(group))
    assert trusted_folder(env.NEFF_CACHE_DIR) == str(group)
    monkeypatch.setenv(env.NEFF_CACHE_DIR, str(tmp_path / "new" / "cache"))
    assert stat.S_IMODE(os.stat(trusted_folder(env.NEFF_CACHE_DIR)).st_mode) == 0o700


def test_a_world_writable_debug_directory_is_refused_before_a_compile(tmp_path, monkeypatch):
    shared = tmp_path / "debug"
    shared.mkdir()
    os.chmod(shared, 0o777)
    monkeypatch.setenv(env.DEBUG_DIR, str(shared))
    with pytest.raises(UntrustedFolderError, match="TORCH_NEURONX_DEBUG_DIR"):
        DebugArtifacts().directory()


def test_a_planted_link_in_the_debug_directory_is_not_followed(tmp_path, monkeypatch):
    debug = tmp_path / "debug"
    debug.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "fx_graph.py").write_text("precious")
    os.symlink(victim, debug / "m_0_inference_0")
    monkeypatch.setenv(env.DEBUG_DIR, str(debug))
    with pytest.raises(DebugFolderError, match="symbolic link"):
        DebugArtifacts().write("m_0_inference_0", fx_code="graph", hlo=None, artifact=None)
    assert (victim / "fx_graph.py").read_text() == "precious" and os.listdir(victim) == ["fx_graph.py"]


def test_a_debug_directory_that_is_a_link_to_ones_own_folder_works(tmp_path, monkeypatch):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    os.symlink(real, tmp_path / "debug")
    monkeypatch.setenv(env.DEBUG_DIR, str(tmp_path / "debug"))
    folder = DebugArtifacts().write("m_0_inference_0", fx_code="graph", hlo=None, artifact=None)
    assert os.listdir(real / "m_0_inference_0") == ["fx_graph.py"] and os.path.isdir(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DebugArtifacts().write("m_0_inference_0", fx_code="graph2", hlo=None, artifact=None)


@pytest.mark.parametrize("variable", [env.NEFF_CACHE_DIR, env.NEFF_LOCAL_CACHE_DIR, env.HLO_CACHE_DIR])
def test_every_cache_the_pipeline_opens_checks_its_folder(tmp_path, monkeypatch, variable):
    from reference import pipeline
    from reference.backends.capture import capture_dir
    from reference.cache.hlo_cache import hlo_cache
    from reference.cache.plan_cache import plan_cache

    for var in (env.NEFF_CACHE_DIR, env.NEFF_LOCAL_CACHE_DIR, env.HLO_CACHE_DIR):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    monkeypatch.delenv(env.NEFF_DISABLE_CACHE, raising=False)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    monkeypatch.setenv(variable, str(shared))
    opened = [pipeline.neff_cache] if variable != env.HLO_CACHE_DIR else [hlo_cache, plan_cache, capture_dir]
    for open_cache in opened:
        with pytest.raises(UntrustedFolderError, match=variable):
            open_cache(CacheRoots.from_env())

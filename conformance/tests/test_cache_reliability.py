"""Contract: the NEFF cache under real processes: races, crashes, lock waits, damaged entries, and
directories that cannot be written.

Every process here is a real process of its own (``conformance/tests/_cache_child.py``) that compiles
and runs the ``mlp`` fixture through the adapter, with every cache kept under a directory the test
hands out (``impl.cache().env(root)``). The processes fork from a server that has imported torch
and nothing of the implementation (``conformance/harness/forkserver.py``: about 4 s less per process); one
that needs what only a fresh interpreter gives (its own ``PYTHONHASHSEED``) starts as a fresh
interpreter. Nothing is simulated: kills are SIGKILL to the process group,
a held lock is a compiling process stopped with SIGSTOP, a read-only directory is a read-only
(bind) mount or mode, a full directory is a tiny tmpfs (both need root or a non-root user; a test
that can make neither skips with the reason).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

import neuron_fixtures
from conformance.harness.child import raise_if_not_supported
from conformance.harness.implementation import cache_entry_file, cache_entry_files
from conformance.harness.evidence import Evidence
from conformance.harness.forkserver import ForkServer, start_module
from conformance.harness.outcomes import FellBack
from conformance.plugin import SUITE
from conformance.harness.tolerances import assert_close

FIXTURE = "mlp"
CHILD_TIMEOUT = 600


def _spec(pytestconfig) -> str:
    return pytestconfig.stash[SUITE].spec


# What the fork server imports before it forks a child: torch, Dynamo and the suite's own modules
# the child runs, nothing of the implementation under test.
PRELOAD = ("torch", "torch._dynamo", "neuron_fixtures", "conformance.harness.child", "conformance.harness.implementation")


def _child_env(env) -> dict[str, str]:
    full_env = {**os.environ, **env}
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in [os.getcwd(), *sys.path] if p)
    return full_env


@pytest.fixture(scope="module", autouse=True)
def fork_server(impl):
    """One fork server per module for the children below (conformance/harness/forkserver.py); it starts
    with the first child. It also imports the libraries the adapter names in ``child_preload()``."""
    with ForkServer((*PRELOAD, *impl.child_preload()), env=_child_env({})) as server:
        Child.server = server
        try:
            yield server
        finally:
            Child.server = None


class Child:
    """One process of its own compiling and running the fixture: forked from the module's fork
    server, or a fresh interpreter when its environment needs one."""

    server: ForkServer | None = None  # set by the module's fork_server fixture

    def __init__(self, spec, env, out, *, barrier=None, cwd=None, options=None, attempts=1, pause=None):
        self.out = str(out)
        args = ["--impl", spec, "--out", self.out]
        if barrier:
            args += ["--barrier", str(barrier)]
        if options is not None:
            args += ["--options", json.dumps(options)]
        if attempts != 1:
            args += ["--attempts", str(attempts), "--pause", str(pause)]
        args.append(FIXTURE)
        full_env = _child_env(env)
        self.proc = start_module("conformance.tests._cache_child", args, env=full_env, log=f"{self.out}.log", cwd=cwd,
                                 server=Child.server)
        self.pid = self.proc.pid

    def result(self, timeout: float = CHILD_TIMEOUT) -> dict:
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"child {self.pid} did not finish in {timeout} s (a hang)")
        raise_if_not_supported(rc, open(self.out + ".log").read(), f"child {self.pid}")
        if not os.path.exists(self.out):
            pytest.fail(f"child {self.pid} exited with {rc} and wrote no result:\n{open(self.out + '.log').read()[-4000:]}")
        data = json.load(open(self.out))
        data["rc"] = rc
        return data

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        self.proc.wait()


@pytest.fixture(autouse=True)
def _cache_capabilities(impl, tmp_path):
    """Skip (with the reason) before starting processes when the adapter lacks what they use."""
    impl.cache().env(str(tmp_path / "probe"))
    impl.cache().compiler_invocations()


@pytest.fixture(scope="module")
def expected() -> list:
    model, args = neuron_fixtures.build(FIXTURE)
    with torch.no_grad():
        out = model(*args)
    return [out] if isinstance(out, torch.Tensor) else list(out)


def _check_outputs(result: dict, expected: list, what: str) -> None:
    """The child succeeded, matched eager, and its outputs came from the implementation's compiled
    path (its evidence; otherwise the test's outcome is 'fell back')."""
    assert result["rc"] == 0, f"{what}: failed: {result.get('error', {}).get('message', '')[:2000]}"
    actual = [torch.tensor(o, dtype=torch.float64).to(e.dtype) for o, e in zip(result["outputs"], expected)]
    assert_close(actual, expected, what=what)
    if result.get("evidence") is not None:
        reason = Evidence.from_dict(result["evidence"]).shortfall(require_compile=True)
        if reason is not None:
            raise FellBack(f"{what}: {reason}")


def _wait_for(predicate, timeout: float, what: str, child: Child | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if child is not None and child.proc.poll() is not None:
            pytest.fail(f"{what}: child {child.pid} exited ({child.proc.returncode}) first:\n{open(child.out + '.log').read()[-3000:]}")
        time.sleep(0.01)
    pytest.fail(f"{what}: not within {timeout} s")


def _holding(impl, root, pid):
    return [c for c in impl.cache().compiles_in_progress(str(root)) if c["pid"] == pid]


# --- eight processes, one key -------------------------------------------------------------------

RACERS = 8


# nine processes: the slow lane's (make slow, make strict and make conformance run it; make test does not)
@pytest.mark.slow
@pytest.mark.spec("001.cache.local-cache-dir")
def test_eight_processes_on_one_key_compile_once(impl, pytestconfig, tmp_path, expected):
    spec = _spec(pytestconfig)
    root = tmp_path / "cache"
    env = impl.cache().env(str(root))
    barrier = tmp_path / "go"
    children = [Child(spec, env, tmp_path / f"racer{i}.json", barrier=barrier) for i in range(RACERS)]
    try:
        _wait_for(lambda: len(list(tmp_path.glob("go.ready.*"))) == RACERS, CHILD_TIMEOUT, "all racers ready")
        barrier.touch()
        results = [c.result() for c in children]
    finally:
        for c in children:
            if c.proc.poll() is None:
                c.kill()
    for i, r in enumerate(results):
        _check_outputs(r, expected, f"racer {i}")
    assert sum(r["compiler_invocations"] for r in results) == 1, (
        f"compiler invocations per racer: {[r['compiler_invocations'] for r in results]}"
    )
    assert all(r["outputs"] == results[0]["outputs"] for r in results), "racers' outputs are not identical"
    assert len(impl.cache().keys(str(root))) == 1
    assert impl.cache().scratch(str(root)) == [], "partial files left behind"
    # The published entry is whole: a further process loads it with a cache hit demanded.
    late = Child(spec, impl.cache().env(str(root), assert_hit=True), tmp_path / "late.json").result()
    _check_outputs(late, expected, "a ninth process")
    assert late["compiler_invocations"] == 0


# --- SIGKILL mid-compile, ten times -------------------------------------------------------------

# Seconds between "the victim holds the lock" and the SIGKILL, one per kill. The default lane (the
# quick local `make test`) kills at every third delay, from the first to the last (4 kills, about
# 4 s each); the other lanes (slow, strict) at all ten.
_DELAYS = [0.0, 0.02, 0.05, 0.1, 0.15, 0.25, 0.35, 0.5, 0.7, 0.9]


def _kill_delays(pytestconfig) -> list[float]:
    return _DELAYS[::3] if pytestconfig.stash[SUITE].lane == "default" else _DELAYS


def test_sigkill_mid_compile_never_leaves_a_loadable_partial_entry(impl, pytestconfig, tmp_path, expected):
    spec = _spec(pytestconfig)
    delays = _kill_delays(pytestconfig)
    kills = 0
    published_before_kill = 0
    attempt = 0
    while kills < len(delays):
        attempt += 1
        assert attempt <= 3 * len(delays), f"only {kills} kills landed in {attempt - 1} attempts"
        root = tmp_path / f"kill{attempt}"
        env = impl.cache().env(str(root))
        victim = Child(spec, env, tmp_path / f"victim{attempt}.json")
        _wait_for(lambda: _holding(impl, root, victim.pid), CHILD_TIMEOUT, "victim starts compiling", victim)
        time.sleep(delays[kills] if attempt <= len(delays) else 0.0)
        victim.kill()
        if victim.proc.returncode != -signal.SIGKILL:
            continue  # it finished before the kill landed; try again with a fresh cache
        kills += 1
        keys = impl.cache().keys(str(root))
        published_before_kill += bool(keys)
        follow = Child(spec, env, tmp_path / f"follow{attempt}.json").result()
        _check_outputs(follow, expected, f"the run after kill {kills}")
        # Nothing published: the next run compiles. Published before the kill: it must be whole.
        assert follow["compiler_invocations"] == (0 if keys else 1), f"kill {kills}: keys before {keys}"
        assert len(impl.cache().keys(str(root))) == 1
        assert impl.cache().scratch(str(root)) == [], f"kill {kills}: leftovers of the killed writer remain"
    assert kills == len(delays)
    print(f"kills survived: {kills} ({published_before_kill} after the entry was published)")


# --- a lock wait shorter than the compile ---------------------------------------------------------


@pytest.mark.spec("001.cache.lock-timeout")
def test_a_lock_wait_shorter_than_the_compile_raises_the_timeout_error(impl, pytestconfig, tmp_path, expected):
    spec = _spec(pytestconfig)
    for attempt in range(3):
        root = tmp_path / f"lock{attempt}"
        holder = Child(spec, impl.cache().env(str(root)), tmp_path / f"holder{attempt}.json")
        held = _wait_for(lambda: _holding(impl, root, holder.pid), CHILD_TIMEOUT, "holder starts compiling", holder)
        os.killpg(holder.pid, signal.SIGSTOP)  # a compile that takes longer than the waiter waits
        if _holding(impl, root, holder.pid) and not impl.cache().keys(str(root)):
            break
        os.killpg(holder.pid, signal.SIGCONT)
        holder.result()
    else:
        pytest.fail("could not stop a holder while it held the lock")
    key = held[0]["key"]
    try:
        waiter = Child(spec, impl.cache().env(str(root), lock_timeout_s=2), tmp_path / "waiter.json").result()
    finally:
        os.killpg(holder.pid, signal.SIGCONT)
    assert waiter["rc"] != 0 and "error" in waiter, "the waiter did not report the timeout"
    message = waiter["error"]["message"]
    assert key in message, f"the timeout error does not name the key {key}: {message}"
    assert str(holder.pid) in message, f"the timeout error does not name the holder (pid {holder.pid}): {message}"
    assert waiter["compiler_invocations"] == 0
    _check_outputs(holder.result(), expected, "the holder, resumed")
    assert impl.cache().keys(str(root)) == [key]


# --- damaged entries --------------------------------------------------------------------------------

DAMAGE = ["truncate_artifact", "flip_artifact_byte", "truncate_metadata", "garble_metadata"]


@pytest.fixture(scope="module")
def warm_cache(impl, pytestconfig, tmp_path_factory, expected):
    root = tmp_path_factory.mktemp("warm") / "cache"
    result = Child(_spec(pytestconfig), impl.cache().env(str(root)), root.parent / "warm.json").result()
    _check_outputs(result, expected, "warm-up")
    keys = impl.cache().keys(str(root))
    assert len(keys) == 1, f"one compiled graph published {len(keys)} entries: {keys}"
    return root, keys[0]


ARTIFACT, METADATA = 0, 1  # roles of cache().entry_files(), by position (docs/adapter.md)

# An entry described by fewer files than a test needs ([]: not described) is an honest answer: the
# test skips.
entry_file = cache_entry_file


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_entry_is_never_executed_and_is_recompiled(impl, pytestconfig, tmp_path, warm_cache, expected, damage):
    src, key = warm_cache
    root = tmp_path / "moved-cache"  # a cache directory moved elsewhere keeps its keys
    shutil.copytree(src, root)
    artifact = entry_file(impl, root, key, ARTIFACT)
    metadata = entry_file(impl, root, key, METADATA) if damage.endswith("metadata") else None
    if damage == "truncate_artifact":
        os.truncate(artifact, os.path.getsize(artifact) // 2)
    elif damage == "flip_artifact_byte":
        data = bytearray(open(artifact, "rb").read())
        data[len(data) // 2] ^= 0x5A
        open(artifact, "wb").write(bytes(data))
    elif damage == "truncate_metadata":
        os.truncate(metadata, os.path.getsize(metadata) // 2)
    else:
        open(metadata, "wb").write(b"\x00garbage\xff" * 10)
    result = Child(_spec(pytestconfig), impl.cache().env(str(root)), tmp_path / "after.json").result()
    _check_outputs(result, expected, f"the run after {damage}")
    assert result["compiler_invocations"] == 1, "the damaged entry was used instead of recompiled"
    assert any(key in w for w in result["warnings"]), f"no warning names the evicted key: {result['warnings']}"
    assert impl.cache().keys(str(root)) == [key]
    again = Child(_spec(pytestconfig), impl.cache().env(str(root), assert_hit=True), tmp_path / "again.json").result()
    _check_outputs(again, expected, "the run after the recompile")


@pytest.mark.spec("001.cache.content-addressed", "001.cache.neff-cache-dir")
def test_an_undamaged_moved_cache_still_hits(impl, pytestconfig, tmp_path, warm_cache, expected):
    src, key = warm_cache
    root = tmp_path / "elsewhere" / "cache"
    shutil.copytree(src, root)
    result = Child(
        _spec(pytestconfig), impl.cache().env(str(root), assert_hit=True), tmp_path / "moved.json", cwd=str(tmp_path)
    ).result()
    _check_outputs(result, expected, "a process using a moved cache from another directory")
    assert result["compiler_invocations"] == 0


# --- a cache directory that cannot be written --------------------------------------------------------


@contextlib.contextmanager
def _unwritable(path, how: str):
    path.mkdir(parents=True, exist_ok=True)
    if how == "read_only" and os.geteuid() != 0:
        path.chmod(0o555)
        try:
            yield
        finally:
            path.chmod(0o755)
        return
    if os.geteuid() != 0:
        pytest.skip("a full filesystem needs root to mount a small tmpfs")
    if how == "read_only":
        cmds = [["mount", "--bind", str(path), str(path)], ["mount", "-o", "remount,bind,ro", str(path)]]
    else:
        cmds = [["mount", "-t", "tmpfs", "-o", "size=8k", "tmpfs", str(path)]]
    for i, cmd in enumerate(cmds):
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            if i:
                subprocess.run(["umount", str(path)], capture_output=True)
            pytest.skip(f"cannot make {how} directory here: {' '.join(cmd)}: {proc.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["umount", str(path)], capture_output=True)


@pytest.mark.parametrize("how", ["read_only", "full"])
def test_an_unwritable_cache_dir_compiles_without_caching_or_fails_clearly(impl, pytestconfig, tmp_path, expected, how):
    neff = tmp_path / "neff"
    root = tmp_path / "cache"
    with _unwritable(neff, how):
        before = sorted(os.listdir(neff))
        result = Child(_spec(pytestconfig), impl.cache().env(str(root), neff_dir=str(neff)), tmp_path / "ro.json").result()
        after = sorted(os.listdir(neff))
    assert after == before, f"the {how} directory was changed: {after}"
    if result["rc"] == 0:
        _check_outputs(result, expected, f"a compile with a {how} cache")
        assert result["warnings"], "compiled without caching but gave no warning"
        assert any(str(neff) in w for w in result["warnings"]), f"no warning names {neff}: {result['warnings']}"
    else:
        assert str(neff) in result["error"]["message"], f"the error does not name the directory: {result['error']}"


@pytest.mark.spec("001.cache.local-cache-dir")
def test_a_read_only_warm_cache_still_serves_hits(impl, pytestconfig, tmp_path, expected):
    """A process fills an artifact cache placed in its own directory (``cache_env(neff_dir=)``, the
    adapter's documented switch, whatever the layout inside); made read-only, the directory still
    serves the next process, which must hit."""
    root, artifacts = tmp_path / "cache", tmp_path / "artifacts"
    warm = Child(_spec(pytestconfig), impl.cache().env(str(root), neff_dir=str(artifacts)), tmp_path / "warm.json").result()
    _check_outputs(warm, expected, "the warm-up into its own artifact directory")
    assert artifacts.is_dir() and any(artifacts.iterdir()), (
        f"cache_env(neff_dir={str(artifacts)!r}) kept nothing in that directory")
    with _unwritable(artifacts, "read_only"):
        result = Child(
            _spec(pytestconfig), impl.cache().env(str(root), neff_dir=str(artifacts), assert_hit=True),
            tmp_path / "rw.json",
        ).result()
    _check_outputs(result, expected, "a hit from a read-only cache")
    assert result["compiler_invocations"] == 0


# --- a compile that fails after taking the lock ----------------------------------------------------

LOCK_WAIT_S = 5  # a retry that waited this long for the lock of a failed compile was not released


def _other_members(pgid: int) -> list[int]:
    """Processes of the child's process group other than the child itself (its compiler)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != pgid:
            with contextlib.suppress(OSError):
                if os.getpgid(int(name)) == pgid:
                    found.append(int(name))
    return found


def _the_compiler(impl, root, child: Child, finished) -> list[int]:
    """The pids of ``child``'s compiler process(es) while it holds the key's lock; ``[]`` when
    ``finished()`` became true first (the compile was too quick to catch)."""
    _wait_for(lambda: _holding(impl, root, child.pid) or finished(), CHILD_TIMEOUT, "the process starts compiling")
    deadline = time.monotonic() + CHILD_TIMEOUT
    while time.monotonic() < deadline and not finished():
        compilers = _other_members(child.pid)
        if compilers:
            return compilers
        time.sleep(0.002)
    return []


def _kill_the_compiler(impl, root, child: Child, attempt_file: str) -> bool:
    """SIGKILL the compiler process of ``child`` while it holds the key's lock; False when the
    compile finished first."""
    compilers = _the_compiler(impl, root, child, lambda: os.path.exists(attempt_file))
    for pid in compilers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return bool(compilers)


def test_a_compile_that_fails_holding_the_lock_releases_it(impl, pytestconfig, tmp_path, expected):
    """The compiler dies under a process that holds the key's lock (a transient failure: killed or
    out of memory). Another process retrying the graph, and the same process retrying it, compile
    at once instead of waiting for the lock timeout."""
    if not os.path.isdir("/proc"):
        pytest.skip("finding the compiler process needs /proc")
    spec = _spec(pytestconfig)
    for attempt in range(4):
        root = tmp_path / f"failed{attempt}"
        env = impl.cache().env(str(root), lock_timeout_s=LOCK_WAIT_S)
        out, pause = tmp_path / f"first{attempt}.json", tmp_path / f"pause{attempt}"
        first = Child(spec, env, out, attempts=2, pause=pause)
        killed = _kill_the_compiler(impl, root, first, f"{out}.attempt0")
        _wait_for(lambda: os.path.exists(f"{out}.attempt0"), CHILD_TIMEOUT, "the first attempt ends", first)
        failed = json.load(open(f"{out}.attempt0"))
        if killed and "error" in failed:
            break
        (pause.parent / f"{pause.name}.0").touch()
        first.result()
    else:
        pytest.skip("the compile never ran as a separate process that could be killed while holding the lock")
    try:
        assert failed["compiler_invocations"] == 1, failed
        # Another process, same key and same lock directory (its artifacts elsewhere, so that the
        # first process's own retry below still has to compile).
        other_env = impl.cache().env(str(root), lock_timeout_s=LOCK_WAIT_S, neff_dir=str(root / "other-neff"))
        started = time.monotonic()
        other = Child(spec, other_env, tmp_path / "other.json").result()
        _check_outputs(other, expected, "another process retrying the graph whose compile failed")
        assert other["compiler_invocations"] == 1, other
    finally:
        (pause.parent / f"{pause.name}.0").touch()
    again = first.result()
    _check_outputs(again, expected, "the same process retrying the graph whose compile failed")
    assert again["compiler_invocations"] == 2, again["attempts"]
    print(f"retry from another process took {time.monotonic() - started:.1f} s")


# --- a publication cut short -----------------------------------------------------------------------


def test_a_write_cut_short_leaves_nothing_under_the_key(impl, pytestconfig, tmp_path, warm_cache, expected):
    """While the compiler runs, the compiling process is limited to files of half the artifact's
    size (``RLIMIT_FSIZE`` set on it with ``prlimit``; the running compiler keeps its own limit), so
    publishing the entry fails midway. The compile succeeds uncached or fails clearly; nothing
    partial is left under the key, and the next process compiles and publishes it whole."""
    resource = pytest.importorskip("resource")
    if not hasattr(resource, "prlimit") or not os.path.isdir("/proc"):
        pytest.skip("limiting a running process's file sizes needs prlimit and /proc (Linux)")
    src, key = warm_cache
    limit = os.path.getsize(entry_file(impl, src, key, ARTIFACT)) // 2
    spec = _spec(pytestconfig)
    for attempt in range(4):
        root = tmp_path / f"cut{attempt}"
        child = Child(spec, impl.cache().env(str(root)), tmp_path / f"cut{attempt}.json")
        compilers = _the_compiler(impl, root, child, lambda: child.proc.poll() is not None)
        if compilers:
            _, hard = resource.prlimit(child.pid, resource.RLIMIT_FSIZE)
            resource.prlimit(child.pid, resource.RLIMIT_FSIZE, (limit, hard))
            if all(os.path.exists(f"/proc/{pid}") for pid in compilers):
                break  # the limit was in place before the compiler returned: publication comes after
        child.result()
    else:
        pytest.skip("the compile never ran as a separate process that could be caught while holding the lock")
    cut = child.result()
    if cut["rc"] == 0:
        _check_outputs(cut, expected, f"a compile whose process may not write files over {limit} bytes")
    said = "\n".join([*cut["warnings"], cut.get("error", {}).get("message", "")])
    assert str(root) in said, f"the failed write was not reported with the cache directory: {said[:2000]}"
    assert impl.cache().keys(str(root)) == [], "an entry was published although its write was cut short"
    partial = [p for p in cache_entry_files(impl, root, key) if os.path.exists(p)]
    assert partial == [], f"a write cut short at {limit} bytes left {partial} under the key"
    assert impl.cache().scratch(str(root)) == [], "the cut-short write left its temporary files"
    follow = Child(spec, impl.cache().env(str(root)), tmp_path / "follow.json").result()
    _check_outputs(follow, expected, "the run after the cut-short write")
    assert follow["compiler_invocations"] == 1
    assert impl.cache().keys(str(root)) == [key]


# --- planted entries: checksums catch damage, only a secret catches intent -----------------------------

SECRET = "conformance-secret"


@pytest.fixture(scope="module")
def other_artifact(impl, pytestconfig, tmp_path_factory, expected) -> bytes:
    """A real, loadable artifact of the same graph built with other arguments: what someone who can
    write the cache folder could put in place of an entry's artifact."""
    root = tmp_path_factory.mktemp("other") / "cache"
    result = Child(_spec(pytestconfig), impl.cache().env(str(root)), root.parent / "o3.json",
                   options={"compiler_args": ["-O3"]}).result()
    _check_outputs(result, expected, "the -O3 build")
    (key,) = impl.cache().keys(str(root))
    with open(entry_file(impl, root, key, ARTIFACT), "rb") as fh:
        return fh.read()


def _warm(impl, pytestconfig, root, expected, **env) -> str:
    result = Child(_spec(pytestconfig), impl.cache().env(str(root), **env), root.parent / "warm.json").result()
    _check_outputs(result, expected, "warm-up")
    (key,) = impl.cache().keys(str(root))
    return key


def test_without_a_secret_a_planted_entry_is_served(impl, pytestconfig, tmp_path, expected, other_artifact):
    """The documented limit: an artifact swapped together with its recorded checksums passes every
    check there is without a secret. A shared cache folder is shared code execution."""
    root = tmp_path / "cache"
    key = _warm(impl, pytestconfig, root, expected)
    impl.cache().plant_entry(str(root), key, other_artifact)
    result = Child(_spec(pytestconfig), impl.cache().env(str(root), assert_hit=True), tmp_path / "after.json").result()
    _check_outputs(result, expected, "the run on the planted entry")
    assert result["compiler_invocations"] == 0, "the planted entry was not served (checksums catch nothing more)"
    with open(entry_file(impl, root, key, ARTIFACT), "rb") as fh:
        assert fh.read() == other_artifact


def test_with_a_secret_a_planted_entry_is_never_executed(impl, pytestconfig, tmp_path, expected, other_artifact):
    root = tmp_path / "cache"
    impl.cache().env(str(root), secret=SECRET)  # NotSupported (a skip) without entry authentication
    key = _warm(impl, pytestconfig, root, expected, secret=SECRET)
    own = open(entry_file(impl, root, key, ARTIFACT), "rb").read()
    impl.cache().plant_entry(str(root), key, other_artifact)
    result = Child(_spec(pytestconfig), impl.cache().env(str(root), secret=SECRET), tmp_path / "after.json").result()
    _check_outputs(result, expected, "the run on the planted entry, with the secret")
    assert result["compiler_invocations"] == 1, "the planted entry was served despite the secret"
    assert any(key in w for w in result["warnings"]), f"no warning names the refused entry: {result['warnings']}"
    with open(entry_file(impl, root, key, ARTIFACT), "rb") as fh:
        assert fh.read() == own, "the rebuilt entry is not the process's own build"
    again = Child(_spec(pytestconfig), impl.cache().env(str(root), secret=SECRET, assert_hit=True),
                  tmp_path / "again.json").result()
    _check_outputs(again, expected, "the run after the rebuild")


def test_an_artifact_with_matching_checksums_the_runtime_cannot_load_is_rebuilt(impl, pytestconfig, tmp_path, warm_cache,
                                                                                expected):
    """An entry whose checksums match an artifact the runtime cannot load (built beside another
    runtime, or planted) is evicted and rebuilt once, with a warning naming the key."""
    src, key = warm_cache
    root = tmp_path / "cache"
    shutil.copytree(src, root)
    impl.cache().plant_entry(str(root), key, b"\x08\x00\x00\x00not an artifact")
    result = Child(_spec(pytestconfig), impl.cache().env(str(root)), tmp_path / "after.json").result()
    _check_outputs(result, expected, "the run on an unloadable entry")
    assert result["compiler_invocations"] == 1, "the unloadable entry was not rebuilt"
    assert any(key in w for w in result["warnings"]), f"no warning names the evicted key: {result['warnings']}"
    again = Child(_spec(pytestconfig), impl.cache().env(str(root), assert_hit=True), tmp_path / "again.json").result()
    _check_outputs(again, expected, "the run after the rebuild")


# --- the compiler dies with the process that started it -----------------------------------------------


def _running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (an exited process its new parent has not reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _foreign_members(child: Child) -> list[int]:
    """Processes of ``child``'s group that run another program than the child (its compiler, not
    the Python workers a framework may keep)."""
    found = []
    with contextlib.suppress(OSError):
        own = os.readlink(f"/proc/{child.pid}/exe")
        for pid in _other_members(child.pid):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/exe") != own and _running(pid):
                    found.append(pid)
    return found


def test_a_compiling_process_killed_with_sigkill_leaves_no_compiler_behind(impl, pytestconfig, tmp_path):
    """The compiler is stopped (SIGSTOP) so that it cannot finish on its own, then only the process
    that started it is SIGKILLed. A compiler tied to its parent dies with it; an orphan would stay."""
    if not os.path.isdir("/proc"):
        pytest.skip("finding the compiler process needs /proc")
    spec = _spec(pytestconfig)
    for attempt in range(4):
        root = tmp_path / f"orphan{attempt}"
        child = Child(spec, impl.cache().env(str(root)), tmp_path / f"orphan{attempt}.json")
        compilers = _wait_for(lambda: _foreign_members(child) or child.proc.poll() is not None, CHILD_TIMEOUT,
                              "the process starts its compiler")
        if compilers is not True:
            for pid in compilers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
            if all(_running(pid) for pid in compilers):
                break
        child.result()
    else:
        pytest.skip("the compile never ran as a separate process that could be caught")
    try:
        os.kill(child.pid, signal.SIGKILL)  # the compiling process only, not its process group
        child.proc.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_running(pid) for pid in compilers):
            time.sleep(0.01)
        survivors = [pid for pid in compilers if _running(pid)]
        names = [open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0].decode(errors="replace") for pid in survivors]
        assert survivors == [], f"the compiler of a SIGKILLed process kept running: pids {survivors} {names}"
    finally:
        for pid in compilers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

"""A fork server: child processes that start with ``torch`` already imported.

Most of a fresh child's start is ``import torch`` and ``import torch._dynamo`` (about 4 s of CPU
on the CI machine), and the suite starts dozens of children: the cache tests' compiling processes,
the selfcheck lane's pytest runs. A :class:`ForkServer` is one interpreter that imports a few
modules once and then forks a child per request; each child resets its environment, working
directory, standard streams and session, and runs a module as ``python -m MODULE ARGS`` would.

A forked child is a real process like any other: it has its own pid and process group (so
``os.killpg`` reaches it and anything it starts), it can be stopped, killed or limited, and its
exit status (a negative signal number when a signal ended it) and CPU time come back to the
parent. What it shares with the server is what the preloaded modules did at import, which is why
the server imports only modules that do no work at import, never the implementation under test.

What a forked child does not get, and when to start a fresh interpreter instead:

- a hash seed of its own choosing (``PYTHONHASHSEED`` in the request's environment cannot take
  effect; the server's processes take turns, each with a random seed, so consecutive children
  differ), nor any other ``PYTHON*`` setting read at interpreter start;
- the values of variables that the preloaded modules read at import (torch reads its
  ``TORCH_*``/``TORCHINDUCTOR_*``/``TORCHDYNAMO_*`` configuration flags then): a request that sets
  one of those differently from the server's environment would silently get the server's value.

:func:`needs_fresh_interpreter` says when a request's environment differs from the server's in
such a variable; callers start a fresh interpreter then.

``python -m conformance.harness.forkserver MODULE...`` is the server itself: it imports the modules,
answers ``{"ready": true}``, then reads one JSON request per line on standard input and writes one
JSON line per event on standard output (``{"id": n, "pid": p}`` when a child started,
``{"exit": p, "code": c, "cpu_s": s}`` when it ended). It kills its remaining children and exits
when its standard input closes.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import select
import signal
import subprocess
import sys
import tempfile
import threading
from typing import Mapping, Sequence

from conformance.harness.env import pythonpath

# Variables read when the interpreter or the preloaded modules start: a request that changes one
# of them needs a fresh interpreter (TORCH_NEURONX_* and NEURON_* are read when used, not here).
_READ_AT_START = (
    "PYTHON", "PYTORCH_", "TORCHINDUCTOR_", "TORCHDYNAMO_", "TORCH_COMPILE", "TORCH_LOGS", "TORCH_CPP_",
    "TORCH_SHOW_CPP_STACKTRACES", "OMP_", "MKL_",
)


def needs_fresh_interpreter(env: Mapping[str, str], server_env: Mapping[str, str]) -> bool:
    """Whether a child with environment ``env`` would see a different value than it asked for of
    a variable the server read when it started (``PYTHONHASHSEED``, torch's import-time flags)."""
    names = {k for k in (*env, *server_env) if k.startswith(_READ_AT_START) and k != "PYTHONPATH"}
    return any(env.get(k) != server_env.get(k) for k in names)


def start_module(module: str, args: Sequence[str], *, env: Mapping[str, str], log: str, cwd: str | None = None,
                 server: "ForkServer | None" = None, err_log: str | None = None) -> "subprocess.Popen | ForkedProcess":
    """``python -m module *args`` as a process of its own (its own session; standard output and
    error written to the file ``log``, standard error to ``err_log`` instead when given): forked
    from ``server`` when there is one and ``env`` allows it (:func:`needs_fresh_interpreter`), a
    fresh interpreter otherwise."""
    for path in filter(None, (log, err_log)):
        open(path, "wb").close()
    if server is not None and not needs_fresh_interpreter(env, server.env):
        return server.spawn(module, args, env=env, log=log, cwd=cwd, err_log=err_log)
    with open(log, "ab") as out, open(err_log or os.devnull, "ab") as err:
        return subprocess.Popen([sys.executable, "-m", module, *args], env=dict(env), cwd=cwd, stdout=out,
                                stderr=err if err_log else subprocess.STDOUT, start_new_session=True)


def run_module(module: str, args: Sequence[str], *, env: Mapping[str, str], cwd: str | None = None,
               server: "ForkServer | None" = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """:func:`start_module` run to its end, as ``subprocess.run(..., capture_output=True, text=True)``
    would: the exit status and the text of its standard output and error. A run still going after
    ``timeout`` seconds is killed (with what it started) and :class:`subprocess.TimeoutExpired` raised."""
    with tempfile.TemporaryDirectory(prefix="run-module-") as logs:
        out, err = os.path.join(logs, "stdout"), os.path.join(logs, "stderr")
        proc = start_module(module, args, env=env, log=out, err_log=err, cwd=cwd, server=server)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            if isinstance(proc, ForkedProcess):
                proc.kill()
            else:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        with open(out, errors="replace") as fo, open(err, errors="replace") as fe:
            return subprocess.CompletedProcess([module, *args], proc.returncode, fo.read(), fe.read())


class ForkServerError(RuntimeError):
    """The server could not start (a preload failed) or died; the message has its output."""


class ForkedProcess:
    """A child of a :class:`ForkServer`, with the part of :class:`subprocess.Popen` the suite uses:
    ``pid``, ``returncode``, ``poll()``, ``wait(timeout)``, ``kill()``; and ``cpu_s``, the CPU
    seconds of the child and the processes it waited for, once it ended."""

    def __init__(self, server: "_Interpreter", pid: int, args: list[str]) -> None:
        self._server = server
        self.pid = pid
        self.args = args
        self.returncode: int | None = None
        self.cpu_s: float | None = None
        #: the ``PYTHONHASHSEED`` of the server process it was forked from
        self.hash_seed: str | None = None

    def poll(self) -> int | None:
        return self._server._status(self, timeout=0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._server._status(self, timeout=timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return code

    def kill(self) -> None:
        """SIGKILL to the child's process group (the child and whatever it started)."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:  # not yet in its own session: the child alone
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


class _Interpreter:
    """One server process with one hash seed: the protocol with it, its children's status."""

    def __init__(self, preload: Sequence[str], env: Mapping[str, str]) -> None:
        self.preload = list(preload)
        self.env = dict(env)
        self._proc: subprocess.Popen | None = None
        self._cond = threading.Condition()
        self._ready = False
        self._next_id = 0
        self._started: dict[int, int] = {}  # request id -> pid
        self._ended: dict[int, tuple[int, float]] = {}  # pid -> (exit code, cpu seconds)
        self._gone = False
        self._reader = threading.Thread(target=self._read, name="forkserver-reader", daemon=True)

    def _start(self) -> subprocess.Popen:
        if self._proc is None:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "conformance.harness.forkserver", *self.preload],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=self.env,
            )
            self._reader.start()
        return self._proc

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            msg = json.loads(line)
            with self._cond:
                if msg.get("ready"):
                    self._ready = True
                elif "exit" in msg:
                    self._ended[msg["exit"]] = (msg["code"], msg["cpu_s"])
                else:
                    self._started[msg["id"]] = msg["pid"]
                self._cond.notify_all()
        with self._cond:
            self._gone = True
            self._cond.notify_all()

    def _dead(self, what: str) -> ForkServerError:
        assert self._proc is not None
        return ForkServerError(f"the fork server (pid {self._proc.pid}) {what}; exit status {self._proc.poll()}")

    def spawn(self, request: dict, label: list[str]) -> ForkedProcess:
        proc = self._start()
        with self._cond:
            self._cond.wait_for(lambda: self._ready or self._gone)
            if not self._ready:
                raise self._dead("exited before it was ready (a preloaded module failed to import: see its stderr)")
            self._next_id += 1
            rid = request["id"] = self._next_id
            assert proc.stdin is not None
            proc.stdin.write((json.dumps(request) + "\n").encode())
            proc.stdin.flush()
            self._cond.wait_for(lambda: rid in self._started or self._gone)
            if rid not in self._started:
                raise self._dead("died before it started a child")
            child = ForkedProcess(self, self._started.pop(rid), label)
        child.hash_seed = self.env.get("PYTHONHASHSEED")
        return child

    def _status(self, child: ForkedProcess, timeout: float | None) -> int | None:
        if child.returncode is not None:
            return child.returncode
        with self._cond:
            self._cond.wait_for(lambda: child.pid in self._ended or self._gone, timeout=timeout)
            if child.pid not in self._ended:
                if self._gone:
                    raise self._dead(f"died while its child {child.pid} ran")
                return None
            child.returncode, child.cpu_s = self._ended.pop(child.pid)
        return child.returncode

    def close(self) -> None:
        if self._proc is None:
            return
        if self._proc.stdin and not self._proc.stdin.closed:
            with contextlib.suppress(OSError):
                self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._reader.join(timeout=5)


class ForkServer:
    """The parent's handle on a server; see the module doc. Use as a context manager.

    Hash seeds: a forked child keeps its server's ``PYTHONHASHSEED`` (it is read when the
    interpreter starts), so a server of one interpreter would run every child with one seed, and a
    bug that depends on the order of a set of strings would hide behind it (two children computing
    a key would always agree). Unless ``env`` pins ``PYTHONHASHSEED``, the server is therefore
    ``interpreters`` server processes (default 2), each started with a seed of its own drawn at
    random, and children are forked from them in turn: two children spawned one after the other
    never share a seed. Each child's seed is on :attr:`ForkedProcess.hash_seed` (to reproduce a
    failure, pin it). A request whose environment sets ``PYTHONHASHSEED`` gets a fresh interpreter
    from :func:`start_module` (:func:`needs_fresh_interpreter`).

    A server process starts with the first child it forks (a fixture that makes one costs nothing
    when its tests skip); ``env`` is the environment they start with, less the seed."""

    def __init__(self, preload: Sequence[str], *, env: Mapping[str, str] | None = None, interpreters: int = 2) -> None:
        self.preload = list(preload)
        self.env = dict(os.environ if env is None else env)
        pinned = self.env.get("PYTHONHASHSEED", "").isdigit()
        self._seeds: list[str | None] = (
            [self.env["PYTHONHASHSEED"]] if pinned else [str(s) for s in random.sample(range(1, 2**32), max(1, interpreters))]
        )
        self._interpreters: list[_Interpreter | None] = [None] * len(self._seeds)
        self._turn = 0
        self._closed = False
        self._lock = threading.Lock()

    @property
    def hash_seeds(self) -> list[str]:
        """The seeds of the server processes, in the order they take turns."""
        return [s for s in self._seeds if s is not None]

    def spawn(self, module: str, args: Sequence[str], *, env: Mapping[str, str], log: str,
              cwd: str | None = None, err_log: str | None = None) -> ForkedProcess:
        """Fork a child that runs ``python -m module *args`` with exactly ``env`` as its environment,
        in ``cwd`` (default: the server's), standard output and error appended to the file ``log``
        (standard error to ``err_log`` instead when given), standard input from /dev/null, in a
        session of its own; from the next server process in turn."""
        request = {"module": module, "args": list(args), "env": dict(env), "log": str(log), "cwd": cwd,
                   "err_log": None if err_log is None else str(err_log)}
        with self._lock:
            if self._closed:
                raise ForkServerError("the fork server was closed; start another to spawn more children")
            turn, self._turn = self._turn, (self._turn + 1) % len(self._seeds)
            interp = self._interpreters[turn]
            if interp is None:
                interp = self._interpreters[turn] = _Interpreter(self.preload, {**self.env, "PYTHONHASHSEED": self._seeds[turn]})
        return interp.spawn(request, [module, *args])

    def close(self) -> None:
        """End the server processes; each kills its children still running first."""
        with self._lock:
            self._closed = True
            interpreters = [i for i in self._interpreters if i is not None]
        for interp in interpreters:
            interp.close()

    def __enter__(self) -> "ForkServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# --- the server process ---------------------------------------------------------------------------


def _send(fd: int, msg: dict) -> None:
    os.write(fd, (json.dumps(msg) + "\n").encode())


def _run_child(request: dict, protocol_fds: Sequence[int]) -> None:
    """In the forked child: become the process the request describes, run its module, exit."""
    code = 70
    try:
        os.setsid()
        for fd in protocol_fds:
            os.close(fd)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        out = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        err = os.open(request["err_log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if request.get("err_log") else out
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        for fd in {out, err, null}:
            os.close(fd)
        if request.get("cwd"):
            os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        # what the interpreter would have put on sys.path from PYTHONPATH, ahead of the rest
        extra = [p for p in pythonpath(request["env"]) if p not in sys.path]
        sys.path[:0] = extra
        sys.argv = [request["module"], *request["args"]]
        import runpy
        import traceback

        try:
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
    finally:
        os._exit(code)


def _reap(reply_fd: int, children: set[int]) -> None:
    while children:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            children.clear()
            return
        if pid == 0:
            return
        children.discard(pid)
        _send(reply_fd, {"exit": pid, "code": os.waitstatus_to_exitcode(status),
                         "cpu_s": usage.ru_utime + usage.ru_stime})


def serve(preload: Sequence[str]) -> None:
    import importlib

    for name in preload:
        importlib.import_module(name)
    # The protocol gets descriptors of its own; stdout becomes stderr, so that nothing a preloaded
    # module prints can corrupt it.
    request_fd, reply_fd = os.dup(0), os.dup(1)
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    _send(reply_fd, {"ready": True})
    children: set[int] = set()
    pending = b""
    try:
        while True:
            readable, _, _ = select.select([request_fd], [], [], 0.02 if children else 1.0)
            if readable:
                data = os.read(request_fd, 1 << 16)
                if not data:
                    break  # the parent closed the pipe (or died)
                pending += data
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    request = json.loads(line)
                    sys.stdout.flush()
                    sys.stderr.flush()
                    pid = os.fork()
                    if pid == 0:
                        _run_child(request, (request_fd, reply_fd))
                    children.add(pid)
                    _send(reply_fd, {"id": request["id"], "pid": pid})
            _reap(reply_fd, children)
    finally:
        for pid in list(children):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        for pid in list(children):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


if __name__ == "__main__":
    serve(sys.argv[1:])

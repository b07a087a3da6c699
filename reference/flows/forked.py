"""Run tasks in forked child processes, a few at a time, without ever hanging the parent.

Each task is a callable run in its own forked child (the child inherits the parent's memory, so a
model or a lowered graph needs no pickling on the way in; the result goes back through a pipe and
must pickle). A child starts its own process group, so a timeout kills it together with anything
it started (the compiler). Every task ends in one :class:`ChildOutcome`: a value, an error the
child raised (type, message, traceback, and the exception itself when it pickles), a crash (exit
status) or a timeout.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Sequence


@dataclass
class ChildOutcome:
    identity: str
    ok: bool
    value: Any = None
    error_type: str | None = None
    error: str | None = None
    traceback: str | None = None
    exitcode: int | None = None
    timed_out: bool = False
    wall_s: float = 0.0
    #: the exception the child raised, rebuilt in the parent (``None`` when it did not pickle)
    exception: BaseException | None = None

    def describe(self) -> str:
        if self.ok:
            return f"{self.identity}: ok"
        if self.timed_out:
            return f"{self.identity}: did not finish within its timeout and was killed"
        if self.error_type:
            return f"{self.identity}: {self.error_type}: {self.error}"
        return f"{self.identity}: the child process died (exit status {self.exitcode}) without reporting a result"


class ChildTraceback(Exception):
    """The traceback of an error raised in a forked child, as text. A parent that re-raises the
    child's exception sets this as its ``__cause__``, so the report shows where in the child it
    was raised (the parent's own traceback only shows the re-raise)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f'the child\'s traceback:\n"""\n{self.text.rstrip()}\n"""'


def _picklable(exc: BaseException) -> BaseException | None:
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return None
    return exc


def _child_main(fn: Callable[[], Any], conn) -> None:
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    code = 0
    try:
        try:
            msg = ("ok", fn())
        except BaseException as exc:  # everything goes back to the parent, which decides
            msg = ("err", type(exc).__name__, str(exc), traceback.format_exc(), _picklable(exc))
        try:
            conn.send(msg)
        except Exception as exc:  # an unpicklable result
            conn.send(("err", type(exc).__name__, f"the result could not be sent back: {exc}", traceback.format_exc()))
    except BaseException:
        code = 70
    finally:
        try:
            conn.close()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)  # skip the parent's atexit handlers (pytest's, for one)


def _kill(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass
    try:
        proc.kill()
    except Exception:
        pass


def reraise(outcome: ChildOutcome) -> None:
    """Raise the exception a child raised, in the parent, ``from`` the child's traceback."""
    if outcome.exception is None:
        raise ValueError(f"{outcome.identity}: the child reported no exception to raise")
    exc = outcome.exception
    exc.add_note(f"raised in a forked child: {outcome.identity}")
    raise exc from ChildTraceback(outcome.traceback or "")


def run_forked(
    tasks: Sequence[tuple[str, Callable[[], Any]]],
    *,
    workers: int,
    timeout: float | None = None,
    on_done: Callable[[int, ChildOutcome], None] | None = None,
) -> list[ChildOutcome]:
    """Run ``(identity, fn)`` tasks, at most ``workers`` at once; outcomes in task order.

    ``timeout`` (seconds) bounds each child; ``on_done(index, outcome)`` is called as each ends.
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers!r}")
    ctx = multiprocessing.get_context("fork")
    pending = list(enumerate(tasks))
    running: dict[int, tuple[Any, Any, float, str]] = {}
    outcomes: list[ChildOutcome | None] = [None] * len(tasks)

    def finish(i: int, outcome: ChildOutcome) -> None:
        outcomes[i] = outcome
        if on_done is not None:
            on_done(i, outcome)

    try:
        while pending or running:
            while pending and len(running) < workers:
                i, (identity, fn) = pending.pop(0)
                reader, writer = ctx.Pipe(duplex=False)
                sys.stdout.flush()
                sys.stderr.flush()
                proc = ctx.Process(target=_child_main, args=(fn, writer), name=f"neuron-child-{i}")
                proc.start()
                writer.close()
                running[i] = (proc, reader, time.monotonic(), identity)
            now = time.monotonic()
            waits = [start + timeout - now for (_, _, start, _) in running.values()] if timeout else []
            wait_s = max(0.0, min(waits)) if waits else None
            handles = [r for (_, r, _, _) in running.values()] + [p.sentinel for (p, _, _, _) in running.values()]
            ready = set(multiprocessing.connection.wait(handles, timeout=wait_s))
            now = time.monotonic()
            for i, (proc, reader, start, identity) in list(running.items()):
                if reader in ready or proc.sentinel in ready:
                    msg = None
                    try:
                        if reader.poll():
                            msg = reader.recv()
                    except (EOFError, OSError):
                        msg = None
                    proc.join(timeout=10)
                    if proc.is_alive():
                        _kill(proc)
                        proc.join()
                    reader.close()
                    del running[i]
                    wall = now - start
                    if msg and msg[0] == "ok":
                        finish(i, ChildOutcome(identity, True, value=msg[1], exitcode=proc.exitcode, wall_s=wall))
                    elif msg:
                        finish(i, ChildOutcome(identity, False, error_type=msg[1], error=msg[2], traceback=msg[3],
                                               exitcode=proc.exitcode, wall_s=wall, exception=msg[4] if len(msg) > 4 else None))
                    else:
                        finish(i, ChildOutcome(identity, False, exitcode=proc.exitcode, wall_s=wall))
                elif timeout is not None and now - start >= timeout:
                    _kill(proc)
                    proc.join()
                    reader.close()
                    del running[i]
                    finish(i, ChildOutcome(identity, False, timed_out=True, exitcode=proc.exitcode, wall_s=now - start))
    finally:
        for proc, reader, _, _ in running.values():  # the parent itself was interrupted
            _kill(proc)
            proc.join()
            reader.close()
    return [o for o in outcomes if o is not None]

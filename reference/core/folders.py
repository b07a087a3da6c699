"""The folders the caches and the debug directory live in, and whether this process may trust them.

A cache entry is native code this process will run, so whoever can write a cache folder can run
code in every process that uses it. The defaults are therefore per user: under
``<tmp>/neuron-<uid>/`` (``<tmp>`` is Python's temporary directory, ``/tmp`` unless ``TMPDIR``
says otherwise), created with mode 0700 and checked to be a real directory owned by this user and
closed to others before anything is read from it.

A folder named by a variable is checked as well, where it really is (``realpath``: a link to a
folder you own is fine), and refused with :class:`UntrustedFolderError` naming the variable when:

- it is writable by everyone (sticky bit or not: cache entries have predictable names, so a
  sticky folder still lets another user create an entry before you do), or
- it is owned by another user (root excepted).

A group-writable folder is accepted: sharing a cache with a group is a decision to trust that
group (docs/caching.md, "Trust").
"""

from __future__ import annotations

import os
import stat
import tempfile

from reference.core import env
from reference.core.errors import NeuronBackendError

#: The variables whose folders this module hands out (their defaults are under :func:`user_root`).
FOLDER_VARIABLES = (env.NEFF_CACHE_DIR, env.HLO_CACHE_DIR, env.NEFF_LOCAL_CACHE_DIR, env.DEBUG_DIR)


class UntrustedFolderError(NeuronBackendError, ValueError):
    """A cache or debug folder that another user could write (or that another user owns)."""

    def __init__(self, variable: str, path: str, problem: str, todo: str) -> None:
        super().__init__(
            f"{variable}: the folder {path} {problem}; a cache or debug folder others can write lets "
            f"them run code in this process, so it is not used. {todo}"
        )
        self.variable = variable
        self.path = path


def user_root() -> str:
    """The per-user folder the defaults live under: ``<tmp>/neuron-<uid>``."""
    return os.path.join(tempfile.gettempdir(), f"neuron-{os.geteuid()}")


def _private_dir(path: str, variable: str) -> None:
    """Create ``path`` (mode 0700) unless it exists, then insist that it is a real directory, owned
    by this user and closed to everyone else (the per-user defaults)."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return  # cannot be created: the first write fails and says so; nothing can be read from it
    st = os.lstat(path)
    todo = f"Remove it (it is not this user's), or set {variable} to a folder you own"
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise UntrustedFolderError(variable, path, "is not a plain directory (a symbolic link or a file)", todo)
    if st.st_uid != os.geteuid():
        raise UntrustedFolderError(variable, path, f"is owned by uid {st.st_uid}, not by this user ({os.geteuid()})", todo)
    if st.st_mode & 0o022:
        raise UntrustedFolderError(
            variable, path, f"is writable by others (mode {stat.S_IMODE(st.st_mode):o})",
            f"Run chmod 700 {path}, or set {variable} to a folder you own",
        )


def check_trusted(path: str, variable: str) -> None:
    """Raise :class:`UntrustedFolderError` when the existing folder ``path`` (followed through
    links) is writable by everyone or owned by another user; nothing when it does not exist."""
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError:
        return
    where = path if real == path else f"{path} (really {real})"
    if st.st_mode & stat.S_IWOTH:
        raise UntrustedFolderError(
            variable, where, f"is writable by every user (mode {stat.S_IMODE(st.st_mode):o})",
            f"Run chmod o-w {real} (chmod 700 for a private cache), or set {variable} to a folder you own",
        )
    if st.st_uid not in (os.geteuid(), 0):
        raise UntrustedFolderError(
            variable, where, f"is owned by another user (uid {st.st_uid})",
            f"Set {variable} to a folder you own (a shared cache must be owned by the user running it)",
        )


def trusted_folder(variable: str) -> str:
    """The folder of ``variable`` (one of :data:`FOLDER_VARIABLES`) as the environment names it
    now, ready to use (:func:`trusted_path`). Raises :class:`UntrustedFolderError` for a folder
    others could write, and :class:`~reference.core.errors.EnvVarError` for a malformed value."""
    return trusted_path(env.get(variable), variable, configured=env.is_set(variable))


def trusted_path(path: str, variable: str, *, configured: bool) -> str:
    """``path``, the folder of ``variable``, ready to use: with ``configured`` false (the per-user
    default applies), created private and checked to be this user's alone; otherwise created (mode
    0700) when missing and checked to be closed to other users. Raises
    :class:`UntrustedFolderError` naming ``variable`` for a folder others could write."""
    if not configured:
        root = user_root()
        _private_dir(root, variable)
        _private_dir(path, variable)
        return path
    if not os.path.lexists(path):
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
        except OSError:
            return path  # a folder that cannot be created holds nothing: the first write says so
    check_trusted(path, variable)
    return path


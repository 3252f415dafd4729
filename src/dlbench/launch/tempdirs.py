"""One temporary folder per dlbench process, for everything it and its children leave there.

dlbench's own temporary folders (an ``--isolate`` worker's record, a torchrun job's files, a
training job's results) are made inside :func:`root`, and every Python child dlbench starts gets
it as its ``TMPDIR`` (:func:`dlbench.launch.signals.child_env`), so that what a child makes with
:mod:`tempfile` lands there too: torchrun's agent makes a ``torchelastic_*`` log folder per job
and leaves it, and a worker or a rank killed with SIGKILL never reaches its own clean-up. The
parent removes the whole folder when it exits; a parent killed with SIGKILL cannot, and the next
dlbench run (inline runs too, which make no folder of their own) or process that makes its own
folder removes the folders of processes that are gone (:func:`remove_stale`).

The folder is ``$TMPDIR/dlbench-run-PID-XXXXXXXX`` with a file ``owner`` naming the host, so
that a folder of a live process, of another host (a shared ``/tmp``) or of another user is left
alone. torch's compile cache stays where it always was (``TORCHINDUCTOR_CACHE_DIR`` is set to
its usual place for the children), so a fresh folder costs no recompilation.
"""

from __future__ import annotations

import atexit
import getpass
import os
import re
import shutil
import socket
import tempfile
import threading
from pathlib import Path

from dlbench.env import process_alive as _alive

#: The name of every process's folder: ``dlbench-run-PID-RANDOM``.
PREFIX = "dlbench-run-"
_NAME = re.compile(rf"{re.escape(PREFIX)}(\d+)-")
_lock = threading.Lock()
_root: tuple[int, Path] | None = None  # (the pid that made it, the folder)


def root() -> Path:
    """This process's temporary folder, made at the first call (when the stale folders of
    processes that are gone are removed too) and removed when the process exits."""
    global _root
    with _lock:
        if _root is not None and _root[0] == os.getpid() and _root[1].is_dir():
            return _root[1]
        base = tempfile.gettempdir()
        remove_stale(base)
        path = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=base))
        (path / "owner").write_text(socket.gethostname() + "\n")
        _root = (os.getpid(), path)
        atexit.register(_remove, os.getpid(), path)
        return path


def _remove(pid: int, path: Path) -> None:
    if os.getpid() == pid:  # not in a forked child, whose parent still uses it
        shutil.rmtree(path, ignore_errors=True)


def stale(base: str | os.PathLike | None = None) -> list[Path]:
    """The folders of dlbench processes of this host and user that no longer exist."""
    host = socket.gethostname()
    found = []
    try:
        entries = list(Path(base or tempfile.gettempdir()).glob(f"{PREFIX}*"))
    except OSError:
        return []
    for path in entries:
        m = _NAME.match(path.name)
        try:
            if not m or not path.is_dir() or path.stat().st_uid != os.getuid():
                continue
            owner = (path / "owner").read_text().strip() if (path / "owner").exists() else host
        except OSError:
            continue
        if owner == host and not _alive(int(m.group(1))):
            found.append(path)
    return found


def remove_stale(base: str | os.PathLike | None = None) -> list[Path]:
    """Remove :func:`stale` folders; the ones removed."""
    gone = stale(base)
    for path in gone:
        shutil.rmtree(path, ignore_errors=True)
    return gone


def child_tmp_env() -> dict[str, str]:
    """What a child's environment takes from here: ``TMPDIR`` in this process's folder, and
    torch's compile cache left at its usual place (inductor's default is under ``TMPDIR``)."""
    env = {"TMPDIR": str(root())}
    if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tempfile.gettempdir(),
                                                      "torchinductor_" + _user())
    return env


def _user() -> str:
    """The user name as torch's inductor spells it in its cache folder's name."""
    try:
        name = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        return f"uid_{os.getuid()}"
    return re.sub(r'[\\/:*?"<>|]', "_", name)



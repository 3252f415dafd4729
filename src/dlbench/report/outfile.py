"""Output files that cannot destroy a store: refused where they would overwrite one, and written
to a temporary file in the same directory then renamed, so a failure leaves no partial file.

``dlbench results export -o S.db`` once replaced the store with its own export. An output path is
now checked before anything is written: one that resolves to the store (through a symlink or a
hard link), to its journal, or to any existing SQLite file is refused.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from dlbench.report import terminal

SQLITE_MAGIC = b"SQLite format 3\x00"


class OutputError(RuntimeError):
    """An output path refused or not writable; the message names the flag (a usage error)."""


def _is_sqlite(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


def _same(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def check_output(path: str | Path, store: str | Path, flag: str = "-o/--output") -> Path:
    """``path`` as a place to write to, or :class:`OutputError` when writing there would
    destroy a store or cannot work (a directory, a missing directory). Nothing is written."""
    out, db = Path(path), Path(store)
    resolved = out.resolve()
    if resolved == db.resolve() or _same(out, db):
        raise OutputError(f"{flag} {path} is the result store itself (--db {store}); "
                          "writing there would destroy it: choose another file")
    if any(resolved == Path(f"{db.resolve()}{s}") for s in ("-journal", "-wal", "-shm")):
        raise OutputError(f"{flag} {path} is the journal of the result store --db {store}; "
                          "choose another file")
    if out.is_dir():
        raise OutputError(f"{flag} {path} is a directory; name a file")
    if out.is_file() and _is_sqlite(out):
        raise OutputError(f"{flag} {path} is an SQLite database (a result store?); dlbench does "
                          "not overwrite one: choose another file")
    return out


def write_text(path: str | Path, text: str, store: str | Path, flag: str = "-o/--output",
               make_dirs: bool = False) -> Path:
    """Write ``text`` to ``path`` whole or not at all: into a temporary file in the same directory,
    flushed to disk, then renamed over ``path``. A device or pipe (``/dev/stdout``) is written
    directly, since it cannot be renamed over. Errors are :class:`OutputError` naming ``flag``."""
    out = check_output(path, store, flag)
    data = text.encode("utf-8")
    try:
        mode = out.stat().st_mode if out.exists() else None
        if mode is not None and not stat.S_ISREG(mode):
            with open(out, "wb") as f:
                f.write(data)
                f.flush()
            return out
        parent = out.parent
        if make_dirs:
            parent.mkdir(parents=True, exist_ok=True)
        elif not parent.is_dir():
            raise OutputError(f"{flag} {path}: no directory {parent}; create it first")
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o666 & ~_umask())
            os.replace(tmp, out)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError as exc:
        raise OutputError(f"{flag} {path}: cannot write ({exc.strerror or exc})") from None
    return out


def print_error(exc: Exception) -> None:
    """Print ``exc`` as one ``error:`` line, however long its paths.

    ``terminal.error`` folds a message at the console's width (200 columns when piped), which
    splits a long path over two lines; this prints it whole."""
    terminal.stderr.print(f"[red]error:[/red] {terminal.safe_markup(exc)}", highlight=False,
                          soft_wrap=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask

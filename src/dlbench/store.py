"""The result store: one SQLite file, the only module that imports sqlite3.

Each result is written in its own transaction the moment it exists, so a crash, a kill or Ctrl-C
keeps everything measured before it. A record is stored whole as JSON (raw samples, config and
environment) beside a few columns for selecting and sorting; the JSON is the truth.

The store is sacred: a foreign SQLite file is refused without a byte written to it; a store that
another process keeps locked is retried with backoff and, if it stays locked, the measured record
goes to a recovery file next to it (``results merge`` takes it) rather than being lost; a write
the disk or the file refuses (full, read-only, an I/O error) sends the record to a recovery file
too and stops the run with a :class:`StoreWriteError`. A row that cannot be read (not UTF-8, not
JSON, an unknown kind, a field of the wrong type) is skipped with a warning naming it, the rest of
the store still reads, and a merge never copies it. Read commands open the store read-only
(``readonly=True``): they never create, repair or lock-journal it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import pickle
import signal
import socket
import sqlite3
import stat
import sys
import tempfile
import threading
import time
import traceback
import types
import typing
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from dlbench.env import process_alive as _alive
from dlbench.records import record_from_dict
from dlbench.records.base import SCHEMA_VERSION, utc_now

DEFAULT_DB = "dlbench.db"

#: How long a write waits for a store that another connection has locked before the record goes
#: to a recovery file (seconds); ``DLBENCH_LOCK_WAIT_S`` overrides it.
LOCK_WAIT_S = 60.0
LOCK_WAIT_ENV = "DLBENCH_LOCK_WAIT_S"

_TABLES = frozenset({"meta", "runs", "results"})
_INDEXES = frozenset({"results_run", "results_key"})  # results_created: new stores
_RUN_COLUMNS = ("run_id", "started_at", "finished_at", "status", "command", "suite", "tag",
                "device", "env_key", "env_json")
_RECOVERY_FORMAT = "dlbench-recovery/1"
#: Who runs a run: added to ``runs`` the first time a store is written by a dlbench that knows
#: them (nullable, so older stores read as they are and older rows simply lack them).
_OWNER_COLUMNS = (("pid", "INTEGER"), ("host", "TEXT"))
#: The status of a run whose process is gone without closing it (SIGKILL, a power cut).
STALE = "stale"

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id      TEXT PRIMARY KEY,
    started_at  TEXT NOT NULL,
    finished_at TEXT,
    status      TEXT NOT NULL,          -- running | done | interrupted | failed | stale
    command     TEXT NOT NULL,
    suite       TEXT,
    tag         TEXT,
    device      TEXT,
    env_key     TEXT,
    env_json    TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS results (
    id          TEXT PRIMARY KEY,
    run_id      TEXT REFERENCES runs(run_id),
    kind        TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    config_key  TEXT NOT NULL,
    env_key     TEXT,
    model       TEXT,
    label       TEXT,
    status      TEXT NOT NULL,
    error_type  TEXT,
    value       REAL,                   -- the headline figure (samples/s for throughput)
    record_json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS results_run ON results(run_id);
CREATE INDEX IF NOT EXISTS results_key ON results(config_key, env_key);
CREATE INDEX IF NOT EXISTS results_created ON results(created_at);
"""


@dataclass(frozen=True, kw_only=True)
class RunInfo:
    """A row of the store's ``runs`` table, with its results' and errors' counts; what the
    reports show of a run (the defaults serve a report of runs made by hand)."""

    run_id: str
    command: str
    started_at: str | None = None
    finished_at: str | None = None
    status: str | None = None
    suite: str | None = None
    tag: str | None = None
    device: str | None = None
    results: int = 0
    errors: int = 0


class StoreError(RuntimeError):
    pass


class StoreWriteError(StoreError):
    """A write the disk or the file refused (full, read-only, an I/O error): the record was
    saved to the recovery file the message names, and the run must stop (the next write would
    fail the same way). A user/environment fault: the CLI ends with exit 2, never "internal"."""


class _Locked(Exception):
    """A write that found the store locked for the whole of its budget."""


def _warn_to_stderr(msg: str) -> None:
    sys.stderr.write(f"warning: {msg}\n")


class Store:
    """A dlbench SQLite file. Use as a context manager or call :meth:`close`.

    ``lock_wait_s`` bounds how long a write waits for a store another connection holds locked
    (default ``LOCK_WAIT_S``, or ``$DLBENCH_LOCK_WAIT_S``); ``on_warning`` receives the one-line
    warnings (a skipped unreadable row, a record saved to a recovery file); stderr by default.
    ``readonly`` opens it as read commands must: SQLite's read-only mode, nothing created or
    repaired (a missing index is only slower), and a missing, empty or half-made file is a
    StoreError rather than a new store.
    """

    def __init__(self, path: str | Path = DEFAULT_DB, lock_wait_s: float | None = None,
                 on_warning: Callable[[str], None] | None = None,
                 readonly: bool = False) -> None:
        self.path = Path(path)
        self.lock_wait_s = _lock_wait(lock_wait_s)
        self.warn = on_warning or _warn_to_stderr
        self._warned: set[str] = set()
        self._run_rows: dict[str, dict[str, Any]] = {}
        self._gave_up = False  # a write already waited its whole budget: later ones wait briefly
        self.skipped_duplicates = 0  # the last merge_from's copies of a job already here
        self.skipped_unreadable = 0  # the last merge_from's rows that cannot be read: left out
        complete = self._probe()  # read-only: a foreign file is refused untouched
        if readonly:
            self._db = self._open_readonly()
        else:
            self._open_for_writing(complete)
        self._db.row_factory = sqlite3.Row
        # one row of bytes that are not UTF-8 must not make every query of the store fail:
        # index columns read leniently, and a record's JSON is read as bytes and decoded
        # strictly, row by row (_parse), so such a row is named and skipped
        self._db.text_factory = _lenient_text

    def _open_readonly(self) -> sqlite3.Connection:
        if not self.path.exists():
            raise StoreError(f"no result store at {self.path}; run 'dlbench run' first or pass "
                             "--db PATH")
        if not self._readable:  # read commands never create or repair a schema
            what = ("an empty file" if not self._tables else
                    f"not a whole dlbench result store (tables: {', '.join(sorted(self._tables))})")
            raise StoreError(f"{self.path} is {what}: there is nothing to read; pass the store "
                             "with --db (a command that stores results, e.g. 'dlbench run', "
                             "makes one)")
        try:  # mode=ro: SQLite itself refuses every write, journal files included
            return sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True,
                                   timeout=min(self.lock_wait_s, 30.0))
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path} cannot be read as a dlbench result store ({exc}); "
                             "pass another file with --db") from None

    def _open_for_writing(self, complete: bool) -> None:
        if self.path.parent and not self.path.parent.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(str(self.path), timeout=min(self.lock_wait_s, 30.0))
            if not complete:  # new, empty or half-made: reading a whole store writes nothing
                self._write(lambda: self._db.executescript(_SCHEMA))
                self._check_version()
        except _Locked:
            raise StoreError(f"{self.path} stayed locked by another process for "
                             f"{self.lock_wait_s:.0f} s; nothing was written") from None
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path} is not a dlbench result store ({exc}); "
                             "pass another file with --db") from None

    def _probe(self) -> bool:
        """Look at an existing file without writing to it: refuse it if it is not a dlbench
        store (or is a newer one); True when it is a whole store that needs no schema written.
        Sets ``_tables`` and ``_readable`` (tables and version all there, indexes or not)."""
        self._tables: set[str] = set()
        self._readable = False
        try:
            if not self.path.exists() or self.path.stat().st_size == 0:
                return False  # a new store, or an empty file to initialise
        except OSError:
            return False
        tables, indexes, version = _read_schema(self.path, self.lock_wait_s)
        self._tables = tables
        self._readable = tables == _TABLES and version is not None
        # dlbench's script makes meta first and versions it next: a file with other tables, or
        # with tables but no version, is someone else's (a half-made store has meta alone)
        if tables and version is None and not (tables <= _TABLES and "meta" in tables):
            raise StoreError(f"{self.path} is not a dlbench result store (it is another SQLite "
                             f"database, with tables {', '.join(sorted(tables))}); it was left "
                             "as it was: pass another file with --db")
        if version is not None and int(version) > SCHEMA_VERSION:
            raise StoreError(f"{self.path} was written by a newer dlbench (schema {version} > "
                             f"{SCHEMA_VERSION}); upgrade dlbench to read it")
        return tables == _TABLES and _INDEXES <= indexes and version is not None

    def _check_version(self) -> None:
        row = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is None:
            def insert() -> None:
                with self._db:
                    self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)",
                                     (str(SCHEMA_VERSION),))
            self._write(insert)
        elif int(row[0]) > SCHEMA_VERSION:
            raise StoreError(f"{self.path} was written by a newer dlbench (schema {row[0]} > "
                             f"{SCHEMA_VERSION}); upgrade dlbench to read it")

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- writes that wait for a lock ----------------------------------------------------------
    def _write(self, fn: Callable[[], T]) -> T:
        """Run the write ``fn``; while another connection holds the store locked, retry with
        backoff until ``lock_wait_s`` has passed, then raise :class:`_Locked`."""
        budget = 1.0 if self._gave_up else self.lock_wait_s
        deadline = time.monotonic() + budget
        pause = 0.05
        try:
            while True:
                left = deadline - time.monotonic()
                # sqlite's own busy handler waits inside each try, at most what is left
                self._db.execute(f"PRAGMA busy_timeout = {int(max(0.01, min(left, 5.0)) * 1000)}")
                try:
                    result = fn()
                    self._gave_up = False
                    return result
                except sqlite3.OperationalError as exc:
                    if not _is_locked(exc):
                        raise
                    if self._db.in_transaction:
                        self._db.rollback()
                left = deadline - time.monotonic()
                if left <= 0:
                    self._gave_up = True
                    raise _Locked(str(self.path))
                time.sleep(min(pause, left))
                pause = min(pause * 2, 2.0)
        finally:
            self._db.execute(f"PRAGMA busy_timeout = {int(min(self.lock_wait_s, 30.0) * 1000)}")

    # -- runs ---------------------------------------------------------------------------------
    def start_run(self, run_id: str, command: str, env: dict, env_key: str, device: str,
                  suite: str | None = None, tag: str | None = None) -> None:
        row = {"run_id": run_id, "started_at": utc_now(), "finished_at": None,
               "status": "running", "command": command, "suite": suite, "tag": tag,
               "device": device, "env_key": env_key, "env_json": json.dumps(env)}
        self._run_rows[run_id] = row  # what a recovery file says about the run

        def insert() -> None:
            with self._db:
                self._db.execute(f"INSERT INTO runs ({', '.join(_RUN_COLUMNS)}, pid, host) "
                                 f"VALUES ({','.join('?' * (len(_RUN_COLUMNS) + 2))})",
                                 (*(row[c] for c in _RUN_COLUMNS), os.getpid(), _host()))
        try:
            self._add_owner_columns()
            self.mark_stale()
            self._write(insert)
        except _Locked:
            raise StoreError(f"{self.path} stayed locked by another process for "
                             f"{self.lock_wait_s:.0f} s; nothing was run") from None
        except sqlite3.Error as exc:  # a full disk, a read-only file: before anything is measured
            raise StoreError(f"{self.path} could not be written ({_reason(exc, bare=True)}); "
                             "nothing was run") from None

    def finish_run(self, run_id: str, status: str) -> None:
        finished = utc_now()
        if run_id in self._run_rows:
            self._run_rows[run_id].update(status=status, finished_at=finished)

        def update() -> None:
            with self._db:
                self._db.execute("UPDATE runs SET status=?, finished_at=? WHERE run_id=?",
                                 (status, finished, run_id))
        try:
            self._write(update)
        except _Locked:  # its results are stored or recovered; only the run's status is late
            self.warn(f"{self.path} stayed locked: run {run_id} could not be marked {status} "
                      "and still reads 'running'")
        except sqlite3.Error as exc:  # the disk that refused a record may refuse this too: the
            # run's records are recovered, and an error raised here would hide why it stopped
            self.warn(f"{self.path} could not be written ({_reason(exc, bare=True)}): run "
                      f"{run_id} could not be marked {status} and still reads 'running'")

    def _add_owner_columns(self) -> None:
        """Give ``runs`` its pid and host columns if this store predates them (a write: only
        commands that start a run call it, so reading a store never changes it)."""
        have = {r[1] for r in self._db.execute("PRAGMA table_info(runs)")}
        missing = [(c, t) for c, t in _OWNER_COLUMNS if c not in have]
        if not missing:
            return

        def alter() -> None:
            with self._db:
                for col, kind in missing:
                    self._db.execute(f"ALTER TABLE runs ADD COLUMN {col} {kind}")
        self._write(alter)

    def integrity_check(self) -> list[str]:
        """SQLite's ``PRAGMA integrity_check``: one line per problem found, none when the store
        is sound. Reads only."""
        try:
            rows = [r[0] for r in self._db.execute("PRAGMA integrity_check")]
        except sqlite3.DatabaseError as exc:
            return [str(exc)]
        return [] if rows == ["ok"] else rows

    def check(self) -> list[str]:
        """The problems of an open store, one line each (none: clean). Reads only.

        Integrity is SQLite's ``PRAGMA integrity_check``; every result row is read back through
        the record classes, and each one that cannot be is named with its reason (the store's own
        warning, collected); a run still ``running`` was killed (SIGKILL, a lost host) or is
        still going, and one marked ``stale`` was found killed by a later command."""
        problems = [f"integrity: {line}" for line in self.integrity_check()]
        said: list[str] = []
        warn, self.warn = self.warn, said.append
        try:
            for _ in self.iter_results():
                pass
        finally:
            self.warn = warn
        problems += [f"unreadable: {line}" for line in said]
        problems += [f"{r.status}: run {r.run_id} started {r.started_at} is marked '{r.status}' "
                     f"({r.command})" for r in self.runs() if r.status in ("running", "stale")]
        return problems

    def mark_stale(self) -> list[str]:
        """Mark ``stale`` every run still "running" whose process, on this host, is gone (killed
        with SIGKILL, or the machine went down); returns their ids. Runs of other hosts, and runs
        of stores older than the pid column, are left as they are: nothing here can tell."""
        have = {r[1] for r in self._db.execute("PRAGMA table_info(runs)")}
        if "pid" not in have:
            return []
        rows = self._db.execute("SELECT run_id, pid FROM runs WHERE status='running' AND "
                                "pid IS NOT NULL AND host=?", (_host(),)).fetchall()
        dead = [rid for rid, pid in rows if not _alive(int(pid))]
        if not dead:
            return []
        finished = utc_now()

        def update() -> None:
            with self._db:
                self._db.executemany("UPDATE runs SET status=?, finished_at=? WHERE run_id=? "
                                     "AND status='running'",
                                     [(STALE, finished, rid) for rid in dead])
        self._write(update)
        return dead

    def runs(self, limit: int | None = None, tag: str | None = None) -> list[RunInfo]:
        sql = ("SELECT r.*, (SELECT COUNT(*) FROM results s WHERE s.run_id=r.run_id) AS n,"
               " (SELECT COUNT(*) FROM results s WHERE s.run_id=r.run_id AND s.status!='ok') AS e"
               " FROM runs r")
        args: list[Any] = []
        if tag is not None:
            sql += " WHERE r.tag=?"
            args.append(tag)
        sql += " ORDER BY r.started_at DESC, r.rowid DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return [RunInfo(run_id=r["run_id"], started_at=r["started_at"],
                        finished_at=r["finished_at"], status=r["status"], command=r["command"],
                        suite=r["suite"], tag=r["tag"], device=r["device"], results=r["n"],
                        errors=r["e"]) for r in self._db.execute(sql, args)]

    def resolve_run(self, ref: str) -> str:
        """A run id from a prefix, or ``latest``."""
        if ref == "latest":
            row = self._db.execute("SELECT run_id FROM runs ORDER BY started_at DESC, rowid DESC"
                                   " LIMIT 1").fetchone()
            if row is None:
                raise StoreError(f"{self.path} holds no runs yet; start one with 'dlbench run'")
            return row[0]
        rows = self._db.execute("SELECT run_id FROM runs WHERE substr(run_id, 1, ?) = ?",
                                (len(ref), ref)).fetchall()  # a prefix, not a LIKE pattern
        if len(rows) != 1:
            raise StoreError(f"run {ref!r} {'is ambiguous' if rows else 'not found'} in {self.path};"
                             " 'dlbench results ls' lists runs")
        return rows[0][0]

    # -- results ------------------------------------------------------------------------------
    def add(self, record: Any, env_key: str | None = None) -> None:
        """Store one record in its own transaction (committed before this returns).

        If another process keeps the store locked for ``lock_wait_s``, the record is written to
        a recovery file (:func:`recovery_dirs`) instead, with a warning saying how to merge it,
        and the run goes on (a lock passes). If the write fails otherwise (a full disk, a
        read-only file, an I/O error), the record goes to a recovery file too and
        :class:`StoreWriteError` says where: the next write would fail the same way."""
        row = _result_row(record, env_key)

        def insert() -> None:
            with self._db:
                self._db.execute(_INSERT_RESULT, row)
        try:
            self._write(insert)
        except _Locked:
            why = f"{self.path} stayed locked by another process for {self.lock_wait_s:.0f} s"
            self.warn(self._recover(record, env_key, why))
        except sqlite3.Error as exc:
            why = f"{self.path} could not be written ({_reason(exc, bare=True)})"
            raise StoreWriteError(self._recover(record, env_key, why) + "; the run stopped "
                                  "here") from None

    def _recover(self, record: Any, env_key: str | None, why: str) -> str:
        """Save ``record`` to the first recovery directory that takes it; the message saying
        where and how to merge it (a StoreError if none does: the record is lost)."""
        doc = {"format": _RECOVERY_FORMAT, "schema_version": SCHEMA_VERSION,
               "store": str(self.path), "env_key": env_key,
               "run": self._run_rows.get(record.run_id), "record": record.to_dict()}
        name = f"{self.path.name}.recovered-{record.id}.json"
        tried = []
        for folder in recovery_dirs(self.path):
            target = folder / name
            try:
                folder.mkdir(parents=True, exist_ok=True)
                _write_whole(target, json.dumps(doc, indent=1) + "\n")
            except OSError as exc:
                tried.append(f"{target}: {exc.strerror or exc}")
                continue
            return (f"{why}: result {record.id} was saved to {target}; add it to the store "
                    f"later with 'dlbench results merge --db {self.path} {target}'")
        raise StoreWriteError(f"{why} and no recovery file could be written "
                              f"({'; '.join(tried)}); result {record.id} is lost")

    def results(self, run_id: str | None = None, kind: str | None = None,
                status: str | None = None, model: str | None = None,
                tag: str | None = None) -> list[Any]:
        return list(self.iter_results(run_id=run_id, kind=kind, status=status, model=model,
                                      tag=tag))

    def iter_results(self, run_id: str | None = None, kind: str | None = None,
                     status: str | None = None, model: str | None = None,
                     tag: str | None = None) -> Iterator[Any]:
        """Records in the order they were stored; ``tag`` selects every run with that tag.

        The selected rows are fetched before the first record is yielded, so the caller may
        write to the store while it iterates; :meth:`stream_results` reads as it goes."""
        where, args = _where(run_id, kind, status, model, tag)
        rows = self._db.execute(f"SELECT id, CAST(record_json AS BLOB) FROM results{where}"
                                " ORDER BY created_at, rowid", args).fetchall()
        yield from self._decoded(rows)

    def stream_results(self, run_id: str | None = None, kind: str | None = None,
                       status: str | None = None, model: str | None = None,
                       tag: str | None = None) -> Iterator[Any]:
        """The records of :meth:`iter_results`, in the same order and with the same warnings,
        read through a cursor a batch of rows at a time: memory stays that of one batch, however
        large the store. For readers (exports): nothing may write to the store meanwhile."""
        where, args = _where(run_id, kind, status, model, tag)
        cur = self._db.execute(f"SELECT id, CAST(record_json AS BLOB) FROM results{where}"
                               " ORDER BY created_at, rowid", args)
        try:
            while True:
                rows = cur.fetchmany(_BATCH)
                if not rows:
                    return
                yield from self._decoded(rows)
        finally:
            cur.close()

    def map_results(self, convert: Callable[[Any], T], run_id: str | None = None,
                    kind: str | None = None, status: str | None = None,
                    model: str | None = None, tag: str | None = None,
                    workers: int | None = None) -> Iterator[T]:
        """``convert(record)`` for each record of :meth:`stream_results`, in the same order and
        with the same warnings, for a reader (an export) whose work per record is decoding and
        converting it. A selection of :data:`PARALLEL_MIN` rows or more is decoded and converted
        in ``workers`` processes (default: one per usable CPU, at most :data:`MAX_WORKERS`),
        :data:`CHUNK` rows a task and at most two tasks a worker ahead of the caller, so memory
        stays bounded; a smaller one, or one CPU, stays in this process. Workers are forked
        (where the platform cannot fork, every selection stays here): they inherit ``convert``,
        which may be any callable, and need import nothing; an exception it raises is raised
        here, after the records before it."""
        where, args = _where(run_id, kind, status, model, tag)
        cur = self._db.execute(f"SELECT id, CAST(record_json AS BLOB) FROM results{where}"
                               " ORDER BY created_at, rowid", args)
        try:
            rows = cur.fetchmany(PARALLEL_MIN)
            n = min(_usable_cpus(), MAX_WORKERS) if workers is None else workers
            if len(rows) == PARALLEL_MIN and n > 1 and hasattr(os, "fork"):
                yield from self._map_in_workers(convert, _chunks(rows, cur), n)
                return
            while rows:  # small: starting processes would cost more than it saves
                for record in self._decoded(rows):
                    yield convert(record)
                rows = cur.fetchmany(_BATCH)
        finally:
            cur.close()

    def _map_in_workers(self, convert: Callable[[Any], T], chunks: Iterator[list],
                        n: int) -> Iterator[T]:
        """:meth:`map_results` over ``n`` forked workers: chunks go out in order and their
        results are taken back in that order, each worker kept two chunks ahead. A worker
        that dies (killed, out of memory) raises BrokenProcessPool here rather than leaving
        its chunk awaited for ever."""
        import multiprocessing  # heavy: only a large export starts workers; others need not
        from concurrent.futures import ProcessPoolExecutor  # heavy: as multiprocessing

        pool = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork"),
                                   initializer=_work_init, initargs=(convert, os.getpid()))
        try:
            pending = deque(pool.submit(_work, c) for c in itertools.islice(chunks, 2 * n))
            while pending:
                done, exc = pending.popleft().result()
                more = next(chunks, None)
                if more is not None:  # sent before this chunk is handed on: no worker idles
                    pending.append(pool.submit(_work, more))
                for ok, item in done:
                    if ok:
                        yield item
                    else:
                        self._skip_reason(*item)
                if exc is not None:
                    raise exc
        finally:  # on an error or Ctrl-C, the chunks not started are dropped, not converted
            pool.shutdown(wait=False, cancel_futures=True)

    def last_results(self, limit: int, run_id: str | None = None) -> list[Any]:
        """The last ``limit`` readable records (all of them: 0), in stored order, as
        ``results(run_id=...)[-limit:]``; only the rows it returns, and the unreadable ones met
        on the way (each named, as always), are decoded. The rows are read newest first through
        the ``created_at`` index (a store without it is sorted, still without decoding)."""
        if not limit:
            return self.results(run_id=run_id)
        where, args = _where(run_id, None, None, None, None)
        cur = self._db.execute(f"SELECT id, CAST(record_json AS BLOB) FROM results{where}"
                               " ORDER BY created_at DESC, rowid DESC", args)
        out: list[Any] = []
        try:
            while len(out) < limit:
                rows = cur.fetchmany(min(limit - len(out), _BATCH))
                if not rows:
                    break
                out.extend(self._decoded(rows))
        finally:
            cur.close()
        out.reverse()
        return out

    def result_kinds(self, run_id: str | None = None, kind: str | None = None,
                     tag: str | None = None) -> set[str]:
        """The kinds the selected rows hold, from the ``kind`` column (nothing decoded)."""
        where, args = _where(run_id, kind, None, None, tag)
        return {k for (k,) in self._db.execute(f"SELECT DISTINCT kind FROM results{where}", args)}

    def _decoded(self, rows: list[tuple[str, bytes]]) -> Iterator[Any]:
        for rid, blob in rows:
            try:
                yield _parse(blob)
            except Exception as exc:  # noqa: BLE001 - any unreadable row is skipped, and named
                self._skip(rid, exc)

    def _skip(self, rid: str, exc: Exception) -> None:
        self._skip_reason(rid, _reason(exc))

    def _skip_reason(self, rid: str, reason: str) -> None:
        if rid not in self._warned:  # once per row, however many queries meet it
            self._warned.add(rid)
            self.warn(f"result {rid} in {self.path} cannot be read and is skipped ({reason})")

    def get(self, ref: str) -> Any:
        """One result by id or unique id prefix (a prefix, not a LIKE pattern)."""
        rows = self._db.execute("SELECT id, CAST(record_json AS BLOB) FROM results "
                                "WHERE substr(id, 1, ?) = ?", (len(ref), ref)).fetchall()
        if len(rows) != 1:
            raise StoreError(f"result {ref!r} {'is ambiguous' if rows else 'not found'} in "
                             f"{self.path}; 'dlbench results ls --results' lists ids")
        try:
            return _parse(rows[0][1])
        except Exception as exc:  # noqa: BLE001
            raise StoreError(f"result {rows[0][0]} in {self.path} cannot be read "
                             f"({_reason(exc)})") from None

    def merge_from(self, other: str | Path) -> tuple[int, int]:
        """Copy every run and result of the store at ``other`` that this one lacks (by id):
        several hosts' stores of one multi-node job, or the stores of several calls on one
        machine, become one. Returns (runs added, results added); rows already here are kept.

        One multi-node job is stored on every host, each copy under its own id: a result whose
        raw samples of every rank equal those of a result of the same kind and config already
        here (:func:`job_fingerprint`) is that job again and is not copied;
        ``skipped_duplicates`` counts them. Each host's run row is kept (its command and
        environment)."""
        src = Path(other)
        if not src.exists():
            raise StoreError(f"no result store at {src}")
        check_source_file(src)
        check_not_self(src, self.path)
        _check_source(src)
        before_runs = self._db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        before = self._db.execute("SELECT COUNT(*) FROM results").fetchone()[0]
        self._db.execute("ATTACH DATABASE ? AS other", (str(src),))
        try:
            def copy() -> None:
                with self._db:
                    # by name: either store may predate the pid and host columns (a run's pid
                    # means nothing in another store, so they are not copied)
                    cols = ", ".join(_RUN_COLUMNS)
                    self._db.execute(f"INSERT OR IGNORE INTO runs ({cols}) "
                                     f"SELECT {cols} FROM other.runs")
                    bad = self._unreadable_in_other(src)
                    skip = self._same_jobs() + bad
                    self._db.execute("CREATE TEMP TABLE IF NOT EXISTS skip_ids (id TEXT)")
                    self._db.execute("DELETE FROM skip_ids")
                    self._db.executemany("INSERT INTO skip_ids VALUES (?)", [(i,) for i in skip])
                    self._db.execute("INSERT OR IGNORE INTO results SELECT * FROM other.results "
                                     "WHERE id NOT IN (SELECT id FROM skip_ids)")
                    self.skipped_duplicates = len(skip) - len(bad)
                    self.skipped_unreadable = len(bad)
            self._write(copy)
        except _Locked:
            raise StoreError(f"{self.path} stayed locked by another process for "
                             f"{self.lock_wait_s:.0f} s; nothing was merged from {src}") from None
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path} could not be written ({_reason(exc, bare=True)}); "
                             f"nothing was merged from {src}") from None
        finally:
            self._db.execute("DETACH DATABASE other")
        runs = self._db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] - before_runs
        results = self._db.execute("SELECT COUNT(*) FROM results").fetchone()[0] - before
        return runs, results

    def _unreadable_in_other(self, src: Path) -> list[str]:
        """Ids of the attached store's (``other``) new results that cannot be read, each named in
        a warning: copied, a bad row would spread to a good store."""
        bad = []
        for rid, blob in self._db.execute(
                "SELECT id, CAST(record_json AS BLOB) FROM other.results "
                "WHERE id NOT IN (SELECT id FROM main.results)").fetchall():
            try:
                _parse(blob)
            except Exception as exc:  # noqa: BLE001 - any unreadable row stays out, named
                bad.append(rid)
                self.warn(f"result {rid} in {src} cannot be read and is not merged "
                          f"({_reason(exc)})")
        return bad

    def _same_jobs(self) -> list[str]:
        """Ids of the attached store's (``other``) results that are a multi-rank job already
        here under another id (see :meth:`merge_from`)."""
        keys = [k for (k,) in self._db.execute(
            "SELECT DISTINCT config_key FROM other.results WHERE kind IN ('scaling', 'comm') "
            "AND config_key IN (SELECT config_key FROM main.results)")]
        skip = []
        for key in keys:
            here = {job_fingerprint(blob) for (blob,) in self._db.execute(
                "SELECT record_json FROM main.results WHERE config_key = ?", (key,))}
            here.discard(None)
            for rid, blob in self._db.execute(
                    "SELECT id, record_json FROM other.results WHERE config_key = ? AND id NOT IN "
                    "(SELECT id FROM main.results)", (key,)):
                if job_fingerprint(blob) in here:
                    skip.append(rid)
        return skip

    def merge_recovery(self, path: str | Path) -> tuple[int, int]:
        """Add the record (and its run, if this store lacks it) of a recovery file written when
        the store stayed locked. Returns (runs added, results added), as :meth:`merge_from`."""
        src = Path(path)
        check_source_file(src)
        try:
            doc = json.loads(src.read_text(encoding="utf-8"))
        except OSError as exc:
            raise StoreError(f"cannot read {src} ({exc.strerror or exc})") from None
        except ValueError as exc:
            raise StoreError(f"{src} is not a dlbench recovery file ({exc})") from None
        if not isinstance(doc, dict) or doc.get("format") != _RECOVERY_FORMAT:
            raise StoreError(f"{src} is not a dlbench recovery file (no {_RECOVERY_FORMAT!r} "
                             "format mark)")
        if int(doc.get("schema_version", 0)) > SCHEMA_VERSION:
            raise StoreError(f"{src} was written by a newer dlbench (schema "
                             f"{doc['schema_version']} > {SCHEMA_VERSION}); upgrade dlbench")
        try:
            record = record_from_dict(doc["record"])
        except Exception as exc:  # noqa: BLE001
            raise StoreError(f"{src}: its record cannot be read ({_reason(exc)})") from None
        run = doc.get("run")
        result_row = _result_row(record, doc.get("env_key"))

        def insert() -> tuple[int, int]:
            with self._db:
                runs = 0
                if isinstance(run, dict) and run.get("run_id"):
                    runs = self._db.execute(
                        f"INSERT OR IGNORE INTO runs ({', '.join(_RUN_COLUMNS)}) VALUES "
                        f"({','.join('?' * len(_RUN_COLUMNS))})",
                        tuple(run.get(c) for c in _RUN_COLUMNS)).rowcount
                results = self._db.execute(_INSERT_RESULT.replace("INSERT", "INSERT OR IGNORE", 1),
                                           result_row).rowcount
            return runs, results
        try:
            return self._write(insert)
        except _Locked:
            raise StoreError(f"{self.path} stayed locked by another process for "
                             f"{self.lock_wait_s:.0f} s; nothing was merged from {src}") from None
        except sqlite3.IntegrityError as exc:
            raise StoreError(f"{src}: its run cannot be added ({exc})") from None
        except sqlite3.Error as exc:  # the recovery file is only read: it is still there
            raise StoreError(f"{self.path} could not be written ({_reason(exc, bare=True)}); "
                             f"nothing was merged from {src}") from None

    def measured_keys(self, env_key: str, statuses: tuple[str, ...] = ("ok",),
                      error_types: tuple[str, ...] = ("oom", "unsupported")) -> set[str]:
        """Config keys already measured in this environment: what ``--resume`` skips.

        Successful results, and failures that would fail again the same way (OOM, unsupported).
        """
        marks = ",".join("?" * len(statuses))
        emarks = ",".join("?" * len(error_types))
        rows = self._db.execute(
            f"SELECT config_key FROM results WHERE env_key=? AND (status IN ({marks})"
            f" OR error_type IN ({emarks}))", (env_key, *statuses, *error_types))
        return {r[0] for r in rows}


#: Rows fetched at a time by the readers that stream (:meth:`Store.stream_results`).
_BATCH = 256

#: Rows a worker of :meth:`Store.map_results` decodes and converts per task, and the rows a
#: selection needs before workers are started (forking them takes a few milliseconds; a
#: thousand records take a few tenths of a second).
CHUNK = 256
PARALLEL_MIN = 1024
#: Beyond a few workers the parent, which writes every record, is what bounds an export; and
#: each worker holds some 40 MB.
MAX_WORKERS = 8


def _usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, where the platform tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _chunks(first: list, cur: sqlite3.Cursor) -> Iterator[list[tuple[str, bytes]]]:
    """The rows of ``first`` and then of ``cur``, :data:`CHUNK` at a time, as plain tuples
    (what a worker is sent must pickle; a ``sqlite3.Row`` does not)."""
    rows = first
    while rows:
        for i in range(0, len(rows), CHUNK):
            yield [(rid, blob) for rid, blob in rows[i:i + CHUNK]]
        rows = cur.fetchmany(CHUNK)


#: What a worker of :meth:`Store.map_results` does to each record it decodes.
_CONVERT: Callable[[Any], Any] | None = None


def _work_init(convert: Callable[[Any], Any], parent: int) -> None:
    """A worker's start: it keeps ``convert``, leaves Ctrl-C (sent to the whole process group)
    to the parent, which stops the pool, takes back the default SIGTERM and SIGHUP (the
    parent's handlers, inherited, would turn them into a KeyboardInterrupt and its
    traceback), and ends itself if the parent dies without stopping it (SIGKILL)."""
    global _CONVERT
    _CONVERT = convert
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True,
                     name="exit-with-parent").start()


def _exit_with_parent(parent: int) -> None:
    """Wait for this worker to lose its parent, then end it: a worker waiting for chunks would
    otherwise wait for ever (each holds the queue open for the others)."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


def _work(rows: list[tuple[str, bytes]]) -> tuple[list[tuple[bool, Any]], Exception | None]:
    """A worker's task: per row, ``(True, convert(record))``, or ``(False, (id, reason))`` for a
    row that cannot be read (the parent names it, as :meth:`Store._skip` does); an exception of
    ``convert`` ends the chunk and comes back beside the rows before it, with its traceback."""
    out: list[tuple[bool, Any]] = []
    for rid, blob in rows:
        try:
            record = _parse(blob)
        except Exception as exc:  # noqa: BLE001 - any unreadable row is skipped, and named
            out.append((False, (rid, _reason(exc))))
            continue
        try:
            out.append((True, _CONVERT(record)))
        except Exception as exc:  # noqa: BLE001 - raised again in the parent, in its place
            return out, _sendable(exc)
    return out, None


class WorkerTraceback(Exception):
    """Where a worker of :meth:`Store.map_results` raised the exception it is the cause of."""

    def __str__(self) -> str:
        return "\n" + self.args[0]


class _Raised:
    """An exception of a worker on its way to the parent, which unpickles it as the exception
    itself with the worker's traceback as its cause (pickling keeps no cause)."""

    def __init__(self, exc: Exception, where: str) -> None:
        self.exc, self.where = exc, where

    def __reduce__(self) -> tuple:
        return _with_cause, (self.exc, self.where)


def _with_cause(exc: Exception, where: str) -> Exception:
    exc.__cause__ = WorkerTraceback(where)
    return exc


def _sendable(exc: Exception) -> Any:
    """``exc`` as a worker sends it: the parent gets it with the worker's traceback as its
    cause, or, where it cannot be pickled, a RuntimeError saying what it was."""
    where = "".join(traceback.format_exception(exc))
    try:
        pickle.dumps(exc)
    except Exception:  # noqa: BLE001 - whatever stops pickling, the message still goes
        exc = RuntimeError(f"{type(exc).__name__}: {exc}")
    return _Raised(exc, where)


def _where(run_id: str | None, kind: str | None, status: str | None, model: str | None,
           tag: str | None) -> tuple[str, list[Any]]:
    """`` WHERE ...`` (or nothing) selecting results by their columns, and its arguments."""
    where, args = [], []
    for col, val in (("run_id", run_id), ("kind", kind), ("status", status), ("model", model)):
        if val is not None:
            where.append(f"{col}=?")
            args.append(val)
    if tag is not None:
        where.append("run_id IN (SELECT run_id FROM runs WHERE tag=?)")
        args.append(tag)
    return (" WHERE " + " AND ".join(where) if where else ""), args


_INSERT_RESULT = (
    "INSERT INTO results (id, run_id, kind, created_at, config_key, env_key, model, label,"
    " status, error_type, value, record_json) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)")


def _result_row(record: Any, env_key: str | None) -> tuple:
    return (record.id, record.run_id, record.kind, record.created_at, record.config.key(),
            env_key, getattr(record.config, "model", None), record.config.label,
            record.status, record.error_type, record.headline(), json.dumps(record.to_dict()))


#: Raw samples every host of a multi-rank job stores alike (each host's record holds every
#: rank's), per kind.
_JOB_SAMPLES = {"scaling": "rank_step_times_s", "comm": "rank_times_s"}


def job_fingerprint(blob: str) -> str | None:
    """What identifies one multi-rank job whichever host stored it: its kind, config and every
    rank's raw samples (float-identical only when they are the same measurement). None for a
    record of one rank or without samples, which is never taken for another."""
    try:
        d = json.loads(blob)
    except ValueError:
        return None
    field = _JOB_SAMPLES.get(d.get("kind", "")) if isinstance(d, dict) else None
    samples = d.get(field) if field else None
    if not samples or len(samples) < 2:
        return None
    ident = json.dumps([d["kind"], d.get("config"), samples], sort_keys=True)
    return hashlib.sha256(ident.encode()).hexdigest()


def _lenient_text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _parse(blob: bytes | str) -> Any:
    """A stored record, checked: UTF-8, a JSON object, a known kind that ``from_dict`` builds,
    and every field of the type its class declares (:func:`_check_fields`), so a record that
    reads is one every command can show, export and compare."""
    text = blob.decode("utf-8") if isinstance(blob, bytes) else blob
    d = json.loads(text)
    if not isinstance(d, dict):
        raise TypeError(f"a JSON {type(d).__name__}, not a record")
    record = record_from_dict(d)
    _check_fields(record)
    return record


def _check_fields(obj: Any, where: str = "") -> None:
    """Raise TypeError naming the first field of the dataclass ``obj`` (and of the dataclasses
    in it: a config, its stop rule) whose value does not fit its declared type: ``from_dict``
    takes whatever JSON holds, and a null, a list or a string where a number was meant would
    only fail later, in whichever command reads it."""
    for name, hint, fits in _field_checks(type(obj)):
        value = getattr(obj, name)
        if fits is not _always and not fits(value):
            shown = json.dumps(value, default=str)
            raise TypeError(f"{where}{name} = {shown[:40] + '...' * (len(shown) > 40)} is "
                            f"not {_type_name(hint)}")
        t = type(value)
        if t not in _JSON_TYPES and hasattr(t, "__dataclass_fields__"):  # a dataclass instance
            _check_fields(value, f"{where}{name}.")


#: Types JSON decodes to, none of them a dataclass.
_JSON_TYPES = frozenset({str, int, float, bool, type(None), list, tuple, dict})


_FIELD_CHECKS: dict[type, list[tuple[str, Any, Callable[[Any], bool]]]] = {}


def _field_checks(cls: type) -> list[tuple[str, Any, Callable[[Any], bool]]]:
    """(name, declared type, its check) of every field of the dataclass ``cls``, made once per
    class: a store of 100,000 records checks some 70 fields each, and working each type out
    again for every value was most of the time a large report spent reading its store."""
    if cls not in _FIELD_CHECKS:
        try:
            hints = typing.get_type_hints(cls)
        except Exception:  # noqa: BLE001 - a type that cannot be resolved is not checked
            hints = {}
        _FIELD_CHECKS[cls] = [(f.name, hints.get(f.name, Any), _checker(hints.get(f.name, Any)))
                              for f in dataclasses.fields(cls)]
    return _FIELD_CHECKS[cls]


def _fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` fits ``hint`` as JSON can tell: numbers (int and float alike: JSON does
    not keep the difference), strings, booleans, None, sequences (element by element) and
    dicts (not their contents); any other type is taken as it is."""
    return _checker(hint)(value)


def _always(value: Any) -> bool:
    return True


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


_INT_FLOAT = frozenset({int, float})


def _is_sequence(value: Any) -> bool:
    return isinstance(value, (tuple, list))


def _checker(hint: Any) -> Callable[[Any], bool]:
    """The check of :func:`_fits` for ``hint``, worked out once (types are cached by identity;
    an unhashable one is worked out each time)."""
    try:
        return _CHECKERS[hint]
    except KeyError:
        check = _CHECKERS[hint] = _make_checker(hint)
        return check
    except TypeError:  # an unhashable annotation
        return _make_checker(hint)


_CHECKERS: dict[Any, Callable[[Any], bool]] = {}


def _exact_types(hint: Any) -> frozenset[type] | None:
    """Types whose every value fits ``hint`` (a number, string, boolean or None, or a union of
    them), to test a long sequence by its elements' types alone; None for any other hint."""
    if hint in (int, float):
        return _INT_FLOAT
    if hint in (str, bool, type(None)):
        return frozenset({hint})
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        arms = [_exact_types(arm) for arm in typing.get_args(hint)]
        return None if None in arms else frozenset().union(*arms)
    return None


def _make_checker(hint: Any) -> Callable[[Any], bool]:
    origin = typing.get_origin(hint)
    if hint is Any or isinstance(hint, TypeVar):
        return _always
    if origin in (typing.Union, types.UnionType):
        hints = typing.get_args(hint)
        if len(hints) == 2 and type(None) in hints:  # X | None: most fields, the quick test first
            other = _checker(hints[0] if hints[1] is type(None) else hints[1])
            return lambda v: v is None or other(v)
        arms = [_checker(arm) for arm in hints]
        return lambda v: any(arm(v) for arm in arms)
    if hint is type(None):
        return lambda v: v is None
    if hint in (int, float):
        return _is_number
    if hint in (str, bool):
        return lambda v: isinstance(v, hint)
    if hint in (dict, list, tuple):
        origin = hint
    if origin is dict or origin is typing.Mapping:
        return lambda v: isinstance(v, dict)
    if origin in (tuple, list) or origin is typing.Sequence:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            if args[0] in (int, float):  # raw times, thousands a record: one C-level pass
                return lambda v: _is_sequence(v) and _INT_FLOAT.issuperset(map(type, v))
            each = _checker(args[0])
            exact = _exact_types(args[0])
            if exact:  # every element of a type that fits, in one C-level pass; else each one
                return lambda v: _is_sequence(v) and (exact.issuperset(map(type, v))
                                                      or all(each(x) for x in v))
            return lambda v: _is_sequence(v) and all(each(x) for x in v)
        if args and origin is tuple:
            arms = [_checker(a) for a in args]
            return lambda v: _is_sequence(v) and len(v) == len(arms) and all(
                arm(x) for arm, x in zip(arms, v))
        if len(args) == 1:
            each = _checker(args[0])
            return lambda v: _is_sequence(v) and all(each(x) for x in v)
        return _is_sequence
    return _always


def _type_name(hint: Any) -> str:
    """``int``, ``tuple[float, ...]``: a type as its annotation spells it."""
    if typing.get_origin(hint) is None and isinstance(hint, type):
        return hint.__name__
    return str(hint).replace("typing.", "")


def _reason(exc: Exception, bare: bool = False) -> str:
    """``Class: first line`` of ``exc`` (``bare``: the line alone, for SQLite's own words)."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    if bare and text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


#: Where a recovery file goes when it cannot go beside the store (that disk is full, or the
#: directory read-only): the user's cache, then the system's temporary directory.
RECOVERY_DIRS_DOC = "beside the store, else $XDG_CACHE_HOME/dlbench/recovered, else $TMPDIR"


def recovery_dirs(store: Path) -> list[Path]:
    """The directories a recovery file is tried in, in order (:data:`RECOVERY_DIRS_DOC`)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return [store.parent, cache / "dlbench" / "recovered", Path(tempfile.gettempdir())]


def _host() -> str:
    return socket.gethostname()


def _lock_wait(value: float | None) -> float:
    if value is None:
        text = os.environ.get(LOCK_WAIT_ENV)
        try:
            value = float(text) if text else LOCK_WAIT_S
        except ValueError:
            raise StoreError(f"{LOCK_WAIT_ENV}={text!r} is not a number of seconds") from None
    if not value >= 0 or value == float("inf"):
        raise StoreError(f"the lock wait must be a finite number of seconds >= 0, got {value}")
    return float(value)


def _is_locked(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _read_schema(path: Path, wait_s: float) -> tuple[set[str], set[str], str | None]:
    """The tables, indexes and schema version of the SQLite file at ``path``, read-only."""
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True,
                             timeout=min(wait_s, 30.0))
        try:
            rows = db.execute("SELECT type, name FROM sqlite_master").fetchall()
            tables = {n for t, n in rows if t == "table" and not n.startswith("sqlite_")}
            indexes = {n for t, n in rows if t == "index"}
            version = None
            if "meta" in tables:
                row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
                version = None if row is None else str(row[0])
        finally:
            db.close()
    except sqlite3.OperationalError as exc:
        if _is_locked(exc):
            raise StoreError(f"{path} stayed locked by another process for {wait_s:.0f} s; "
                             "try again when it is done") from None
        raise StoreError(f"{path} is not a dlbench result store ({exc}); "
                         "pass another file with --db") from None
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{path} is not a dlbench result store ({exc}); "
                         "pass another file with --db") from None
    if version is not None and not version.isdigit():
        raise StoreError(f"{path} is not a dlbench result store (schema version {version!r})")
    return tables, indexes, version


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and os.path.samefile(a, b))
    except OSError:
        return False


def check_not_self(source: str | Path, store: str | Path) -> None:
    """Refuse merging a store into itself (it would wait on its own lock)."""
    if _same_file(Path(source), Path(store)):
        raise StoreError(f"{source} is the store --db {store} itself: a store cannot be merged "
                         "into itself")


def _special_kind(path: Path) -> str | None:
    """What ``path`` is when it exists and is not a regular file (a FIFO, a directory...)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None  # missing or unreadable: the reader says so
    if stat.S_ISREG(mode):
        return None
    for test, what in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return what
    return "not a regular file"


def check_source_file(path: str | Path) -> None:
    """Refuse a ``results merge`` source that is not a regular file: opening a FIFO waits for a
    writer that may never come, and a directory or a device is no store. Nothing is opened."""
    what = _special_kind(Path(path))
    if what is not None:
        raise StoreError(f"{path} is {what}, not a file: 'results merge' reads result stores "
                         "and recovery files only")


def is_recovery_file(path: str | Path) -> bool:
    """Whether ``results merge`` should read ``path`` as a recovery file (JSON), not a store."""
    p = Path(path)
    if p.suffix.lower() == ".json":
        return True
    if _special_kind(p) is not None:  # never opened: a FIFO would block here
        return False
    try:
        with open(p, "rb") as f:
            return f.read(1) == b"{"
    except OSError:
        return False


def _write_whole(target: Path, text: str) -> None:
    """Write to a temporary file beside ``target`` and rename it: whole or not at all."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _check_source(path: Path) -> None:
    """Refuse a file that is not a dlbench store, or one of a newer schema, without writing to
    it (opening it as a Store would add the tables to a foreign SQLite file)."""
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{path} is not a dlbench result store ({exc})") from None
    if row is None:
        raise StoreError(f"{path} is not a dlbench result store (no schema version)")
    if int(row[0]) > SCHEMA_VERSION:
        raise StoreError(f"{path} was written by a newer dlbench (schema {row[0]} > "
                         f"{SCHEMA_VERSION}); upgrade dlbench to read it")

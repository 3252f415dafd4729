"""The result store: one SQLite file, the only module that imports sqlite3.

Each result is written in its own transaction the moment it exists, so a crash, a kill or Ctrl-C
keeps everything measured before it. A record is stored whole as JSON (raw samples, config and
environment) beside a few columns for selecting and sorting; the JSON is the truth.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from dlbench.records import record_from_dict
from dlbench.records.base import SCHEMA_VERSION, utc_now

DEFAULT_DB = "dlbench.db"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id      TEXT PRIMARY KEY,
    started_at  TEXT NOT NULL,
    finished_at TEXT,
    status      TEXT NOT NULL,          -- running | done | interrupted | failed
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
"""


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    started_at: str
    finished_at: str | None
    status: str
    command: str
    suite: str | None
    tag: str | None
    device: str | None
    results: int
    errors: int


class StoreError(RuntimeError):
    pass


class Store:
    """A dlbench SQLite file. Use as a context manager or call :meth:`close`."""

    def __init__(self, path: str | Path = DEFAULT_DB) -> None:
        self.path = Path(path)
        if self.path.parent and not self.path.parent.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(str(self.path), timeout=30.0)
            self._db.executescript(_SCHEMA)
            self._check_version()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path} is not a dlbench result store ({exc}); "
                             "pass another file with --db") from None
        self._db.row_factory = sqlite3.Row

    def _check_version(self) -> None:
        row = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is None:
            with self._db:
                self._db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        elif int(row[0]) > SCHEMA_VERSION:
            raise StoreError(f"{self.path} was written by a newer dlbench (schema {row[0]} > "
                             f"{SCHEMA_VERSION}); upgrade dlbench to read it")

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- runs ---------------------------------------------------------------------------------
    def start_run(self, run_id: str, command: str, env: dict, env_key: str, device: str,
                  suite: str | None = None, tag: str | None = None) -> None:
        with self._db:
            self._db.execute(
                "INSERT INTO runs (run_id, started_at, status, command, suite, tag, device, env_key,"
                " env_json) VALUES (?, ?, 'running', ?, ?, ?, ?, ?, ?)",
                (run_id, utc_now(), command, suite, tag, device, env_key, json.dumps(env)))

    def finish_run(self, run_id: str, status: str) -> None:
        with self._db:
            self._db.execute("UPDATE runs SET status=?, finished_at=? WHERE run_id=?",
                             (status, utc_now(), run_id))

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
        rows = self._db.execute("SELECT run_id FROM runs WHERE run_id LIKE ?", (ref + "%",)).fetchall()
        if len(rows) != 1:
            raise StoreError(f"run {ref!r} {'is ambiguous' if rows else 'not found'} in {self.path};"
                             " 'dlbench results ls' lists runs")
        return rows[0][0]

    # -- results ------------------------------------------------------------------------------
    def add(self, record: Any, env_key: str | None = None) -> None:
        """Store one record in its own transaction (committed before this returns)."""
        with self._db:
            self._db.execute(
                "INSERT INTO results (id, run_id, kind, created_at, config_key, env_key, model, label,"
                " status, error_type, value, record_json) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (record.id, record.run_id, record.kind, record.created_at, record.config.key(),
                 env_key, getattr(record.config, "model", None), record.config.label,
                 record.status, record.error_type, record.headline(),
                 json.dumps(record.to_dict())))

    def results(self, run_id: str | None = None, kind: str | None = None,
                status: str | None = None, model: str | None = None,
                tag: str | None = None) -> list[Any]:
        return list(self.iter_results(run_id=run_id, kind=kind, status=status, model=model,
                                      tag=tag))

    def iter_results(self, run_id: str | None = None, kind: str | None = None,
                     status: str | None = None, model: str | None = None,
                     tag: str | None = None) -> Iterator[Any]:
        """Records in the order they were stored; ``tag`` selects every run with that tag."""
        where, args = [], []
        for col, val in (("run_id", run_id), ("kind", kind), ("status", status), ("model", model)):
            if val is not None:
                where.append(f"{col}=?")
                args.append(val)
        if tag is not None:
            where.append("run_id IN (SELECT run_id FROM runs WHERE tag=?)")
            args.append(tag)
        sql = "SELECT record_json FROM results"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at, rowid"
        for (blob,) in self._db.execute(sql, args):
            yield record_from_dict(json.loads(blob))

    def get(self, ref: str) -> Any:
        """One result by id or unique id prefix."""
        rows = self._db.execute("SELECT record_json FROM results WHERE id LIKE ?",
                                (ref + "%",)).fetchall()
        if len(rows) != 1:
            raise StoreError(f"result {ref!r} {'is ambiguous' if rows else 'not found'} in "
                             f"{self.path}; 'dlbench results ls --results' lists ids")
        return record_from_dict(json.loads(rows[0][0]))

    def merge_from(self, other: str | Path) -> tuple[int, int]:
        """Copy every run and result of the store at ``other`` that this one lacks (by id):
        several hosts' stores of one multi-node job, or the stores of several calls on one
        machine, become one. Returns (runs added, results added); rows already here are kept."""
        src = Path(other)
        if not src.exists():
            raise StoreError(f"no result store at {src}")
        _check_source(src)
        before_runs = self._db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        before = self._db.execute("SELECT COUNT(*) FROM results").fetchone()[0]
        self._db.execute("ATTACH DATABASE ? AS other", (str(src),))
        try:
            with self._db:
                self._db.execute("INSERT OR IGNORE INTO runs SELECT * FROM other.runs")
                self._db.execute("INSERT OR IGNORE INTO results SELECT * FROM other.results")
        finally:
            self._db.execute("DETACH DATABASE other")
        runs = self._db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] - before_runs
        results = self._db.execute("SELECT COUNT(*) FROM results").fetchone()[0] - before
        return runs, results

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

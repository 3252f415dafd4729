"""The store under faults: a write the disk or the file refuses, rows that are not UTF-8 or hold
the wrong types, and read commands that must never write (docs/reliability.md)."""

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

from dlbench.cli import main
from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
from dlbench.store import Store, StoreError
from dlbench.env import env_key

ENV = {"accelerator": "cpu", "cpu_model": "Test CPU", "packages": {"torch": "2.9.0"},
       "hostname": "bench-host"}
KEY = env_key(ENV)
FAST = ["--min-steps", "5", "--min-time", "0.05", "--max-time", "1", "--warmup", "1",
        "--device", "cpu"]


def record(batch=32, run_id="run-a", steps=4):
    times = tuple(0.1 + i * 1e-6 for i in range(steps))
    return ThroughputRecord(config=ThroughputConfig(model="resnet50", batch_size=batch,
                                                    device="cpu"),
                            env=ENV, step_times_s=times, samples_per_step=batch,
                            unit="images", run_id=run_id)


def fill(db: Path, run_id="run-a", batches=(16, 32)) -> list:
    recs = [record(b, run_id) for b in batches]
    with Store(db) as s:
        s.start_run(run_id, "dlbench throughput", ENV, KEY, "CPU")
        for r in recs:
            s.add(r, KEY)
        s.finish_run(run_id, "done")
    return recs


def digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def one_line_error(err: str) -> bool:
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("warning:")]
    return (len(lines) == 1 and "Traceback" not in err and lines[0].startswith("error:")
            and "internal error" not in err)


def count(db: Path, table="results") -> int:
    con = sqlite3.connect(db)
    try:
        return con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    finally:
        con.close()


@pytest.fixture
def store(tmp_path):
    db = tmp_path / "S.db"
    fill(db)
    return db


def refuse(monkeypatch, statement: str, message: str) -> None:
    """Every connection the store opens from now on fails ``statement`` as SQLite does when the
    disk is full, the file is read-only or the device fails (tests may run as root, where a
    chmod does not stop a write)."""
    real = sqlite3.connect

    class Refusing(sqlite3.Connection):
        def execute(self, sql, *args):
            if sql.lstrip().upper().startswith(statement):
                raise sqlite3.OperationalError(message)
            return super().execute(sql, *args)

    monkeypatch.setattr(sqlite3, "connect", lambda *a, **kw: real(*a, factory=Refusing, **kw))


# -- 1. a write that fails: the record goes to a recovery file, the run stops cleanly ----------

def test_a_full_disk_sends_the_record_to_a_recovery_file_that_merge_takes(store, tmp_path):
    rec = record(64, run_id="run-b", steps=2000)  # several pages: the insert needs new ones
    st = Store(store)
    st.start_run("run-b", "dlbench throughput", ENV, KEY, "CPU")
    pages = st._db.execute("PRAGMA page_count").fetchone()[0]
    st._db.execute(f"PRAGMA max_page_count = {pages}")  # a real SQLITE_FULL from here on
    with pytest.raises(StoreError) as err:
        st.add(rec, KEY)
    st.close()
    recovery = tmp_path / f"S.db.recovered-{rec.id}.json"
    msg = str(err.value)
    assert "database or disk is full" in msg and str(recovery) in msg
    assert f"dlbench results merge --db {store} {recovery}" in msg
    assert recovery.exists() and count(store) == 2
    with Store(store) as s:
        assert s.merge_recovery(recovery) == (0, 1)
        assert s.get(rec.id) == rec


@pytest.mark.parametrize("message", ["database or disk is full",
                                     "attempt to write a readonly database", "disk I/O error"])
def test_any_refused_write_is_recovered_not_lost(store, tmp_path, monkeypatch, message):
    refuse(monkeypatch, "INSERT INTO RESULTS", message)
    rec = record(64)
    with Store(store) as st, pytest.raises(StoreError, match="results merge") as err:
        st.add(rec, KEY)
    assert message in str(err.value)
    assert (tmp_path / f"S.db.recovered-{rec.id}.json").exists()


def test_a_full_disk_ends_the_sweep_with_exit_2_and_the_result_in_a_recovery_file(
        tmp_path, monkeypatch, capsys):
    db = tmp_path / "S.db"
    fill(db)
    refuse(monkeypatch, "INSERT INTO RESULTS", "database or disk is full")
    code = main(["throughput", "-m", "tiny_cnn", "-b", "2,4", "--db", str(db), "-q", *FAST])
    err = capsys.readouterr().err
    assert code == 2, err
    assert one_line_error(err), err
    files = list(tmp_path.glob("S.db.recovered-*.json"))
    assert len(files) == 1  # the sweep stopped at its first lost write
    assert str(files[0]) in err and "dlbench results merge" in err
    monkeypatch.undo()
    with Store(db) as st:
        (run,) = [r for r in st.runs() if r.run_id != "run-a"]
        assert run.status == "failed" and run.results == 0
    assert main(["results", "merge", "--db", str(db), str(files[0])]) == 0
    assert count(db) == 3


def test_the_recovery_file_falls_back_to_the_cache_directory(store, tmp_path, monkeypatch):
    import dlbench.store as storemod
    refuse(monkeypatch, "INSERT INTO RESULTS", "database or disk is full")
    real = storemod._write_whole

    def beside_the_store_fails(target, text):
        if Path(target).parent == store.parent:
            raise OSError(28, "No space left on device")
        real(target, text)
    monkeypatch.setattr(storemod, "_write_whole", beside_the_store_fails)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    rec = record(64)
    with Store(store) as st, pytest.raises(StoreError) as err:
        st.add(rec, KEY)
    saved = tmp_path / "cache" / "dlbench" / "recovered" / f"S.db.recovered-{rec.id}.json"
    assert saved.exists() and str(saved) in str(err.value)
    monkeypatch.undo()
    with Store(store) as st:
        assert st.merge_recovery(saved) == (0, 1)


def test_a_record_that_cannot_be_saved_anywhere_is_said_lost(store, monkeypatch):
    import dlbench.store as storemod
    refuse(monkeypatch, "INSERT INTO RESULTS", "database or disk is full")

    def fails(target, text):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(storemod, "_write_whole", fails)
    rec = record(64)
    with Store(store) as st, pytest.raises(StoreError, match=f"result {rec.id} is lost"):
        st.add(rec, KEY)


def test_a_run_that_cannot_start_is_a_store_error(store, monkeypatch):
    refuse(monkeypatch, "INSERT INTO RUNS", "database or disk is full")
    with Store(store) as st, pytest.raises(StoreError, match="disk is full.*nothing was run"):
        st.start_run("run-c", "dlbench throughput", ENV, KEY, "CPU")


# -- 2. rows that are not UTF-8 or hold the wrong types: skipped, named, never merged -----------

def insert_raw(db: Path, rows: dict[str, bytes | str]) -> None:
    """Rows beside the good ones, as another writer (or a broken disk) might leave them: a bytes
    value is stored as TEXT without any check that it is UTF-8."""
    con = sqlite3.connect(db)
    good = con.execute("SELECT * FROM results LIMIT 1").fetchone()
    for rid, blob in rows.items():
        con.execute("INSERT INTO results VALUES (?,?,?,?,?,?,?,?,?,?,?,CAST(? AS TEXT))",
                    (rid, *good[1:-1], blob.encode() if isinstance(blob, str) else blob))
    con.commit()
    con.close()


def spoiled(field: str, value) -> str:
    d = record(8).to_dict()
    d[field] = value
    return json.dumps(d)


def wrong_config() -> str:
    d = record(8).to_dict()
    d["config"]["batch_size"] = "eight"
    return json.dumps(d)


BAD_ROWS = {
    "not-utf8": b'{"kind": "throughput", "label": "caf\xe9 \xff"}',
    "null-samples": spoiled("samples_per_step", None),
    "env-list": spoiled("env", ["a", "b"]),
    "times-string": spoiled("step_times_s", "0.1 0.2"),
    "times-of-text": spoiled("step_times_s", ["0.1", "0.2"]),
    "config-batch-text": wrong_config(),
}


def test_bad_rows_are_skipped_with_one_warning_each(store):
    insert_raw(store, BAD_ROWS)
    said = []
    with Store(store, on_warning=said.append) as st:
        assert len(st.results()) == 2
        assert len(st.results(run_id="run-a")) == 2
    assert len(said) == len(BAD_ROWS)
    for rid, text in zip(BAD_ROWS, said):
        assert rid in text, text
    assert "UnicodeDecodeError" in said[0]
    assert "samples_per_step" in said[1] and "env" in said[2]


@pytest.mark.parametrize("argv", [["results", "ls", "--results"], ["results", "show"],
                                  ["results", "show", "run-a", "--json"],
                                  ["results", "export"], ["results", "export", "--format", "csv"],
                                  ["report", "--markdown", "-o", "{out}"],
                                  ["compare", "run-a", "run-a"]])
def test_every_reader_reads_the_rest_of_a_store_with_bad_rows(store, tmp_path, capsys, argv):
    insert_raw(store, BAD_ROWS)
    code = main([a.format(out=tmp_path / "r.md") for a in argv] + ["--db", str(store)])
    cap = capsys.readouterr()
    assert code in ((0, 6) if argv[0] == "compare" else (0,)), cap.err
    assert "internal error" not in cap.err and "Traceback" not in cap.err
    for rid in BAD_ROWS:
        assert cap.err.count(rid) == 1, cap.err
    said = [ln for ln in cap.err.splitlines() if ln.startswith("warning: result")]
    assert len(said) == len(BAD_ROWS)
    if argv == ["results", "export"]:
        assert len(json.loads(cap.out)) == 2


def test_a_bad_row_shown_by_id_is_one_line(store, capsys):
    insert_raw(store, BAD_ROWS)
    for rid in BAD_ROWS:
        assert main(["results", "show", rid, "--db", str(store)]) == 2
        err = capsys.readouterr().err
        assert one_line_error(err) and rid in err, err


def test_check_reports_every_bad_row(store, capsys):
    insert_raw(store, BAD_ROWS)
    before = digest(store)
    assert main(["results", "check", "--db", str(store)]) == 3
    out = capsys.readouterr().out
    for rid in BAD_ROWS:
        assert f"unreadable: result {rid}" in out, out
    assert digest(store) == before


def test_merge_never_copies_a_bad_row(store, tmp_path, capsys):
    insert_raw(store, BAD_ROWS)
    target = tmp_path / "T.db"
    fill(target, run_id="run-t")
    assert main(["results", "merge", "--db", str(target), str(store)]) == 3
    err = capsys.readouterr().err
    for rid in BAD_ROWS:
        assert rid in err
    assert count(target) == 4  # its own two and the source's two good ones
    assert main(["results", "check", "--db", str(target)]) == 0


# -- 3. read commands never write ---------------------------------------------------------------

READERS = [["results", "ls"], ["results", "ls", "--results"], ["results", "show"],
           ["results", "check"], ["results", "export"], ["report", "--markdown", "-o", "{out}"]]


@pytest.mark.parametrize("argv", READERS)
def test_an_empty_file_is_an_error_for_read_commands_and_stays_empty(tmp_path, capsys, argv):
    db = tmp_path / "empty.db"
    db.write_bytes(b"")
    assert main([a.format(out=tmp_path / "r.md") for a in argv] + ["--db", str(db)]) == 2
    assert one_line_error(capsys.readouterr().err)
    assert db.read_bytes() == b"" and sorted(tmp_path.iterdir()) == [db]


@pytest.mark.parametrize("argv", READERS)
def test_a_store_without_its_indexes_is_read_not_repaired(store, tmp_path, capsys, argv):
    con = sqlite3.connect(store)
    con.executescript("DROP INDEX results_run; DROP INDEX results_key;")
    con.close()
    before = digest(store)
    assert main([a.format(out=tmp_path / "r.md") for a in argv] + ["--db", str(store)]) == 0
    capsys.readouterr()
    assert digest(store) == before


def test_dev_null_is_refused_and_leaves_no_journal(capsys):
    journal = Path("/dev/null-journal")
    existed = journal.exists()
    try:
        assert main(["results", "ls", "--db", "/dev/null"]) == 2
        assert one_line_error(capsys.readouterr().err)
        assert journal.exists() == existed
    finally:
        if journal.exists() and not existed:
            journal.unlink()

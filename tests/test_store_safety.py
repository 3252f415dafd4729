"""Nothing a user types can destroy a store: outputs that would overwrite it, foreign SQLite
files, a locked store, a merge into itself, LIKE patterns as id prefixes, malformed rows."""

import hashlib
import json
import os
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from fakes.cli import run as run_cli

from dlbench.cli import main
from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
from dlbench.store import Store, StoreError
from dlbench.env import env_key

ENV = {"accelerator": "cpu", "cpu_model": "Test CPU", "packages": {"torch": "2.9.0"},
       "hostname": "bench-host"}


def record(batch=32, run_id="run-a"):
    return ThroughputRecord(config=ThroughputConfig(model="resnet50", batch_size=batch,
                                                    device="cpu"),
                            env=ENV, step_times_s=(0.1, 0.11, 0.09, 0.1), samples_per_step=batch,
                            unit="images", run_id=run_id)


def fill(db: Path, run_id="run-a", batches=(16, 32)) -> list:
    recs = [record(b, run_id) for b in batches]
    with Store(db) as s:
        s.start_run(run_id, "dlbench throughput", ENV, env_key(ENV), "CPU")
        for r in recs:
            s.add(r, env_key(ENV))
        s.finish_run(run_id, "done")
    return recs


def digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def cli(*args):
    return run_cli(*args, timeout=120)


def one_line_error(err: str) -> bool:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    return len(lines) == 1 and "Traceback" not in err and lines[0].startswith("error:")


@pytest.fixture
def store(tmp_path):
    db = tmp_path / "S.db"
    fill(db)
    return db


# -- 1. outputs never overwrite a store; they are written whole or not at all ------------------

@pytest.mark.parametrize("argv", [
    ["results", "export", "-o", "{db}"],
    ["results", "export", "--format", "csv", "--output", "{db}"],
    ["report", "-o", "{db}"],
    ["report", "--markdown", "-o", "{db}"],
    ["results", "export", "-o", "{link}"],
    ["report", "-o", "{link}"],
    ["results", "export", "-o", "{other}"],
    ["report", "-o", "{other}"],
])
def test_an_output_onto_a_store_is_refused_before_anything_is_written(store, tmp_path, capsys,
                                                                       argv):
    link = tmp_path / "out.csv"
    link.symlink_to(store)
    other = tmp_path / "other.db"
    fill(other, run_id="run-b")
    before, before_other = digest(store), digest(other)
    names = {"db": str(store), "link": str(link), "other": str(other)}
    code = main([a.format(**names) for a in argv] + ["--db", str(store)])
    err = capsys.readouterr().err
    assert code == 2
    assert one_line_error(err) and ("-o" in err or "--output" in err)
    assert digest(store) == before and digest(other) == before_other
    assert link.is_symlink()


@pytest.mark.parametrize("cmd", [["results", "export"], ["report", "--markdown"]])
def test_an_unwritable_output_is_one_line_and_leaves_nothing(store, tmp_path, capsys, cmd):
    (tmp_path / "adir").mkdir()
    for target in (tmp_path / "adir", tmp_path / "afile.txt" / "x.out"):
        if target.name == "x.out":
            target.parent.write_text("a file, not a directory")
        before = sorted(p.name for p in tmp_path.rglob("*"))
        code = main(cmd + ["--db", str(store), "-o", str(target)])
        err = capsys.readouterr().err
        assert code == 2, err
        assert one_line_error(err) and "-o" in err
        assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_export_into_a_missing_directory_is_refused(store, tmp_path, capsys):
    code = main(["results", "export", "--db", str(store), "-o", str(tmp_path / "no" / "x.json")])
    err = capsys.readouterr().err
    assert code == 2 and one_line_error(err) and "-o" in err
    assert not (tmp_path / "no").exists()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("cmd", [["results", "export"], ["report", "--markdown"]])
def test_a_full_disk_is_one_line_not_a_traceback(store, cmd):
    p = cli(*cmd, "--db", str(store), "-o", "/dev/full")
    assert p.returncode == 2 and one_line_error(p.stderr), p.stderr
    assert os.path.exists("/dev/full") and not os.path.isfile("/dev/full")


def test_outputs_are_written_whole_or_not_at_all(store, tmp_path, monkeypatch, capsys):
    from dlbench.report import outfile

    out = tmp_path / "export.json"
    out.write_text("the previous export")
    real_fsync = os.fsync

    def broken(fd):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(outfile.os, "fsync", broken)
    code = main(["results", "export", "--db", str(store), "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and one_line_error(err) and "No space left" in err
    assert out.read_text() == "the previous export"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["S.db", "export.json"]
    monkeypatch.setattr(outfile.os, "fsync", real_fsync)
    assert main(["results", "export", "--db", str(store), "-o", str(out)]) == 0
    assert len(json.loads(out.read_text())) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["S.db", "export.json"]


# -- 2. a foreign SQLite file is refused, read-only and untouched -------------------------------

def foreign(path: Path) -> Path:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE notes (x TEXT)")
    con.execute("INSERT INTO notes VALUES ('mine')")
    con.commit()
    con.close()
    return path


@pytest.mark.parametrize("argv", [["results", "ls"], ["results", "ls", "--results"],
                                  ["results", "show"], ["results", "export"],
                                  ["results", "merge", "{src}"], ["report", "--markdown"]])
def test_a_foreign_sqlite_file_is_refused_by_every_command_and_left_as_it_was(tmp_path, capsys,
                                                                              argv):
    db = foreign(tmp_path / "notes.db")
    src = tmp_path / "S.db"
    fill(src)
    before = digest(db)
    code = main([a.format(src=src) for a in argv] + ["--db", str(db)])
    err = capsys.readouterr().err
    assert code == 2 and one_line_error(err) and "not a dlbench result store" in err
    assert digest(db) == before
    con = sqlite3.connect(db)
    assert [r[0] for r in con.execute("SELECT name FROM sqlite_master")] == ["notes"]
    con.close()


def test_a_foreign_file_is_refused_by_the_store_itself(tmp_path):
    db = foreign(tmp_path / "notes.db")
    before = digest(db)
    with pytest.raises(StoreError, match="not a dlbench result store"):
        Store(db)
    assert digest(db) == before


def test_a_new_or_empty_file_becomes_a_store(tmp_path):
    for path in (tmp_path / "new.db", tmp_path / "empty.db"):
        if path.name == "empty.db":
            path.write_bytes(b"")
        with Store(path) as st:
            st.start_run("r", "x", ENV, env_key(ENV), "CPU")
        with Store(path) as st:
            assert [r.run_id for r in st.runs()] == ["r"]


def test_reading_a_store_writes_nothing_to_it(store, capsys):
    before = digest(store)
    assert main(["results", "ls", "--db", str(store)]) == 0
    assert main(["results", "show", "--db", str(store)]) == 0
    assert digest(store) == before


# -- 3. a locked store: retried, then a recovery file that merge takes --------------------------

def test_a_store_locked_too_long_writes_a_recovery_file_that_merge_takes(store, tmp_path,
                                                                          capsys):
    rec = record(64, run_id="run-b")
    said = []
    st = Store(store, lock_wait_s=0.5, on_warning=said.append)
    st.start_run("run-b", "dlbench throughput", ENV, env_key(ENV), "CPU")
    holder = sqlite3.connect(store, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    t0 = time.monotonic()
    st.add(rec, env_key(ENV))  # does not raise: the record goes to a recovery file
    assert time.monotonic() - t0 < 10
    holder.execute("ROLLBACK")
    holder.close()
    recovery = tmp_path / f"S.db.recovered-{rec.id}.json"
    assert recovery.exists()
    assert len(said) == 1 and str(recovery) in said[0] and "dlbench results merge" in said[0]
    st.close()
    with Store(store) as s:
        assert [r.id for r in s.results()] == [r.id for r in s.results(run_id="run-a")]
    assert main(["results", "merge", "--db", str(store), str(recovery)]) == 0
    assert "1 result(s) added" in capsys.readouterr().err
    with Store(store) as s:
        assert s.get(rec.id) == rec
        assert "run-b" in {r.run_id for r in s.runs()}
        assert s.merge_recovery(recovery) == (0, 0)  # a second merge adds nothing


def test_a_lock_released_within_the_budget_is_waited_for(store, tmp_path):
    rec = record(64)
    st = Store(store, lock_wait_s=20)
    holder = sqlite3.connect(store, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    threading.Timer(1.0, lambda: holder.execute("ROLLBACK")).start()
    st.add(rec, env_key(ENV))
    st.close()
    holder.close()
    assert not list(tmp_path.glob("*.recovered-*"))
    with Store(store) as s:
        assert s.get(rec.id) == rec


def test_the_lock_budget_comes_from_the_environment(store, monkeypatch):
    monkeypatch.setenv("DLBENCH_LOCK_WAIT_S", "0.25")
    with Store(store) as st:
        assert st.lock_wait_s == 0.25


def test_a_recovery_file_that_is_not_one_is_refused(store, tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"some": "json"}')
    with Store(store) as st, pytest.raises(StoreError, match="not a dlbench recovery file"):
        st.merge_recovery(bad)


# -- 4. a store merged into itself --------------------------------------------------------------

def test_merging_a_store_into_itself_is_refused_at_once(store, tmp_path, capsys):
    link = tmp_path / "again.db"
    link.symlink_to(store)
    before = digest(store)
    for src in (store, link):
        t0 = time.monotonic()
        code = main(["results", "merge", "--db", str(store), str(src)])
        err = capsys.readouterr().err
        assert code == 2 and one_line_error(err) and "itself" in err
        assert time.monotonic() - t0 < 5
    assert digest(store) == before
    with Store(store) as st, pytest.raises(StoreError, match="itself"):
        st.merge_from(store)


# -- 5. an id prefix is a prefix, not a LIKE pattern --------------------------------------------

def test_an_id_prefix_is_not_a_like_pattern(store, capsys):
    with Store(store) as st:
        rid = st.results()[0].id
        for ref in ("%", "_", "_" * 4, rid[:2] + "%", "r%"):
            with pytest.raises(StoreError, match="not found"):
                st.get(ref)
            with pytest.raises(StoreError, match="not found"):
                st.resolve_run(ref)
        assert st.get(rid[:8]).id == rid and st.resolve_run("run") == "run-a"
    assert main(["results", "show", "--db", str(store), "%"]) == 2
    assert one_line_error(capsys.readouterr().err)


# -- 6. a malformed row is skipped with a warning, the rest reads -------------------------------

def spoil(db: Path) -> None:
    con = sqlite3.connect(db)
    good = con.execute("SELECT * FROM results LIMIT 1").fetchone()
    for rid, blob in (("bad-json", "{not json"), ("alien-kind", json.dumps({"kind": "alien"})),
                      ("bad-fields", json.dumps({"kind": "throughput", "config": 5}))):
        con.execute("INSERT INTO results VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                    (rid, *good[1:-1], blob))
    con.commit()
    con.close()


BAD = ("bad-json", "alien-kind", "bad-fields")


def test_malformed_rows_are_skipped_with_a_warning_naming_each(store):
    spoil(store)
    said = []
    with Store(store, on_warning=said.append) as st:
        assert len(st.results()) == 2
        assert len(st.results(run_id="run-a")) == 2  # warned once per row, not once per call
        with pytest.raises(StoreError, match="bad-json"):
            st.get("bad-j")
    assert len(said) == 3
    for rid, text in zip(BAD, said):
        assert rid in text
    assert "unknown record kind" in said[1]


@pytest.mark.parametrize("argv", [["results", "ls", "--results"], ["results", "ls"],
                                  ["results", "show"], ["results", "show", "run-a", "--json"],
                                  ["results", "export"], ["results", "export", "--format", "csv"],
                                  ["report", "--markdown", "-o", "{out}"]])
def test_commands_read_the_rest_of_a_store_with_malformed_rows(store, tmp_path, capsys, argv):
    spoil(store)
    code = main([a.format(out=tmp_path / "r.md") for a in argv] + ["--db", str(store)])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    if argv != ["results", "ls"]:  # the run list reads no records
        for rid in BAD:
            assert cap.err.count(rid) == 1, cap.err
    if argv[:2] == ["results", "export"] and "csv" not in argv:
        assert len(json.loads(cap.out)) == 2


def test_an_old_store_still_reads(tmp_path, capsys):
    old = tmp_path / "old.db"
    old.write_bytes((Path(__file__).parent / "data" / "store-before-records.db").read_bytes())
    before = digest(old)
    assert main(["results", "ls", "--results", "--db", str(old)]) == 0
    assert "warning" not in capsys.readouterr().err
    assert digest(old) == before

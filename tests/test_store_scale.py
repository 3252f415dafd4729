"""Reading a large store: ``results ls --results`` decodes only the rows it shows, exports are
streamed a record at a time with the bytes the whole-list exporters write, and a FIFO or other
special file is refused as a ``results merge`` source instead of hanging
(docs/reliability.md#large-stores, benchmarks/store_scale.py)."""

from __future__ import annotations

import csv
import importlib.util
import io
import os
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import dlbench.store as store_mod
from dlbench.cli import main
from dlbench.report import export
from dlbench.store import Store, StoreError

ROOT = Path(__file__).resolve().parents[1]
N = 2000
PER_RUN = 100


def _bench():
    spec = importlib.util.spec_from_file_location("store_scale",
                                                  ROOT / "benchmarks" / "store_scale.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("scale") / "big.db"
    _bench().generate(_bench().TEMPLATE, db, N, PER_RUN)
    return db


@pytest.fixture
def decodes(monkeypatch) -> list:
    """Every record the store decodes (``record_from_dict`` as ``_parse`` calls it)."""
    seen = []
    real = store_mod.record_from_dict

    def counted(d):
        seen.append(d.get("id"))
        return real(d)
    monkeypatch.setattr(store_mod, "record_from_dict", counted)
    return seen


def test_the_generated_store_is_whole_and_reads(big):
    with Store(big, readonly=True) as st:
        assert len(st.runs()) == N // PER_RUN
        assert st.result_kinds() == {"throughput", "net"}
        assert sum(1 for _ in st.stream_results()) == N
        assert st.check() == []


def test_ls_results_decodes_only_the_rows_it_shows(big, decodes, capsys):
    with Store(big, readonly=True) as st:
        last = [r.id for r in st.results()][-7:]
    decodes.clear()
    assert main(["results", "ls", "--results", "-q", "--limit", "7", "--db", str(big)]) == 0
    assert capsys.readouterr().out.split() == last  # oldest first, as before
    assert len(decodes) == 7
    decodes.clear()
    assert main(["results", "ls", "--results", "--db", str(big)]) == 0
    assert len(decodes) == 50  # the default --limit
    capsys.readouterr()


def test_last_results_of_one_run_and_all(big):
    with Store(big, readonly=True) as st:
        run = st.runs()[3].run_id
        every = st.results(run_id=run)
        assert [r.id for r in st.last_results(10, run_id=run)] == [r.id for r in every[-10:]]
        assert [r.id for r in st.last_results(0, run_id=run)] == [r.id for r in every]
        assert len(st.last_results(10 * PER_RUN, run_id=run)) == PER_RUN


def test_ls_results_skips_an_unreadable_row_in_its_tail_and_still_shows_k(tmp_path, capsys):
    db = tmp_path / "s.db"
    _bench().generate(_bench().TEMPLATE, db, 40, 20)
    con = sqlite3.connect(db)
    row = con.execute("SELECT * FROM results ORDER BY rowid DESC LIMIT 1").fetchone()
    con.execute("INSERT INTO results VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                ("badbadbadbad", row[1], row[2], "2099-01-01T00:00:00+00:00", *row[4:11],
                 '{"kind": "throughput", "config": 7}'))
    con.commit()
    con.close()
    with Store(db, readonly=True, on_warning=lambda m: None) as st:
        want = [r.id for r in st.results()][-5:]
    assert main(["results", "ls", "--results", "-q", "--limit", "5", "--db", str(db)]) == 0
    cap = capsys.readouterr()
    assert cap.out.split() == want
    assert cap.err.count("badbadbadbad") == 1


def test_stream_results_reads_a_batch_at_a_time(big, decodes):
    with Store(big, readonly=True) as st:
        it = st.stream_results()
        next(it)
        assert len(decodes) <= store_mod._BATCH  # not the whole store
        it.close()
        decodes.clear()
        assert [r.id for r in st.stream_results(kind="net")] == \
            [r.id for r in st.iter_results(kind="net")]


def test_a_streamed_export_is_the_bytes_of_the_whole_list_exporters(big, tmp_path, capsys):
    tag = "sweep-2"
    with Store(big, readonly=True) as st:
        recs = st.results(tag=tag)
    assert len(recs) == 3 * PER_RUN
    assert main(["results", "export", "--tag", tag, "--db", str(big)]) == 0
    assert capsys.readouterr().out == export.to_json(recs) + "\n"
    out = tmp_path / "t.json"
    assert main(["results", "export", "--tag", tag, "-o", str(out), "--db", str(big)]) == 0
    assert out.read_text() == export.to_json(recs) + "\n"
    assert f"wrote {len(recs)} result(s)" in capsys.readouterr().err
    # CSV: one file per kind, as before
    assert main(["results", "export", "--tag", tag, "--format", "csv", "-o",
                 str(tmp_path / "t.csv"), "--db", str(big)]) == 0
    for kind in ("throughput", "net"):
        text = (tmp_path / f"t-{kind}.csv").read_text()
        assert text == export.to_csv(recs, kind)
        assert len(list(csv.DictReader(io.StringIO(text)))) == sum(r.kind == kind for r in recs)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t-net.csv", "t-throughput.csv",
                                                          "t.json"]  # no temporary file left
    capsys.readouterr()
    assert main(["results", "export", "--tag", tag, "--format", "csv", "--kind", "net",
                 "--db", str(big)]) == 0
    assert capsys.readouterr().out == export.to_csv(recs, "net")


def test_an_empty_selection_exports_as_before(big, capsys):
    assert main(["results", "export", "--kind", "peak", "--db", str(big)]) == 0
    assert capsys.readouterr().out == export.to_json([]) + "\n"
    assert main(["results", "export", "--kind", "peak", "--format", "csv",
                 "--db", str(big)]) == 0
    assert capsys.readouterr().out == export.to_csv([], "peak")


def test_several_kinds_to_stdout_are_refused_before_writing(big, capsys):
    assert main(["results", "export", "--format", "csv", "--db", str(big)]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and "2 kinds (throughput, net)" in cap.err


def test_a_report_of_a_large_store_draws_the_newest_results_and_tables_every_one(big, tmp_path,
                                                                                   capsys):
    from dlbench.report.charts.base import MAX_DRAWN

    with Store(big, readonly=True) as st:
        thr = [r for r in st.results(kind="throughput") if r.summary() is not None]
    out = tmp_path / "r.html"
    assert main(["report", "--db", str(big), "-o", str(out)]) == 0
    assert f"wrote {out} ({N} result(s)" in capsys.readouterr().err
    html = out.read_text()
    # a chart of bars per unit, the newest MAX_DRAWN results of that unit where there are more
    per_unit = Counter(r.unit for r in thr)
    assert max(per_unit.values()) > MAX_DRAWN
    for n in per_unit.values():
        note = f"(the newest {MAX_DRAWN} of {n:,} results; the tables list every one)"
        assert (note in html) == (n > MAX_DRAWN), note
    # ... and every result in the throughput table, whose rows start with the model
    models = {r.config.model for r in thr}
    rows = sum(html.count(f"<tr><td>{m}</td>") for m in models)
    assert rows >= len(thr), f"{rows} table rows for {len(thr)} results"


def test_newest_keeps_the_last_items_and_says_so():
    from dlbench.report.charts.base import MAX_DRAWN, newest

    few = list(range(MAX_DRAWN))
    assert newest(few) == (few, "")
    many = list(range(3 * MAX_DRAWN + 1))
    kept, note = newest(many, "points")
    assert kept == many[-MAX_DRAWN:]
    assert note == f" (the newest {MAX_DRAWN} of {len(many):,} points; the tables list every one)"


def _merge(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "dlbench", "results", "merge", *argv],
                          capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.parametrize("name", ["pipe", "pipe.json", "pipe.db"])
def test_a_fifo_source_is_refused_not_waited_on(tmp_path, name):
    fifo = tmp_path / name
    os.mkfifo(fifo)
    target = tmp_path / "T.db"
    done = _merge("--db", str(target), str(fifo))  # TimeoutExpired here: it hung
    assert done.returncode == 2, done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "FIFO" in lines[0], done.stderr
    assert not target.exists()  # refused before --db was opened


def test_a_directory_source_is_refused(tmp_path, capsys):
    assert main(["results", "merge", "--db", str(tmp_path / "T.db"), str(tmp_path)]) == 2
    assert "is a directory, not a file" in capsys.readouterr().err


def test_the_store_api_refuses_a_fifo_too(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert store_mod.is_recovery_file(fifo) is False  # never opened
    with Store(tmp_path / "T.db") as st:
        with pytest.raises(StoreError, match="FIFO"):
            st.merge_from(fifo)
        with pytest.raises(StoreError, match="FIFO"):
            st.merge_recovery(fifo)


def test_a_regular_source_still_merges(big, tmp_path, capsys):
    target = tmp_path / "T.db"
    assert main(["results", "merge", "--db", str(target), str(big)]) == 0
    with Store(target, readonly=True) as st:
        assert len(st.results(kind="throughput")) + len(st.results(kind="net")) == N
    assert "2000 result(s) added" in capsys.readouterr().err

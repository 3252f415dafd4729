"""Reading a large store: ``results ls --results`` decodes only the rows it shows, exports are
streamed with the bytes the whole-list exporters write (a large selection converted in worker
processes, in order, with the warnings and errors of one process), and a FIFO or other special
file is refused as a ``results merge`` source instead of hanging
(docs/reliability.md#large-stores, benchmarks/store_scale.py)."""

from __future__ import annotations

import csv
import io
import os
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from fakes import cli

import dlbench.store as store_mod
from dlbench.cli import main
from dlbench.report import export
from dlbench.store import Store, StoreError

ROOT = Path(__file__).resolve().parents[1]
N = 2000
PER_RUN = 100


def _bench():
    return cli.script("store_scale")


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


# -- exports over worker processes -------------------------------------------------------------
# A selection of store_mod.PARALLEL_MIN rows or more is decoded and converted in forked workers
# (Store.map_results); the bytes, the warnings and the errors are those of one process.

@pytest.fixture
def two_cpus(monkeypatch):
    """Workers as on a machine of two CPUs, whatever this one has."""
    monkeypatch.setattr(store_mod, "_usable_cpus", lambda: 2)


@pytest.fixture(scope="module")
def with_bad_rows(tmp_path_factory) -> tuple[Path, list[str]]:
    """A store of 1,500 results and, spread over its chunks, four rows that cannot be read
    (each stored just after a readable one, with its time): the store and their ids."""
    db = tmp_path_factory.mktemp("bad") / "bad.db"
    _bench().generate(_bench().TEMPLATE, db, 1500, PER_RUN)
    bad = {"bad000000001": b"\xff\xfe not UTF-8", "bad000000002": '{"kind": "throughput"}',
           "bad000000003": "[1, 2]", "bad000000004": "{not JSON"}
    con = sqlite3.connect(db)
    rows = con.execute("SELECT * FROM results ORDER BY rowid").fetchall()
    for i, (rid, blob) in enumerate(bad.items()):
        row = rows[100 + 350 * i]
        con.execute("INSERT INTO results VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                    (rid, *row[1:11], blob))
    con.commit()
    con.close()
    return db, list(bad)


def test_workers_convert_in_order_and_name_each_unreadable_row_as_one_process_does(
        with_bad_rows):
    db, bad = with_bad_rows
    got = {}
    for workers in (1, 2):
        said: list[str] = []
        with Store(db, readonly=True, on_warning=said.append) as st:
            got[workers] = (list(st.map_results(export.json_element, workers=workers)), said)
    assert got[1] == got[2]
    elements, said = got[2]
    assert len(elements) == 1500
    assert [w.split()[1] for w in said] == bad  # in stored order, once each
    with Store(db, readonly=True, on_warning=lambda m: None) as st:
        assert elements == [export.json_element(r) for r in st.stream_results()]


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_an_export_over_workers_is_the_bytes_of_one_process(with_bad_rows, tmp_path, fmt,
                                                            monkeypatch, capsys):
    db, bad = with_bad_rows
    written = {}
    for cpus in (1, 2):
        monkeypatch.setattr(store_mod, "_usable_cpus", lambda: cpus)
        out = tmp_path / str(cpus) / f"all.{fmt}"
        out.parent.mkdir()
        assert main(["results", "export", "--format", fmt, "-o", str(out), "--db", str(db)]) == 0
        err = capsys.readouterr().err.replace(str(out.parent), "DIR")
        written[cpus] = ({p.name: p.read_bytes() for p in out.parent.iterdir()}, err)
    assert written[1] == written[2]
    files, err = written[2]
    assert sorted(files) == ([f"all.{fmt}"] if fmt == "json" else
                             ["all-net.csv", "all-throughput.csv"])  # no temporary file left
    assert all(err.count(rid) == 1 for rid in bad)
    with Store(db, readonly=True, on_warning=lambda m: None) as st:
        recs = st.results()
    if fmt == "json":
        assert files["all.json"].decode() == export.to_json(recs) + "\n"
    else:
        assert files["all-net.csv"].decode() == export.to_csv(recs, "net")


def test_a_whole_store_export_over_workers_is_the_bytes_of_the_whole_list_exporter(
        big, two_cpus, capsys):
    with Store(big, readonly=True) as st:
        recs = st.results()
    assert main(["results", "export", "--db", str(big)]) == 0
    assert capsys.readouterr().out == export.to_json(recs) + "\n"
    assert main(["results", "export", "--format", "csv", "--kind", "throughput",
                 "--db", str(big)]) == 0
    assert capsys.readouterr().out == export.to_csv(recs, "throughput")


def test_an_error_in_a_worker_is_raised_after_the_records_before_it(big):
    with Store(big, readonly=True) as st:
        ids = [r.id for r in st.stream_results()]
        wrong = ids[1300]

        def convert(r):
            if r.id == wrong:
                raise ValueError(f"cannot convert {r.id}")
            return r.id

        got = []
        with pytest.raises(ValueError, match=f"cannot convert {wrong}") as info:
            for rid in st.map_results(convert, workers=2):
                got.append(rid)
    assert got == ids[:1300]
    assert "raise ValueError" in str(info.value.__cause__)  # the worker's traceback


def test_workers_run_only_a_few_chunks_ahead(big, monkeypatch):
    sent = []
    chunks = store_mod._chunks

    def counted(first, cur):
        for chunk in chunks(first, cur):
            sent.append(len(chunk))
            yield chunk
    monkeypatch.setattr(store_mod, "_chunks", counted)
    with Store(big, readonly=True) as st:
        it = st.map_results(lambda r: r.id, workers=2)
        next(it)
        assert len(sent) <= 2 * 2 + 1 and sum(sent) < N  # not the whole store
        it.close()


def test_a_small_selection_starts_no_worker(big, monkeypatch):
    def refused(*args, **kwargs):
        raise AssertionError("workers started")
    monkeypatch.setattr(Store, "_map_in_workers", refused)
    with Store(big, readonly=True) as st:
        assert len(list(st.map_results(lambda r: r.id, tag="sweep-2", workers=2))) == 300
        assert len(list(st.map_results(lambda r: r.id, workers=1))) == N


def test_the_benchmark_counts_a_commands_memory_with_its_workers():
    bench = _bench()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        alone = bench.tree_rss_mb(child.pid)
        assert 0 < alone < bench.tree_rss_mb(os.getpid())  # this process and the child
    finally:
        child.kill()
        child.wait()
    assert bench.tree_rss_mb(child.pid) == 0  # gone: nothing to read

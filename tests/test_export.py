"""Exports: a CSV per record kind with every config and result column filled, the JSON layout,
the schema page that documents them, and ``results export`` through the CLI.

The store is built from real records: every kind of tests/data/store-before-records.db (GPU
records of an H100 and H200s, failures included), plus records of the committed campaign
stores where that store has none of a column's kind (a scaling run with GPU telemetry, a matmul
ceiling, a training run with its pipeline measurements, a CPU net run with its environment).
No committed store holds a ``generate`` record yet: one with known numbers
(tests/fakes/generate_records.py) in the environment of the old store's H100, and its failure;
nor a ``serve`` record: those of tests/fakes/serve_records.py that fill every serve column.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from fakes.cli import run as run_cli
from fakes.generate_records import failed_generate, generate_record
from fakes.serve_records import every_column_records

from dlbench.records import RECORD_TYPES
from dlbench.records.base import new_id
from dlbench.report import export
from dlbench.store import Store

ROOT = Path(__file__).resolve().parents[1]
OLD_STORE = ROOT / "tests" / "data" / "store-before-records.db"
# Record ids of the committed stores that fill what the old store's records leave empty.
EXTRA = {"pt2.11-cu130-4x-h200": ("9bd14a74b481", "67f76214181f", "28324df9eb9c"),
         "pt2.14-cpu": ("*net",)}


def _plain(name: str, tmp: Path) -> Path:
    out = tmp / f"{name}.db"
    with gzip.open(ROOT / "results" / name / "dlbench.db.gz") as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


@pytest.fixture(scope="module")
def every_kind(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("export")
    db = tmp / "every-kind.db"
    with Store(db) as store:
        store.merge_from(OLD_STORE)
        for name, ids in EXTRA.items():
            with Store(_plain(name, tmp)) as src:
                recs = ([r for r in src.results(kind=ids[0][1:])][:1] if ids[0].startswith("*")
                        else [src.get(i) for i in ids])
            for r in recs:
                store.add(r)
        h100 = next(r for r in store.results(kind="throughput")
                    if r.ok and (r.env.get("gpus") or [{}])[0].get("uuid"))
        store.add(generate_record(env=h100.env, run_id=h100.run_id))
        store.add(failed_generate(env=h100.env, run_id=h100.run_id))
        for r in every_column_records(env=h100.env, run_id=h100.run_id):
            store.add(r)
        # Nor a scaling record with its ranks' exposed communication: an ok one with
        # known profiles (2 ms of 10 ms exposed per step), each rank's.
        scaled = next(r for r in store.results(kind="scaling") if r.ok)
        prof = {"source": "cuda kernels", "steps": 2, "warmup_steps": 1,
                "exposed_s": [0.002, 0.002], "comm_s": [0.005, 0.005], "step_s": [0.01, 0.01],
                "comm_names": {"ncclDevKernel_AllReduce_Sum_f32_RING_LL": 0.01},
                "reason": None, "cost_s": 1.5}
        store.add(replace(scaled, id=new_id(),
                          rank_comm_profile=(prof,) * len(scaled.rank_step_times_s)))
    return db


def _tables(db: Path) -> dict[str, list[dict[str, str]]]:
    with Store(db) as store:
        recs = store.results()
    return {k: list(csv.DictReader(io.StringIO(text)))
            for k, text in export.csv_by_kind(recs).items()}


def test_every_kind_is_exported_with_its_own_columns(every_kind):
    tables = _tables(every_kind)
    assert set(tables) == set(RECORD_TYPES)
    for kind, rows in tables.items():
        assert list(rows[0]) == [c.name for c in export.columns(kind)]
        assert all(r["kind"] == kind for r in rows)
    # a column that does not apply to a kind does not exist in its table
    assert "busbw_gbps" not in tables["throughput"][0] and "model" not in tables["comm"][0]
    assert "gpu_uuid" not in tables["net"][0]


def test_every_column_of_every_kind_is_filled(every_kind):
    """No empty column: identity and config columns on every row, result and environment
    columns on at least one row of the kind (a failure has no figures), error columns on every
    failed row and on no ok row."""
    with Store(every_kind) as store:
        recs = {r.id: r for r in store.results()}
    for kind, rows in _tables(every_kind).items():
        for col in export.columns(kind):
            name, group = col.name, col.group
            values = [r[name] for r in rows]
            if group in ("identity", "config"):
                for row in rows:  # a column of some rows only (a matmul's shape) is empty elsewhere
                    assert bool(row[name]) == col.applies(recs[row["id"]]), \
                        f"{kind}.{name} on {row['id']}"
                assert any(values), f"{kind}.{name} is empty on every row"
            elif group in ("result", "env"):
                assert any(values), f"{kind}.{name} is empty on every row"
            else:
                for r in rows:
                    assert bool(r[name]) == (r["status"] != "ok") or name == "error", \
                        f"{kind}.{name} on a {r['status']} row"


def test_csv_values_are_the_records_figures(every_kind):
    with Store(every_kind) as store:
        recs = {r.id: r for r in store.results()}
    rows = _tables(every_kind)
    for row in rows["comm"]:
        r = recs[row["id"]]
        assert float(row["busbw_gbps"]) == pytest.approx(r.busbw() / 1e9)
        assert int(row["bytes"]) == r.config.size_bytes and int(row["ranks"]) == r.config.ranks
    for row in rows["scaling"]:
        r = recs[row["id"]]
        if r.ok:
            assert float(row["samples_per_s"]) == pytest.approx(r.summary().throughput)
            assert int(row["gpus"]) == r.config.gpus and row["strategy"] == r.config.strategy
            assert row["gpu_uuid"].split()[0] == r.env["gpus"][0]["uuid"]
    for row in rows["train"]:
        r = recs[row["id"]]
        assert row["time_to_train_s"] == ("" if r.time_to_train_s is None
                                          else str(r.time_to_train_s))


def test_pandas_reads_every_table_without_an_empty_config_column(every_kind, tmp_path):
    pd = pytest.importorskip("pandas")
    for kind, text in export.csv_by_kind(Store(every_kind).results()).items():
        df = pd.read_csv(io.StringIO(text))
        config = [c.name for c in export.columns(kind) if c.group in ("identity", "config")]
        assert not df[config].isna().all().any(), kind


def test_json_carries_kind_schema_version_and_figures(every_kind):
    with Store(every_kind) as store:
        docs = json.loads(export.to_json(store.results()))
    assert {d["kind"] for d in docs} == set(RECORD_TYPES)
    for d in docs:
        assert d["export_version"] == export.EXPORT_VERSION and d["schema_version"] >= 1
        assert set(d["figures"]) == {c.name for c in export.columns(d["kind"])
                                     if c.group == "result"}


def test_schema_page_documents_every_column():
    page = (ROOT / "docs" / "schema.md").read_text()
    assert export.schema_markdown() in page, \
        "docs/schema.md is out of date: put export.schema_markdown() between its generated marks"
    assert f"export_version` is {export.EXPORT_VERSION}" in page


def _dlbench(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return run_cli(*args, cwd=cwd, env={"PATH": "/usr/bin:/bin"}, timeout=120)


def test_results_export_writes_a_file_per_kind_and_picks_one_with_kind(every_kind, tmp_path):
    p = _dlbench("results", "export", "--db", str(every_kind), "--format", "csv", "-o",
                 str(tmp_path / "all.csv"), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert sorted(f.name for f in tmp_path.glob("all-*.csv")) == sorted(
        f"all-{k}.csv" for k in RECORD_TYPES)
    p = _dlbench("results", "export", "--db", str(every_kind), "--format", "csv", "--kind",
                 "train", cwd=tmp_path)
    assert p.returncode == 0 and p.stdout.splitlines()[0].split(",") == [
        c.name for c in export.columns("train")]
    p = _dlbench("results", "export", "--db", str(every_kind), "--format", "csv", cwd=tmp_path)
    assert p.returncode == 2 and "--kind" in p.stderr and len(p.stderr.splitlines()) == 1

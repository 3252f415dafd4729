"""The record envelope, the kind registry, and stores written before records had one home."""

from __future__ import annotations

import math
import shutil
import sqlite3
from dataclasses import FrozenInstanceError, fields
from pathlib import Path

import pytest

from dlbench.records import RECORD_TYPES, ThroughputConfig, ThroughputRecord, record_from_dict
from dlbench.records.base import Record
from dlbench.store import Store

# Written by dlbench before the records package existed (every kind, ok and error rows, a
# record measured with --method seed002): a store users already have must keep reading.
OLD_STORE = Path(__file__).parent / "data" / "store-before-records.db"
ENVELOPE = ("config", "env", "status", "error_type", "error", "run_id", "id", "created_at",
            "schema_version")


@pytest.fixture()
def old_store(tmp_path):
    path = tmp_path / "old.db"
    shutil.copy(OLD_STORE, path)  # a copy: reading must not need to write, but never risk it
    with Store(path) as store:
        yield store, sqlite3.connect(path)


def test_every_kind_shares_the_envelope():
    assert set(RECORD_TYPES) == {"throughput", "scaling", "comm", "maxbatch", "peak", "net", "train",
                                 "generate", "serve"}
    for kind, cls in RECORD_TYPES.items():
        assert cls.kind == kind and issubclass(cls, Record)
        names = [f.name for f in fields(cls)]
        assert set(ENVELOPE) <= set(names), kind


def test_records_are_frozen_and_keyword_only():
    cfg = ThroughputConfig(model="test_mlp", batch_size=4, device="cpu")
    rec = ThroughputRecord(config=cfg, env={}, step_times_s=(0.1, 0.2), samples_per_step=4)
    with pytest.raises(FrozenInstanceError):
        rec.status = "error"
    with pytest.raises(TypeError):
        ThroughputRecord(cfg, {})


def test_unknown_kind_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown record kind 'bogus'"):
        record_from_dict({"kind": "bogus", "config": {}})


def test_a_store_written_before_reads_every_kind(old_store):
    store, db = old_store
    records = store.results()
    # every kind there was when it was written (generate and serve came later)
    assert {r.kind for r in records} == set(RECORD_TYPES) - {"generate", "serve"}
    assert {r.status for r in records} == {"ok", "error"}
    rows = {row[0]: {"config_key": row[1], "value": row[2]}
            for row in db.execute("SELECT id, config_key, value FROM results")}
    for r in records:
        row = rows[r.id]
        # Identity and headline figure exactly as the old writer computed them: --resume and
        # comparisons still match, the index column still agrees with the record.
        assert r.config.key() == row["config_key"], r.kind
        if row["value"] is None:
            assert r.headline() is None
        else:
            assert math.isclose(r.headline(), row["value"], rel_tol=1e-12), r.kind
        # and a round trip through today's writer changes nothing
        again = record_from_dict(r.to_dict())
        assert again == r, r.kind


def test_an_old_method_name_reads_under_its_new_name_with_its_old_key(old_store):
    store, db = old_store
    [fb] = [r for r in store.results(kind="throughput") if r.config.method != "standard"]
    assert fb.config.method == "fwd-bwd"
    assert '"method": "seed002"' in db.execute(
        "SELECT record_json FROM results WHERE id=?", (fb.id,)).fetchone()[0]
    fresh = ThroughputConfig.from_dict({**fb.config.to_dict(), "method": "fwd-bwd"})
    assert fresh.key() == fb.config.key()


def test_a_scaling_record_from_its_ranks_reports():
    """The job's record from its ranks' JSON: raw times in rank order whatever order the
    reports came in, the slowest rank's clocks, rank 0's memory and loss; a rank's own
    bookkeeping (ok, time) is not part of the measurement."""
    from dlbench.records.scaling import ScalingConfig, ScalingRank, ScalingRecord
    from dlbench.records.throughput import ThroughputConfig

    def report(rank, steps, first, loss):
        return {"rank": rank, "host": f"h{rank}", "ok": True, "time": 1.0 + rank,
                "step_times_s": steps, "warmup_times_s": [0.5], "samples_per_step": 4,
                "first_step_s": first, "build_s": 2.0 + rank, "window_wall_s": sum(steps),
                "stop_reason": "converged", "unit": "tokens", "units_per_sample": 128,
                "flops_per_sample": 10 if rank == 0 else None, "memory": {"peak": rank},
                "final_loss": loss, "telemetry": None,
                "comm_profile": {"steps": 3} if rank == 1 else None}
    cfg = ScalingConfig(base=ThroughputConfig(model="tiny_mlp", batch_size=4, device="cpu"),
                        gpus=2)
    ranks = [ScalingRank.from_dict(report(1, [0.2, 0.3], 9.0, 2.0)),
             ScalingRank.from_dict(report(0, [0.1, 0.1], 7.0, 1.0))]
    rec = ScalingRecord.from_ranks(cfg, {}, ranks, {"X": "1"}, "gloo")
    assert rec.rank_step_times_s == ((0.1, 0.1), (0.2, 0.3))
    assert rec.rank_hosts == ("h0", "h1")
    assert (rec.first_step_s, rec.build_s, rec.window_wall_s) == (9.0, 3.0, 0.5)
    assert (rec.memory, rec.final_loss, rec.flops_per_sample) == ({"peak": 0}, 1.0, 10)
    assert rec.rank_comm_profile == ({"steps": 3},)
    assert rec.units_per_sample == 128 and rec.launch_env == {"X": "1"} and rec.ok

"""What judges a pair in ``dlbench compare``, on records with known step times: both sides
``--repeat`` groups -> Welch's t across processes; one process a side -> the interval widened by
a run-to-run spread (stored, or a group side's own); one process a side with none known ->
inconclusive, never a regression, exit 0. And the shipped spread is derived, not typed."""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import random
import shutil
import statistics
from pathlib import Path

import pytest

from fakes.cli import run as run_cli

from dlbench.measure.stats import t_quantile
from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
from dlbench.report import compare as cmp
from dlbench.store import Store
from dlbench.env import env_key

ROOT = Path(__file__).resolve().parents[1]
CPU = {"accelerator": "cpu", "cpu_model": "Test CPU", "cpu_logical_cores": 2,
       "packages": {"torch": "2.9.0"}, "hostname": "bench-host"}
#: A stored spread for the test CPU: one process's figure varies by 5% (sd) across processes.
SPREAD = {"throughput": {"Test CPU": {"rel_sd": 0.05, "df": 20, "configs": [{}]}}}


def record(mean_s: float = 0.1, run_id: str = "run-a", n: int = 200, rel: float = 0.01,
           **kw) -> ThroughputRecord:
    """A resnet50 b32 window of ``n`` steps, alternately ``rel`` above and below ``mean_s``:
    its figure is exactly 32 / mean_s images/s."""
    times = tuple(mean_s * (1 + rel * (-1) ** i) for i in range(n))
    return ThroughputRecord(config=ThroughputConfig(model="resnet50", batch_size=32,
                                                    device="cpu"),
                            env=CPU, step_times_s=times, samples_per_step=32, unit="images",
                            run_id=run_id, **kw)


def group(means: tuple[float, ...], gid: str, run_id: str = "run-a") -> list[ThroughputRecord]:
    """A --repeat group: one process per mean step time."""
    return [record(m, run_id).in_group(gid, i, len(means)) for i, m in enumerate(means)]


# -- one process a side, against the stored spread ----------------------------------------------
def test_the_run_to_run_term_is_t_times_sd_per_one_process_side():
    s = cmp.RunSpread(0.05, 20, "test")
    t = t_quantile(0.975, 20)                       # 2.0859634...
    assert t == pytest.approx(2.0859634, rel=1e-6)
    assert s.halfwidth(1) == pytest.approx(t * 0.05, rel=1e-12)
    assert s.halfwidth(2) == pytest.approx(t * 0.05 * math.sqrt(2), rel=1e-12)  # 0.14750


def test_identical_samples_with_a_stored_spread_are_no_change():
    p = cmp.compare([record()], [record(run_id="run-b")], spreads=SPREAD).pairs[0]
    assert p.basis == cmp.RUN_TO_RUN and p.ratio == pytest.approx(1.0)
    assert not p.significant and not p.regression and cmp._verdict(p) == "no change"
    assert p.rel_runs == pytest.approx(t_quantile(0.975, 20) * 0.05 * math.sqrt(2))
    assert cmp.judged_by(p) == "one process a side + run-to-run +-14.75%"


def test_a_difference_inside_the_run_to_run_spread_is_no_regression():
    """B 10% slower: far outside the two windows' intervals (Welch's p ~ 0, the old verdict a
    regression) but inside what two processes of identical code differ by (sd 5%)."""
    a, b = record(0.1), record(0.1 / 0.9, run_id="run-b")
    p = cmp.compare([a], [b], spreads=SPREAD).pairs[0]
    assert p.ratio == pytest.approx(0.9) and p.p < 1e-10
    lo, hi = cmp.ratio_interval(0.9, a.summary().rel_halfwidth, b.summary().rel_halfwidth,
                                0.0, t_quantile(0.975, 20) * 0.05 * math.sqrt(2))
    assert (p.ratio_low, p.ratio_high) == pytest.approx((lo, hi))
    assert lo == pytest.approx(0.9 * math.exp(-math.log1p(0.1475)), rel=1e-3)  # 0.784
    assert p.ratio_low < 1.0 < p.ratio_high and not p.regression


def test_a_large_slowdown_with_a_stored_spread_is_a_regression():
    p = cmp.compare([record(0.1)], [record(0.2, run_id="run-b")], spreads=SPREAD).pairs[0]
    assert p.ratio == pytest.approx(0.5) and p.ratio_high < 0.58
    assert p.basis == cmp.RUN_TO_RUN and p.regression and cmp._verdict(p) == "REGRESSION"


# -- one process a side, no spread known ---------------------------------------------------------
def test_one_process_a_side_with_no_spread_known_is_inconclusive():
    c = cmp.compare([record(0.1)], [record(0.2, run_id="run-b")], spreads={})
    p = c.pairs[0]
    assert p.inconclusive and not p.significant and not p.regression and not p.improvement
    assert p.test == "none" and math.isnan(p.p) and c.regressions == ()
    assert c.inconclusive == (p,) and cmp._verdict(p) == "inconclusive (one process per side)"
    assert cmp.to_dict(c)["inconclusive"] == 1 and cmp.to_dict(c)["pairs"][0]["basis"] == \
        "inconclusive"


def test_the_shipped_spreads_know_no_test_cpu():
    """The default table: no spread for the test CPU (nor for any CPU: no committed store holds
    a CPU repeat group), so one CPU process a side is inconclusive."""
    assert cmp.stored_spread("throughput", "Test CPU") is None
    assert not any(k.startswith(("AMD", "Intel")) for k in cmp.run_spreads()["throughput"])
    assert cmp.compare([record()], [record(0.2, run_id="run-b")]).pairs[0].inconclusive


# -- across processes, and a group against one process -------------------------------------------
def test_repeat_groups_on_both_sides_are_tested_across_processes():
    a = group((0.100, 0.101, 0.099), "ga")
    b = group((0.125, 0.126, 0.124), "gb", "run-b")
    p = cmp.compare(a, b, spreads={}).pairs[0]  # no stored spread needed
    figures_a = [32 / m for m in (0.100, 0.101, 0.099)]
    figures_b = [32 / m for m in (0.125, 0.126, 0.124)]
    assert p.basis == cmp.ACROSS_PROCESSES and p.processes == (3, 3) and p.rel_runs == 0.0
    assert p.p == pytest.approx(cmp.welch_t(figures_a, figures_b).p, rel=1e-9)
    assert p.ratio == pytest.approx(statistics.mean(figures_b) / statistics.mean(figures_a))
    assert p.regression
    same = cmp.compare(a, group((0.1005, 0.0995, 0.100), "gc", "run-b"), spreads={}).pairs[0]
    assert same.basis == cmp.ACROSS_PROCESSES and not same.regression


def test_one_process_against_a_group_uses_the_groups_spread():
    a = group((0.100, 0.101, 0.099), "ga")
    p = cmp.compare(a, [record(0.1, run_id="run-b")], spreads={}).pairs[0]
    figures = [32 / m for m in (0.100, 0.101, 0.099)]
    sd = statistics.stdev(figures) / statistics.mean(figures)
    assert p.basis == cmp.RUN_TO_RUN and p.processes == (3, 1)
    assert p.run_spread.df == 2 and p.run_spread.rel_sd == pytest.approx(sd, rel=1e-9)
    assert p.rel_runs == pytest.approx(t_quantile(0.975, 2) * sd)  # one one-process side
    assert p.test == "interval" and not p.regression  # figures against times: no Welch
    assert "A's 3 processes" in p.run_spread.source
    assert cmp.judged_by(p) == f"processes 3 | 1 + run-to-run +-{p.rel_runs:.2%}"


# -- deriving the stored spread ------------------------------------------------------------------
def _noisy(mean_s: float, seed: int, cv: float, n: int) -> tuple[float, ...]:
    rng = random.Random(seed)
    return tuple(mean_s * (1 + rng.gauss(0.0, cv)) for _ in range(n))


def test_derive_pools_the_groups_of_a_config_and_takes_the_widest_config():
    def proc(m, gid, i, cfg=ThroughputConfig(model="resnet50", batch_size=32, device="cpu"),
             cv=0.002, n=200):
        return ThroughputRecord(config=cfg, env=CPU, step_times_s=_noisy(m, i + 7 * len(gid),
                                                                         cv, n),
                                samples_per_step=32, unit="images").in_group(gid, i, 4)
    g1 = [proc(m, "g1", i) for i, m in enumerate((0.100, 0.102, 0.098))]
    g2 = [proc(m, "g2", i) for i, m in enumerate((0.100, 0.101, 0.099, 0.1005))]
    noisy = proc(0.2, "g2", 9, cv=0.5, n=20)     # its own interval is far over 1%: left out
    vgg = ThroughputConfig(model="vgg16", batch_size=32, device="cpu")
    g3 = [proc(m, "g3", i, vgg) for i, m in enumerate((0.100, 0.1001))]
    assert noisy.summary().rel_halfwidth > 0.01
    out = cmp.derive_run_spreads(g1 + g2 + [noisy] + g3)["throughput"]["Test CPU"]

    def rsd(rs):
        f = [r.summary().throughput for r in rs]
        return statistics.stdev(f) / statistics.mean(f)
    pooled = math.sqrt((2 * rsd(g1) ** 2 + 3 * rsd(g2) ** 2) / 5)
    by = {c["config"]: c for c in out["configs"]}
    assert by["resnet50 b32 fp32 train"]["rel_sd"] == pytest.approx(pooled, rel=1e-12)
    assert by["resnet50 b32 fp32 train"]["df"] == 5
    assert noisy.id not in by["resnet50 b32 fp32 train"]["groups"][1]["records"]
    assert out["rel_sd"] == pytest.approx(pooled) and out["df"] == 5  # the widest config
    assert by["vgg16 b32 fp32 train"]["df"] == 1


def _plain(gz: Path, tmp: Path) -> Path:
    out = tmp / (gz.parent.name + "-" + gz.stem)
    with gzip.open(gz) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


def test_shipped_run_spread_is_what_the_committed_stores_give(tmp_path):
    shipped = cmp.run_spreads()
    records = []
    for src in shipped["sources"]:
        with Store(_plain(ROOT / src, tmp_path)) as s:
            records += s.results(kind="throughput") + s.results(kind="generate")
    derived = cmp.derive_run_spreads(records)
    assert {k: v for k, v in shipped.items() if k not in ("about", "sources")} == derived
    h100 = shipped["throughput"]["NVIDIA H100 80GB HBM3"]
    assert 0.0005 < h100["rel_sd"] < 0.005 and h100["df"] >= 20  # about 0.13%


def test_device_model_is_the_gpu_or_else_the_cpu():
    assert cmp.device_model(record()) == "Test CPU"
    gpu = dict(CPU, accelerator="cuda", gpus=[{"name": "NVIDIA H100 80GB HBM3"}])
    r = dataclasses.replace(record(), env=gpu,
                            config=dataclasses.replace(record().config, device="auto"))
    assert cmp.device_model(r) == "NVIDIA H100 80GB HBM3"
    assert cmp.device_model(dataclasses.replace(r, config=record().config)) == "Test CPU"


# -- the command ---------------------------------------------------------------------------------
def _fill(db: Path, run_id: str, recs, tag: str) -> None:
    with Store(db) as s:
        s.start_run(run_id, "dlbench throughput -m resnet50", CPU, env_key(CPU), "CPU", tag=tag)
        for r in recs:
            s.add(dataclasses.replace(r, run_id=run_id), env_key(CPU))
        s.finish_run(run_id, "done")


def _cli(*args):
    return run_cli(*args, timeout=120)


def test_cli_inconclusive_exits_0_with_advice_and_groups_gate_with_5(tmp_path):
    db = tmp_path / "c.db"
    _fill(db, "aaaa1111", [record(0.1)], "one-a")
    _fill(db, "bbbb2222", [record(0.125)], "one-b")
    _fill(db, "cccc3333", group((0.100, 0.101, 0.099), "ga"), "rep-a")
    _fill(db, "dddd4444", group((0.125, 0.126, 0.124), "gb"), "rep-b")
    p = _cli("compare", "tag:one-a", "tag:one-b", "--db", str(db))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "inconclusive" in p.stdout and "judged by" in p.stdout
    assert "--repeat 3" in p.stderr and "Not counted as a regression" in p.stderr
    p = _cli("compare", "tag:one-a", "tag:one-b", "--db", str(db), "--json")
    d = json.loads(p.stdout)
    assert p.returncode == 0 and d["inconclusive"] == 1 and d["regressions"] == 0
    p = _cli("compare", "tag:one-a", "tag:one-b", "--db", str(db), "-q")
    assert p.returncode == 0 and "no regression; 1 inconclusive" in p.stdout
    p = _cli("compare", "tag:rep-a", "tag:rep-b", "--db", str(db))
    assert p.returncode == 5, p.stdout + p.stderr
    assert "across processes (3 | 3)" in p.stdout and "REGRESSION" in p.stdout

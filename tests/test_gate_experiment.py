"""The regression-gate experiment (``benchmarks/gate.py``): the figures the compare guide quotes
are those of the committed run (``results/pt2.14-cpu/gate-cpu.json``), recomputed from its
trials; and the experiment's logic on known numbers: the Wilson interval, the injected wait,
and how one trial's sides are judged."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest
import torch
from torch import nn

from fakes import cli

from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
from dlbench.report import compare as cmp

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "results" / "pt2.14-cpu" / "gate-cpu.json"
GUIDE = ROOT / "docs" / "reports.md"


@pytest.fixture(scope="module")
def gate():
    return cli.script("gate")


# -- the published figures ------------------------------------------------------------------------
def test_the_guide_quotes_the_committed_run(gate):
    run = json.loads(RUN.read_text())
    s = gate.summarize(run["trials"])  # from the trials, not from the stored summary
    assert s == run["summary"]
    text = GUIDE.read_text()
    section = text[text.index("<a id=\"gate\"></a>"):]
    section = section[:section.index("\n## ")] if "\n## " in section else section
    for how in ("processes", "one_process", "former_one_process"):
        for what in ("false_alarms", "detections"):
            assert s[how][what]["text"] in section, (how, what, s[how][what]["text"])
    assert s["one_process"]["inconclusive_identical"]["text"] in section
    assert run["command"] in section
    n = len(run["trials"])
    assert re.search(rf"\b{n} trials\b", section)
    assert f"{s['mean_ratio']['slowed']:.3f}" in section
    assert run["config"]["threshold"] == 0.02 and run["config"]["repeat"] == 3


def test_the_committed_run_judged_real_processes():
    run = json.loads(RUN.read_text())
    for t in run["trials"]:
        assert sorted(t["order"]) == ["A", "A2", "S"]
        for side in t["sides"].values():
            assert len(side["records"]) == run["config"]["repeat"] == len(side["figures"])
        assert t["identical"]["processes"]["basis"] == "across processes"
        assert t["identical"]["processes"]["processes"] == [3, 3]
        assert t["identical"]["one_process"]["processes"] == [1, 1]
        # the verdicts across processes follow from the stored process figures today
        for which, side in (("identical", "A2"), ("slowed", "S")):
            a, b = t["sides"]["A"]["figures"], t["sides"][side]["figures"]
            pair = t[which]["processes"]
            w = cmp.welch_t(a, b)
            assert pair["p"] == pytest.approx(w.p) and pair["ratio"] == pytest.approx(
                statistics.fmean(b) / statistics.fmean(a))
            cfg = run["config"]
            assert pair["regression"] == (w.p < cfg["alpha"] and
                                          pair["ratio"] < 1 - cfg["threshold"])
    assert run["environment"]["accelerator"] == "cpu"


GPU_RUN = ROOT / "results" / "pt2.11-cu130-2x-h100" / "gate-gpu.json"


def _gpu_section() -> str:
    text = " ".join(GUIDE.read_text().split())
    return text[text.index("**On a GPU: the first run measured Python"):].split("<a id=")[0]


def test_the_guide_quotes_the_gpu_run_and_todays_verdicts(gate, tmp_path):
    """The GPU run's rates from its trials, its steps and windows from its store, and the
    one-process pairs re-judged from the stored records by today's rule (a window wider than
    the stored spread's windows is no verdict)."""
    import gzip
    import shutil

    from dlbench.store import Store
    run = json.loads(GPU_RUN.read_text())
    s = gate.summarize(run["trials"])
    assert s == run["summary"]
    section = _gpu_section()
    for how in ("processes", "one_process", "former_one_process"):
        for what in ("false_alarms", "detections"):
            assert s[how][what]["text"] in section, (how, what)
    assert f"mean B/A across processes was {s['mean_ratio']['identical']:.3f} for identical " \
           f"code and {s['mean_ratio']['slowed']:.3f}" in section
    cfg = run["config"]
    assert (cfg["device"], cfg["batch"], cfg["trials"], len(run["trials"])) == ("cuda", 256, 7, 4)
    assert "32-pixel images at batch 256" in section and "after 4 of its 7 trials" in section
    walls = [sum(t["wall_s"].values()) for t in run["trials"]]
    assert f"({min(walls):.0f}-{max(walls):.0f} s a trial)" in section
    apart = max(max(v["figures"]) / min(v["figures"]) for t in run["trials"]
                for v in t["sides"].values())
    assert f"up to {apart - 1:.1%} apart" in section
    db = tmp_path / "gate.db"
    with gzip.open(GPU_RUN.with_name("gate-gpu.db.gz"), "rb") as src, open(db, "wb") as dst:
        shutil.copyfileobj(src, dst)
    with Store(db) as store:
        ids = {i for t in run["trials"] for v in t["sides"].values() for i in v["records"]}
        ok = [r for r in store.results() if r.id in ids]
        assert len(ok) == len(ids) == 36 and all(r.ok for r in ok)
        medians = [statistics.median(r.step_times_s) * 1e3 for r in ok]
        widths = [r.summary().rel_halfwidth for r in ok]
        assert f"A step took {min(medians):.1f}-{max(medians):.1f} ms" in section
        assert f"Windows were ±{min(widths):.1%}-{max(widths):.1%} wide" in section
        assert {r.env["gpus"][0]["name"] for r in ok} == {"NVIDIA H100 80GB HBM3"}
        rejudged = []
        for i in range(len(run["trials"])):
            recs = {side: [r for r in store.results(tag=f"gate-{i}-{side}") if r.ok]
                    for side in gate.SIDES}
            rejudged += [gate.judge(recs["A"], recs[b], cfg["threshold"], cfg["alpha"])
                         ["one_process"] for b in ("A2", "S")]
    assert all(gate.outcome(p) == "inconclusive" for p in rejudged) and len(rejudged) == 8
    assert "no verdict in 4 of 4 trials, both comparisons, and no false alarm" in section
    spread = cmp.stored_spread("throughput", "NVIDIA H100 80GB HBM3")
    assert f"the H100's stored spread, sd {spread.rel_sd:.2%}" in section
    assert cmp.SPREAD_WINDOW_MAX_REL_HALFWIDTH == 0.01 and "wider than 1%" in section


GPU_128 = ROOT / "results" / "pt2.11-cu130-2x-h100" / "gate-128"


def _gpu_128_section() -> str:
    text = " ".join(GUIDE.read_text().split())
    return text[text.index("**On a GPU at 128 pixels"):].split("<a id=")[0]


def _stores(run: dict, tmp_path: Path) -> dict:
    """Every record of the merged run's trials, read from each run's committed store."""
    import gzip
    import shutil

    from dlbench.store import Store
    records = {}
    for i, r in enumerate(run["runs"]):
        db = tmp_path / f"run{i}.db"
        committed = ROOT / r["file"].replace(".json", ".db.gz")
        with gzip.open(committed, "rb") as src, open(db, "wb") as dst:
            shutil.copyfileobj(src, dst)
        with Store(db) as store:
            records.update({rec.id: rec for rec in store.results()})
    return records


def test_the_guide_quotes_the_128_pixel_gpu_runs(gate, tmp_path):
    """The merged JSON is the six runs' JSON joined again; the rates, ratios and misses come from
    its trials; the steps, windows and cards from the six stores."""
    run = json.loads((GPU_128 / "gate-gpu.json").read_text())
    again = gate.merge([(r["file"], json.loads((ROOT / r["file"]).read_text()))
                        for r in run["runs"]])
    assert again == run
    s = gate.summarize(run["trials"])
    section = _gpu_128_section()
    for how in ("processes", "one_process", "former_one_process"):
        for what in ("false_alarms", "detections"):
            assert s[how][what]["text"] in section, (how, what)
    assert f"inconclusive in {s['one_process']['inconclusive_slowed']['text']} trials" in section
    assert s["one_process"]["inconclusive_identical"]["n"] == 15
    assert s["one_process"]["inconclusive_identical"]["k"] == 0
    ratio = s["mean_ratio"]
    assert (f"{ratio['identical']:.4f} for identical code and {ratio['slowed']:.4f} for the "
            f"slowed model: the injected 5% measured as {1 - ratio['slowed']:.1%}") in section
    cfg = run["config"]
    assert (cfg["device"], cfg["input_size"], cfg["batch"], cfg["repeat"]) == ("cuda", 128, 256, 3)
    assert len(run["runs"]) == 6 and len(run["trials"]) == 15 and "15 trials on six cards" in section
    assert all("--device cuda --trials 40" in r["command"] for r in run["runs"])
    walls = [sum(t["wall_s"].values()) for t in run["trials"]]
    assert f"({len(run['runs'])} runs, {min(walls):.0f}-{max(walls):.0f} s a trial)" in section
    records = _stores(run, tmp_path)
    by_side: dict[str, list] = {side: [] for side in gate.SIDES}
    for t in run["trials"]:
        for side, v in t["sides"].items():
            by_side[side] += [records[i] for i in v["records"]]
    every = [r for rs in by_side.values() for r in rs]
    assert len(every) == 135 and all(r.ok for r in every)
    assert len({r.env["gpus"][0]["uuid"] for r in every}) == 6
    medians = [statistics.median(r.step_times_s) * 1e3 for r in every]
    assert f"A step now took {min(medians):.1f}-{max(medians):.1f} ms" in section
    same = [r.summary().rel_halfwidth for r in by_side["A"] + by_side["A2"]]
    slowed = [r.summary().rel_halfwidth for r in by_side["S"]]
    assert (f"A and A2 were ±{min(same):.3%}-{max(same):.2%} wide, the slowed side's "
            f"±{min(slowed):.2%}-{max(slowed):.2%}") in section
    # the misses: each its run's first trial; the slowed side's first process short of the others
    missed = [t for t in run["trials"] if t["slowed"]["processes"]["verdict"] != "REGRESSION"]
    assert len(missed) == 3 and "The three it missed are each the first trial of its run" in section
    assert all(t is next(u for u in run["trials"] if u["run"] == t["run"]) for t in missed)
    first, others, widths = [], [], []
    for t in missed:
        a = statistics.mean(t["sides"]["A"]["figures"])
        below = [1 - f / a for f in t["sides"]["S"]["figures"]]
        first.append(below[0])
        others += below[1:]
        widths.append(t["sides"]["S"]["within_rel_halfwidth"][0])
        assert max(below[1:]) > 3 * below[0]
    assert f"only {min(first):.1%} to {max(first):.1%} below A's mean" in section
    assert f"its other two {min(others):.1%} to {max(others):.1%}" in section
    assert f"(windows of ±{min(widths):.2%} to ±{max(widths):.2%})" in section
    assert all(gate.outcome(t["slowed"]["one_process"]) == "pass" for t in missed)


def test_merge_refuses_runs_of_other_settings(gate, tmp_path):
    one = json.loads((GPU_128 / "first-gpu0.json").read_text())
    other = json.loads(json.dumps(one))
    other["config"]["input_size"] = 32
    with pytest.raises(ValueError, match=r"b\.json was run with other settings \(input_size\)"):
        gate.merge([("a.json", one), ("b.json", other)])
    (tmp_path / "a.json").write_text(json.dumps(one))
    (tmp_path / "b.json").write_text(json.dumps(other))
    assert gate.main(["--merge", str(tmp_path / "a.json"), str(tmp_path / "b.json"),
                      "--out", str(tmp_path / "m.json")]) == 2
    assert not (tmp_path / "m.json").exists()
    joined = gate.merge([("a.json", one), ("c.json", one)])
    assert [t["run"] for t in joined["trials"]] == [0] * 3 + [1] * 3
    assert joined["summary"]["processes"]["false_alarms"]["n"] == 6


# -- the logic on known numbers -------------------------------------------------------------------
def test_wilson_interval_known_values(gate):
    lo, hi = gate.wilson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.27753, abs=1e-5)
    lo, hi = gate.wilson(5, 10)
    assert (lo, hi) == pytest.approx((0.23659, 0.76341), abs=1e-5)
    assert gate.wilson(18, 18)[1] == 1.0 and gate.wilson(18, 18)[0] == pytest.approx(0.82412,
                                                                                       abs=1e-5)
    assert gate.rate_text(1, 20) == "1 of 20 (5.0%, 95% Wilson 0.9%-23.6%)"


class _Clock:
    """A fake clock: the inner model's forward and the wait advance it."""

    def __init__(self) -> None:
        self.t = 0.0


def test_slowed_waits_the_fraction_of_the_steps_own_time(gate):
    clock = _Clock()
    waits = []

    def wait(seconds, x):
        waits.append(seconds)
        clock.t += seconds

    class Step(nn.Module):  # every step's own work: 10 ms
        def forward(self, x):
            clock.t += 0.010
            return x
    m = gate.Slowed(Step(), 0.05, clock=lambda: clock.t, wait=wait)
    for _ in range(20):
        m(torch.zeros(1))
    assert waits == pytest.approx([0.0005] * 19)      # 5% of 10 ms, from the second step on
    unslowed = gate.Slowed(Step(), 0.0, clock=lambda: clock.t, wait=wait)
    for _ in range(5):
        unslowed(torch.zeros(1))
    assert len(waits) == 19


def test_the_models_slowdown_comes_from_the_environment(gate, monkeypatch):
    monkeypatch.setenv(gate.SLOWDOWN_ENV, "0.05")
    model, spec = gate.build()
    assert model.fraction == 0.05 and spec.input_size == 32
    monkeypatch.delenv(gate.SLOWDOWN_ENV)
    assert gate.build()[0].fraction == 0.0
    assert model(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


def _side(means, gid, n=200):
    cfg = ThroughputConfig(model="benchmarks/gate.py:build", batch_size=32, device="cpu")
    env = {"accelerator": "cpu", "cpu_model": "Test CPU", "packages": {"torch": "2.9.0"}}
    return [ThroughputRecord(config=cfg, env=env, samples_per_step=32, unit="images",
                             step_times_s=tuple(m * (1 + 0.01 * (-1) ** i) for i in range(n)))
            .in_group(gid, i, len(means)) for i, m in enumerate(means)]


def test_a_trial_is_judged_across_processes_and_one_process_a_side(gate):
    a = _side((0.0100, 0.0101, 0.0099), "a")
    same = gate.judge(a, _side((0.01005, 0.00995, 0.0100), "b"), 0.02, 0.05)
    assert gate.outcome(same["processes"]) == "pass"
    assert same["processes"]["basis"] == "across processes"
    # one process a side: no spread is stored for the test CPU, so no verdict; the former test
    # (Welch's t on two windows) calls a 0.5% difference of two quiet windows significant
    assert gate.outcome(same["one_process"]) == "inconclusive"
    assert same["one_process"]["processes"] == [1, 1]
    slow = gate.judge(a, _side((0.0105, 0.01061, 0.0104), "c"), 0.02, 0.05)
    assert gate.outcome(slow["processes"]) == "regression"
    assert slow["processes"]["ratio"] == pytest.approx(1 / 1.05, rel=2e-3)
    assert slow["former_one_process"]["regression"]  # 0.952x with p ~ 0
    # with a stored spread for the device the first processes are judged against it
    spreads = {"throughput": {"Test CPU": {"rel_sd": 0.001, "df": 20, "configs": [{}]}}}
    assert gate.outcome(gate.judge(a, _side((0.0105,) * 3, "d"), 0.02, 0.05,
                                   spreads)["one_process"]) == "regression"


def test_summary_counts_and_intervals(gate):
    def pair(regression, basis="across processes", ratio=1.0):
        return {"regression": regression, "basis": basis, "ratio": ratio}

    def trial(false_alarm, detected):
        return {"identical": {"processes": pair(false_alarm),
                              "one_process": pair(False, "inconclusive"),
                              "former_one_process": {"regression": True, "ratio": 0.9}},
                "slowed": {"processes": pair(detected, ratio=0.95),
                           "one_process": pair(False, "inconclusive"),
                           "former_one_process": {"regression": detected, "ratio": 0.9}}}
    s = gate.summarize([trial(False, True)] * 9 + [trial(True, False)])
    assert s["processes"]["false_alarms"]["k"] == 1 and s["processes"]["false_alarms"]["n"] == 10
    assert s["processes"]["detections"]["text"] == gate.rate_text(9, 10)
    assert s["one_process"]["inconclusive_identical"]["k"] == 10
    assert s["former_one_process"]["false_alarms"]["k"] == 10
    assert s["mean_ratio"]["slowed"] == pytest.approx(0.95)

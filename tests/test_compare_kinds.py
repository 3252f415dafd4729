"""``dlbench compare`` for every record kind, on real records: three processes a side against
themselves is no change, against copies whose raw samples are 25% slower a regression found
across processes (exit 5); one process a side is judged against the stored run-to-run spread
where one is known, else inconclusive (exit 0); nothing matched exits 6; two different H100
cards get the measured card-to-card spread."""

from __future__ import annotations

import dataclasses
import gzip
import json
import shutil
from pathlib import Path

import pytest

from fakes.cli import run as run_cli

from dlbench.records.base import new_id
from dlbench.report import cards
from dlbench.report import compare as cmp
from dlbench.store import Store

ROOT = Path(__file__).resolve().parents[1]
OLD_STORE = ROOT / "tests" / "data" / "store-before-records.db"


def _slower(r, f: float = 1.25):
    """The same measurement with every raw time ``f`` times longer (batches ``1/f`` for a
    largest-batch search): what a regression of the change under test looks like."""
    def scale(x):
        return tuple(scale(v) for v in x) if isinstance(x, tuple) else x * f
    kw = {"id": new_id(), "run_id": "b"}
    names = {f.name for f in dataclasses.fields(r)}
    for name in ("step_times_s", "rank_step_times_s", "rank_times_s", "times_s", "epoch_times_s"):
        if name in names and getattr(r, name):
            kw[name] = scale(getattr(r, name))
    if r.kind == "train" and r.time_to_train_s:
        kw["time_to_train_s"] = r.time_to_train_s * f
    if r.kind == "maxbatch":
        kw["best_batch"] = int(r.best_batch / 2)
        kw["first_oom_batch"] = int(r.best_batch / 2) + 1
    return dataclasses.replace(r, **kw)


def _plain(name: str, tmp: Path) -> Path:
    out = tmp / f"{name}.db"
    with gzip.open(ROOT / "results" / name / "dlbench.db.gz") as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """Every kind's ok records of the old store; net from the CPU campaign (the old store's net
    record is a short test fixture)."""
    with Store(OLD_STORE) as s:
        recs = [r for r in s.results() if r.ok and r.kind != "net"]
    with Store(_plain("pt2.14-cpu", tmp_path_factory.mktemp("cpu"))) as s:
        return recs + [r for r in s.results(kind="net") if r.ok]


def _group(r, f: float, gid: str, spread=(1.0, 1.01, 0.99)) -> list:
    """Three fresh processes of ``r``'s config (a --repeat group), ``f`` times slower, their
    figures ``spread`` apart."""
    return [_slower(r, f * s).in_group(gid, i, len(spread)) for i, s in enumerate(spread)]


def _first(real, kind):
    a = [r for r in real if r.kind == kind]
    if kind == "net":  # the steadiest link: a 25% slowdown of a 60%-cv CPU run is not a signal
        a = sorted(a, key=lambda r: r.summary().rel_halfwidth)
    assert a, kind
    return a[0]


@pytest.mark.parametrize("kind", ["throughput", "scaling", "comm", "peak", "net"])
def test_every_kind_gates_a_regression_across_processes_and_passes_itself(real, kind):
    r = _first(real, kind)
    a = _group(r, 1.0, "ga")
    same = cmp.compare(a, _group(r, 1.0, "gb", (1.005, 0.995, 1.0)))
    assert len(same.pairs) == 1 and not same.regressions, kind
    p = cmp.compare(a, _group(r, 1.25, "gc")).pairs[0]
    assert p.kind == kind and p.ratio < 0.85 and p.regression, (kind, p)
    assert p.test == "welch" and p.basis == cmp.ACROSS_PROCESSES and p.processes == (3, 3)


def test_the_largest_batch_gates_on_its_brackets(real):
    a = [_first(real, "maxbatch")]
    assert not cmp.compare(a, [dataclasses.replace(a[0], id=new_id())]).regressions
    p = cmp.compare(a, [_slower(a[0])]).pairs[0]
    assert p.regression and p.test == "bracket" and p.basis == "brackets"


@pytest.mark.parametrize("kind", ["scaling", "comm", "peak", "net"])
def test_one_process_a_side_without_a_run_to_run_spread_is_inconclusive(real, kind):
    """No run-to-run spread is stored for these kinds: a 25% difference between two processes
    is no verdict (the audit saw identical code differ by 17% between two processes)."""
    r = _first(real, kind)
    p = cmp.compare([r], [_slower(r)]).pairs[0]
    assert p.inconclusive and not p.regression and not p.significant, (kind, p)
    assert p.test == "none" and cmp._verdict(p) == "inconclusive (one process per side)"


def _h100_throughput(real, steady: bool):
    return next(x for x in real if x.kind == "throughput" and x.ok and cmp.device_model(x) ==
                "NVIDIA H100 80GB HBM3" and (x.summary().rel_halfwidth <=
                                            cmp.SPREAD_WINDOW_MAX_REL_HALFWIDTH) == steady)


def test_one_h100_process_a_side_is_judged_against_the_stored_spread(real):
    r = _h100_throughput(real, steady=True)
    spread = cmp.stored_spread("throughput", "NVIDIA H100 80GB HBM3")
    assert spread is not None
    same = cmp.compare([r], [dataclasses.replace(r, id=new_id())]).pairs[0]
    assert same.basis == cmp.RUN_TO_RUN and not same.significant
    assert same.rel_runs == pytest.approx(spread.halfwidth(2))
    p = cmp.compare([r], [_slower(r)]).pairs[0]
    assert p.basis == cmp.RUN_TO_RUN and p.regression and p.ratio_high < 1.0
    assert p.run_spread == spread and "stored run-to-run spread" in p.run_spread.source


def test_a_noisy_window_is_not_judged_against_the_stored_spread(real):
    """The stored spread comes from windows of at most 1%: a wider one-process window (here a
    real H100 record's) varies more from process to process than it says, so no verdict."""
    r = _h100_throughput(real, steady=False)
    assert r.summary().rel_halfwidth > cmp.SPREAD_WINDOW_MAX_REL_HALFWIDTH
    p = cmp.compare([r], [_slower(r)]).pairs[0]
    assert p.inconclusive and not p.regression and p.run_spread is None


def test_training_seeds_gate_on_time_to_train_and_epoch_speed(tmp_path_factory):
    with Store(_plain("pt2.11-cu130-4x-h200", tmp_path_factory.mktemp("c"))) as s:
        seeds = [r for r in s.results(kind="train")
                 if (r.config.batch_size, r.config.gpus) == (512, 1)]  # five seeds
    assert len(seeds) == 5
    c = cmp.compare(seeds, [_slower(r, 3.0) for r in seeds])
    by = {p.unit: p for p in c.pairs}
    assert by["1/time to train"].test == "welch" and by["1/time to train"].regression
    epoch = by["samples/s (epochs 2+)"]
    assert epoch.ratio == pytest.approx(1 / 3, rel=1e-6) and epoch.regression
    assert not cmp.compare(seeds, seeds).regressions


def test_different_cards_of_one_model_widen_the_interval(real):
    a = next(r for r in real if r.kind == "throughput" and "H100" in cards.card_model(r))
    other = dict(a.env, gpus=[dict(a.env["gpus"][0], uuid="GPU-another-card")])
    b = dataclasses.replace(a, id=new_id(), env=other)
    assert cards.different_cards(a, b)
    p = cmp.compare([a], [b]).pairs[0]
    same = cmp.compare([a], [dataclasses.replace(a, id=new_id())]).pairs[0]
    assert p.cards and "card-to-card spread" in p.cards and same.cards is None
    h = cards.spread_for(cards.card_model(a))["rel_halfwidth"]
    assert p.ratio_high / p.ratio > same.ratio_high / same.ratio
    assert p.ratio_high >= 1 + h  # at least the spread measured across cards


def test_card_spread_is_derived_from_the_committed_records():
    spread = cards.card_spreads()
    h100 = spread["throughput"]["NVIDIA H100 80GB HBM3"]
    gpt2 = [c for c in h100["configs"] if c["config"].startswith("gpt2 b64")]
    assert gpt2 and gpt2[0]["min"] == pytest.approx(455027, abs=1) and gpt2[0]["cards"] == 4
    assert h100["rel_halfwidth"] == max(c["rel_halfwidth"] for c in h100["configs"])
    assert all(len(c["records"]) == c["cards"] for c in h100["configs"])


def _cli(*args):
    return run_cli(*args, timeout=120)


def test_cli_exit_codes_gate_scaling_and_nothing_matched(real, tmp_path):
    a = next(r for r in real if r.kind == "scaling")
    for name, recs in (("a.db", _group(a, 1.0, "ga")), ("b.db", _group(a, 1.25, "gb"))):
        with Store(tmp_path / name) as s:
            s.start_run(recs[0].run_id or "a", "test", recs[0].env, "k", "dev")
            for r in recs:
                s.add(dataclasses.replace(r, run_id=recs[0].run_id or "a"))
            s.finish_run(recs[0].run_id or "a", "done")
    p = _cli("compare", "latest", "latest", "--db", str(tmp_path / "a.db"), "--db-b",
             str(tmp_path / "b.db"), "--json")
    assert p.returncode == 5, p.stderr
    pair = json.loads(p.stdout)["pairs"][0]
    assert pair["kind"] == "scaling" and pair["basis"] == cmp.ACROSS_PROCESSES
    p = _cli("compare", "latest", "latest", "--db", str(tmp_path / "a.db"), "--db-b",
             str(tmp_path / "b.db"), "--kind", "comm")
    assert p.returncode == 6 and "nothing to compare" in p.stderr
    p = _cli("compare", "latest", "latest", "--db", str(tmp_path / "a.db"), "-q")
    assert p.returncode == 0 and "no regression" in p.stdout


def test_a_repeat_group_is_one_side_tested_on_its_process_figures(real):
    """Three processes a side (--repeat 3): the figure is the mean of the process figures, the
    test Welch's t on those figures (the run-to-run spread one process cannot show)."""
    base = next(r for r in real if r.kind == "throughput" and len(r.step_times_s) >= 10)

    def group(f: float, spread: tuple[float, ...], gid: str) -> list:
        return [_slower(base, f * s).in_group(gid, i, len(spread)) for i, s in enumerate(spread)]
    a = group(1.0, (1.0, 1.01, 0.99), "ga")
    same = cmp.compare(a, group(1.0, (1.005, 0.995, 1.0), "gb")).pairs[0]
    assert same.test == "welch" and len(same.a_id.split(",")) == 3 and not same.regression
    assert same.basis == cmp.ACROSS_PROCESSES and cmp.judged_by(same) == "across processes (3 | 3)"
    slow = cmp.compare(a, group(1.25, (1.0, 1.01, 0.99), "gc")).pairs[0]
    assert slow.regression and slow.ratio == pytest.approx(0.8, rel=0.01)
    # the interval is the processes' (t with 2 df over 3 figures), far wider than one window's
    assert slow.ratio_high - slow.ratio_low > 0.02


def test_shipped_card_spread_is_what_the_committed_stores_give(tmp_path):
    """card_spread.json is derived, not typed: the derivation over its sources gives it again."""
    shipped = cards.card_spreads()
    records = []
    for src in shipped["sources"]:
        with Store(_plain(Path(src).parent.name, tmp_path)) as s:
            records += s.results(kind="throughput")
    assert cards.derive_spreads(records)["throughput"] == shipped["throughput"]

"""The single-H100 page's prose against its records: the figures it quotes outside its generated
tables are recomputed here from the committed store and the files committed beside it
(fidelity JSON, nvidia-smi's power log, Inductor's autotuning records, the side stores and logs
its closing links point to, the reference data of the articles it cites). The
generated tables are checked by tests/test_readme_claims.py, the MLPerf verdicts by
tests/test_verdicts.py and the coverage summary by tests/test_coverage.py."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import statistics
import sys
import tarfile
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest
from fakes.pages import H, assert_says, environment_rows, store_fixture

from dlbench.measure import stats
from dlbench.measure.mfu import datasheet_mfu, measured_peaks
from dlbench.records import compat
from dlbench.reference import spec_for_env
from dlbench.report.table import fmt_num, fmt_pct
from dlbench.store import Store
from dlbench.tuning.payback import payback, setup_s

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / H.H100_PAGE).read_text()
FOLDER = ROOT / "results" / H.H100
REFERENCE = json.loads((ROOT / "src/dlbench/reference/results.json").read_text())["results"]
GPT2_PARAMS = 124_439_808


def says(text: str) -> None:
    assert_says(PAGE, text)


store = store_fixture(H.H100)


@pytest.fixture(scope="module")
def runs(store):
    return {r.run_id: r for r in store.runs()}


def wall_s(run) -> float:
    return (datetime.fromisoformat(run.finished_at)
            - datetime.fromisoformat(run.started_at)).total_seconds()


def rate(r) -> float:
    return r.summary().throughput * r.units_per_sample


def hw(r) -> float:
    return r.summary().rel_halfwidth


def gpu(r) -> dict:
    return r.telemetry["summary"]["gpus"][0]


def span(values, fmt: str = ",.0f", unit: str = "") -> str:
    """``686-692``: the range of ``values`` as the page writes it."""
    lo, hi = format(min(values), fmt), format(max(values), fmt)
    return f"{lo}{unit}" if lo == hi else f"{lo}-{hi}{unit}"


def flags_say(r, *flags: str) -> None:
    assert [f for f in H.record_flags(r) if f != "one process"] == list(flags), H.record_flags(r)


def test_the_opening_and_the_environment(store):
    every = store.results()
    # "Every figure on this page comes from one process"
    assert all(getattr(r, "repeat_group", None) is None for r in every)
    says("Every figure on this page comes from one process")
    # the GPT-2 windows: the old batch-means interval then, today's now
    cards = [store.get(rid) for rid, _ in H.GPT2_CARD_RECORDS]
    old = [stats.mean_interval_batch_means(r.step_times_s) / stats.mean(r.step_times_s)
           for r in cards]
    says(f"(the tuned GPT-2 windows' ±{span(old, '.2%').replace('%-', '-')} then are "
         f"±{span([hw(r) for r in cards], '.2%').replace('%-', '-')} now)")
    # one driver and software for every record (the store's one environment key)
    envs = {json.dumps({k: r.env[k] for k in ("driver", "cuda_runtime", "cudnn", "nccl",
                                                "python", "kernel", "cpu_logical_cores")}
                       | {"pkg": r.env["packages"], "gpus": [
                           {k: v for k, v in g.items() if k not in ("uuid", "pci_bus_id")}
                           for g in r.env["gpus"]]}, sort_keys=True, default=str)
            for r in every}
    assert len(envs) == 1
    env = every[0].env
    (card,) = env["gpus"]
    spec = spec_for_env(env)[0]
    assert spec.id == "h100-sxm" and card["name"] == "NVIDIA H100 80GB HBM3"
    says(f"| GPU | {card['name']} (SXM, {card['sm_count']} SMs, "
         f"{card['memory_total_bytes'] / 2**30:.1f} GiB as torch reports it, power limit "
         f"{card['power_limit_w']:.0f} W, SM clock up to {card['max_sm_clock_mhz']:,} MHz) |")
    for row in environment_rows(env):
        says(row)
    # run-to-run variance between cards: the GPT-2 config's seven measurements on five H100s
    cards = [store.get(rid) for rid, _ in H.GPT2_CARD_RECORDS]
    says(f"run-to-run variance, about {max(map(rate, cards)) / min(map(rate, cards)) - 1:.0%} "
         "between these H100s for one config, is not in its interval")


def test_the_default_suite(store, runs):
    run = runs[H.DEFAULT_SUITE_RUN]
    assert run.command.startswith("dlbench run --db") and run.tag == "default-suite"
    says(f"SGD with momentum, eager; wall time {wall_s(run):.0f} s)")
    first = {(r.config.model, r.config.mode): r.config.batch_size
             for r in store.results(run_id="6a4cdcfdb7a3", kind="throughput")}
    second = {(r.config.model, r.config.mode): r.config.batch_size
              for r in store.results(run_id=H.DEFAULT_SUITE_RUN, kind="throughput")}
    assert first.keys() == second.keys() and all(2 * first[k] == second[k] for k in first)
    says("a first default-suite run (6a4cdcfdb7a3) whose batches were halved")
    (card,) = store.results(run_id=H.DEFAULT_SUITE_RUN)[0].env["gpus"]
    says(f"(torch reports {card['memory_total_bytes'] / 2**30:.1f} GiB for this card)")
    # NASNet's parameters: its fp32 weights' bytes (the energy run records them)
    nasnet = H.latest(store.results(run_id="21dab0cda4ef", kind="throughput"), model="nasnet")
    says(f"NASNet is timm's `nasnetalarge` at 331 px "
         f"({nasnet.memory['params_bytes'] / 4 / 1e6:.1f}M parameters)")
    from dlbench.models.registry import get_model  # noqa: PLC0415
    assert get_model("nasnet").input_size == 331


def _reference(source: str, **match) -> list[dict]:
    return [r for r in REFERENCE if r["source"] == source
            and all(r.get(k) == v for k, v in match.items())]


def test_the_suites_runs_under_their_former_names(runs):
    """The classic-cnn and ms-per-batch runs were stored before the suites were renamed: their
    suite and tag are the old names, read through compat; the page's commands find them by
    today's names or by run id."""
    from dlbench.suites import canonical  # noqa: PLC0415
    for suite in ("classic-cnn", "ms-per-batch"):
        mine = [r for r in runs.values() if canonical(r.suite) == suite]
        assert mine and all(r.suite != suite for r in mine)    # stored under the old name
        assert {r.tag for r in mine} <= set(compat.former(compat.SUITES, suite))
    says("the classic-cnn and ms-per-batch suites' runs are tagged with those suites' former "
         "names (`dlbench results ls --db h100.db --suite classic-cnn` lists a suite's runs")
    (ms,) = [r for r in runs.values() if canonical(r.suite) == "ms-per-batch"]
    says(f"`dlbench results show {ms.run_id} --db h100.db --view ms-per-batch`")
    tuned = runs["b235ab913c19"]
    assert " --tuned " in tuned.command and tuned.suite is None
    assert compat.current(compat.METHODS, tuned.command.split("--method ")[1].split()[0]) \
        == "fwd-bwd"
    says("--method fwd-bwd --tuned` (run b235ab913c19). From the store: `dlbench report --db "
         "h100.db --run b235ab913c19 --markdown`.")


def test_the_ms_per_batch_suite(store):
    recs = {(r.config.model, r.config.mode, r.config.precision): r
            for r in store.results(run_id="e991c923eb3f", kind="throughput")}
    cells = []
    for model in ("vgg16", "resnet152", "densenet161"):
        ev, tr = (_reference("ms-per-batch", device="RTX 3060", model=model, mode=m,
                             precision="fp32") for m in ("eval", "train"))
        cells.append(f"{model} {ev[0]['value']} / {tr[0]['value']}")
    assert {r["framework"] for r in _reference("ms-per-batch", device="RTX 3060")} == {
        "PyTorch (PyTorch 1.12, CUDA 11.3)"}
    says(f"published RTX 3060 figures (PyTorch 1.12, FP32; not measured by dlbench; `dlbench gpus "
         f"--source ms-per-batch`): {', '.join(cells)} ms (eval / train)")
    # fp16 slower than fp32 for ResNet-152 and DenseNet-161, at batch 16
    for model in ("resnet152", "densenet161"):
        for mode in ("eval", "train"):
            assert (recs[(model, mode, "fp16")].summary().mean_s
                    > recs[(model, mode, "fp32")].summary().mean_s)
    says("eager fp16 autocast is *slower* than fp32 for ResNet-152 and DenseNet-161")
    capped = sorted(k for k, r in recs.items() if H.record_flags(r)[0] == "noisy (time cap)")
    assert capped == sorted([(m, mode, "fp16") for m in ("resnet152", "densenet161")
                             for mode in ("eval", "train")] + [("resnet152", "train", "fp32")])
    assert H.record_flags(recs[("densenet161", "train", "fp32")])[0] == "noisy"
    says("The fp16 ResNet-152 and DenseNet-161 windows and fp32 ResNet-152 train were stopped by "
         "the time cap before their interval reached 1%, and fp32 DenseNet-161 train missed it "
         "too")


def test_the_classic_cnn_suite(store, runs):
    article = _reference("tf-cnn-benchmarks", gpus=1, precision="fp16", setup="no NVLink")
    v = {r["model"]: round(r["value"]) for r in article}
    says(f"The article's Quadro RTX 8000 did {v['resnet50']:,} (ResNet-50), {v['inception_v3']} "
         f"(Inception v3), {v['vgg16']} (VGG-16), {v['resnet152']} (ResNet-152) and "
         f"{v['inception_v4']} (Inception v4) img/s in fp16 with XLA.")
    # The suite's runs carry its former name as their tag and in their command, read through
    # compat under today's.
    invocations = [r for r in runs.values()
                   if compat.current(compat.SUITES, r.tag or "") == "classic-cnn"]
    recs = [x for r in invocations for x in store.results(run_id=r.run_id, kind="throughput")]
    configs = {(r.config.model, r.config.precision, r.config.compile) for r in recs}
    assert len(configs) == 24 and all(r.ok for r in recs)
    suites = {compat.current(compat.SUITES, r.command.split()[3]) for r in invocations}
    assert suites == {"classic-cnn"}
    assert {r.tag for r in invocations} <= set(compat.former(compat.SUITES, "classic-cnn"))
    assert all(r.command.startswith("dlbench run --suite ") and "--resume" in r.command
               for r in invocations)
    says(f"All 24 configs were measured over {len(invocations)} invocations of the suite")
    empty = sorted(r.run_id for r in invocations if not store.results(run_id=r.run_id))
    assert all(runs[r].status == "running" for r in empty)
    says(f"{len(empty)} invocations stored nothing (runs {' and '.join(empty)}, status "
         "`running`)")
    # the one cut before Inception v4 fp32 compiled: the next invocation measured it, first
    nxt = min((r for r in invocations if r.started_at > runs[empty[-1]].started_at),
              key=lambda r: r.started_at)
    (v4,) = store.results(run_id=nxt.run_id, kind="throughput")
    assert (v4.config.model, v4.config.precision, v4.config.compile) == ("inception_v4", "fp32",
                                                                        "default")
    says(f"the next one measured it with a {v4.first_step_s:.0f} s first step")
    by = {}
    for r in sorted(recs, key=lambda r: r.created_at):
        by[(r.config.model, r.config.precision, r.config.compile)] = r  # the later one wins
    eager32 = [r for k, r in by.items() if k[1] == "fp32" and k[2] is None]
    compiled = [r for k, r in by.items() if k[2] is not None] + [
        r for r in recs if r.config.model == "nasnet" and r.config.compile]
    top = max(eager32, key=lambda r: r.first_step_s)
    assert top.config.model == "vgg16"
    says(f"cuDNN's autotuning of the first fp32 step took up to {top.first_step_s:.0f} s (VGG-16)")
    slow = max(compiled, key=lambda r: r.first_step_s)
    assert (slow.config.model, slow.config.precision) == ("nasnet", "fp16")
    says(f"compiling up to {slow.first_step_s:.0f} s (NASNet fp16; NASNet fp32 "
         f"{by[('nasnet', 'fp32', 'default')].first_step_s:.0f} s, VGG-16 fp32 "
         f"{by[('vgg16', 'fp32', 'default')].first_step_s:.0f} s, autotuning included)")
    # NASNet fp16 compiled, twice on one card
    a, b = sorted((r for r in recs if r.config.model == "nasnet" and r.config.compile
                   and r.config.precision == "fp16"), key=lambda r: r.created_at)
    assert gpu(a)["uuid"] == gpu(b)["uuid"] and by[("nasnet", "fp16", "default")] is b
    for r in (a, b):
        assert H.record_flags(r)[0] == "noisy (time cap)"
    says(f"NASNet fp16 compiled was measured twice on the same warm machine, {fmt_num(rate(a))} "
         f"and {fmt_num(rate(b))} img/s (±{fmt_pct(hw(a))} and ±{fmt_pct(hw(b))}, both "
         f"`noisy (time cap)`, cv {a.summary().cv:.0%} and {b.summary().cv:.0%})")
    busy = [gpu(r)["mean_util_gpu_pct"] for r in (a, b)]
    says(f"NVML saw the card busy {span(busy)}% of the window")
    says(f"The table shows the later one ({b.first_step_s:.0f} s first step from Inductor's cache)")
    # fp32 VGG-16 against the datasheet and the measured ceiling
    eager, comp = by[("vgg16", "fp32", None)], by[("vgg16", "fp32", "default")]
    (ceiling,) = measured_peaks(store.results(kind="peak")).values()
    te, tc = eager.achieved_tflops(), comp.achieved_tflops()
    (_, peak, _, _) = datasheet_mfu(te, eager.env, "fp32")
    says(f"fp32 VGG-16 reaches {te:.1f} model TFLOP/s eager and {tc:.1f} compiled, "
         f"{te / peak:.0%} and {tc / peak:.0%} of the card's {peak:.0f} TFLOP/s FP32 datasheet "
         f"peak and **{te / ceiling['fp32']:.0%} and {tc / ceiling['fp32']:.0%} of the fp32 "
         f"ceiling `dlbench peak` measured ({ceiling['fp32']:.1f} TFLOP/s)**")
    says(f"(records {eager.id} and {comp.id})")
    assert eager.profile is None and comp.profile is None
    says(f"reached {te / ceiling['fp32']:.0%} of this card's measured fp32 matmul ceiling eager "
         f"and {tc / ceiling['fp32']:.0%} compiled")
    # GradScaler's loss scale
    fp16 = [r for r in recs if r.config.precision == "fp16"]
    scaled = [r for r in fp16 if r.loss_scale is not None]
    assert all(r.loss_scale[0] == r.loss_scale[1] for r in scaled)
    unknown = [r for r in fp16 if r.loss_scale is None]
    assert {r.config.compile for r in unknown} == {None}
    assert sorted(r.config.model for r in unknown) == ["inception_v3", "nasnet", "resnet50",
                                                      "vgg16"]
    assert {r.config.model for r in scaled if not r.config.compile} == {"resnet152",
                                                                       "inception_v4"}
    says(f"in {len(scaled)} of the {len(fp16)} fp16 records (the compiled column, and eager "
         f"ResNet-152 and Inception v4): in those {len(scaled)} it never dropped")
    says(f"(runs {' and '.join(sorted({r.run_id for r in unknown}))}) were stored before dlbench "
         "recorded the loss scale")


def test_fidelity():
    files = {name: json.loads((FOLDER / name).read_text())
             for name in ("fidelity.json", "fidelity-telemetry.json", "fidelity-tuned.json")}
    for name, d in files.items():
        ratios = [r["ratio"] for r in d["rounds"]]
        assert (min(ratios), max(ratios)) == (d["min_ratio"], d["max_ratio"]) and d["pass"]
        c = d["config"]
        assert (c["model"], c["batch_size"], c["precision"], c["channels_last"], c["mode"]) == (
            "resnet50", 256, "bf16", True, "train")
        assert [r["dlbench_first"] for r in d["rounds"]] == [i % 2 == 0 for i in
                                                            range(len(ratios))]
        says(f"| **{d['median_ratio']:.4f}** | {d['min_ratio']:.4f}-{d['max_ratio']:.4f} | "
             f"`{name}` |")
    assert len(files["fidelity.json"]["rounds"]) == 4
    says("| plain (4 rounds) | **")
    assert files["fidelity-telemetry.json"]["config"]["telemetry_interval_s"] == 0.1
    t = files["fidelity-tuned.json"]
    assert len(t["rounds"]) == 2 and (t["config"]["compile"], t["config"]["cuda_graph"],
                                      t["config"]["optimizer_impl"]) == ("default", True, "fused")
    bands = {name: "-".join(f"{x:.2f}" for x in d["band"]) for name, d in files.items()}
    says(f"The band is {bands['fidelity.json']} on a GPU")
    assert bands["fidelity-tuned.json"] == bands["fidelity.json"]
    says(f"(`fidelity-telemetry.json` was judged against {bands['fidelity-telemetry.json']}, "
         "the band of its time)")


def test_the_command_line_beside_fidelity(store, runs):
    search, measured = store.results(run_id="0d2fcf063d64")
    assert runs["0d2fcf063d64"].command.startswith(
        "dlbench maxbatch -m resnet50 --precision bf16 --channels-last --max 2048 "
        "--tolerance 0.25")
    assert measured.config.batch_size == search.best_batch
    flags_say(measured, "throttled (power)")
    says(f"| {search.best_batch:,} fits, {search.first_oom_batch:,} out of memory; "
         f"{fmt_num(rate(measured))} img/s at {search.best_batch:,}, throttled (power) | "
         "`0d2fcf063d64` |")
    seeds = store.results(run_id="4760d1fdbf37", kind="train")
    assert all(r.compliance["passed"] for r in seeds) and len(seeds) == 2
    says(f"time to train {' / '.join(f'{r.time_to_train_s:.2f}' for r in seeds)} s "
         f"({' / '.join(str(r.epochs_to_converge) for r in seeds)} epochs); both MLPerf logs "
         "passed the checker when stored")


def test_energy_and_telemetry(store, monkeypatch):
    (r,) = store.results(run_id="c46049d2028e", kind="throughput")
    total = r.telemetry["summary"]["total"]
    assert total["methods"] == ["counter"]
    says(f"| dlbench (NVML energy counter) | **{total['j_per_sample']:.4f} J** | "
         f"{total['mean_power_w']:.1f} W |")
    # benchmarks/compare_power.py against the committed nvidia-smi log (local time is UTC there)
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import compare_power  # noqa: PLC0415
    import io  # noqa: PLC0415
    import tempfile  # noqa: PLC0415
    with tempfile.TemporaryDirectory() as tmp:
        rec = Path(tmp) / "rn50.json"
        rec.write_text(json.dumps([{"created_at": r.created_at, "telemetry": r.telemetry}]))
        out = io.StringIO()
        monkeypatch.setattr(sys, "stdout", out)
        compare_power.main(str(rec), str(FOLDER / "nvidia-smi-power.csv"))
        monkeypatch.undo()
        time.tzset()
    line = out.getvalue()
    assert line.startswith(f"dlbench: {total['j_per_sample']:.4f} J/img")
    smi_j, smi_w, n = line.split("nvidia-smi: ")[1].split(" J/img (")[0], \
        line.split(" J/img (")[2].split(" W mean")[0], line.split(" W mean of ")[1].split()[0]
    says(f"| nvidia-smi power.draw, {n} samples over the same window | **{smi_j} J** | "
         f"{smi_w} W |")
    # the default suite with energy: the idle power before each benchmark
    suite = store.results(run_id="21dab0cda4ef", kind="throughput")
    idle = [gpu(x)["idle_power_w"] for x in suite]
    says(f"(`dlbench run`; idle about {statistics.median(idle):.0f} W)")
    says(f"The idle power measured before each benchmark read {span(idle[1:])} W, except before "
         f"the first (ResNet-50: {idle[0]:.1f} W).")
    assert suite[0].config.model == "resnet50"


def test_the_targets(store, runs):
    plain, tuned = store.get("8b248dcfe99f"), store.get("1d65b62624ab")
    by_hand = store.get("5879c12c763d")
    both = (tuned, by_hand)
    for r in both:
        flags_say(r, "throttled (power)")
        assert gpu(r)["power_limit_w"] == 700
    says(f"ResNet-50: met, with the card at its {gpu(tuned)['power_limit_w']:.0f} W limit "
         f"({span([gpu(r)['mean_power_w'] for r in both])} W mean, SM clock "
         f"{span([gpu(r)['mean_sm_clock_mhz'] for r in both])} of "
         f"{tuned.env['gpus'][0]['max_sm_clock_mhz']:,} MHz; both windows flagged "
         "`throttled (power)`)")
    goal = 6500
    says(f"{fmt_num(rate(tuned))} in tuned mode and {fmt_num(rate(by_hand))} by hand, a margin of "
         f"{span([rate(r) / goal - 1 for r in both], '.1%').replace('%-', '-')} at intervals of "
         f"±{span([hw(r) for r in both], '.2%').replace('%-', '-')}, from one process each")
    says(f"Its setup, {setup_s(tuned):.0f} s, is with Inductor's timing records restored")
    p = payback(plain, tuned)
    says(f"so the {p.steps:,.0f} steps to pay back are a floor")
    # the default compile stays under the goal
    best = store.results(run_id="13af34cdd628", kind="throughput")
    (t13,) = [r for r in best if r.config.tuned]
    base = [r for r in store.results(kind="throughput")
            if r.ok and r.config.key() == t13.config.tuned_from and r.created_at < t13.created_at]
    p13 = payback(base[-1], t13)
    others = [store.get(i) for i in ("b70a3c3f08c9", "b995a35552fa", "f315a66c6417")]
    for r in [t13, *others]:
        assert r.config.compile == "default" and r.config.batch_size == 1024
        flags_say(r, "throttled (power)")
        assert rate(r) < goal
    assert len({gpu(r)["uuid"] for r in [t13, *others]}) == 4
    says(f"Compiled in the default mode it stays under: {fmt_num(rate(t13))} at best "
         f"(`throughput --tuned` with the default compile, run 13af34cdd628: "
         f"{setup_s(t13):.0f} s setup, paid back after {p13.steps:,.0f} steps), "
         + ", ".join(fmt_num(rate(r)) for r in others[:-1])
         + f" and {fmt_num(rate(others[-1]))} on other machines; every one of these windows "
           "`throttled (power)`")
    # GPT-2
    cards = [store.get(rid) for rid, _ in H.GPT2_CARD_RECORDS]
    says(f"GPT-2 (setup {setup_s(cards[0]):.0f} s)")
    uuids = [gpu(r)["uuid"] for r in cards]
    words = {5: "five", 7: "Seven"}
    says(f"{words[len(cards)]} measurements of the config at batch 64 ran on "
         f"{words[len(set(uuids))]} H100s")
    # N: GPT-2's fp32 weights in the default suite's record (unpadded, tied embedding)
    g2 = H.latest(store.results(run_id="21dab0cda4ef", kind="throughput"), model="gpt2")
    assert g2.memory["params_bytes"] == 4 * GPT2_PARAMS
    flop = 6 * GPT2_PARAMS + 12 * 12 * 768 * 1024
    assert flop == H.GPT2_FLOP_PER_TOKEN
    _, peak, _, _ = datasheet_mfu(1.0, cards[0].env, "bf16")
    counted = cards[0].flops_per_sample / cards[0].units_per_sample
    assert {r.flops_per_sample / r.units_per_sample for r in cards} == {counted}
    says(f"MFU against the datasheet's dense bf16 {peak} TFLOP/s, counted as 6N + 12LHT = "
         f"{flop / 1e9:.3f} GFLOP per token (N = {GPT2_PARAMS:,} with the tied embedding), "
         f"where 40% is {0.4 * peak * 1e12 / flop:,.0f} tok/s, and as dlbench counts "
         f"(torch.utils.flop_counter, {counted / 1e9:.3f} GFLOP per token, "
         f"{1 - counted / flop:.1%} fewer; its MFU column)")
    formula = {gpu(r)["uuid"] for r in cards if rate(r) * flop / 1e12 / peak >= 0.4}
    ours = {gpu(r)["uuid"] for r in cards if rate(r) * counted / 1e12 / peak >= 0.4}
    short = lambda u: u[4:12]  # noqa: E731
    met = lambda us: ", ".join(short(u) for u in dict.fromkeys(uuids) if u in us)  # noqa: E731
    says(f"By the formula {len(formula)} of the {len(set(uuids))} cards met 40% ({met(formula)}), "
         f"by dlbench's count {len(ours)} ({met(ours)})")
    assert not any(rate(r) * (1 - hw(r)) * flop / 1e12 / peak >= 0.4 for r in cards)
    says("no measurement's interval lies wholly above 40%")
    says(f"within the spread between cards (about "
         f"{max(map(rate, cards)) / min(map(rate, cards)) - 1:.0%})")
    for r in cards:
        assert "throttled (power)" in H.record_flags(r)
    says(f"SM clock {span([gpu(r)['mean_sm_clock_mhz'] for r in cards[-2:]])} MHz in the last two")
    steps = [r.summary().steps for r in cards]
    says(f"(effective sample size; {span(steps)} steps each)")
    noisy = [r for r in cards if "noisy" in H.record_flags(r)]
    assert [r.id for r in noisy] == ["de2870c46ef2", "3211ed22d070"]
    says(f"two miss the 1% target (flagged noisy): the tuned-mode one, ±{fmt_pct(hw(noisy[0]))}, "
         f"and the fused-SGD one, ±{fmt_pct(hw(noisy[1]))}.")


def test_time_to_accuracy(store):
    seeds = store.results(run_id="49d638dbbc76", kind="train")
    assert [r.config.seed for r in seeds] == list(range(5))
    assert all(r.converged and r.compliance["passed"] for r in seeds)
    ttt = [r.time_to_train_s for r in seeds]
    olympic = statistics.mean(sorted(ttt)[1:-1])
    says(f"| 1 | {' / '.join(f'{t:.2f}' for t in ttt)} | "
         f"{' / '.join(str(r.epochs_to_converge) for r in seeds)} | {olympic:.2f} s | 0 of 5 | "
         f"{statistics.median(r.train_samples_per_s() for r in seeds):,.0f} | 5 of 5 |")
    batches = {r.config.batch_size: r for r in store.results(run_id="1e81cf8eda03", kind="train")}
    assert set(batches) == {128, 256, 1024, 2048}

    def row(batch, first, median, epochs, acc, ttt):
        says(f"| {batch} | {first:.2f} | {median:.2f} | {epochs} | {acc:.4f} | {ttt} |")
    for b, r in batches.items():
        row(b, r.first_epoch_s, r.median_epoch_s, r.epochs,
            r.final_accuracy, "cap" if r.time_to_train_s is None else f"{r.time_to_train_s:.2f}")
    med = statistics.median
    row(512, med(r.first_epoch_s for r in seeds), med(r.median_epoch_s for r in seeds),
        med(r.epochs for r in seeds), med(r.final_accuracy for r in seeds), f"{med(ttt):.2f}")
    says("(one seed per batch size; batch 512: medians over the five seeds above)")
    cap = batches[2048]
    assert not cap.converged and cap.epochs == cap.config.max_epochs == 20
    assert "aborted" in cap.mllog and not cap.compliance["passed"]
    says(f"Batch 2048 did not reach 0.90 within {cap.epochs} epochs: its log says \"aborted\"")
    conv = [r.epochs_to_converge for r in seeds]
    says(f"The epochs to converge range from {min(conv)} to {max(conv)} at one batch size")


def test_tuned_mode(store, runs):
    # the first GPT-2 search, without the padded vocabulary and the compiled loss
    first = store.results(run_id="b37dbe3b98ba", kind="throughput")[-1]
    assert (first.config.compile, first.config.batch_size) == ("default", 32)
    flags_say(first, "throttled (power)")
    says(f"found compile and batch 32, {fmt_num(rate(first))} tok/s (±{fmt_pct(hw(first))}, "
         "throttled (power)).")
    # the tuned suite's plain ResNet-50 against the default suite's
    plain = store.get("cdaae0bb64a2")
    suite = H.latest(store.results(run_id=H.DEFAULT_SUITE_RUN, kind="throughput"),
                     model="resnet50", mode="train")
    says(f"({fmt_num(rate(plain))} against {fmt_num(rate(suite))} img/s for ResNet-50)")
    # ms per batch of 16, plain eager train, from the tuned run's plain records
    ms = {(r.config.model, r.config.precision): r
          for r in store.results(run_id="b235ab913c19", kind="throughput")
          if not r.config.tuned and r.config.mode == "train"}
    four = [ms[(m, p)] for m in ("resnet152", "densenet161") for p in ("fp16", "fp32")]
    assert all(H.record_flags(r)[0] == "noisy (time cap)" for r in four)
    cell = lambda m, p: f"{ms[(m, p)].summary().mean_s * 1e3:.1f}"  # noqa: E731
    says(f"eager fp16 trains ResNet-152 in {cell('resnet152', 'fp16')} ms against fp32's "
         f"{cell('resnet152', 'fp32')}, DenseNet-161 in {cell('densenet161', 'fp16')} against "
         f"{cell('densenet161', 'fp32')} (launch-bound, as in the suite above; all four plain "
         f"windows `noisy (time cap)`, ±{fmt_pct(min(map(hw, four))).rstrip('%')}-"
         f"{fmt_pct(max(map(hw, four)))})")
    # the fused optimizer's first graph: error rows with NaN losses
    nan = store.results(run_id="f0d5e7971cbd", kind="throughput")
    assert nan and all(r.error_type == "nan" for r in nan)
    says("those error rows stay in the store (run f0d5e7971cbd)")
    # the compiled loss's peak memory
    eager_loss, compiled_loss = store.results(run_id="8269422c2a78", kind="throughput")
    assert (eager_loss.config.compile_loss, compiled_loss.config.compile_loss) == (False, True)
    b64 = store.results(run_id="967a3039c5ac", kind="throughput")[0]
    gib = lambda r: r.memory["allocated_peak_bytes"] / 2**30  # noqa: E731
    says(f"It also halved the peak memory at batch 32 ({gib(eager_loss):.1f} to "
         f"{gib(compiled_loss):.1f} GiB), which is what made batch 64 fit ({gib(b64):.1f} GiB)")
    # cuDNN's autotuning: setup and speed at batch 256
    auto, heur = (store.results(run_id=i, kind="throughput")[0]
                  for i in ("c64440b926cd", "28c492ba4130"))
    assert auto.config.autotune and not heur.config.autotune
    says(f"an {auto.first_step_s:.1f} s first step against {heur.first_step_s:.1f} s with the "
         "heuristics (runs c64440b926cd, 28c492ba4130)")
    a32, h32 = (store.results(run_id=i, kind="throughput")[0]
                for i in ("efcc1768c202", "9b07bfdb2796"))
    flags_say(a32, "time cap")
    flags_say(h32, "time cap", "19 of 20 steps")
    says(f"fp32 {fmt_num(rate(a32))} img/s autotuned against {fmt_num(rate(h32))} with the "
         f"heuristics, {rate(a32) / rate(h32) - 1:.1%} for autotuning; bf16 "
         f"{fmt_num(rate(auto))} against {fmt_num(rate(heur))}, nothing")
    says("the two fp32 windows were stopped by the time cap, flagged `time cap`, the second after "
         "19 of its 20 steps)")
    # the runs that stored nothing: how long they ran
    for rid in ("aa9496ce190b", "bd7bd63c656d", "aa03df6a1c2f", "a3956fa156cb", "c8f8e8acc623"):
        assert not store.results(run_id=rid)
    assert runs["aa03df6a1c2f"].finished_at is None and runs["aa03df6a1c2f"].status == "running"
    assert runs["aa9496ce190b"].tag.endswith("-cudnn-conv")
    tries = [wall_s(runs[i]) for i in ("aa9496ce190b", "bd7bd63c656d")]
    says(f"outlasted three tries, of {tries[0]:.0f} and {tries[1]:.0f} s and a third whose end the "
         "store does not record")
    says(f"the compilation is longer than {max(tries):.0f} s (the longest try whose end is "
         "recorded)")
    says(f"had not finished compiling after {wall_s(runs['a3956fa156cb']):.0f} s (run "
         f"a3956fa156cb, no result); the padded GPT-2 at batch 64 started "
         f"{wall_s(runs['c8f8e8acc623']):.0f} s before a time limit stored nothing")
    # fused kernels in bf16 (the ResNet-50 lever search) and the bounded-queue re-check
    search = {(r.config.channels_last, r.config.optimizer_impl, r.config.precision,
               r.config.compile): r for r in store.results(run_id="8a823bc3d0ed")}
    cl, fused = (search[(True, impl, "bf16", None)] for impl in ("default", "fused"))
    says(f"the same fused kernels bought {rate(fused) / rate(cl) - 1:.1%} (the lever search above)")
    again = store.results(run_id="08978fb9d931", kind="throughput")[0]
    says(f"gave {fmt_num(rate(again))} img/s against {fmt_num(rate(auto))} and "
         f"{fmt_num(rate(cl))} before (run 08978fb9d931)")


def test_ceilings_and_roofline(runs):
    # the peak run's start and end are stored to the second: no finer duration is on record
    run = runs["c52cfaa9d7a8"]
    assert run.command.startswith("dlbench peak") and run.tag == "peak"
    says(f"`dlbench peak` ({wall_s(run):.0f} s by its run's start and end, which the store keeps "
         "to the second;")


def _vs_smaller(store, at):
    """The fastest ok throughput record of ``at``'s setup at a smaller batch (the report's
    ``vs smaller batch`` column), and ``at``'s gain over it."""
    from dlbench.report.tables import _setup_key  # noqa: PLC0415
    same = [r for r in store.results(kind="throughput") if r.ok
            and _setup_key(r) == _setup_key(at) and r.config.batch_size < at.config.batch_size]
    if not same:
        return None, None
    best = max(same, key=rate)
    return best, rate(at) / rate(best) - 1


def test_largest_batch_that_fits(store, runs):
    rows = {label.split()[0]: tuple(map(store.get, (*bf, *fp)))
            for label, bf, fp in H._MAXBATCH_ROWS}  # (bf16 search, its record, fp32 ...)
    # the gains over the fastest smaller batch, and over the first machine's default suite
    names = {"resnet152": "ResNet-152", "inception_v3": "Inception v3",
             "inception_v4": "Inception v4", "vit_b_16": "ViT-B/16"}
    gains, at = {}, {}
    for model, (_, t, _, _) in rows.items():
        best, gain = _vs_smaller(store, t)
        if best is not None:
            gains[model], at[model] = (best, gain), t
    assert "densenet161" not in gains
    best, gain = gains["resnet50"]
    assert (best.run_id, best.config.batch_size) == ("0d2fcf063d64", 1790)
    fastest_1024 = max((r for r in store.results(kind="throughput") if r.ok
                        and r.config.key() == replace(best.config, batch_size=1024).key()),
                       key=rate)
    says(f"the boundary bought ResNet-50 {gain:+.1%} (1,790 → 1,792: the command-line search "
         f"beside Fidelity measured 1,790; {rate(at['resnet50']) / rate(fastest_1024) - 1:+.1%} "
         "against batch 1,024), "
         + ", ".join(f"{names[m]} {gains[m][1]:+.1%}" for m in ("resnet152", "inception_v3",
                                                                 "inception_v4"))
         + f", NASNet {gains['nasnet'][1]:+.1%} ({gains['nasnet'][0].config.batch_size} → "
           f"{at['nasnet'].config.batch_size}), ViT-B/16 {gains['vit_b_16'][1]:+.1%}, GPT-2 "
           f"{gains['gpt2'][1]:+.1%} ({gains['gpt2'][0].config.batch_size} → "
           f"{at['gpt2'].config.batch_size}), and cost VGG-16 {gains['vgg16'][1]:+.1%}")
    flags = {m: H.record_flags(t) for m, t in at.items()}
    assert all(f[0] in ("time cap", "noisy (time cap)") for f in flags.values())
    assert [m for m, f in flags.items() if f[0] == "noisy (time cap)"] == ["vgg16"]
    steps = [int(f[1].split()[0]) for f in flags.values()]
    assert all(f[1].endswith(" of 20 steps") for f in flags.values())
    throttled = [m for m, f in flags.items() if "throttled (power)" in f]
    words = {4: "four"}
    says(f"stopped by the time cap after {min(steps)}-{max(steps)} of its 20 steps, VGG-16's "
         f"before its interval reached 1% (`noisy (time cap)`), and {words[len(throttled)]} "
         "were `throttled (power)`")
    first = {m: H.latest(store.results(run_id=H.DEFAULT_SUITE_RUN, kind="throughput"),
                         model=at[m].config.model, mode="train") for m in at}
    more = {m: (rate(at[m]) / rate(first[m]) - 1) - gains[m][1] for m in at}
    assert max(more, key=more.get) == "vit_b_16"
    says(f"against the first machine's default suite alone the gains read "
         f"{min(more.values()) * 100:.1f}-{max(more.values()) * 100:.1f} points higher (ViT-B/16 "
         f"{rate(at['vit_b_16']) / rate(first['vit_b_16']) - 1:+.1%})")
    # -b auto and the batch sweep, with their flags
    (auto,) = store.results(run_id="a9114074c195", kind="throughput")
    assert runs["a9114074c195"].command.startswith(
        "dlbench throughput -m resnet50 --precision bf16 --channels-last on -b auto --max-time 5")
    flags_say(auto, "time cap", "13 of 20 steps", "throttled (power)")
    says(f"measured {fmt_num(rate(auto))} img/s at {auto.config.batch_size:,} (run a9114074c195; "
         "time cap, 13 of 20 steps, throttled (power))")
    sweep = store.results(run_id="5c869be37648", kind="throughput")
    ok, oom = [r for r in sweep if r.ok], [r for r in sweep if not r.ok]
    assert [r.config.batch_size for r in oom] == [1024, 2048]
    assert all(r.error_type == "oom" for r in oom)
    for r, n in zip(ok, (6, 4)):
        flags_say(r, "time cap", f"{n} of 20 steps", "throttled (power)")
    says(f"gave {fmt_num(rate(ok[0]))} and {fmt_num(rate(ok[1]))} img/s at 256 and 512 "
         f"(±{fmt_pct(hw(ok[0]))} and ±{fmt_pct(hw(ok[1]))}; both time cap, 6 and 4 of 20 steps, "
         "throttled (power)) and ran out of memory at 1,024 and 2,048")
    # fp32 against bf16: batch and speed at the boundary
    cnn = {m: v for m, v in rows.items() if m != "gpt2"}
    share = [fs.best_batch / bs.best_batch for bs, _, fs, _ in cnn.values()]
    says(f"fit about half the batch in fp32 ({min(share):.2f}x-{max(share):.2f}x; ResNet-50 "
         f"{rows['resnet50'][2].best_batch} against {rows['resnet50'][0].best_batch:,})")
    g_bf, _, g_fp, _ = rows["gpt2"]
    says(f"GPT-2 only {1 - g_fp.best_batch / g_bf.best_batch:.0%} less "
         f"({g_fp.best_batch} against {g_bf.best_batch})")
    slower = [rate(bt) / rate(ft) for m, (_, bt, _, ft) in cnn.items() if m != "vgg16"]
    assert all(not fs.config.base.autotune for m, (_, _, fs, _) in cnn.items() if m != "vit_b_16")
    assert all(H.record_flags(ft)[0] in ("time cap", "noisy (time cap)")
               for _, _, _, ft in rows.values())
    r50 = rows["resnet50"]
    says(f"is {min(slower):.1f}-{max(slower):.1f}x slower at the boundary for the CNNs and "
         f"ViT-B/16 (VGG-16 aside), {rate(rows['gpt2'][1]) / rate(rows['gpt2'][3]):.1f}x "
         f"for GPT-2: ResNet-50 {fmt_num(rate(r50[3]))} against {fmt_num(rate(r50[1]))} img/s. "
         "Every one of these windows was stopped by the time cap")
    # autotuning's first step in fp32, and the probes and searches without it
    a32, h32 = (store.results(run_id=i, kind="throughput")[0]
                for i in ("efcc1768c202", "9b07bfdb2796"))
    says(f"(ResNet-50 at batch 256: a {a32.first_step_s:.1f} s first step autotuned against "
         f"{h32.first_step_s:.1f} s with the heuristics)")
    heur = [fs for m, (_, _, fs, _) in cnn.items() if m not in ("vgg16", "vit_b_16")]
    probes = [p.wall_s for fs in heur for p in fs.probes if p.wall_s]
    says(f"`--no-autotune` brought a probe to {min(probes):.0f}-{max(probes):.0f} s and a search "
         f"to {min(fs.search_wall_s for fs in heur):.0f}-"
         f"{max(fs.search_wall_s for fs in heur):.0f} s (VGG-16 aside)")
    assert not any(m.config.base.precision == "fp32" and m.config.base.autotune
                   and m.config.base.model != "vit_b_16" and m.config.base.model != "gpt2"
                   for m in store.results(kind="maxbatch"))
    # VGG-16 fp32: the probes near its boundary and the figure at 1,022
    _, _, vs, vt = rows["vgg16"]
    wall = {p.batch: p.wall_s for p in vs.probes if p.wall_s}
    flags_say(vt, "time cap", "2 of 20 steps")
    eager128 = H.latest([r for r in store.results(kind="throughput")
                         if runs[r.run_id].tag == H.CLASSIC_CNN_TAG], model="vgg16",
                        precision="fp32", compile=None)
    assert eager128.config.batch_size == 128 and eager128.config.autotune
    says(f"probes of {wall[914]:.0f} s at 914, {wall[1022]:.0f} s at 1,022, {wall[1076]:.0f} s "
         f"at 1,076, and {fmt_num(rate(vt))} img/s measured at 1,022 (time cap, 2 of 20 steps), "
         f"{rate(eager128) / rate(vt):.0f} times below its {fmt_num(rate(eager128))} img/s at "
         "batch 128")
    # the ‡ footnote: the three invocations of VGG-16's fp32 search
    first, second, third = (runs[i] for i in ("445d70e2e89a", "9c8ae9bb6ada", "9db99909942e"))
    assert (first.status, second.status, third.status) == ("interrupted", "interrupted", "done")
    (lost,) = store.results(run_id="9c8ae9bb6ada")
    assert (lost.config.batch_size, lost.error_type) == (1076, "oom")
    assert store.results(run_id="9db99909942e", kind="maxbatch")[0].id == vs.id
    assert third.command.startswith(
        "dlbench maxbatch -m vgg16 --precision fp32 --channels-last --no-autotune --tolerance 0.1 "
        "--max-time 2 --warmup 0 --warmup-time 0 --min-steps 2 --resume")
    assert (vt.config.warmup_steps, vt.config.stop.min_steps) == (10, 20)
    assert len(vt.warmup_times_s) == 10 and len(vt.step_times_s) == 2
    says(f"(run 445d70e2e89a, cut by a time limit after {wall_s(first):.0f} s); the next "
         f"invocation (9c8ae9bb6ada) measured 1,076 out of memory and was cut after "
         f"{wall_s(second):.0f} s in all, stepping down to 1,022")
    says(f"measured 1,022 in {wall_s(third):.0f} s. Its record holds 10 warm-up steps "
         f"({sum(vt.warmup_times_s):.0f} s) and a 20-step minimum")
    says(f"the time cap ended its window after 2 steps of {max(vt.step_times_s):.1f} s")
    # the bf16 searches' probes; NASNet's resumed search
    bf = [bs for bs, _, _, _ in rows.values()]
    total = {bs.config.base.model: sum(p.wall_s for p in bs.probes if p.wall_s) for bs in bf}
    walls = [p.wall_s for bs in bf for p in bs.probes if p.wall_s]
    counts = [len(bs.probes) for bs in bf]
    assert max(total, key=total.get) == "nasnet"
    says(f"A bf16 search's probes took {min(total.values()):.0f}-{max(total.values()):.0f} s in "
         f"all ({min(counts)}-{max(counts)} probes of {min(walls):.0f}-{max(walls):.0f} s; "
         "NASNet's the slowest, over two invocations)")
    (cut,) = store.results(run_id="c4a0fe1946ef")
    assert cut.error_type == "interrupted"
    assert [(p.batch, p.fits) for p in cut.probes] == [(64, True), (144, True), (159, False)]
    assert rows["nasnet"][0].probes[:3] == cut.probes and len(rows["nasnet"][0].probes) == 4
    says('(NASNet resumed from "64 and 144 fit, 159 OOM" and needed one more probe)')
    # the first search and the cut autotuned fp32 run
    (rn50,) = store.results(run_id="8db556e9f53b")
    assert runs["8db556e9f53b"].status == "running" and rn50.id == rows["resnet50"][0].id
    says(f"The first search (run 8db556e9f53b, all nine models in one invocation) stored "
         f"ResNet-50 bf16 ({rn50.best_batch:,} fits, {rn50.first_oom_batch:,} OOM)")
    assert runs["d8dee7906665"].status == "running" and not store.results(run_id="d8dee7906665")
    says("(d8dee7906665) was cut before its first step ended: status `running`, no result")


def test_where_the_time_goes(store):
    from dlbench.measure.kernels import summarise  # noqa: PLC0415
    rows = {"ResNet-50 b1024 bf16 NCHW eager (plain)": "8b248dcfe99f",
            "ResNet-50 b256 bf16 channels_last eager": "7262371ca2dc",
            "ResNet-50 b1024 fp16 tuned, compiled by default": "f315a66c6417",
            "the same under max-autotune (Inductor's Triton templates for 1x1 convolutions: "
            "6.2 ms more)": "1d65b62624ab", "GPT-2 b64 bf16 tuned (cuDNN attention: 27.2 ms, "
            "19%)": "c4cf9e9b617a"}
    columns = ("convolution", "GEMM", "pointwise (Inductor)", "reduction (Inductor)",
               "batch norm", "elementwise, reduction (PyTorch)")
    busy, share = [], {}
    for label, rid in rows.items():
        r = store.get(rid)
        s = summarise(r.profile, r.summary().median_s)
        busy.append(s["busy"])
        cats = {c["category"]: c for c in s["categories"]}
        share[rid] = {k: c["share"] for k, c in cats.items()}
        def cell(k: str) -> str:
            c = cats.get(k)
            return f"{c['per_step_s'] * 1e3:.1f} ({c['share']:.0%})" \
                if c and c["per_step_s"] > 1e-3 else "-"
        flags = [f for f in H.record_flags(r) if f != "one process"]
        assert "one process" in H.record_flags(r)
        says(f"| {label} | {r.summary().median_s * 1e3:.1f} ms | "
             + " | ".join(cell(k) for k in columns)
             + f" | {'; '.join(flags) or '–'} | {r.run_id} |")
    says(f"The kernels add up to {min(busy) * 100:.1f}-{max(busy):.1%} of the window's median step")
    tuned = store.get("1d65b62624ab")
    ms = {c["category"]: c["per_step_s"] for c in summarise(tuned.profile)["categories"]}
    says(f"Triton templates for 1x1 convolutions: "
         f"{ms['convolution (Inductor template)'] * 1e3:.1f} ms more")
    gpt = {c["category"]: c for c in summarise(store.get("c4cf9e9b617a").profile)["categories"]}
    says(f"(cuDNN attention: {gpt['attention']['per_step_s'] * 1e3:.1f} ms, "
         f"{gpt['attention']['share']:.0%})")
    assert round(gpt["GEMM"]["share"], 1) == 0.5 and round(gpt["attention"]["share"], 1) == 0.2
    says("For GPT-2 half the step is cuBLAS GEMMs and a fifth cuDNN's flash attention")
    # batch norm, ReLU and the residual adds: eager's batch norm and elementwise kernels,
    # compiled, Inductor's pointwise and reduction kernels
    eager = [share[i]["batch norm"] + share[i]["elementwise, reduction (PyTorch)"]
             for i in ("8b248dcfe99f", "7262371ca2dc")]
    compiled = [share[i]["pointwise (Inductor)"] + share[i]["reduction (Inductor)"]
                for i in ("f315a66c6417", "1d65b62624ab")]
    assert {round(x, 1) for x in eager} == {0.7} and {round(x, 1) for x in compiled} == {0.6}
    says("take about 70% of the step eager and 60% compiled")
    nchw = store.get("8b248dcfe99f").profile
    layout = sum(s for name, _, s in nchw["kernels"]
                 if "nchwToNhwc" in name or "nhwcToNchw" in name) / nchw["steps"]
    says(f"NCHW eager also spends {layout * 1e3:.1f} ms per step converting layouts")
    assert not any("nchwToNhwc" in k[0] for k in store.get("7262371ca2dc").profile["kernels"])
    assert gpu(store.get("f315a66c6417"))["uuid"] != gpu(tuned)["uuid"]
    says("The profiles of the default and the max-autotune compile come from two machines")


def test_the_levers_autotune_records():
    """``autotune-records.tgz``: Inductor's timing of each choice for each convolution and
    GEMM of ResNet-50's max-autotune compile (ms, lower is better)."""
    with tarfile.open(FOLDER / "autotune-records.tgz") as tgz:
        (member,) = [m for m in tgz.getmembers() if "/cache/" in m.name]
        cache = json.load(tgz.extractfile(member))["cache"]
    won, lost = {}, {}
    for op, shapes in cache.items():
        for choices in (t for by_prec in shapes.values() for t in by_prec.values()):
            triton = min(t for k, t in choices.items() if k.startswith("triton"))
            library = min(t for k, t in choices.items() if not k.startswith("triton"))
            (won if triton < library else lost).setdefault(op, []).append(library / triton)
    assert "convolution" not in won
    says(f"cuDNN won all {len(lost['convolution'])} convolution shapes Inductor timed as "
         "convolutions")
    gemms = sum(len(won.get(op, [])) + len(lost.get(op, [])) for op in ("mm", "addmm"))
    assert len(won["addmm"]) == 1  # the classifier: the one matmul with a bias
    lo, hi = min(won["mm"]) - 1, max(won["mm"]) - 1
    says(f"Triton templates won {len(won['mm']) + 1} of the {gemms} GEMMs (1x1 convolutions "
         f"computed as matrix products by {lo * 100:.0f}-{hi:.0%}, the classifier's by "
         f"{won['addmm'][0]:.1f}x)")


def test_the_closing_links(tmp_path):
    def committed(name: str) -> Store:
        target = tmp_path / name.replace("/", "_").removesuffix(".gz")
        with gzip.open(FOLDER / name) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
        return Store(target)

    # the default suite with three processes per config: dlbench's wall time in each log
    wall = [float(re.search(r"wall time ([\d.]+) s", (FOLDER / "default-suite-repeat" / log)
                            .read_text()).group(1)) for log in ("run.log", "run-spawned.log")]
    says(f"{wall[0]:.0f} s of dlbench's wall time with processes forked from the zygote "
         f"({wall[1]:.0f} s when each started a new interpreter")
    # own models: CLI and API
    rows = json.loads((FOLDER / "own-models" / "agreement.json").read_text())
    conv, gpt = rows
    assert all(r["agree"] for r in rows) and conv["model"] == "timm:convnext_tiny"
    assert fmt_num(conv["cli"]["per_s"]) == fmt_num(conv["api"]["per_s"])
    says(f"timm:convnext_tiny b{conv['batch']} {fmt_num(conv['cli']['per_s'])} img/s both ways; "
         f"hf:gpt2 b{gpt['batch']} {fmt_num(gpt['cli']['per_s'])} and "
         f"{fmt_num(gpt['api']['per_s'])} tok/s (one process each)")
    # the matmul grid on two cards, against the published maximum achievable rate
    grids = []
    for name in ("peak-grid/dlbench.db.gz", "frameworks/first-measurements.db.gz"):
        st = committed(name)
        recs = st.results(kind="peak")
        bf16 = [r for r in recs if r.ok and r.config.verb == "matmul"
                and r.config.precision == "bf16"]
        (peaks,) = measured_peaks(recs).values()
        ceiling = peaks["bf16"]
        (uuid,) = {r.env["gpus"][0]["uuid"][:12] for r in bf16}
        grids.append((ceiling, uuid, len(bf16)))
        st.close()
    (a, ua, na), (b, ub, nb) = grids
    assert na == nb
    says(f"bf16 median {a:.1f} TFLOP/s on {ua} and {b:.1f} on {ub} ({na} shapes each")
    (mamf,) = [r["value"] for r in json.loads(
        (ROOT / "src/dlbench/reference/today.json").read_text())["rows"]
        if r["kind"] == "matmul_ceiling" and r["gpu_id"] == "h100-sxm"
        and r["precision"] == "bf16"]
    says(f"{1 - b / mamf:.2%} under {mamf} (the published maximum achievable bf16 matmul rate "
         f"of an H100 SXM, docs/ceilings.md) on one card, {a / mamf - 1:.1%} above it")
    # time to accuracy with the rules' recipe
    st = committed("time-to-accuracy-recipe/dlbench.db.gz")
    runs_ = st.results(kind="train")
    st.close()
    batches = sorted({r.config.batch_size for r in runs_})
    by = {b: [r for r in runs_ if r.config.batch_size == b] for b in batches}
    assert all(len(rs) == 5 and all(r.converged for r in rs) for rs in by.values())
    assert all(r.mllog for r in runs_) and len(runs_) == 25
    olympic = [statistics.mean(sorted(r.time_to_train_s for r in rs)[1:-1]) for rs in by.values()]
    says(f"5 of 5 seeds reach 0.90 at every global batch from {batches[0]} to {batches[-1]} on "
         f"one GPU (olympic means {' / '.join(f'{x:.2f}' for x in olympic)} s at "
         f"{' / '.join(map(str, batches))}), with the store and the {len(runs_)} MLPerf "
         "logs")

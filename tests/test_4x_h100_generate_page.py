"""The four-H100 generation page's prose against its records: the figures it quotes, its
commands and its environment are recomputed here from the committed store, the logs and the
fidelity file (its tables are rendered from the same store by tests/test_readme_claims.py)."""

from __future__ import annotations

import json
import re
import shlex
import statistics
from datetime import datetime
from pathlib import Path

import pytest
from fakes.pages import H, assert_says, prose, stored_runs

from dlbench.report.groups import group_figure
from dlbench.report.table import fmt_num, fmt_pct

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / H.GENERATE_4X_PAGE).read_text()
FOLDER = ROOT / "results" / H.H100_4_GENERATE
ALL_RUNS = (H.GENERATE_4X_WO_RUNS + H.GENERATE_4X_DYNAMIC_RUNS + H.GENERATE_4X_LARGEST_RUNS
            + (H.GENERATE_4X_REPEAT_RUN,))
DATASHEET_GBS = 3350.0  # the H100 SXM's spec row: no `dlbench peak` ran in these calls
GPU = {"0": "GPU-ce856b08", "1": "GPU-e918fe8c", "2": "GPU-2fb6c566"}


def says(text: str) -> None:
    assert_says(PAGE, text)


def ms(seconds: float) -> str:
    return fmt_num(seconds * 1e3, 3)


def rate(r) -> str:
    return fmt_num(r.output_tokens_per_s())


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    recs, peaks = stored_runs(H.H100_4_GENERATE, ALL_RUNS, "generate",
                              tmp_path_factory.mktemp("gen4"))
    return recs, peaks


@pytest.fixture(scope="module")
def records(store):
    return store[0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each stored run's row: its command line, its times, its environment."""
    import sqlite3
    s = H.open_store(ROOT / "results", H.H100_4_GENERATE, tmp_path_factory.mktemp("runs"))
    path = s.path
    s.close()
    con = sqlite3.connect(path)
    rows = {rid: {"command": cmd, "started": started, "finished": finished,
                  "env": json.loads(env), "status": status}
            for rid, cmd, started, finished, env, status in con.execute(
                "select run_id, command, started_at, finished_at, env_json, status from runs")}
    con.close()
    return rows


def pick(recs, run, batch=1, precision=None, path=None):
    """The one ok record of ``run`` at ``batch`` with that precision label and path label."""
    [r] = [r for r in recs if r.ok and r.run_id == run and r.config.batch_size == batch
           and precision in (None, r.config.precision_label)
           and path in (None, r.config.path_label)]
    return r


def card(r) -> str:
    return r.env["gpus"][0]["uuid"][:12]


def test_the_store_holds_these_runs_and_no_other(runs, records):
    assert set(runs) == set(ALL_RUNS)
    assert all(row["status"] == "done" for row in runs.values())
    assert all(r.ok for r in records) and len(records) == 14
    # the tables keep fp8's recipes apart: generate_runs labels a row by its precision only
    wo = [r for r in records if r.run_id in H.GENERATE_4X_WO_RUNS and r.config.precision == "fp8"]
    dyn = [r for r in records
           if r.run_id in H.GENERATE_4X_DYNAMIC_RUNS and r.config.precision == "fp8"]
    assert wo and all(r.config.fp8_recipe == "weight-only" for r in wo)
    assert dyn and all(r.config.fp8_recipe == "dynamic" for r in dyn)
    says("Every fp8 row of this table is the weight-only recipe")
    says("Every fp8 row of this table is the dynamic recipe")


def _page_commands() -> list[tuple[str, str]]:
    """(CUDA_VISIBLE_DEVICES, command) of each line of the page's command block, $G expanded,
    continuations joined, comments dropped."""
    [block] = re.findall(r"```sh\n(.*?)```", PAGE, re.S)
    out, g = [], None
    for line in block.replace("\\\n", " ").splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        m = re.fullmatch(r'G="(.*)"', line)
        if m:
            g = m.group(1)
            continue
        dev, cmd = re.fullmatch(r"CUDA_VISIBLE_DEVICES=(\d) (.*)", line).groups()
        out.append((dev, " ".join(cmd.replace("$G", g or "$G").split())))
    return out


def test_the_commands_are_the_stored_ones(runs, records):
    cmds = _page_commands()
    stored = {}
    for rid, row in runs.items():
        words = shlex.split(row["command"])
        i = words.index("--db")
        stored[" ".join(words[:i] + words[i + 2:])] = (rid, row)
    dlbench = [(dev, c) for dev, c in cmds if c.startswith("dlbench ")]
    assert len(dlbench) == len(stored) == 9
    for dev, c in dlbench:
        rid, row = stored[c]  # the page's command, as run (less its --db)
        assert row["env"]["env_vars"]["CUDA_VISIBLE_DEVICES"] == dev
        assert row["env"]["gpus"][0]["uuid"].startswith(GPU[dev])
    # the fidelity check: its log's command line, on GPU 2
    [(dev, fid)] = [(d, c) for d, c in cmds if "fidelity.py" in c]
    log = (FOLDER / "first-fid.log").read_text()
    assert fid.replace("--out fidelity-compile-shared.json", "").split()[2:] == \
        re.search(r"fidelity\.py (.*) --out", log).group(1).split()
    d = json.loads((FOLDER / "fidelity-compile-shared.json").read_text())
    assert dev == d["env"]["env_vars"]["CUDA_VISIBLE_DEVICES"] == "2"
    assert d["env"]["gpus"][0]["uuid"].startswith(GPU["2"])
    # the compiled weight-only sweep: its time limit ended it after both results were stored
    text = (FOLDER / "first-fp8.log").read_text()
    tail = text[text.index("--fp8-recipe weight-only --path compile"):]
    assert "2 result(s) stored" in tail and tail.rstrip().endswith("rc 124")
    assert len([r for r in records if r.run_id == "79e5f343dbde"]) == 2


def test_the_two_calls_and_what_ran_at_the_same_time(runs):
    t = {rid: (datetime.fromisoformat(row["started"]), datetime.fromisoformat(row["finished"]))
         for rid, row in runs.items()}
    first = ("98c01b1791ff", "b0f23aa2eff6", "79e5f343dbde", "ff986811406a", "aba302c3ac70")
    second = ("5c3e7dd4a8aa", "80f27034a7f7", "4c7db2507e19", "be3f4a3e5ab3")
    gap = min(t[r][0] for r in second) - max(t[r][1] for r in first)
    assert 0 < gap.total_seconds() < 60
    says("the second starting under a minute after the first call's last run ended")
    # GPU 0's bf16 then weight-only, one after the other; GPU 1's dynamic run beside them
    assert t["5c3e7dd4a8aa"][1] <= t["80f27034a7f7"][0]
    assert t["4c7db2507e19"][0] < t["5c3e7dd4a8aa"][1] and t["5c3e7dd4a8aa"][0] < \
        t["4c7db2507e19"][1]
    # the 1B group ran on GPU 1 while GPU 0 ran its fp8 runs
    assert t["ff986811406a"][0] < t["b0f23aa2eff6"][1] and t["98c01b1791ff"][0] < \
        t["ff986811406a"][1]


def test_the_environment(records):
    env = records[0].env
    assert {r.env["driver"] for r in records} == {"580.159.04"}
    says(f"| driver | {env['driver']} |")
    assert {r.env["cuda_runtime"] for r in records} == {"13.0"}
    says(f"| CUDA runtime | {env['cuda_runtime']} |")
    pk = env["packages"]
    says(f"| torch | {pk['torch']} (transformers {pk['transformers']}; torchao 0.18.0")
    assert "torchao" not in pk  # "the records' package list does not name torchao"
    says("the records' package list does not name torchao")
    says(f"| host | {env['cpu_logical_cores']} CPU cores (Intel Xeon); Python {env['python']}; "
         "Linux 6.18 |")
    assert env["kernel"].startswith("6.18") and "Xeon" in env["cpu_model"]
    gpus = {r.env["gpus"][0]["uuid"] for r in records}
    assert {g[:12] for g in gpus} == set(GPU.values())
    assert {r.env["gpus"][0]["power_limit_w"] for r in records} == {700.0}
    assert {r.env["gpus"][0]["name"] for r in records} == {"NVIDIA H100 80GB HBM3"}
    for dev, uuid in GPU.items():
        says(f"GPU {dev} ({uuid})")
    assert "NV18" in env["topology"] and env["topology"].count("NV18") == 12


def test_the_roof_is_the_datasheets(store):
    recs, peaks = store
    assert not peaks  # no `dlbench peak` in these calls
    from dlbench.report.generate_figures import bandwidth_roof
    assert {(bandwidth_roof(r, peaks).gbs, bandwidth_roof(r, peaks).source) for r in recs} == \
        {(DATASHEET_GBS, "datasheet")}
    says("every memory roof below is the datasheet's 3,350 GB/s")


def test_weight_only_against_bf16_on_one_card(records):
    bf = pick(records, "5c3e7dd4a8aa", precision="bf16", path="compile+fuse+fold")
    wo = pick(records, "80f27034a7f7", precision="fp8-wo", path="compile+fuse+fold")
    assert card(bf) == card(wo) == GPU["0"]
    tb, tw = bf.tpot().mean_s, wo.tpot().mean_s
    says(f"the weight-only recipe made {rate(wo)} output tokens/s against bf16's {rate(bf)}, "
         f"{wo.output_tokens_per_s() / bf.output_tokens_per_s():.2f} times, with a decode step "
         f"of {ms(tw)} ms against {ms(tb)} ms ({tb / tw:.2f} times shorter)")
    gb = lambda r: r.decode_bytes_per_step() / 1e9  # noqa: E731
    says(f"Each step reads {gb(wo):.2f} GB of weights instead of {gb(bf):.2f} GB, so it runs at "
         f"{wo.roofline_fraction(DATASHEET_GBS):.1%} of the datasheet's roof where bf16 runs at "
         f"{bf.roofline_fraction(DATASHEET_GBS):.1%}")
    assert round(gb(wo) / gb(bf), 1) == 0.5 and round(1 - tw / tb, 2) == 0.26  # half, a quarter
    says("about half the bytes, a quarter less time")
    says(f"It took {fmt_num(wo.energy_per_output_token_j(), 3)} J an output token against "
         f"{fmt_num(bf.energy_per_output_token_j(), 3)}")
    first = pick(records, "79e5f343dbde", precision="fp8-wo", path="compile+fuse+fold")
    assert card(first) == GPU["0"]
    says(f"the first call's weight-only run on the same card made {rate(first)} tokens/s (a step "
         f"of {ms(first.tpot().mean_s)} ms), "
         f"{1 - first.output_tokens_per_s() / wo.output_tokens_per_s():.1%} below the second's")
    assert all(H.record_flags(r) == ["one process"] for r in (bf, wo, first))
    says("Both figures come from one process each")


def test_bf16_agrees_with_the_single_h100_page(records, tmp_path):
    bf = pick(records, "5c3e7dd4a8aa", precision="bf16", path="compile+fuse+fold")
    recs, _ = stored_runs(H.H100_GENERATE, H.GENERATE_THIRD_RUNS, "generate", tmp_path)
    [single] = [r for r in recs if r.ok and r.config.model == "llama-3.1-8b"
                and r.config.batch_size == 1 and r.config.precision == "bf16"
                and r.config.path_label == "compile+fuse+fold"]
    says(f"bf16's {rate(bf)} is where the [single-H100 page](2026-11-h100-generate.md) put the "
         f"same compiled, fused and folded step ({rate(single)} tokens/s)")
    assert abs(bf.output_tokens_per_s() / single.output_tokens_per_s() - 1) < 0.02


def test_time_to_first_token(records):
    bf = pick(records, "5c3e7dd4a8aa", precision="bf16", path="compile+fuse+fold")
    wo = pick(records, "80f27034a7f7", precision="fp8-wo", path="compile+fuse+fold")
    says(f"**Time to first token**: {ms(wo.ttft().mean_s)} ms against bf16's "
         f"{ms(bf.ttft().mean_s)} ms, {wo.ttft().mean_s / bf.ttft().mean_s:.1f} times")
    says(f"why its prefill takes {wo.ttft().mean_s / bf.ttft().mean_s:.1f} times bf16's")
    # the decode step gains more than the output rate does
    assert bf.tpot().mean_s / wo.tpot().mean_s > wo.output_tokens_per_s() / \
        bf.output_tokens_per_s()
    graph = pick(records, "b0f23aa2eff6", precision="fp8-wo", path="graph+fuse+fold")
    first = pick(records, "79e5f343dbde", precision="fp8-wo", path="compile+fuse+fold")
    says(f"prefill took as long graph-captured ({ms(graph.ttft().mean_s)} ms) as compiled "
         f"({ms(first.ttft().mean_s)} and {ms(wo.ttft().mean_s)} ms)")
    ttfts = [r.ttft().mean_s for r in (graph, first, wo)]
    assert max(ttfts) / min(ttfts) < 1.02


def test_not_compiled_the_weight_only_recipe_is_slow(records):
    g = pick(records, "b0f23aa2eff6", precision="fp8-wo", path="graph+fuse+fold")
    b = pick(records, "98c01b1791ff", precision="bf16", path="graph+fuse+fold")
    assert card(g) == card(b) == GPU["0"]
    says(f"graph-captured, the weight-only step takes {ms(g.tpot().mean_s)} ms a token "
         f"({rate(g)} tokens/s), {g.tpot().mean_s / b.tpot().mean_s:.1f} times bf16's "
         f"graph-captured {ms(b.tpot().mean_s)} ms on the same card")


def test_batch_64_across_cards(records, tmp_path):
    w64 = pick(records, "79e5f343dbde", batch=64, precision="fp8-wo")
    assert H.record_flags(w64) == ["throttled (power)", "one process"]
    says(f"the weight-only recipe made {rate(w64)} tokens/s (a step of {ms(w64.tpot().mean_s)} "
         "ms, throttled (power))")
    # no other batch-64 run in these calls
    assert [r for r in records if r.config.batch_size == 64] == [w64]
    morning, _ = stored_runs(H.H100_4, H.GENERATE_FP8_RUNS, "generate", tmp_path)
    [b64] = [r for r in morning if r.ok and r.config.batch_size == 64
             and r.config.precision == "bf16"]
    [d64] = [r for r in morning if r.ok and r.config.batch_size == 64
             and r.config.precision_label == "fp8"]
    assert card(b64) not in GPU.values() and card(d64) not in GPU.values()
    assert all(r.created_at[:10] == w64.created_at[:10] and r.created_at < w64.created_at
               for r in (b64, d64))  # earlier that day
    says(f"bf16 made {rate(b64)} and the dynamic recipe {rate(d64)}, so weight-only made "
         f"{w64.output_tokens_per_s() / b64.output_tokens_per_s():.2f} of bf16's rate there, "
         "across cards")


def test_the_dynamic_recipe(records, tmp_path):
    dyn = pick(records, "4c7db2507e19", precision="fp8", path="compile+fuse+fold")
    wo = pick(records, "80f27034a7f7", precision="fp8-wo", path="compile+fuse+fold")
    assert card(dyn) == GPU["1"] and card(wo) == GPU["0"]
    says(f"the dynamic recipe's step takes {ms(dyn.tpot().mean_s)} ms, where the weight-only "
         f"recipe's took {ms(wo.tpot().mean_s)} ms on GPU 0 at the same time "
         f"({1 - wo.tpot().mean_s / dyn.tpot().mean_s:.0%} shorter, two cards), and its time "
         f"to first token is {ms(dyn.ttft().mean_s)} ms")
    assert "noisy" in H.record_flags(dyn)
    says(f"Its window is `noisy` (±{fmt_pct(dyn.summary().rel_halfwidth)})")
    morning, _ = stored_runs(H.H100_4, H.GENERATE_FP8_RUNS, "generate", tmp_path)
    [m1] = [r for r in morning if r.ok and r.config.batch_size == 1
            and r.config.precision == "fp8" and r.config.path == "compile"]
    assert card(m1) not in GPU.values()
    says(f"On another card that morning the same config took {ms(m1.tpot().mean_s)} ms a step")
    g = pick(records, "98c01b1791ff", precision="fp8", path="graph+fuse+fold")
    b = pick(records, "98c01b1791ff", precision="bf16", path="graph+fuse+fold")
    says(f"{ms(g.tpot().mean_s)} ms a step against bf16's {ms(b.tpot().mean_s)} ms on the same "
         f"card (the dynamic recipe slower than bf16 again, as that morning), its window "
         f"`noisy (time cap)` (±{fmt_pct(g.summary().rel_halfwidth)})")
    assert "noisy (time cap)" in H.record_flags(g) and g.tpot().mean_s > b.tpot().mean_s
    [mg], [mb] = ([r for r in morning if r.ok and r.config.path == "graph"
                   and r.config.precision == p] for p in ("fp8", "bf16"))
    assert mg.tpot().mean_s > mb.tpot().mean_s  # "again, as that morning"


def test_three_processes_of_one_config(records):
    group = [r for r in records if r.run_id == H.GENERATE_4X_REPEAT_RUN]
    assert len(group) == 3 and len({r.repeat_group for r in group}) == 1
    assert {card(r) for r in group} == {GPU["1"]}
    group.sort(key=lambda r: r.created_at)
    fast, slow = 2.37e-3, 2.66e-3
    for i, r in enumerate(group, 1):
        t = r.tpot()
        steps = r.decode_times()
        over = sum(d > 2.5e-3 for d in steps) / len(steps)
        flags = H.record_flags(r)
        says(f"| {i} | {rate(r)} ±{fmt_pct(r.summary().rel_halfwidth)} | {ms(r.ttft().mean_s)} | "
             f"{ms(t.mean_s)} ({ms(t.median_s)} / {ms(t.p99_s)}) | "
             f"{f'{over:.0%}' if over == 1 else f'{over:.1%}'} | {'; '.join(flags) or '–'} |")
        # "one of two times": nearly every step within 0.05 ms of one of them
        near = sum(min(abs(d - fast), abs(d - slow)) < 5e-5 for d in steps) / len(steps)
        assert near > 0.99
    g = group_figure(group)
    says(f"The group's figure is **{fmt_num(g.mean)} tokens/s ±{fmt_pct(g.rel_halfwidth)}** "
         "across the three processes")
    lo, hi = (min(r.output_tokens_per_s() for r in group),
              max(r.output_tokens_per_s() for r in group))
    says(f"the processes are {hi / lo - 1:.1%} apart ({fmt_num(lo)} to {fmt_num(hi)})")
    says(f"where the 1B group's processes came out {hi / lo - 1:.1%} apart")
    assert all(r.summary().rel_halfwidth < 0.01 for r in group[:2])  # "under 1%"
    assert group[0].tpot().median_s > 2.6e-3 and all(r.tpot().median_s < 2.4e-3
                                                     for r in group[1:])


def test_the_largest_3b_batch(records, tmp_path):
    log = (FOLDER / "first-gen.log").read_text()
    [chosen] = re.findall(r"-b auto: llama-3\.2-3b bf16 128\+128 -> batch (\d+)", log)
    says(f"`-b auto` chose batch {chosen} for llama-3.2-3b")
    eager = pick(records, "aba302c3ac70", batch=int(chosen), path="eager")
    fused = pick(records, "aba302c3ac70", batch=int(chosen), path="compile+fuse")
    plain = pick(records, "be3f4a3e5ab3", batch=int(chosen), path="compile")
    assert card(eager) == card(fused) == GPU["1"] and card(plain) == GPU["2"]
    says(f"At batch {chosen} `generate()` (eager) made {rate(eager)} output tokens/s, a decode "
         f"step of {ms(eager.tpot().mean_s)} ms, against {rate(fused)} tokens/s and "
         f"{ms(fused.tpot().mean_s)} ms for the compiled, fused step "
         f"({fused.output_tokens_per_s() / eager.output_tokens_per_s():.2f} times; it never pays "
         "back its setup), both on GPU 1, both throttled (power)")
    assert all("throttled (power)" in H.record_flags(r) for r in (eager, fused, plain))
    says(f"Compiled without `--fuse`, on GPU 2 in the second call, the step took "
         f"{ms(plain.tpot().mean_s)} ms ({rate(plain)} tokens/s), "
         f"{abs(plain.output_tokens_per_s() / fused.output_tokens_per_s() - 1):.1%} from the "
         "fused step's rate on GPU 1")
    assert not any(r.config.fold_gqa for r in (fused, plain))
    says(f"costs the 3B step its {(fused.tpot().mean_s - eager.tpot().mean_s) * 1e3:.0f} ms")
    # the single-H100 page: the compiled, fused step beat generate() at every 3B batch to 64
    third, _ = stored_runs(H.H100_GENERATE, H.GENERATE_THIRD_RUNS, "generate", tmp_path)
    three = [r for r in third if r.ok and r.config.model == "llama-3.2-3b"]
    batches = sorted({r.config.batch_size for r in three})
    assert batches == [1, 8, 32, 64]
    for b in batches:
        [e] = [r for r in three if r.config.batch_size == b and r.config.path == "eager"]
        [c] = [r for r in three if r.config.batch_size == b
               and r.config.path_label == "compile+fuse"]
        assert c.output_tokens_per_s() > e.output_tokens_per_s()
    says("the compiled, fused step beat `generate()` for this model at every batch measured "
         "there, 1 to 64")
    # the folded 8B step at its largest batch, the folded 1B step against generate() at its own
    s = H.open_store(ROOT / "results", H.H100_GENERATE, tmp_path)
    unfolded, folded = (s.get(rid) for rid in H.GENERATE_FOLD_PAIRS[2])
    s.close()
    assert unfolded.config.batch_size == folded.config.batch_size == 711
    says(f"the unfolded compiled step took {ms(unfolded.tpot().mean_s)} ms and the folded "
         f"{ms(folded.tpot().mean_s)} ms")
    big = [r for r in third if r.ok and r.config.model == "llama-3.2-1b"
           and r.config.batch_size == 2568]
    [e1] = [r for r in big if r.config.path == "eager"]
    [f1] = [r for r in big if r.config.path_label == "compile+fuse+fold"]
    assert f1.tpot().mean_s > e1.tpot().mean_s
    says(f"even the folded step lost to `generate()` ({ms(f1.tpot().mean_s)} against "
         f"{ms(e1.tpot().mean_s)} ms)")


def test_the_compiled_steps_fidelity():
    d = json.loads((FOLDER / "fidelity-compile-shared.json").read_text())
    assert d["compile"] == "shared, once per process" and d["pass"] is True
    c = d["config"]
    assert (c["model"], c["batch_size"], c["prompt_len"], c["output_len"], c["precision"],
            c["path"], c["fuse"], c["fold_gqa"]) == ("llama-3.2-1b", 1, 128, 128, "bf16",
                                                      "compile", False, False)
    says("(llama-3.2-1b, batch 1, 128+128, bf16)")
    rs = d["rounds"]
    assert len(rs) == 3 and len({r["dynamo_graphs"] for r in rs}) == 1  # one compile
    for i, r in enumerate(rs, 1):
        first = "dlbench" if r["dlbench_first"] else "bare loop"
        says(f"| {i} | {first} | {r['dlbench']:.1f} | {r['bare']:.1f} | {r['ratio']:.4f} | "
             f"{r['requests']} / {r['bare_requests']} |")
    ratios = [r["ratio"] for r in rs]
    assert d["median_ratio"] == statistics.median(ratios)
    says(f"The median ratio, **{d['median_ratio']:.4f}**, is inside the 0.99-1.01 band")
    assert 0.99 <= d["median_ratio"] <= 1.01
    outside = sorted(x for x in ratios if not 0.99 <= x <= 1.01)
    assert len(outside) == 2 and outside[0] < 0.99 < 1.01 < outside[1]
    says(f"two of them outside the band on their own ({outside[0]:.4f} and {outside[1]:.4f}, "
         "one on each side)")
    old = [json.loads((ROOT / "results" / H.H100_GENERATE / f).read_text())["median_ratio"]
           for f in ("fidelity-compile.json", "fidelity-compile-again.json")]
    says(f"gave medians of {old[0]:.4f} and {old[1]:.4f}")
    assert min(old) > 1.01


def test_the_prose_quotes_no_table_by_hand():
    # the generated blocks are the headline's; the prose holds the two hand tables this test
    # recomputes (the --repeat group, the fidelity rounds) and the command block
    assert prose(PAGE).count("| 1 |") == 2


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_page_is_linked_and_its_links_resolve():
    name = Path(H.GENERATE_4X_PAGE).name
    assert f"(docs/results/{name})" in (ROOT / "README.md").read_text()
    assert f"(../docs/results/{name})" in (ROOT / "results" / "README.md").read_text()
    anchors = {_slug(h) for h in re.findall(r"^#+ (.*)$", PAGE, re.M)}
    single = (ROOT / H.GENERATE_PAGE).read_text()
    missing = single[single.index("## What is missing"):]
    used = re.findall(rf"\({re.escape(name)}#([\w-]+)\)", missing)
    assert len(used) == 4 and set(used) <= anchors  # the single-H100 page's pointers here
    here = ROOT / H.GENERATE_4X_PAGE
    for target in re.findall(r"\]\(([^)#]+)(?:#[\w-]+)?\)", PAGE):
        assert (here.parent / target).resolve().exists(), target

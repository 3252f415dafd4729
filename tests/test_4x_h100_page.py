"""The four-H100 strategy page's prose against its records: the figures it quotes are
recomputed here from the committed store, the fidelity files and the what-if check (its tables
are rendered from the same store by tests/test_readme_claims.py)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from fakes import cli
from fakes.pages import H, assert_says, stored_runs

from dlbench.measure.mfu import datasheet_mfu
from dlbench.report.groups import group_figure
from dlbench.report.strategy_tables import per_gpu_tflops

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / H.SHARDED_H100_PAGE).read_text()
FOLDER = ROOT / "results" / H.H100_4


def says(text: str) -> None:
    assert_says(PAGE, text)


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    return stored_runs(H.H100_4, H.SHARDED_H100_RUNS, "scaling",
                       tmp_path_factory.mktemp("sharded"))[0]


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    return stored_runs(H.H100_4, H.GENERATE_FP8_RUNS, "generate",
                       tmp_path_factory.mktemp("generate"))[0]


def one(recs, model, strategy, gpus, batch, fp8=False, ckpt=False, offload=False):
    """The ok records of one row of the table: its levers named, the others off."""
    return [r for r in recs if r.ok and (r.config.model, r.config.strategy, r.config.gpus,
                                         r.config.base.batch_size, r.config.fp8,
                                         r.config.base.checkpointing, r.config.offload)
            == (model, strategy, gpus, batch, fp8, ckpt, offload)]


def tokens(r) -> float:
    return r.summary().throughput * r.units_per_sample


def mfu(r) -> float:
    return datasheet_mfu(per_gpu_tflops(r), r.env, "bf16")[0]


SUPERSEDED = FOLDER / "superseded"


def rounds(files) -> list[dict]:
    return [r for f in files for r in json.loads(f.read_text())["rounds"]]


def group_tokens(recs) -> float:
    """A --repeat group's figure: the mean of its jobs' tokens/s, as the table shows it."""
    assert len({r.repeat_group for r in recs}) == 1
    return statistics.mean(tokens(r) for r in recs)


def test_the_first_days_rounds_and_the_bug_they_found():
    files = sorted(SUPERSEDED.glob("fidelity-fsdp-*.json"))
    rs = rounds(files)
    assert len(rs) == 7 and len(files) == 5
    ratios = [r["ratio"] for r in rs]
    assert all(r > 1.01 for r in ratios)  # outside the band, dlbench always the faster
    says(f"**{min(ratios) - 1:.1%} to {max(ratios) - 1:.1%} faster** than the bare FSDP2 loop")
    says("in all seven rounds")
    says(f"seven rounds, {min(ratios):.4f} to {max(ratios):.4f}, dlbench always the faster")
    assert {r["dlbench_first"] for r in rs} == {True, False}  # "in either order"
    losses = [r["dlbench_final_loss"] for r in rs]
    bare = [r["bare_loop"]["final_loss"] for r in rs]
    says(f"dlbench's final loss was **{statistics.median(losses):.1f}** where the bare loop's was "
         f"**{statistics.median(bare):.4f}**")
    assert min(losses) > 100 and max(bare) < 0.01
    # the bounded queue and the compile wrapping: what the files say of their bare loops
    last = json.loads((SUPERSEDED / "fidelity-fsdp-5-same-data-bounded.json").read_text())
    assert last["rounds"][0]["bare_in_flight"] == 3
    assert json.loads((SUPERSEDED / "fidelity-fsdp-3-forward.json").read_text()
                      )["rounds"][0]["bare_compile"] == "forward"


def test_the_superseded_runs_are_apart(tmp_path):
    old = H.open_store(ROOT / "results", H.SHARDED_H100_SUPERSEDED, tmp_path)
    new = H.open_store(ROOT / "results", H.H100_4, tmp_path)
    old_runs = {r.run_id for r in old.runs()}
    assert len(old_runs) == 8 and not old_runs & {r.run_id for r in new.runs()}
    assert not old_runs & set(H.SHARDED_H100_RUNS)
    old.close()
    new.close()


def test_fidelity_after_the_fix():
    d = json.loads((FOLDER / "fidelity-fsdp.json").read_text())
    rs = d["rounds"]
    says(f"(**{d['median_ratio']:.4f}**, equal final losses")
    says(f"The median ratio, **{d['median_ratio']:.4f}**, is inside the 0.99-1.01 band")
    assert 0.99 <= d["median_ratio"] <= 1.01
    for i, r in enumerate(rs, 1):
        first = "dlbench" if r["dlbench_first"] else "bare loop"
        says(f"| {i} | {first} | {r['dlbench']:,.0f} | {r['bare']:,.0f} | {r['ratio']:.4f} | "
             f"{r['dlbench_final_loss']:.6f} / {r['bare_loop']['final_loss']:.6f} |")
        assert abs(r["dlbench_final_loss"] / r["bare_loop"]["final_loss"] - 1) < 0.01


def test_fsdp_mfu_scaling_and_the_bare_loops_figure(records):
    b2, b1 = one(records, "llama-3.2-1b", "fsdp", 2, 8), one(records, "llama-3.2-1b", "fsdp", 1, 8)
    assert len(b2) == 2 and len(b1) == 2  # the two --repeat groups
    (b4,) = one(records, "llama-3.2-1b", "fsdp", 4, 8)
    m2, m1 = (statistics.mean(mfu(r) for r in g) for g in (b2, b1))
    t2 = statistics.mean(per_gpu_tflops(r) for r in b2)
    says(f"reads **{m2:.1%}** MFU on two GPUs ({t2:.0f} TFLOP/s a GPU; the mean of two fresh "
         f"torchrun jobs")
    says(f"{m1:.1%} on one and {mfu(b4):.1%} on four, where four GPUs make "
         f"{tokens(b4) / group_tokens(b1):.2f} times one GPU's tokens")
    bare = statistics.median(r["bare"] for r in rounds([FOLDER / "fidelity-fsdp.json"]))
    says(f"made a median of {bare:,.0f} tokens/s at the same configuration, "
         f"**{m2 * bare / group_tokens(b2):.1%}** MFU")
    assert all("throttled (power)" in H.record_flags(r) for r in records if r.ok)
    # the group's spread as the table gives it
    assert "| 2 | 8 | 108,693 |" in PAGE and "±2.49% (2)" in PAGE


def test_ddp_tp_and_fsdp_tp(records):
    (d2,), (d1,) = one(records, "llama-3.2-1b", "ddp", 2, 4), one(records, "llama-3.2-1b", "ddp", 1, 4)
    (f4,) = one(records, "llama-3.2-1b", "fsdp", 2, 4)
    says(f"made {tokens(d2):,.0f} tokens/s on two GPUs, {tokens(d2) / tokens(d1):.2f} times its "
         f"one GPU; FSDP2 at the same four sequences made {tokens(f4):,.0f}, "
         f"{tokens(f4) / tokens(d2):.2f} times DDP's")
    b2 = group_tokens(one(records, "llama-3.2-1b", "fsdp", 2, 8))
    b1 = group_tokens(one(records, "llama-3.2-1b", "fsdp", 1, 8))
    (tp,) = one(records, "llama-3.2-1b", "tp", 2, 8)
    says(f"over two GPUs made {tokens(tp):,.0f} tokens/s, {tokens(tp) / b2:.2f} of FSDP2's")
    (ft,) = one(records, "llama-3.2-1b", "fsdp+tp", 4, 8)
    (b4,) = one(records, "llama-3.2-1b", "fsdp", 4, 8)
    says(f"made {tokens(ft):,.0f} tokens/s on four GPUs, {tokens(ft) / b1:.2f} times one GPU of "
         f"FSDP2 and {tokens(ft) / tokens(b4):.2f} of FSDP2 alone")
    # what the prose draws from them: tensor parallelism loses to FSDP2 at this size
    assert tokens(tp) < b2 and tokens(ft) < tokens(b4)
    assert tokens(f4) > tokens(d2)  # FSDP2 ahead of DDP at four sequences


def test_levers(records):
    (fp8,) = one(records, "llama-3.2-1b", "fsdp", 2, 4, fp8=True)
    (bf16,) = one(records, "llama-3.2-1b", "fsdp", 2, 4)
    says(f"{tokens(fp8):,.0f} tokens/s against bf16's {tokens(bf16):,.0f}, "
         f"{tokens(fp8) / tokens(bf16):.2f} times")
    b8 = one(records, "llama-3.2-1b", "fsdp", 2, 8)
    (sel,) = one(records, "llama-3.2-1b", "fsdp", 2, 8, ckpt=True)
    assert sel.config.base.checkpoint_policy == "selective"
    (off,) = one(records, "llama-3.2-1b", "fsdp", 2, 8, offload=True)
    gib = lambda r: r.memory["allocated_peak_bytes"] / 2**30  # noqa: E731
    says(f"{tokens(sel):,.0f} tokens/s, {tokens(sel) / group_tokens(b8):.2f} of the run without "
         f"it, for {gib(sel):.1f} GiB on rank 0 instead of {max(gib(r) for r in b8):.1f}")
    says(f"{tokens(off):,.0f} tokens/s, {tokens(off) / group_tokens(b8):.2f} of FSDP2 without it, "
         f"its window `noisy (time cap)` (±{off.summary().rel_halfwidth:.1%})")
    assert "noisy (time cap)" in H.record_flags(off)
    assert off.launch_env["OMP_NUM_THREADS"] == "32"
    says("here 32, recorded in the run's `launch_env`")


def test_the_8b_model(records):
    (e2,), (e4,) = (one(records, "llama-3.1-8b", "fsdp", n, 1, ckpt=True) for n in (2, 4))
    gib = [r.memory["allocated_peak_bytes"] / 2**30 for r in (e2, e4)]
    says(f"{tokens(e2):,.0f} tokens/s, {mfu(e2):.1%} MFU, {gib[0]:.1f} GiB peak on rank 0 (of "
         f"{e2.memory['device_total_bytes'] / 2**30:.1f} GiB), its window `noisy (time cap)`")
    assert "noisy (time cap)" in H.record_flags(e2)
    says(f"{tokens(e4):,.0f} tokens/s, {mfu(e4):.1%}, {gib[1]:.1f} GiB")
    # the two offload tries are runs of the list with no result
    assert not [r for r in records if r.run_id in ("d0ccccdc4f6e", "bca347b2cbb0")]
    assert {"d0ccccdc4f6e", "bca347b2cbb0"} <= set(H.SHARDED_H100_RUNS)


def test_exposed_communication(records):
    def ms(r):
        return r.exposed_comm().per_step_s * 1e3

    def pct(r):
        return r.exposed_comm().share
    b2 = one(records, "llama-3.2-1b", "fsdp", 2, 8)
    b2_ms = statistics.mean(ms(r) for r in b2)  # the group's figure, as the table's
    (b4,) = one(records, "llama-3.2-1b", "fsdp", 4, 8)
    (tp,) = one(records, "llama-3.2-1b", "tp", 2, 8)
    (ft,) = one(records, "llama-3.2-1b", "fsdp+tp", 4, 8)
    (f4,), (f8,) = one(records, "llama-3.2-1b", "fsdp", 2, 4), one(records, "llama-3.2-1b",
                                                                    "fsdp", 2, 4, fp8=True)
    says(f"{b2_ms:.2f} ms a step ({statistics.mean(pct(r) for r in b2):.1%}) at eight sequences "
         f"on two GPUs, {ms(b4):.2f} ms ({pct(b4):.1%}) on four, where the collectives ran "
         f"{b4.exposed_comm().comm_per_step_s * 1e3:.1f} ms a step in all")
    says(f"{pct(tp):.1%} of the step on two GPUs, {pct(ft):.1%} under FSDP2 with tensor "
         f"parallelism on four")
    says(f"FSDP2's exposed share is {pct(f4):.1%} and with fp8 {pct(f8):.1%}")
    says(f"its collectives ran {ms(tp):.1f} ms a step with no compute beside them "
         f"({pct(tp):.1%} of the step), against {b2_ms:.2f} ms for FSDP2")
    # "FSDP2 hides nearly all", "tensor parallelism cannot hide": the shares the words rest on
    assert max(pct(r) for r in (*b2, b4)) < 0.03 and min(pct(tp), pct(ft)) > 0.15
    assert pct(f8) > pct(f4)  # fp8's shorter matmuls leave less to hide behind


def test_time_to_accuracy_at_one_and_two_gpus(tmp_path):
    import subprocess
    import sys
    store = H.open_store(ROOT / "results", f"{H.H100_4}/tta", tmp_path)
    db = store.path
    recs = store.results(kind="train")
    store.close()
    table = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "seeds_converged.py"),
                            str(db)], capture_output=True, text=True, check=True).stdout
    committed = (FOLDER / "tta" / "converged.md").read_text()
    assert table.strip() == committed.strip()
    rows = [line for line in table.splitlines() if line.startswith("| 1 ") or
            line.startswith("| 2 ")]
    assert len(rows) == 3 and all("| 5 of 5 |" in r and r.endswith("| yes |") for r in rows)

    def setup(gpus, batch):
        return [r for r in recs if (r.config.gpus, r.config.batch_size) == (gpus, batch)]

    def epoch(rs):  # the median over seeds of each seed's median epoch from the second
        return statistics.median(statistics.median(r.epoch_times_s[1:]) for r in rs)
    one_gpu, two_gpus = setup(1, 1024), setup(2, 512)
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        page_row = "| " + " | ".join(cells[:6]) + " |"
        says(page_row)
    from dlbench.report.table import fmt_num
    for gpus, batch in ((1, 512), (1, 1024), (2, 512)):
        rs = setup(gpus, batch)
        img = statistics.median(r.train_samples_per_s() for r in rs)
        says(f"| {fmt_num(epoch(rs))} | {img:,.0f} |")
    olympic = {r.split("|")[1].strip() + "/" + r.split("|")[2].strip():
               float(r.split("|")[6].strip().rstrip(" s")) for r in rows}
    says(f"in {olympic['1/1024'] / olympic['2/512']:.2f} times fewer seconds than one GPU "
         f"({olympic['2/512']:.2f} s against {olympic['1/1024']:.2f} s), their epoch "
         f"{epoch(one_gpu) / epoch(two_gpus):.2f} times shorter")
    assert all(r.compliance["checkers"] == ["dlbench"] for r in recs)


def test_the_largest_batch_per_strategy(tmp_path):
    searches = stored_runs(H.H100_4, (H.SHARDED_H100_MAXBATCH_RUN,), "maxbatch", tmp_path)[0]
    found = {r.config.strategy: r.best_batch for r in searches}
    assert found["fsdp"] > found["ddp"]  # "sharding ... frees room for more sequences"
    says(f"FSDP2 fits {found['fsdp']} sequences a GPU where DDP fits {found['ddp']}")


def test_the_what_if_check():
    text = (FOLDER / "whatif-check.txt").read_text()
    assert "mean absolute error perfect scaling: 4.2%, none: 7.9%, full: 5.1%" in text
    assert "over 4 rows: no skill" in text
    says("the mean absolute error is 5.1% with overlap and 7.9% without, where assuming perfect "
         "scaling is 4.2% off: no skill")


def test_fp8_generation(generated):
    def pick(precision, path, batch):
        (r,) = [r for r in generated if (r.config.precision, r.config.path, r.config.batch_size)
                == (precision, path, batch) and r.ok]
        return r
    ms = lambda latency: latency.mean_s * 1e3  # noqa: E731
    f1, b1 = pick("fp8", "compile", 1), pick("bf16", "compile", 1)
    says(f"fp8 decodes a token in {ms(f1.tpot()):.2f} ms against bf16's {ms(b1.tpot()):.2f} ms: "
         f"{b1.tpot().mean_s / f1.tpot().mean_s - 1:.0%} faster")
    says(f"time to first token is {ms(f1.ttft()):.1f} ms against {ms(b1.ttft()):.1f} ms")
    says(f"both make the same {b1.output_tokens_per_s():.0f} tokens/s")
    assert abs(f1.output_tokens_per_s() / b1.output_tokens_per_s() - 1) < 0.01
    # the roof figures quoted from the generated table, each on its own row
    rows = [line for line in PAGE.splitlines() if line.startswith("| llama-3.1-8b | 1 |")]
    assert any("| fp8 | compile+fuse+fold |" in r and "| 1,429 | 47.7% of 2,998" in r
               for r in rows)
    assert any("| bf16 | compile+fuse+fold |" in r and "| 82.4% of 2,998" in r for r in rows)
    says("Its decode steps read 1,429 GB/s, 47.7% of the card's measured 2,998; bf16's read 82.4%")
    f64, b64 = pick("fp8", "compile", 64), pick("bf16", "compile", 64)
    r64 = f64.output_tokens_per_s() / b64.output_tokens_per_s()
    says(f"fp8 {f64.output_tokens_per_s():,.0f} tokens/s against bf16's "
         f"{b64.output_tokens_per_s():,.0f}, {r64:.2f} times (TPOT {ms(f64.tpot()):.2f} against "
         f"{ms(b64.tpot()):.2f} ms)")
    g8, gb = pick("fp8", "graph", 1), pick("bf16", "graph", 1)
    says(f"(TPOT {ms(g8.tpot()):.2f} against {ms(gb.tpot()):.2f} ms)")
    assert g8.tpot().mean_s > gb.tpot().mean_s


@pytest.fixture(scope="module")
def third(tmp_path_factory):
    return stored_runs(H.H100_4, H.SHARDED_H100_THIRD_RUNS, "scaling",
                       tmp_path_factory.mktemp("third"))[0]


def test_the_third_lending(third, records):
    gib = lambda r: r.memory["allocated_peak_bytes"] / 2**30  # noqa: E731
    (d1,), (d2,) = (one(third, "llama-3.2-3b", "ddp", n, 1) for n in (1, 2))
    (f1,), (f2,) = (one(third, "llama-3.2-3b", "fsdp", n, 1) for n in (1, 2))
    (tp,) = one(third, "llama-3.2-3b", "tp", 2, 1)
    says(f"DDP fits one H100 ({gib(d1):.1f} GiB on rank 0) and makes {tokens(d1):,.0f} "
         f"tokens/s there, {tokens(d2):,.0f} on two ({tokens(d2) / tokens(d1):.2f} times)")
    says(f"FSDP2 makes {tokens(f1):,.0f} on one and {tokens(f2):,.0f} on two, "
         f"{tokens(f2) / tokens(f1):.2f} times, {gib(f2):.1f} GiB on rank 0")
    assert tokens(f2) / tokens(f1) > 2 and "noisy (time cap)" in H.record_flags(f2)
    says(f"makes {tokens(tp):,.0f}, {tp.exposed_comm().share:.1%} of its step in "
         "exposed collectives")
    says(f"reaches {mfu(f2):.1%} MFU under FSDP2 on two GPUs")
    b8 = one(records, "llama-3.2-1b", "fsdp", 2, 8)
    assert round(mfu(f2) / mfu(b8[0]), 1) == 0.5  # "half of the 1B model's at eight"
    f3, t3 = one(third, "llama-3.2-1b", "fsdp", 2, 8), one(third, "llama-3.2-1b", "tp", 2, 8)
    assert len(f3) == len(t3) == 3 and len({r.repeat_group for r in f3 + t3}) == 2
    spread = lambda rs: group_figure(rs).rel_halfwidth  # noqa: E731
    says(f"`--repeat 3` group: {group_tokens(f3):,.0f} tokens/s, ±{spread(f3):.2%} across the "
         f"three jobs, where this page's first group of two said {group_tokens(b8):,.0f} "
         f"±{spread(b8):.2%}")
    (t1,) = one(records, "llama-3.2-1b", "tp", 2, 8)
    says(f"Tensor parallelism at the same size: {group_tokens(t3):,.0f} tokens/s, "
         f"±{spread(t3):.2%} across three jobs (one job, above: {tokens(t1):,.0f})")
    (off,) = one(third, "llama-3.1-8b", "fsdp", 2, 1, ckpt=True, offload=True)
    (e2,) = one(records, "llama-3.1-8b", "fsdp", 2, 1, ckpt=True)
    step = statistics.median(off.step_times_s)
    says(f"{tokens(off):,.1f} tokens/s, {mfu(off):.1%} MFU, {gib(off):.1f} GiB on rank 0 "
         f"({gib(e2):.1f} GiB without offload), a median step of {step:.1f} s")
    assert "noisy (time cap)" in H.record_flags(off) and off.config.comm_profile_steps == 0
    log = (FOLDER / "rerun4-offload-tp.log").read_text()
    for phase in ("rank 0: building the model", "first step (compile, communicators)",
                  "warm-up", "measured window, step 4 (9.75 s a step)"):
        assert phase in log
    says("`measured window, step 4 (9.75 s a step)`")


def test_the_predictions_for_eight_gpus_and_several_nodes(tmp_path):
    """The committed predictions are what the what-if model says today of the committed store,
    and the page quotes them (the command in this process: it only reads and computes)."""
    db = tmp_path / "dlbench.db"
    db.write_bytes(__import__("gzip").decompress((FOLDER / "dlbench.db.gz").read_bytes()))
    args = ["whatif", "-m", "llama-3.2-1b", "--db", str(db), "--strategy", "fsdp,fsdp+tp",
            "--nodes", "1,2,4,8", "--gpus-per-node", "8", "--network", "100gbe,400gbe,ib-ndr",
            "--nics", "8"]
    p = cli.run(*args, "--json")
    assert p.returncode == 0, p.stderr
    rows = {(r["strategy"], r["cluster"]): r for r in json.loads(p.stdout)}
    committed = (FOLDER / "whatif-predict.txt").read_text()

    def factor(strategy, cluster):
        f = rows[(strategy, cluster)]["factor"]
        assert f"{f:.2f}" in committed
        return f"{f:.2f}"
    one = "1 node x 8 GPU(s), nvlink4"
    nets = [factor("fsdp", f"8 nodes x 8 GPU(s), {n} + nvlink4")
            for n in ("100gbe", "400gbe", "ib-ndr")]
    says(f"on one node of eight at {factor('fsdp', one)} times one GPU, and on eight such nodes "
         f"(64 GPUs) at {nets[0]} times over 100 Gb Ethernet, {nets[1]} over 400 Gb Ethernet and "
         f"{nets[2]} over InfiniBand NDR")
    compute = rows[("fsdp", one)]["compute_s"] * 1e3
    says(f"at eight sequences ({compute:.1f} ms; the store's record)")
    says(f"predicted at {factor('fsdp+tp', one)} times on one node of eight")

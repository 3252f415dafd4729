"""The four-H100 strategy page's prose against its records: the figures it quotes are
recomputed here from the committed store, the fidelity files and the what-if check (its tables
are rendered from the same store by tests/test_readme_claims.py)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from fakes.pages import assert_says, stored_runs

from dlbench.measure.mfu import datasheet_mfu
from dlbench.report import headline as H
from dlbench.report.strategy_tables import per_gpu_tflops

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / H.SHARDED_H100_PAGE).read_text()
FOLDER = ROOT / "results" / H.H100_4
FIDELITY = sorted(FOLDER.glob("fidelity-fsdp-*.json"))


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


def one(recs, model, strategy, gpus, batch, fp8=False):
    return [r for r in recs if r.ok and (r.config.model, r.config.strategy, r.config.gpus,
                                         r.config.base.batch_size, r.config.fp8)
            == (model, strategy, gpus, batch, fp8)]


def tokens(r) -> float:
    return r.summary().throughput * r.units_per_sample


def mfu(r) -> float:
    return datasheet_mfu(per_gpu_tflops(r), r.env, "bf16")[0]


def rounds() -> list[dict]:
    return [r for f in FIDELITY for r in json.loads(f.read_text())["rounds"]]


def test_the_fidelity_rounds_and_the_bug_they_found():
    rs = rounds()
    assert len(rs) == 7 and len(FIDELITY) == 5
    ratios = [r["ratio"] for r in rs]
    assert all(r > 1.01 for r in ratios)  # outside the band, dlbench always the faster
    says(f"**{min(ratios) - 1:.1%} to {max(ratios) - 1:.1%} faster** than the bare FSDP2 loop")
    says("in all seven rounds")
    assert {r["dlbench_first"] for r in rs} == {True, False}  # "in either order"
    losses = [r["dlbench_final_loss"] for r in rs]
    bare = [r["bare_loop"]["final_loss"] for r in rs]
    says(f"dlbench's final loss was **{statistics.median(losses):.1f}** where the bare loop's was "
         f"**{statistics.median(bare):.4f}**")
    assert min(losses) > 100 and max(bare) < 0.01
    table = {f.name: [round(r["ratio"], 4) for r in json.loads(f.read_text())["rounds"]]
             for f in FIDELITY}
    for name, values in table.items():
        says(f"| `{name}` | {len(values)} |")
        says(" | " + ", ".join(f"{v:.4f}" for v in values) + " |")
    # the bounded queue and the compile wrapping: what the files say of their bare loops
    last = json.loads((FOLDER / "fidelity-fsdp-5-same-data-bounded.json").read_text())
    assert last["rounds"][0]["bare_in_flight"] == 3
    assert json.loads((FOLDER / "fidelity-fsdp-3-forward.json").read_text()
                      )["rounds"][0]["bare_compile"] == "forward"
    h200 = json.loads((ROOT / "results" / H.H200_2 / "fidelity-fsdp.json").read_text())
    says(f"gave {h200['median_ratio']:.4f} with equal losses")


def test_fsdp_mfu_scaling_and_the_bare_loops_figure(records):
    (b2,), (b1,), (b4,) = (one(records, "llama-3.2-1b", "fsdp", n, 8) for n in (2, 1, 4))
    says(f"reads **{mfu(b2):.1%}** MFU on two GPUs ({per_gpu_tflops(b2):.0f} TFLOP/s a GPU), "
         f"{mfu(b1):.1%} on one and {mfu(b4):.1%} on four, where four GPUs make "
         f"{tokens(b4) / tokens(b1):.2f} times one GPU's tokens")
    bare = statistics.median(r["bare"] for r in rounds())
    says(f"made a median of {bare:,.0f} tokens/s at the same configuration")
    says(f"which is **{mfu(b2) * bare / tokens(b2):.1%}** MFU")
    assert mfu(b2) * bare / tokens(b2) > 0.45
    assert all("throttled (power)" in H.record_flags(r) for r in records if r.ok)


def test_tensor_parallel_fp8_and_the_8b_model(records):
    (tp,) = one(records, "llama-3.2-1b", "fsdp+tp", 4, 8)
    (b1,), (b4,) = one(records, "llama-3.2-1b", "fsdp", 1, 8), one(records, "llama-3.2-1b",
                                                                    "fsdp", 4, 8)
    says(f"made {tokens(tp):,.0f} tokens/s on four GPUs, {tokens(tp) / tokens(b1):.2f} times one "
         f"GPU of FSDP2 and {tokens(tp) / tokens(b4):.2f} of FSDP2 alone")
    (fp8,) = one(records, "llama-3.2-1b", "fsdp", 2, 4, fp8=True)
    group = one(records, "llama-3.2-1b", "fsdp", 2, 4)
    assert len(group) == 2 and len({r.repeat_group for r in group}) == 1
    mean = statistics.mean(tokens(r) for r in group)
    says(f"{tokens(fp8):,.0f} tokens/s against bf16's {mean:,.0f} (the mean of a `--repeat 2` "
         f"group")
    says(f"{tokens(fp8) / mean:.2f} times")
    (e2,), (e4,) = (one(records, "llama-3.1-8b", "fsdp", n, 1) for n in (2, 4))
    gib = [r.memory["allocated_peak_bytes"] / 2**30 for r in (e2, e4)]
    says(f"{tokens(e2):,.0f} tokens/s, {mfu(e2):.1%} MFU, {gib[0]:.1f} GiB peak on rank 0 (of "
         f"{e2.memory['device_total_bytes'] / 2**30:.1f} GiB), its window `noisy (time cap)`")
    assert "noisy (time cap)" in H.record_flags(e2)
    says(f"{tokens(e4):,.0f} tokens/s, {mfu(e4):.1%}, {gib[1]:.1f} GiB")
    assert not [r for r in records if r.run_id == "b1cece3190ce"]  # interrupted: no result


def test_the_largest_batch_per_strategy(tmp_path):
    searches = stored_runs(H.H100_4, (H.SHARDED_H100_MAXBATCH_RUN,), "maxbatch", tmp_path)[0]
    found = {r.config.strategy: r.best_batch for r in searches}
    assert found["fsdp"] > found["ddp"]  # "sharding ... frees room for more sequences"
    says(f"FSDP2 fits {found['fsdp']} sequences a GPU where DDP fits {found['ddp']}")


def test_the_what_if_check():
    text = (FOLDER / "whatif-check.txt").read_text()
    assert "mean absolute error perfect scaling: 0.7%, none: 5.6%, full: 1.7%" in text
    says("1.7% off with overlap, where assuming perfect scaling is 0.7% off")


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

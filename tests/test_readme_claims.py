"""README's headline tables (and the campaign pages' suite tables) against the committed stores:
each row, value and flag must be what ``tools/headline.py`` renders from the records under
``results/``, so the published pages cannot drift from their measurements (a figure typed by
hand, a flag dropped, an interval left from an older method)."""

from __future__ import annotations

import json
import re

from dataclasses import replace
from pathlib import Path

import pytest
from fakes.pages import H

ROOT = Path(__file__).resolve().parents[1]
FIX = (f"regenerate the tables with `{H.WRITE_COMMAND}` from the repository root, and read "
       "the diff: a changed figure or flag is a changed claim")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    return H.render_all(ROOT, tmp_path_factory.mktemp("stores"))


@pytest.fixture(scope="module")
def published():
    """The marked blocks of each file that publishes headline tables, by file."""
    return {path: H.blocks((ROOT / path).read_text())
            for path in dict.fromkeys(h.path for h in H.HEADLINES)}


def test_every_marked_table_is_rendered(published):
    rendered_names = {h.name: h.path for h in H.HEADLINES}
    for path, marked in published.items():
        unknown = sorted(n for n in marked if rendered_names.get(n) != path)
        assert not unknown, f"{path} marks tables no code renders there: {unknown}"
    assert "h100-default" in published["README.md"], f"README.md lost its tables: {FIX}"


@pytest.mark.parametrize("headline", H.HEADLINES, ids=lambda h: h.name)
def test_published_table_matches_its_records(headline, rendered, published):
    name, path = headline.name, headline.path
    want, have = rendered[name], published[path].get(name)
    assert have is not None, f"{path} has no headline table {name!r}: {FIX}"
    for i, (w, h) in enumerate(zip(want, have)):
        assert h == w, (f"{path}'s table {name!r}, line {i + 1}, says\n  {h}\nbut the "
                        f"committed store says\n  {w}\n{FIX}")
    assert len(have) == len(want), f"{path}'s table {name!r} has {len(have)} lines, the " \
        f"store's {len(want)}: {FIX}"


def test_flags_are_what_the_records_carry(rendered):
    # The checks the tables exist for, on the committed records themselves: the eight-H200
    # ResNet-50 window whose energy counter ran 15% above its power samples is flagged, the
    # CPU suite's converged windows carry no noisy flag, the H100 tuned windows ran at the
    # power cap.
    assert "energy-mismatch" in "\n".join(rendered["h200-8"])
    assert rendered["cpu-suite"][0].endswith("Flags every figure here carries: one process.")
    assert "throttled (power)" in rendered["h100-tuned"][0]
    # Every figure measured in one process says so: in its table's caption, or, in a table
    # with a --repeat group among its rows, in each row's '±95% jobs' cell. The largest-batch
    # table holds batches found, no throughput (its search measured none).
    per_row = {"4x-h100-strategies", "4x-h100-strategies-third"}
    no_figure = {"4x-h100-largest-batch"}
    assert all("one process" in lines[0] for name, lines in rendered.items()
               if name not in per_row | no_figure)
    for name in per_row:
        rows = [line for line in rendered[name] if line.startswith("| llama")]
        # the '±95% jobs' cell, then the exposed-communication cell (multi-GPU runs) last
        jobs = r"\| (1 process|±[\d.]+% \(\d+\)) \| (-|[\d.]+ \([\d.]+%\)) \|$"
        assert rows and all(re.search(jobs, r) for r in rows)
        assert any(re.search(r"\| ±[\d.]+% \([23]\) \|", r) for r in rows)
    assert all(" - | - |" in line for line in rendered["4x-h100-largest-batch"]
               if line.startswith("| llama"))  # throughput there: not measured
    # The hand-kept tables these replaced had dropped these: the ms-per-batch fp16 windows the
    # time cap stopped, the socket-only VGG-16 window (±58%) behind the 0.341 factor, the
    # DataParallel window at batch 256 on two H200s.
    fp16 = next(line for line in rendered["h100-ms-per-batch"] if line.startswith("| FP16"))
    assert fp16.count("noisy (time cap)") == 4
    vgg = next(line for line in rendered["h200-interconnect-4"] if line.startswith("| vgg16"))
    assert "(0.341) ±58.5%, noisy (time cap)" in vgg
    dp = next(line for line in rendered["two-h200"] if line.startswith("| dp"))
    assert "noisy (time cap); cv 15%" in dp


def test_lever_gains_are_computed_from_their_records(rendered):
    row = next(line for line in rendered["h100-levers"] if "compiled with the model** (" in line)
    assert "| 349,601 tok/s ±0.55% | 448,926 tok/s ±1.73%, noisy | +28.4% | 8269422c2a78 |" in row


def test_replacing_blocks_keeps_the_rest_and_refuses_a_lost_table():
    text = f"intro\n{H.begin_mark('x')}\nold\n{H.end_mark('x')}\noutro\n"
    assert H.replace_blocks(text, {"x": ["new", "lines"]}) == \
        f"intro\n{H.begin_mark('x')}\nnew\nlines\n{H.end_mark('x')}\noutro\n"
    assert H.blocks(H.replace_blocks(text, {"x": ["a"]})) == {"x": ["a"]}
    with pytest.raises(ValueError, match="no marks for headline table 'y'"):
        H.replace_blocks(text, {"y": ["a"]})


def test_record_flags_name_the_cap_the_missing_telemetry_and_the_process():
    from dlbench.measure.stopping import StopRule
    from dlbench.records.throughput import ThroughputConfig, ThroughputRecord

    cfg = ThroughputConfig(model="tiny_mlp", batch_size=8, device="cuda",
                           stop=StopRule(target_rel_ci=0.01))
    wide = tuple(0.01 * (1 + 0.3 * (i % 2)) for i in range(6))   # a wide, capped window
    capped = ThroughputRecord(config=cfg, env={"accelerator": "cuda"}, step_times_s=wide,
                              samples_per_step=8, stop_reason="time_cap")
    assert H.record_flags(capped) == ["noisy (time cap)", "6 of 20 steps", "cv 14%",
                                      "no telemetry", "one process"]
    # A window the time cap ended with its interval at the target is flagged all the same
    narrow = replace(capped, step_times_s=(0.01,) * 25, env={"accelerator": "cpu"},
                     repeat_group="g", repeat_index=0, repeat_count=3)
    assert H.record_flags(narrow) == ["time cap"]
    gen = replace(narrow, step_times_s=(0.01,) * 2)
    assert H.record_flags(gen) == ["time cap", "2 of 20 steps"]
    steady = ThroughputRecord(config=cfg, env={"accelerator": "cpu"}, step_times_s=(0.01,) * 40,
                              samples_per_step=8, stop_reason="converged",
                              repeat_group="g", repeat_index=0, repeat_count=3)
    assert H.record_flags(steady) == []
    assert H._common([["a", "b"], ["b", "a", "c"]]) == ["a", "b"]


def test_maxbatch_rows_carry_their_bracket_and_flags(rendered):
    # The hand-kept table had dropped the bf16 VGG-16 measurement's time cap and every
    # interval; the bracket, a failure that was not an out-of-memory and the corrected search
    # come from the records.
    rows = {line.split(" | ")[0]: line for line in rendered["h100-maxbatch"]
            if line.startswith("| ")}
    assert ("3,300 img/s ±1.60%, noisy (time cap); 6 of 20 steps; throttled (power)"
            in rows["| vgg16 (fp32 ‡)"])
    # the fp32 measurement's narrow interval came from 2 steps: it says so
    assert "32.20 img/s ±0.01%, time cap; 2 of 20 steps" in rows["| vgg16 (fp32 ‡)"]
    assert "845 (922: CUDNN_STATUS_INTERNAL_ERROR)" in rows["| inception_v4"]
    assert "597 (657)*" in rows["| densenet161"]
    # the excerpt's rows are the full table's, but for a flag all its rows carry, which its
    # caption says once
    assert "time cap" in rendered["memory-maxbatch"][0]
    assert rendered["memory-maxbatch"][2:] == [
        line.replace("time cap; ", "") for line in rendered["h100-maxbatch"][2:]
        if not line.startswith("| ") or line.split(" | ")[0] in (
            "| model", "| resnet50", "| vit_b_16", "| gpt2 (seq 1024)")]


def test_ceilings_are_the_peak_runs_medians(rendered):
    # The hand-kept table gave the pageable transfers without their spread: their iterations
    # vary by more than a third, which the rendered rows say.
    rows = {line.split(" | ")[0]: line for line in rendered["h100-ceilings"]
            if line.startswith("| ")}
    assert "| 779.9 TFLOP/s |" in rows["| bf16 matmul"]
    assert rows["| h2d pageable"].endswith("| cv 36% |")
    assert rows["| d2h pageable"].endswith("| cv 41% |")


def test_emulated_network_rows_carry_their_spread(rendered):
    # The hand-kept table's intervals were an older method's: the four-host 1 Gbit/s parameter
    # server read ±10% where its records give ±46%.
    rows = [line for line in rendered["cpu-net"] if line.startswith("| 4 | 1gbit | ps")]
    assert len(rows) == 1 and "| 19.1 ±46.1% |" in rows[0] and rows[0].endswith("| cv 20% |")
    assert len([line for line in rendered["cpu-net"] if line.startswith("| 2 ")]) == 8


SUITE_RUNS = ROOT / "tests" / "data" / "suite_runs.json"


def _minutes(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 60} min {s % 60} s"


def suite_runs_table(runs: list[dict]) -> str:
    """docs/architecture.md's table of the test suite's runs, from their record."""
    def cell(value, unit):
        return "-" if value is None else f"{value:g} {unit}"
    lines = ["| code | time | CPU, user + sys | I/O stall | read back | written |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['code']} | {_minutes(r['seconds'])} | {cell(r['cpu_s'], 's')} | "
              f"{cell(r['io_stall_s'], 's')} | {cell(r['read_back_mb'], 'MB')} | "
              f"{cell(r['written_mb'], 'MB')} |" for r in runs]
    return "\n".join(lines)


def test_the_test_times_table_is_its_record_and_the_readme_gives_its_range():
    record = json.loads(SUITE_RUNS.read_text())
    runs = record["runs"]
    section = (ROOT / "docs" / "architecture.md").read_text().split(
        "## The test suite's time")[1].split("\n## ")[0]
    assert suite_runs_table(runs) in section
    # the section quotes no time but the table's
    assert len(re.findall(r"\d+ min \d+ s", section)) == len(runs)
    said = re.search(r"The whole suite takes (\d+) to (\d+)( and a half)? minutes",
                     (ROOT / "README.md").read_text())
    assert said
    # the range of the suite as it now stands: the runs from readme_from's first on
    first = [r["code"] for r in runs].index(record["readme_from"])
    minutes = [r["seconds"] / 60 for r in runs[first:]]
    low, high = int(said[1]), int(said[2]) + (0.5 if said[3] else 0)
    assert low <= min(minutes) < low + 1 and high - 0.5 < max(minutes) <= high, (said[0], minutes)

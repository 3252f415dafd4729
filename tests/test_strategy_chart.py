"""The memory-against-throughput chart of language-model training by strategy: its points'
coordinates and labels on known numbers, the GPU's memory as a vertical line, what is left out
(and said), and the chart in the report of a store holding such records.

Every record is a real :class:`ScalingRecord` with constant step times, so each figure is exact:
a rank feeds 2 sequences of 2048 tokens a step.
"""

from __future__ import annotations

import dataclasses
import re

import pytest

from dlbench.records.scaling import ScalingConfig, ScalingRecord
from dlbench.records.throughput import ThroughputConfig
from dlbench.report import charts
from dlbench.report import html as report_html
from dlbench.report.charts.base import pyplot
from dlbench.report.charts.strategy import panel_title, strategy_figure, strategy_panels
from dlbench.store import Store
from dlbench.env import env_key

GIB = 1024 ** 3
H100 = {"accelerator": "cuda", "gpu_count": 2, "hostname": "gpu-host",
        "packages": {"torch": "2.11.0"},
        "gpus": [{"name": "NVIDIA H100 80GB HBM3", "memory_total_bytes": 80 * GIB}] * 2}
CPU = {"accelerator": "cpu", "cpu_model": "Test CPU", "cpu_logical_cores": 2,
       "packages": {"torch": "2.11.0"}, "hostname": "cpu-host"}
RUN = "run-strategies"
COMMAND = "dlbench scale -m llama-3.2-1b -b 2 --gpus 1,2 --strategy ddp,fsdp,tp"


def lm(strategy="fsdp", gpus=1, step_s=0.25, mem_gib=30.0, model="llama-3.2-1b", env=H100,
       ckpt=False, batch=2, total=80 * GIB, **kw):
    """A finished ``dlbench scale`` record: every rank feeds ``batch`` sequences of 2048 tokens
    per ``step_s`` seconds, rank 0's allocated peak ``mem_gib`` (None: not measured) on a
    device of ``total`` bytes (None: not said)."""
    b = ThroughputConfig(model=model, batch_size=batch, input_size=2048, precision="bf16",
                         optimizer="adamw", checkpointing=ckpt,
                         device="cpu" if env is CPU else "auto")
    memory = {} if mem_gib is None else {"allocated_peak_bytes": int(mem_gib * GIB),
                                         "device_total_bytes": total}
    return ScalingRecord(config=ScalingConfig(base=b, gpus=gpus, strategy=strategy, **kw),
                         env=env, rank_step_times_s=((step_s,) * 10,) * gpus,
                         rank_samples_per_step=(batch,) * gpus, unit="tokens",
                         units_per_sample=2048, flops_per_sample=int(6e9 * 2048),
                         memory=memory, run_id=RUN)


def failed(strategy="ddp", gpus=4, model="llama-3.2-1b"):
    b = ThroughputConfig(model=model, batch_size=2, input_size=2048, precision="bf16",
                         optimizer="adamw")
    return ScalingRecord(config=ScalingConfig(base=b, gpus=gpus, strategy=strategy), env=H100,
                         status="error", error_type="oom", error="CUDA out of memory",
                         unit="tokens", run_id=RUN)


def sweep():
    """fsdp at 1 and 2 GPUs, tp at 2, ddp with checkpointing at 1."""
    return [lm("fsdp", 1, 0.25, 30.0), lm("fsdp", 2, 0.5, 20.0), lm("tp", 2, 0.5, 25.0),
            lm("ddp", 1, 0.3, 10.0, ckpt=True)]


def test_points_are_the_tables_memory_and_tokens_per_gpu():
    [panel] = strategy_panels(sweep())
    assert (panel.model, panel.device) == ("llama-3.2-1b", "2x NVIDIA H100 80GB HBM3")
    got = {p.label: (p.strategy, p.gib, p.per_gpu[0]) for p in panel.points}
    assert got == {
        "fsdp x1": ("fsdp", 30.0, pytest.approx(16_384)),         # 2 x 2048 / 0.25 s
        "fsdp x2": ("fsdp", 20.0, pytest.approx(8_192)),          # 2 ranks x 4096 / 0.5 s / 2
        "tp x2": ("tp", 25.0, pytest.approx(4_096)),              # one TP group's batch, / 2
        "ddp x1 ckpt": ("ddp", 10.0, pytest.approx(4096 / 0.3)),  # only it checkpoints
    }
    # constant steps: a zero-width interval
    assert all(p.per_gpu[1] == pytest.approx(p.per_gpu[0]) == pytest.approx(p.per_gpu[2])
               for p in panel.points)
    # what every point shares is said once, in the title, not on every label
    assert panel.common == ("bf16", "seq 2048", "b2/replica")
    assert panel.capacity_gib == (80.0,) and panel.left_out == ()
    assert panel_title(panel).startswith(
        "Memory against throughput by strategy: llama-3.2-1b (bf16, seq 2048, b2/replica) on "
        "2x NVIDIA H100 80GB HBM3")


def test_labels_carry_only_what_sets_points_apart():
    recs = [lm("fsdp", 2, 0.5, 20.0, batch=2), lm("fsdp", 2, 0.5, 40.0, batch=4, ckpt=True),
            lm("fsdp+tp", 4, 0.5, 15.0, tp=2)]
    [panel] = strategy_panels(recs)
    assert [p.label for p in panel.points] == ["fsdp x2 b2/replica", "fsdp x2 b4/replica ckpt",
                                               "fsdp+tp tp=2 x4 b2/replica"]
    assert [p.strategy for p in panel.points] == ["fsdp", "fsdp", "fsdp+tp"]
    assert panel.common == ("bf16", "seq 2048")


def test_figure_draws_the_points_and_the_gpus_memory():
    [panel] = strategy_panels(sweep())
    plt = pyplot()
    fig = strategy_figure(plt, panel, panel_title(panel))
    try:
        ax = fig.axes[0]
        drawn = {}
        for c in ax.containers:  # one errorbar series per strategy, in data coordinates
            x, y = c.lines[0].get_data()
            drawn[c.get_label()] = sorted(zip(map(float, x), map(float, y)))
        assert drawn == {"fsdp": [(20.0, pytest.approx(8192)), (30.0, pytest.approx(16384))],
                         "tp": [(25.0, pytest.approx(4096))],
                         "ddp": [(10.0, pytest.approx(4096 / 0.3))]}
        vlines = [ln for ln in ax.get_lines() if ln.get_label().startswith("GPU memory")]
        assert [ln.get_label() for ln in vlines] == ["GPU memory 80.0 GiB"]
        assert list(vlines[0].get_xdata()) == [80.0, 80.0]
        assert ax.get_xlim()[1] > 80.0 and ax.get_ylim()[0] == 0
        assert sorted(t.get_text() for t in ax.texts) == ["ddp x1 ckpt", "fsdp x1", "fsdp x2",
                                                          "tp x2"]
    finally:
        plt.close(fig)


def test_capacity_from_the_record_else_no_line():
    no_env_mem = dict(H100, gpus=[{"name": "NVIDIA H100 80GB HBM3"}] * 2)
    [panel] = strategy_panels([lm(env=no_env_mem)])
    assert panel.capacity_gib == (80.0,)                # the record's device_total_bytes
    [panel] = strategy_panels([lm(env=no_env_mem, total=None)])
    assert panel.capacity_gib == ()
    plt = pyplot()
    fig = strategy_figure(plt, panel, panel_title(panel))
    try:
        assert not [ln for ln in fig.axes[0].get_lines()
                    if ln.get_label().startswith("GPU memory")]
    finally:
        plt.close(fig)


def test_records_without_memory_or_that_failed_are_left_out_and_named():
    recs = sweep() + [lm("ddp", 2, 0.5, None), failed("ddp", 4)]
    [panel] = strategy_panels(recs)
    assert len(panel.points) == 4
    assert panel.left_out == ("ddp x2 (no GPU memory peak)", "ddp x4 (oom)")
    assert panel_title(panel).endswith("; not drawn: ddp x2 (no GPU memory peak), ddp x4 (oom)")
    assert len(panel.records) == 6                      # the commands of all of them


def test_no_point_no_chart():
    cpu = [lm("fsdp", 1, 0.25, None, env=CPU), lm("fsdp", 2, 0.5, None, env=CPU)]
    assert strategy_panels(cpu) == []
    assert charts.strategy_charts(cpu, {RUN: COMMAND}) == []
    assert charts.strategy_charts([failed()], {RUN: COMMAND}) == []
    images = ScalingRecord(config=ScalingConfig(base=ThroughputConfig(model="tiny_cnn",
                                                                      batch_size=16), gpus=1),
                           env=H100, rank_step_times_s=((0.1,) * 10,),
                           rank_samples_per_step=(16,), unit="images",
                           memory={"allocated_peak_bytes": GIB}, run_id=RUN)
    assert charts.strategy_charts([images], {RUN: COMMAND}) == []   # not a language model


def test_one_chart_per_model_and_device_and_a_rerun_wins():
    recs = sweep() + [lm("fsdp", 1, 0.5, 60.0, model="llama-3.2-3b"),
                      lm("fsdp", 1, 0.2, 31.0),       # a rerun of fsdp x1: it wins
                      failed("tp", 2)]                # a failed rerun of tp x2: the ok one stays
    panels = strategy_panels(recs)
    assert [p.model for p in panels] == ["llama-3.2-1b", "llama-3.2-3b"]
    one = {p.label: (p.gib, p.per_gpu[0]) for p in panels[0].points}
    assert one["fsdp x1"] == (31.0, pytest.approx(4096 / 0.2))
    assert one["tp x2"] == (25.0, pytest.approx(4096)) and panels[0].left_out == ()
    got = charts.strategy_charts(recs, {RUN: COMMAND})
    assert [c.title.split(":")[1].split("(")[0].strip() for c in got] == ["llama-3.2-1b",
                                                                          "llama-3.2-3b"]
    assert all(c.commands == (COMMAND,) and c.svg.startswith("<svg") for c in got)


def test_the_report_draws_it_beside_the_scaling_charts(tmp_path):
    from dlbench.cli import main
    assert report_html.CHART_BUILDERS.index(charts.strategy_charts) == \
        report_html.CHART_BUILDERS.index(charts.interconnect_charts) + 1
    db, out, md = tmp_path / "s.db", tmp_path / "report.html", tmp_path / "report.md"
    with Store(db) as s:
        s.start_run(RUN, COMMAND, H100, env_key(H100), "2x NVIDIA H100 80GB HBM3")
        for r in sweep() + [failed("ddp", 4)]:
            s.add(r, env_key(H100))
        s.finish_run(RUN, "done")
    assert main(["report", "--db", str(db), "-o", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert "<caption>Language-model training by strategy</caption>" in page
    caps = re.findall(r"<figcaption>(.*?)</figcaption>", page, re.S)
    [mine] = [c for c in caps if c.startswith("Memory against throughput by strategy")]
    assert "llama-3.2-1b (bf16, seq 2048, b2/replica)" in mine
    assert "not drawn: ddp x4 (oom)" in mine and f"Data from: <code>{COMMAND}</code>" in mine
    # the Markdown report holds the table, and no chart (it has none)
    assert main(["report", "--db", str(db), "--markdown", "-o", str(md)]) == 0
    text = md.read_text(encoding="utf-8")
    assert "Language-model training by strategy" in text and "<svg" not in text


def test_the_strategy_table_keeps_a_failed_language_model_run_as_a_row():
    """A failed run never learnt its unit: the registry says its model counts tokens."""
    from dlbench.report.strategy_tables import strategy_table
    crashed = dataclasses.replace(failed("tp", 2), unit="samples", error_type="exception")
    images = dataclasses.replace(crashed, config=dataclasses.replace(
        crashed.config, base=ThroughputConfig(model="tiny_cnn", batch_size=2)))
    table = strategy_table(sweep() + [crashed, images])
    assert len(table.rows) == len(sweep()) + 1
    row = table.rows[-1]
    assert (row[0], row[3], row[5], row[7]) == ("llama-3.2-1b", "tp", "2", "exception")

"""The PyTorch vs JAX view: records that differ only in framework share a row; the rest do not;
the chart draws the ratio. Records only: no JAX needed."""

import pytest

from dlbench.measure.stopping import StopRule
from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
from dlbench.report.frameworks import framework_tables, throughput_table


def _rec(framework: str, step_s: float, batch: int = 8, model: str = "resnet50",
         precision: str = "bf16", **levers) -> ThroughputRecord:
    cfg = ThroughputConfig(model=model, batch_size=batch, precision=precision,
                           framework=framework, stop=StopRule(), **levers)
    times = tuple(step_s * (1 + 0.001 * (i % 3)) for i in range(40))
    return ThroughputRecord(config=cfg, env={}, step_times_s=times, first_step_s=2.0,
                            samples_per_step=batch, unit="images",
                            memory={"allocated_peak_bytes": 3 * 1024 ** 3})


def test_a_pair_makes_a_row_with_the_ratio():
    t = throughput_table([_rec("torch", 0.010), _rec("jax", 0.008)])
    assert len(t.rows) == 1
    row = dict(zip(t.columns, t.rows[0]))
    assert row["JAX/PyTorch"] == "1.25"
    assert row["peak GiB PT"] == "3.0" and row["peak GiB JAX"] == "3.0"
    rate = lambda cell: float(cell.split()[0].replace(",", ""))
    assert rate(row["PyTorch"]) == pytest.approx(800, rel=2e-3)
    assert rate(row["JAX"]) == pytest.approx(1000, rel=2e-3)
    assert any("XLA_PYTHON_CLIENT_PREALLOCATE=false" in n for n in t.notes)


def test_a_jax_record_stored_with_the_first_memory_keys_reads_as_pytorchs():
    old = _rec("jax", 0.008).to_dict()
    old["memory"] = {"peak_allocated": 5 * 1024 ** 3, "allocated": 1, "reserved": 60 * 1024 ** 3}
    back = ThroughputRecord.from_dict(old)
    assert back.memory == {"allocated_peak_bytes": 5 * 1024 ** 3, "allocated_bytes": 1}
    row = dict(zip(*(lambda t: (t.columns, t.rows[0]))(throughput_table([_rec("torch", 0.01),
                                                                          back]))))
    assert row["peak GiB JAX"] == "5.0"


def test_jax_stands_beside_each_pytorch_setting_of_its_config():
    recs = [_rec("torch", 0.010), _rec("torch", 0.009, channels_last=True),
            _rec("torch", 0.008, channels_last=True, compile="default"), _rec("jax", 0.008)]
    t = throughput_table(recs)
    rows = [dict(zip(t.columns, row)) for row in t.rows]
    assert [(r["PyTorch as"], r["JAX/PyTorch"]) for r in rows] == [
        ("eager NCHW", "1.25"), ("eager NHWC", "1.12"), ("compiled NHWC", "1.00")]


def test_a_repeat_group_shows_its_processes_mean_and_the_interval_across_them():
    group = [_rec("torch", step).in_group("g1", i, 3) for i, step in
             enumerate((0.010, 0.011, 0.012))]
    row = dict(zip(*(lambda t: (t.columns, t.rows[0]))(throughput_table(group
                                                                         + [_rec("jax", 0.008)]))))
    rate = float(row["PyTorch"].split()[0].replace(",", ""))
    assert rate == pytest.approx((800 + 800 / 1.1 + 800 / 1.2) / 3, rel=3e-3)
    assert row["PyTorch"].endswith("(3)") and not row["JAX"].endswith(")")


def test_an_interval_that_reaches_zero_step_time_is_not_halved():
    from dataclasses import replace
    wild = replace(_rec("torch", 0.01), step_times_s=(0.001, 1.0, 0.002))
    assert wild.summary().throughput_high == float("inf")
    row = dict(zip(throughput_table([wild, _rec("jax", 0.01)]).columns,
                   throughput_table([wild, _rec("jax", 0.01)]).rows[0]))
    assert float(row["PyTorch"].split("±")[1].rstrip("%")) > 100


def test_sides_from_two_cards_of_one_model_are_flagged():
    from dataclasses import replace
    def on(r, uuid):
        return replace(r, env={"accelerator": "cuda", "gpus": [{"name": "H100", "uuid": uuid}]})
    row = lambda recs: dict(zip(throughput_table(recs).columns, throughput_table(recs).rows[0]))
    assert "different cards" in row([on(_rec("torch", 0.01), "GPU-a"),
                                     on(_rec("jax", 0.01), "GPU-b")])["flags"]
    assert "different cards" not in row([on(_rec("torch", 0.01), "GPU-a"),
                                         on(_rec("jax", 0.01), "GPU-a")])["flags"]


def test_jax_rows_of_the_throughput_table_say_jit_and_nhwc_and_stay_out_of_the_classic_view():
    from dlbench.report.tables import classic_cnn_table, throughput_table as main_table
    jax = _rec("jax", 0.008)
    row = dict(zip(main_table([jax]).columns, main_table([jax]).rows[0]))
    assert (row["layout"], row["compile"]) == ("NHWC", "jit")
    classic = classic_cnn_table([_rec("torch", 0.010), jax])
    assert not any("jit" in col for col in classic.columns)
    assert [float(r[2]) for r in classic.rows] == [pytest.approx(800, rel=2e-3)]  # PyTorch's


def test_unpaired_or_different_configs_make_no_row():
    assert framework_tables([_rec("torch", 0.01), _rec("torch", 0.01, batch=16)]) == []
    assert framework_tables([_rec("torch", 0.01), _rec("jax", 0.01, precision="fp32")]) == []


def test_the_chart_draws_one_bar_per_pair():
    pytest.importorskip("matplotlib")
    from dlbench.report.charts.frameworks import framework_charts
    charts = framework_charts([_rec("torch", 0.01), _rec("jax", 0.02),
                               _rec("torch", 0.01, model="vgg16")], {})
    assert len(charts) == 1 and "<svg" in charts[0].svg
    assert framework_charts([_rec("torch", 0.01)], {}) == []


def test_gpt2_training_rows_say_the_attention_dropout_differs():
    """PyTorch's GPT-2 drops attention probabilities inside SDPA in training; the JAX twin's
    attention has no dropout: the row says the two sides do not do the same work."""
    gpt2 = throughput_table([_rec("torch", 0.010, model="gpt2"), _rec("jax", 0.009, model="gpt2")])
    assert "attention probabilities" in dict(zip(gpt2.columns, gpt2.rows[0]))["flags"]
    cnn = throughput_table([_rec("torch", 0.010), _rec("jax", 0.008)])
    assert dict(zip(cnn.columns, cnn.rows[0]))["flags"] == ""
    infer = throughput_table([_rec("torch", 0.010, model="gpt2", mode="eval"),
                              _rec("jax", 0.009, model="gpt2", mode="eval")])
    assert "attention" not in dict(zip(infer.columns, infer.rows[0]))["flags"]


def _row(table):
    return dict(zip(table.columns, table.rows[0]))


def test_a_jax_record_that_dropped_at_pytorchs_rates_is_not_flagged():
    """A JAX record says what its step dropped (env.jax.dropout); at the PyTorch model's
    config rates both sides did the same work, and the row says nothing of dropout."""
    from dataclasses import replace
    from dlbench.frameworks import dropout
    jax = replace(_rec("jax", 0.009, model="gpt2"),
                  env={"jax": {"dropout": dropout.applied("gpt2", "train")}})
    row = _row(throughput_table([_rec("torch", 0.010, model="gpt2"), jax]))
    assert "drops" not in row["flags"]
    half = replace(jax, env={"jax": {"dropout": {"embedding": 0.1, "residual": 0.1}}})
    flags = _row(throughput_table([_rec("torch", 0.010, model="gpt2"), half]))["flags"]
    assert "PT drops attention probabilities (0.1), JAX does not" in flags
    assert "predates" not in flags


def test_a_jax_gpt2_record_from_before_the_rule_says_it_predates_it():
    flags = _row(throughput_table([_rec("torch", 0.010, model="gpt2"),
                                   _rec("jax", 0.009, model="gpt2")]))["flags"]
    assert "attention probabilities" in flags and "predates equal dropout" in flags


def test_the_view_states_the_dropout_rule_and_what_still_differs():
    t = throughput_table([_rec("torch", 0.010, model="gpt2"), _rec("jax", 0.009, model="gpt2"),
                          _rec("torch", 0.010, model="vgg16"), _rec("jax", 0.009, model="vgg16")])
    rule = [n for n in t.notes if n.startswith("dropout:")]
    assert len(rule) == 1
    assert "gpt2 attention 0.1, embedding 0.1, residual 0.1" in rule[0]
    assert "vgg16 classifier 0.5" in rule[0]
    still = [n for n in t.notes if n.startswith("still differs between the sides")]
    assert len(still) == 1
    for what in ("Philox", "threefry", "attention kernel", "layout", "BatchNorm"):
        assert what in still[0]


def test_a_jax_run_stored_before_init_compiled_everything_is_flagged_in_time_to_accuracy():
    """Before 2026-11-27 a JAX run compiled its step again in its first epoch (the inputs init
    compiled it for were placed otherwise): its 1st epoch and time to train hold a compile. Its
    record lacks ``env.jax.compiled_in_init``; a newer run's has it; PyTorch's are never
    flagged."""
    from dlbench.records.train import JAX_COMPILED_IN_INIT, TrainConfig, TrainRecord
    from dlbench.report.frameworks import COMPILE_IN_RUN_FLAG, training_table

    def run(framework: str, env: dict, seed: int = 0) -> TrainRecord:
        cfg = TrainConfig(dataset="fashion-mnist", model="cnn10", batch_size=256, target=0.9,
                          framework=framework, seed=seed)
        return TrainRecord(config=cfg, env=env, epoch_times_s=(6.0, 0.6, 0.4),
                           eval_accuracy=(0.8, 0.88, 0.91), time_to_train_s=10.2)
    old, new = {"jax": {"jax": "0.11.2"}}, {"jax": {"jax": "0.11.2", JAX_COMPILED_IN_INIT: True}}
    t = training_table([run("torch", {}), run("jax", old), run("torch", {}, seed=1),
                        run("jax", new, seed=1)])
    rows = [dict(zip(t.columns, row)) for row in t.rows]
    assert [(r["seed"], r["framework"], r["flags"]) for r in rows] == [
        ("0", "PyTorch", "-"), ("0", "JAX", COMPILE_IN_RUN_FLAG),
        ("1", "PyTorch", "-"), ("1", "JAX", "-")]
    assert any(n.startswith(f"{COMPILE_IN_RUN_FLAG}: a JAX run stored before 2026-11-27")
               for n in t.notes)


def test_a_pytorch_gpu_run_stored_before_init_warmed_every_shape_is_flagged_where_one_was_left():
    """Before 2026-11-27 PyTorch's init warmed up the full batch only: on a GPU, cuDNN autotuned
    the epoch's last, partial batch in the first epoch. A record without ``warm_up`` whose
    epoch ends on a partial batch is flagged; one with it, one whose batch divides the epoch,
    and a CPU run's are not."""
    from dlbench.records.train import TrainConfig, TrainRecord
    from dlbench.report.frameworks import AUTOTUNE_IN_RUN_FLAG, training_table

    def run(framework: str, seed: int, samples: int = 60_000, device: str = "cuda",
            **kw) -> TrainRecord:
        cfg = TrainConfig(dataset="fashion-mnist", model="cnn10", batch_size=256, target=0.9,
                          framework=framework, seed=seed)
        return TrainRecord(config=cfg, env={"jax": {"compiled_in_init": True}}, device=device,
                           samples_per_epoch=samples, steps_per_epoch=-(-samples // 256),
                           epoch_times_s=(5.5, 1.6), eval_accuracy=(0.88, 0.91),
                           time_to_train_s=7.5, **kw)
    recs = [run("torch", 0), run("jax", 0),
            run("torch", 1, warm_up={"train": [256, 96], "eval": [1024, 784]}), run("jax", 1),
            run("torch", 2, samples=256 * 234), run("jax", 2, samples=256 * 234),
            run("torch", 3, device="cpu"), run("jax", 3, device="cpu")]
    t = training_table(recs)
    flags = [(row[3], row[4], row[-1]) for row in t.rows]
    assert [f for f in flags if f[1] == "PyTorch"] == [
        ("0", "PyTorch", AUTOTUNE_IN_RUN_FLAG), ("1", "PyTorch", "-"), ("2", "PyTorch", "-"),
        ("3", "PyTorch", "-")]
    assert all(f[2] == "-" for f in flags if f[1] == "JAX")
    assert any(f"{AUTOTUNE_IN_RUN_FLAG}: a PyTorch run on a GPU stored before then" in n
               for n in t.notes)

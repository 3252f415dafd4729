"""Tables from records with known step times, the published layouts among them."""

from dataclasses import replace

from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
from dlbench.report import tables
from dlbench.report.export import CSV_COLUMNS, to_csv


def rec(model, precision="fp16", compile=None, mode="train", step=0.5, batch=100, method="standard",
        **kw):
    c = ThroughputConfig(model=model, batch_size=batch, precision=precision, compile=compile,
                         mode=mode, method=method)
    return ThroughputRecord(config=c, env={}, step_times_s=(step,) * 10, samples_per_step=batch,
                            unit="images", stop_reason="converged", first_step_s=1.0, **kw)


def test_fmt_num():
    assert tables.fmt_num(1046.94) == "1,047"
    assert tables.fmt_num(3.14159) == "3.142"
    assert tables.fmt_num(0.012345) == "0.01235"
    assert tables.fmt_num(None) == "-"


def test_classic_cnn_table_gives_factor_over_eager():
    recs = [rec("resnet50", step=0.5), rec("resnet50", compile="default", step=0.4),
            rec("vgg16", step=1.0)]
    t = tables.classic_cnn_table(recs)
    assert t.columns == ("model", "fp16 batch", "fp16 eager", "fp16 default (x eager)")
    assert t.rows[0] == ("resnet50", "100", "200.0", "250.0 (1.25)")
    assert t.rows[1] == ("vgg16", "100", "100.0", "-")


def test_classic_cnn_table_never_mixes_batch_sizes_or_shows_language_models():
    recs = [rec("resnet50", step=0.5, batch=256), rec("resnet50", compile="default", step=0.4,
                                                      batch=512),
            rec("resnet50", compile="default", step=0.2, batch=256),
            rec("resnet50", compile="default", step=0.1, batch=1024),
            rec("gpt2", precision="bf16", step=0.5, batch=32)]
    t = tables.classic_cnn_table(recs)
    # the eager record's batch: the compiled b512 and b1024 figures are not compared with it
    assert t.rows == (("resnet50", "256", "512.0", "1,280 (2.50)"),)
    cl = rec("resnet50", compile="default", step=0.1, batch=256)
    cl = replace(cl, config=replace(cl.config, channels_last=True))
    assert tables.classic_cnn_table(recs[:3] + [cl]).rows == t.rows   # nor two layouts
    only_compiled = tables.classic_cnn_table([rec("vgg16", compile="default", batch=64),
                                              rec("vgg16", compile="default", batch=128)])
    assert only_compiled.rows == (("vgg16", "128", "-", "256.0"),)


def test_layout_column_is_a_dash_for_a_language_model():
    tokens = replace(rec("gpt2", precision="bf16", batch=8), unit="tokens", units_per_sample=1024)
    t = tables.throughput_table([tokens, rec("resnet50")])
    assert [row[t.columns.index("layout")] for row in t.rows] == ["-", "NCHW"]


def test_ms_per_batch_table_in_ms():
    recs = [rec("vgg16", "fp32", mode="eval", step=0.0313, batch=16, method="fwd-bwd"),
            rec("vgg16", "fp32", mode="train", step=0.1088, batch=16, method="fwd-bwd"),
            ThroughputRecord(config=ThroughputConfig(model="vgg16", batch_size=16, precision="fp16",
                                                     mode="train", method="fwd-bwd"),
                             env={}, status="error", error_type="oom", error="OOM")]
    t = tables.ms_per_batch_table(recs, "H100")
    assert t.columns == ("device", "setup", "vgg16 eval", "vgg16 train")
    assert t.rows[0] == ("H100", "FP32", "31.3", "108.8")
    assert t.rows[1] == ("H100", "FP16", "-", "oom")


def test_throughput_table_shows_failures_as_rows():
    bad = ThroughputRecord(config=ThroughputConfig(model="vgg16", batch_size=4096), env={},
                           status="error", error_type="oom", error="OutOfMemoryError: CUDA out of memory")
    t = tables.throughput_table([rec("resnet50"), bad])
    assert len(t.rows) == 2
    assert t.rows[0][6] == "200.0 img/s"
    assert t.rows[1][-1].startswith("oom: OutOfMemoryError")


def test_setup_the_columns_miss_is_in_the_note():
    """Rows that differ only in optimizer kernels or a padded vocabulary must not look alike."""
    plain = rec("gpt2", precision="bf16", compile="default")
    padded = replace(plain, config=replace(plain.config, pad_vocab=True, optimizer_impl="fused"))
    t = tables.throughput_table([plain, padded])
    assert t.rows[0][-1] == ""
    assert t.rows[1][-1] == "fused-opt; pad-vocab"


def test_noisy_result_is_flagged():
    c = ThroughputConfig(model="resnet50", batch_size=8)
    r = ThroughputRecord(config=c, env={}, step_times_s=(0.1, 0.3) * 3 + (0.9,), samples_per_step=8,
                         stop_reason="time_cap")
    assert tables.flags(r) == ["noisy (time_cap)", "7/20 steps"]


def test_a_capped_window_is_flagged_whatever_its_interval():
    c = ThroughputConfig(model="resnet50", batch_size=8)
    narrow = ThroughputRecord(config=c, env={}, step_times_s=(0.1,) * 25, samples_per_step=8,
                              stop_reason="time_cap")
    assert narrow.converged() and tables.flags(narrow) == ["time_cap"]
    short = replace(narrow, step_times_s=(0.1,) * 3)
    assert tables.flags(short) == ["time_cap", "3/20 steps"]
    done = replace(narrow, stop_reason="converged")
    assert tables.flags(done) == []
    assert ",time_cap;short;one_process," in to_csv([short])
    assert ",converged,True,one_process," in to_csv([done])


def test_csv_has_every_column_and_one_row_per_record():
    text = to_csv([rec("resnet50"), rec("vgg16")])
    lines = text.splitlines()
    assert lines[0].split(",") == list(CSV_COLUMNS)
    assert len(lines) == 3
    assert ",200.0," in lines[1]

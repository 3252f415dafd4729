"""``dlbench train`` on the CPU: a real short run on the MNIST subset, failures as records, the
store, the tables and the command line."""

import json
import math
import time

import pytest
import torch
from fakes.datasets import mnist5k_dir

from dlbench.store import RunInfo
from dlbench.cli import main
from dlbench.data import load_dataset
from dlbench.measure.stats import percentile
from dlbench.records import record_from_dict
from dlbench.records.train import TrainConfig, TrainRecord, batch_sizes
from dlbench.report.tables import tables_for
from dlbench.store import Store
from dlbench.training.loop import EVAL_BATCH, default_lr, train_run
from dlbench.training.models import build_model, canonical_name
from dlbench.training.runner import InlineRunner, to_record

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return mnist5k_dir(tmp_path_factory.mktemp("mnist5k"))


@pytest.fixture(scope="module")
def mnist5k(data_dir):
    return load_dataset("mnist5k", data_dir)


def cfg(data_dir, **kw):
    d = dict(dataset="mnist5k", model="tiny_mlp", batch_size=64, target=0.85, max_epochs=5,
             data_dir=data_dir, throughput_steps=5, workers=0)
    d.update(kw)
    return TrainConfig(**d)


@pytest.fixture(scope="module")
def run(data_dir, mnist5k):
    """One real run to 0.85 on the MNIST subset, shared by the tests that read its series."""
    t = time.perf_counter()
    res = train_run(cfg(data_dir), mnist5k, CPU)
    return res, time.perf_counter() - t


def test_a_real_short_run_reaches_a_modest_target_within_a_minute(run, mnist5k):
    res, wall = run
    assert res["status"] == "ok", res["error"]
    assert res["time_to_train_s"] is not None and wall < 60
    n = res["epochs_to_converge"]
    assert 1 <= n <= 5 and len(res["eval_accuracy"]) == n      # stopped at the target
    assert res["eval_accuracy"][-1] >= 0.85 > max(res["eval_accuracy"][:-1] + [0])
    # init warmed up every batch shape the epoch meets: the full one and the last
    sizes, samples = res["warm_up"]["train"], res["samples_per_epoch"]
    assert sizes == [64] + ([samples % 64] if samples % 64 else []), (sizes, samples)
    assert res["warm_up"]["eval"] == list(batch_sizes(mnist5k.eval_len, EVAL_BATCH))
    # the clock: time to train ends with the last evaluation, and holds every epoch
    assert res["time_to_train_s"] == pytest.approx(res["eval_end_s"][-1])
    assert res["time_to_train_s"] >= sum(res["epoch_times_s"]) + sum(res["eval_times_s"]) - 1e-6
    # the slow-networks study's series: one loss and one end time per iteration, in order
    steps = res["steps_per_epoch"]
    assert steps == math.ceil(mnist5k.train_len / 64)
    assert len(res["iter_loss"]) == len(res["iter_time_s"]) == steps * n
    assert all(a <= b for a, b in zip(res["iter_time_s"], res["iter_time_s"][1:]))
    assert res["iter_time_s"][-1] <= res["time_to_train_s"]
    k = steps // 4
    assert sum(res["iter_loss"][-k:]) < 0.7 * sum(res["iter_loss"][:k])      # it learned
    # the side measurements, taken after run stop
    assert res["pipeline"]["samples"] == 5 * 64 and res["synthetic"]["samples"] == 5 * 64
    assert res["pipeline"]["seconds"] > 0 and res["synthetic"]["seconds"] > 0


def test_the_record_derives_its_figures_from_the_series(run, mnist5k):
    res, _ = run
    rec = to_record(cfg(None), {}, [res], mnist5k.source)
    assert rec.ok and rec.converged and rec.headline() == res["time_to_train_s"]
    assert rec.first_epoch_s == res["epoch_times_s"][0]
    rest = res["epoch_times_s"][1:]
    assert rec.median_epoch_s == (percentile(rest, 50) if rest else None)
    assert rec.train_samples_per_s() > 0 and rec.pipeline_samples_per_s() > 0
    assert rec.synthetic_samples_per_s() == pytest.approx(5 * 64 / res["synthetic"]["seconds"])
    back = record_from_dict(json.loads(json.dumps(rec.to_dict())))
    assert isinstance(back, TrainRecord) and back == rec


def test_records_in_the_store_and_the_tables(tmp_path, run, mnist5k):
    res, _ = run
    recs = [to_record(cfg(None, seed=s), {}, [res], mnist5k.source).with_run("r1")
            for s in range(3)]
    failed = TrainRecord(config=cfg(None, seed=3), env={}, status="error",
                         error_type="not_converged", error="cap", run_id="r1")
    with Store(tmp_path / "s.db") as store:
        store.start_run("r1", "dlbench train", {}, "k", "cpu")
        for r in recs + [failed]:
            store.add(r, "k")
        back = store.results(run_id="r1", kind="train")
    assert back == recs + [failed]
    ttt, epochs = tables_for(back, "cpu")
    row = ttt.rows[0]
    assert row[7].endswith(" / cap") and row[10] == "1/4"
    assert row[9] != "invalid" and float(row[9].replace(",", "")) > 0   # one failure: a score
    assert epochs.rows[0][4] == "3"                                    # runs with epochs


def test_curves_chart_in_the_html_report(run, mnist5k):
    from dlbench.report import html as report_html
    from dlbench.report.charts import training_charts
    from dlbench.report.charts.training import smooth
    res, _ = run
    recs = [to_record(cfg(None, seed=s), {}, [res], mnist5k.source).with_run("r1")
            for s in range(2)]
    (chart,) = training_charts(recs, {"r1": "dlbench train --dataset mnist5k"})
    assert "tiny_mlp on mnist5k" in chart.title and "2 run(s)" in chart.title
    assert chart.svg.startswith("<svg") and chart.commands == ("dlbench train --dataset mnist5k",)
    page = report_html.render_html(recs, [RunInfo(run_id="r1", command="dlbench train")])
    assert "against iteration and wall time" in page and "Time to train (MLPerf-style)" in page
    # the running mean: about 1% of the series per point, each point the mean of its window
    xs, ys = smooth(range(1000), [float(i) for i in range(1000)])
    assert len(xs) <= 500 and ys[0] == pytest.approx(sum(range(10)) / 10)
    assert smooth([1, 2], [float("nan"), float("inf")]) == ([], [])


def test_divergence_is_a_failed_run_not_an_exception(data_dir, mnist5k):
    res = train_run(cfg(data_dir, model="test_nan", throughput_steps=0), mnist5k, CPU,
                    mllog=False)
    assert res["status"] == "error" and res["error_type"] == "nan"
    assert res["time_to_train_s"] is None and len(res["epoch_times_s"]) == 1
    assert "diverged" in res["error"]


def test_a_run_that_never_reaches_the_target_failed(data_dir, mnist5k):
    res = train_run(cfg(data_dir, target=0.999, max_epochs=1, throughput_steps=0), mnist5k, CPU,
                    mllog=False)
    assert res["status"] == "error" and res["error_type"] == "not_converged"
    assert "did not reach the target 0.999" in res["error"] and res["run_s"] > 0


def test_full_epochs_keeps_training_after_the_target(data_dir, mnist5k):
    res = train_run(cfg(data_dir, target=0.5, max_epochs=3, full_epochs=True,
                        throughput_steps=0), mnist5k, CPU, mllog=False)
    assert res["status"] == "ok" and len(res["epoch_times_s"]) == 3
    assert res["epochs_to_converge"] == 1 and res["run_s"] > res["time_to_train_s"]


def test_the_dataloader_path_trains_the_same_batches(data_dir, mnist5k):
    a = train_run(cfg(data_dir, max_epochs=1, target=0.99, throughput_steps=0), mnist5k, CPU,
                  mllog=False)
    b = train_run(cfg(data_dir, max_epochs=1, target=0.99, throughput_steps=0,
                      loader="dataloader", workers=0), mnist5k, CPU, mllog=False)
    # the same permutation and arithmetic: the same losses, whichever loader fetched the data
    assert a["iter_loss"] == pytest.approx(b["iter_loss"], rel=1e-5)
    assert a["eval_accuracy"] == b["eval_accuracy"]


def test_the_synthetic_side_measurement_is_bounded_by_its_count(monkeypatch):
    # Training has no time cap: the epoch is one pass over the data and the time to train counts
    # all of it. Its timed side measurement runs through the measured window for a fixed count,
    # so however slow a step is (2 s here, on a fake clock), it ends after exactly its steps,
    # with the first step and the warm-up apart, and the window bounds its launch queue.
    import contextlib
    from types import SimpleNamespace

    from dlbench.training import loop

    t = [0.0]
    calls = []

    def slow_update(loss, opt, scaler):
        calls.append(t[0])
        t[0] += 2.0
    monkeypatch.setattr(loop, "update", slow_update)
    data = SimpleNamespace(channels=1, size=4, num_classes=10)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 10))
    c = TrainConfig(dataset="mnist5k", model="tiny_mlp", batch_size=8, target=0.5,
                    throughput_steps=7, device="cpu")
    res = loop._synthetic(net, None, None, contextlib.nullcontext, data, c, CPU,
                          lambda: t[0])
    assert res == {"samples": 7 * 8, "seconds": 14.0, "steps": 7}
    assert len(calls) == loop.SYNTHETIC_WARMUP + 7    # first step, warm-up, then the window


def test_models_and_learning_rate_rule():
    x = torch.randn(2, 1, 28, 28)
    for name in ("cnn10", "cnn10_small", "resnet18", "tiny_mlp"):
        assert build_model(name, 1, 10, 28)(x).shape == (2, 10)
    assert canonical_name("wide_resnet28_10") == "wrn28_10"
    assert build_model("wrn28_10", 3, 10, 32)(torch.randn(1, 3, 32, 32)).shape == (1, 10)
    wrn = build_model("wrn28_10", 3, 10, 32)
    assert sum(p.numel() for p in wrn.parameters()) == pytest.approx(36.5e6, rel=0.01)
    base = TrainConfig(dataset="d", model="m", batch_size=128, target=0.9)
    assert default_lr(base) == pytest.approx(0.05)
    assert default_lr(TrainConfig(dataset="d", model="m", batch_size=256, gpus=2, target=0.9)
                      ) == pytest.approx(0.2)                # linear: 0.1 x 512 / 256 (Goyal)
    assert default_lr(TrainConfig(dataset="d", model="m", batch_size=128, target=0.9,
                                  lr=0.01)) == 0.01


def test_config_errors_name_the_flag():
    from dlbench.config import ConfigError
    for kw, flag in ((dict(target=1.5), "^target "), (dict(batch_size=0), "^batch_size "),
                     (dict(loader="tfrecord"), "^loader "), (dict(gpus=0), "^gpus "),
                     (dict(max_epochs=0), "^max_epochs ")):
        with pytest.raises(ConfigError, match=flag):
            TrainConfig(**{**dict(dataset="d", model="m", batch_size=8, target=0.9), **kw})
    seeds = {TrainConfig(dataset="d", model="m", batch_size=8, target=0.9, seed=s).setup_key()
             for s in range(3)}
    assert len(seeds) == 1


# -- the command line -----------------------------------------------------------------------------
def test_cli_trains_seeds_stores_them_and_writes_checked_logs(tmp_path, data_dir, capsys):
    args = ["train", "--dataset", "mnist5k", "-m", "tiny_mlp", "--target", "0.85", "--seeds",
            "3", "-b", "64", "--max-epochs", "5", "--throughput-steps", "3", "--device", "cpu",
            "--db", str(tmp_path / "t.db"), "--json", "-q", "--tag", "t"]
    if data_dir:
        args += ["--data-dir", data_dir]
    assert main(args) == 0
    docs = json.loads(capsys.readouterr().out)
    assert [d["config"]["seed"] for d in docs] == [0, 1, 2]
    assert all(d["status"] == "ok" and d["compliance"]["passed"] for d in docs)
    assert docs[0]["pipeline"] and docs[1]["pipeline"] is None      # first seed only
    logs = sorted((tmp_path / "t-mllog").glob("*.log"))
    assert len(logs) == 3 and ":::MLLOG" in logs[0].read_text()
    with Store(tmp_path / "t.db") as store:
        assert len(store.results(tag="t", kind="train")) == 3


def test_cli_missing_dataset_is_a_usage_error(tmp_path, capsys):
    code = main(["train", "--dataset", "cifar10", "--data-dir", str(tmp_path), "-m", "resnet18",
                 "--target", "0.9", "--db", str(tmp_path / "t.db")])
    assert code == 2
    err = capsys.readouterr().err
    assert "CIFAR-10 was not found" in err and "cifar-10-batches-py" in err
    assert not (tmp_path / "t.db").exists()                          # nothing ran


def test_ctrl_c_keeps_the_finished_runs(tmp_path, data_dir, monkeypatch, capsys):
    real = InlineRunner.run
    calls = []

    def run_then_interrupt(self, cfg, env, **kw):
        calls.append(cfg.seed)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, cfg, env, **kw)
    monkeypatch.setattr(InlineRunner, "run", run_then_interrupt)
    args = ["train", "--dataset", "mnist5k", "-m", "tiny_mlp", "--target", "0.8", "--seeds", "3",
            "--device", "cpu", "--no-mllog", "--throughput-steps", "0", "--db",
            str(tmp_path / "t.db"), "-q"]
    assert main(args + (["--data-dir", data_dir] if data_dir else [])) == 130
    with Store(tmp_path / "t.db") as store:
        (info,) = store.runs()
        assert info.status == "interrupted" and info.results == 1
    assert "finished run(s) are kept" in capsys.readouterr().err


def test_help_teaches_datasets_rules_and_examples(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    for text in ("examples:", "apt-get install dataset-fashion-mnist", "olympic mean",
                 "cifar-10-batches-py", "compliance_checker", "--seeds", "exit codes",
                 "sqrt(global batch / 128)", "Goyal", "--decay-epochs", "the rules' target"):
        assert text in out, text


@pytest.mark.gpu
@pytest.mark.parametrize("loader", ["gpu", "dataloader"])
def test_a_run_on_the_gpu_with_both_loaders(data_dir, mnist5k, loader):
    res = train_run(cfg(data_dir, model="cnn10_small", precision="bf16", loader=loader,
                        workers=2, device="cuda", throughput_steps=20), mnist5k,
                    torch.device("cuda", 0))
    assert res["status"] == "ok", res["error"]
    assert res["device"] == "cuda" and res["memory"]["allocated_peak_bytes"] > 0
    assert res["synthetic"]["samples"] == 20 * 64 and res["pipeline"]["seconds"] > 0
    assert torch.cuda.get_device_name(0) in res["mllog"]          # submission_platform

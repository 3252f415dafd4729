"""MLPerf logs of real runs and MLPerf's own compliance checker with dlbench's rules: a produced
log passes, a tampered one fails, a failed run's log fails."""

import json

import pytest
import torch
from fakes.datasets import mnist5k_dir

from dlbench.data import load_dataset
from dlbench.records.train import TrainConfig
from dlbench.training import mlperf
from dlbench.training.loop import train_run


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """A converged run's log and a failed run's log, written to files."""
    tmp = tmp_path_factory.mktemp("mllog")
    data_dir = mnist5k_dir(tmp)
    data = load_dataset("mnist5k", data_dir)
    base = dict(dataset="mnist5k", model="tiny_mlp", batch_size=64, max_epochs=5,
                data_dir=data_dir, throughput_steps=0, seed=3)
    ok = train_run(TrainConfig(target=0.85, **base), data, torch.device("cpu"))
    # three epochs in full (the last evaluation above the target): a log to tamper with
    three = train_run(TrainConfig(target=0.85, **{**base, "max_epochs": 3, "full_epochs": True}),
                      data, torch.device("cpu"))
    assert three["eval_accuracy"][-1] >= 0.85, three["eval_accuracy"]
    (tmp / "three.log").write_text(three["mllog"])
    bad = train_run(TrainConfig(target=0.999, **{**base, "max_epochs": 1}), data,
                    torch.device("cpu"))
    assert ok["status"] == "ok" and bad["error_type"] == "not_converged"
    (tmp / "ok.log").write_text(ok["mllog"])
    (tmp / "bad.log").write_text(bad["mllog"])
    return tmp, ok


def _events(text):
    return [json.loads(line.split(":::MLLOG ", 1)[1]) for line in text.splitlines()
            if ":::MLLOG" in line]


def _write(path, events):
    path.write_text("".join(":::MLLOG " + json.dumps(e) + "\n" for e in events))
    return path


def test_the_log_holds_mlperfs_events_and_the_run_clock(logs):
    tmp, ok = logs
    ev = _events(ok["mllog"])
    keys = [e["key"] for e in ev]
    for k in ("init_start", "init_stop", "run_start", "run_stop", "seed", "global_batch_size",
              "train_samples", "eval_samples", "epoch_start", "epoch_stop", "eval_accuracy"):
        assert k in keys, k
    assert next(e["value"] for e in ev if e["key"] == "seed") == 3
    assert next(e["value"] for e in ev if e["key"] == "global_batch_size") == 64
    assert keys.count("eval_accuracy") == ok["epochs_to_converge"]
    assert ev[-1]["key"] == "run_stop" and ev[-1]["metadata"]["status"] == "success"
    start, stop = mlperf.run_times_ms(ok["mllog"])
    # MLPerf's time to train (run_stop - run_start) is the record's, to the logged millisecond
    assert (stop - start) / 1e3 == pytest.approx(ok["time_to_train_s"], abs=2e-3)


def test_mlperfs_checker_passes_a_produced_log(logs, monkeypatch):
    tmp, _ = logs
    monkeypatch.chdir(tmp)                      # a relative path, as --log-dir gives by default
    verdict = mlperf.check_log("ok.log")
    assert verdict.passed, verdict.output
    assert verdict.returncode == 0 and "SUCCESS" in verdict.output
    assert mlperf.mlperf_verdict(verdict.output) == "SUCCESS"   # MLPerf's own line, not ours
    assert verdict.rules.endswith("dlbench_train.yaml") and verdict.ruleset
    assert verdict.rules_version and verdict.to_dict()["rules_version"] == verdict.rules_version


CHECKERS = ["dlbench", pytest.param("mlperf_logging", marks=pytest.mark.skipif(
    not mlperf.available(), reason="needs the mlperf-logging package"))]


def _verdict(path, checker):
    return mlperf.check_log(path, use_mlperf=checker == "mlperf_logging")


def _tamper(ev, tamper):
    """Edit a log's events as a hand might; returns them."""
    def first(key):
        return next(e for e in ev if e["key"] == key)
    if tamper == "target_lowered":        # the target edited down, the run stopping at 0.79
        first("target_accuracy")["value"] = 0.5
        [e for e in ev if e["key"] == "eval_accuracy"][-1]["value"] = 0.79
    elif tamper == "last_eval_below_target":
        [e for e in ev if e["key"] == "eval_accuracy"][-1]["value"] = 0.80
    elif tamper == "lr_changed":          # a hyperparameter off the rules at this global batch
        first("opt_base_learning_rate")["value"] *= 2
    elif tamper == "decay_removed":       # a hyperparameter line removed
        ev = [e for e in ev if e["key"] != "opt_learning_rate_decay_epochs"]
    elif tamper == "batch_changed":       # the batch changed, the learning rate kept
        first("global_batch_size")["value"] *= 4
    elif tamper == "eval_skipped":        # epoch 2 left unevaluated
        ev = [e for e in ev if not (e["key"].startswith("eval_")
                                    and e["metadata"].get("epoch_num") == 2)]
    elif tamper == "unknown_benchmark":
        first("submission_benchmark")["value"] = "dlbench_mnist5k_other"
    elif tamper == "no_init_stop":
        ev = [e for e in ev if e["key"] != "init_stop"]
    elif tamper == "epoch_skip":
        for e in ev:
            if e["key"] == "epoch_start" and e["metadata"]["epoch_num"] == 1:
                e["metadata"]["epoch_num"] = 2
    elif tamper == "two_seeds":
        ev.insert(3, {**first("seed"), "value": 99})
    elif tamper == "stop_before_start":
        ev[-1]["time_ms"] = first("run_start")["time_ms"] - 1000
    return ev


@pytest.mark.parametrize("checker", CHECKERS)
def test_an_untampered_log_passes_the_rules(logs, checker):
    tmp, _ = logs
    for name in ("ok.log", "three.log"):
        verdict = _verdict(tmp / name, checker)
        assert verdict.passed, verdict.output
        assert "SUCCESS" in verdict.output and not verdict.reasons
        if checker == "mlperf_logging":
            assert mlperf.mlperf_verdict(verdict.output) == "SUCCESS", verdict.output


@pytest.mark.parametrize("checker", CHECKERS)
@pytest.mark.parametrize("tamper,why", [
    ("target_lowered", "target_accuracy 0.5 is not the rules' 0.85"),
    ("last_eval_below_target", "the last evaluation (0.8) is below the rules' target 0.85"),
    ("lr_changed", "opt_base_learning_rate"),
    ("decay_removed", "opt_learning_rate_decay_epochs appears 0 times"),
    ("batch_changed", "opt_base_learning_rate"),
    ("eval_skipped", "epoch 2 was not evaluated"),
    ("unknown_benchmark", "is not defined by the rules"),
    ("no_init_stop", "init_stop appears 0 times"),
    ("epoch_skip", "epoch_start 2 follows epoch 0"),
    ("two_seeds", "seed appears 2 times"),
    ("stop_before_start", "run_stop is dated before run_start"),
])
def test_a_tampered_log_fails_the_rules(logs, tamper, why, checker):
    tmp, _ = logs
    ev = _tamper(_events((tmp / "three.log").read_text()), tamper)
    verdict = _verdict(_write(tmp / f"tampered-{tamper}-{checker}.log", ev), checker)
    assert not verdict.passed, verdict.output
    assert "FAILED" in verdict.output
    # dlbench's checker says why, in words; it runs beside MLPerf's too
    assert any(why in r for r in verdict.reasons), verdict.reasons
    if checker == "mlperf_logging":
        assert verdict.returncode != 0 and "mlperf_logging" in verdict.checkers
        # MLPerf's checker's own verdict line: "FAILED" above may come from dlbench's summary
        # alone, and a crash of MLPerf's checker also exits non-zero
        assert mlperf.mlperf_verdict(verdict.output) == "FAILED", verdict.output
        assert "Traceback" not in verdict.output and verdict.mlperf_reasons


def test_the_target_comes_from_the_rules_not_from_the_log(logs):
    """A run told a lower target than its benchmark's logs that target; it fails the rules
    even where its last evaluation reached the target it was given."""
    tmp, _ = logs
    data_dir = mnist5k_dir(tmp)
    data = load_dataset("mnist5k", data_dir)
    res = train_run(TrainConfig(dataset="mnist5k", model="tiny_mlp", batch_size=64, target=0.5,
                                max_epochs=5, data_dir=data_dir, throughput_steps=0, seed=1),
                    data, torch.device("cpu"))
    assert res["status"] == "ok"
    verdict = mlperf.check_log(_write(tmp / "low.log", _events(res["mllog"])))
    assert not verdict.passed
    assert any("target_accuracy 0.5 is not the rules' 0.85" in r for r in verdict.reasons)


def test_a_failed_run_logs_aborted_and_does_not_pass(logs):
    tmp, _ = logs
    ev = _events((tmp / "bad.log").read_text())
    assert ev[-1]["key"] == "run_stop" and ev[-1]["metadata"]["status"] == "aborted"
    verdict = mlperf.check_log(tmp / "bad.log")
    assert not verdict.passed and "status" in verdict.output


def test_the_rules_file_ships_with_the_package():
    path = mlperf.rules_path()
    assert path.is_file() and "compliance_checker" in path.read_text()


def test_the_shipped_mlperf_rules_are_generated_from_the_rules_file():
    from dlbench.training.compliance import mlperf_rules_yaml
    assert mlperf.rules_path().read_text() == mlperf_rules_yaml(), (
        "regenerate src/dlbench/training/rules/dlbench_train.yaml (see its header)")


def _block_mlperf_logging(monkeypatch):
    import builtins
    real = builtins.__import__

    def no_mllog(name, *a, **kw):
        if name.startswith("mlperf_logging"):
            raise ImportError(name)
        return real(name, *a, **kw)
    monkeypatch.setattr(builtins, "__import__", no_mllog)
    monkeypatch.setattr(mlperf, "available", lambda: False)


def test_without_mlperf_logging_dlbench_writes_the_same_lines(monkeypatch):
    def script(log):
        log.start("init_start", t=0.0)
        log.event("seed", 3, t=0.5)
        log.start("epoch_start", metadata={"epoch_num": 1}, t=1.0)
        log.end("run_stop", metadata={"status": "success"}, t=2.0)
        return _events(log.text())
    clock = lambda: 0.0  # noqa: E731
    theirs = script(mlperf.MLPerfLog(clock))
    _block_mlperf_logging(monkeypatch)
    plain = mlperf.MLPerfLog(clock)
    assert plain.writer == "dlbench"
    ours = script(plain)

    def strip(ev):
        return [{**e, "time_ms": None, "metadata": {k: v for k, v in e["metadata"].items()
                                                    if k not in ("file", "lineno")}} for e in ev]
    assert strip(ours) == strip(theirs)
    assert [e["time_ms"] - ours[0]["time_ms"] for e in ours] == [0, 500, 1000, 2000]
    assert all(isinstance(e["metadata"]["lineno"], int) for e in ours)


def test_without_mlperf_logging_a_run_is_logged_and_checked_by_dlbench(logs, monkeypatch):
    tmp, _ = logs
    _block_mlperf_logging(monkeypatch)
    data_dir = mnist5k_dir(tmp)
    data = load_dataset("mnist5k", data_dir)
    res = train_run(TrainConfig(dataset="mnist5k", model="tiny_mlp", batch_size=64, target=0.85,
                                max_epochs=5, data_dir=data_dir, throughput_steps=0, seed=3),
                    data, torch.device("cpu"))
    verdict = mlperf.check_log(_write(tmp / "plain.log", _events(res["mllog"])))
    assert verdict.passed and verdict.checkers == ("dlbench",) and verdict.returncode is None
    assert "mlperf-logging is not installed" in verdict.output
    with pytest.raises(mlperf.MLPerfUnavailable, match=r"pip install 'dlbench\[train\]'"):
        mlperf.check_log(tmp / "plain.log", use_mlperf=True)

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
    assert verdict.rules.endswith("dlbench_train.yaml") and verdict.ruleset


@pytest.mark.parametrize("tamper,why", [
    ("accuracy", "best_accuracy"),     # the converging evaluation edited below the target
    ("no_init_stop", "init_stop"),     # a line removed
    ("epoch_skip", "epoch_num"),       # an epoch renumbered
    ("two_seeds", "seed"),             # a second seed
    ("stop_before_start", "run_start_ms"),  # run_stop dated before run_start
])
def test_mlperfs_checker_fails_a_tampered_log(logs, tamper, why):
    tmp, ok = logs
    ev = _events(ok["mllog"])
    if tamper == "accuracy":
        for e in ev:
            if e["key"] == "eval_accuracy" and e["value"] >= 0.85:
                e["value"] = 0.5
    elif tamper == "no_init_stop":
        ev = [e for e in ev if e["key"] != "init_stop"]
    elif tamper == "epoch_skip":
        for e in ev:
            if e["key"] == "epoch_start" and e["metadata"]["epoch_num"] == 1:
                e["metadata"]["epoch_num"] = 2
    elif tamper == "two_seeds":
        ev.insert(3, {**next(e for e in ev if e["key"] == "seed"), "value": 99})
    elif tamper == "stop_before_start":
        start = next(e for e in ev if e["key"] == "run_start")["time_ms"]
        ev[-1]["time_ms"] = start - 1000
    verdict = mlperf.check_log(_write(tmp / f"tampered-{tamper}.log", ev))
    assert not verdict.passed and verdict.returncode != 0
    assert "FAILED" in verdict.output and why in verdict.output, verdict.output


def test_a_failed_run_logs_aborted_and_does_not_pass(logs):
    tmp, _ = logs
    ev = _events((tmp / "bad.log").read_text())
    assert ev[-1]["key"] == "run_stop" and ev[-1]["metadata"]["status"] == "aborted"
    verdict = mlperf.check_log(tmp / "bad.log")
    assert not verdict.passed and "status" in verdict.output


def test_the_rules_file_ships_with_the_package():
    path = mlperf.rules_path()
    assert path.is_file() and "compliance_checker" in path.read_text()


def test_without_mlperf_logging_the_message_says_what_to_install(monkeypatch):
    import builtins
    real = builtins.__import__

    def no_mllog(name, *a, **kw):
        if name.startswith("mlperf_logging"):
            raise ImportError(name)
        return real(name, *a, **kw)
    monkeypatch.setattr(builtins, "__import__", no_mllog)
    with pytest.raises(mlperf.MLPerfUnavailable, match=r"pip install 'dlbench\[train\]'"):
        mlperf.MLPerfLog()

"""The command line: exit codes, output and the SQLite file of each command, run in this process
by the shared runner (tests/fakes/cli.py); a real ``python -m dlbench`` where a signal or a kill
is what is tested."""

import json
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from fakes import cli
from fakes.cli import FAST


def dlbench(*args, timeout=300):
    return cli.run(*args, timeout=timeout)


def count_results(db):
    if not Path(db).exists():
        return 0
    try:
        con = sqlite3.connect(db, timeout=5)
        n = con.execute("SELECT COUNT(*) FROM results").fetchone()[0]
        con.close()
        return n
    except sqlite3.OperationalError:
        return 0


def test_help_teaches():
    p = dlbench("throughput", "--help")
    assert p.returncode == 0
    assert "examples:" in p.stdout and "exit codes" in p.stdout


def test_models_lists_seed_and_modern_models():
    p = dlbench("models", "--json", "--no-flops")
    assert p.returncode == 0
    names = {m["name"] for m in json.loads(p.stdout)}
    assert {"resnet50", "inception_v4", "nasnet", "vit_b_16", "bert-base", "gpt2"} <= names
    assert "tiny_cnn" not in names


def test_unknown_model_names_close_matches(tmp_path):
    p = dlbench("throughput", "-m", "resnet5", "--db", str(tmp_path / "x.db"))
    assert p.returncode == 2
    assert "resnet50" in p.stderr
    assert not (tmp_path / "x.db").exists()  # nothing ran, nothing written


@pytest.mark.parametrize("cmd", ["throughput", "maxbatch", "scale"])
def test_an_impossible_stopping_rule_is_a_usage_error(tmp_path, cmd):
    p = dlbench(cmd, "-m", "tiny_cnn", "--device", "cpu", "--min-time", "2", "--max-time", "0.5",
                "--db", str(tmp_path / "x.db"))
    assert p.returncode == 2 and "--max-time" in p.stderr
    assert "Traceback" not in p.stderr
    assert not (tmp_path / "x.db").exists()


def test_precision_the_device_lacks_fails_before_anything_runs(tmp_path):
    p = dlbench("throughput", "-m", "tiny_cnn", "-b", "4", "--precision", "fp32,tf32",
                "--device", "cpu", "--db", str(tmp_path / "x.db"))
    assert p.returncode == 2 and "tf32" in p.stderr
    assert not (tmp_path / "x.db").exists()


def test_sweep_json_results_and_export(tmp_path):
    db = str(tmp_path / "r.db")
    p = dlbench("throughput", "-m", "tiny_cnn", "-b", "4", "--mode", "train,eval", "--json",
                "-q", "--db", db, "--tag", "first", *FAST)
    assert p.returncode == 0, p.stderr
    docs = json.loads(p.stdout)
    assert [d["config"]["mode"] for d in docs] == ["train", "eval"]
    assert all(len(d["step_times_s"]) >= 5 and d["summary"]["samples_per_s"] > 0 for d in docs)
    assert docs[0]["env"]["accelerator"] in ("cpu", "cuda")

    ls = dlbench("results", "ls", "--db", db, "--json")
    runs = json.loads(ls.stdout)
    assert len(runs) == 1 and runs[0]["tag"] == "first" and runs[0]["results"] == 2

    show = dlbench("results", "show", "latest", "--db", db)
    assert show.returncode == 0 and "tiny_cnn" in show.stdout
    one = dlbench("results", "show", docs[0]["id"][:8], "--db", db)
    assert one.returncode == 0 and "step times (ms)" in one.stdout

    out = tmp_path / "r.csv"
    ex = dlbench("results", "export", "--db", db, "--format", "csv", "-o", str(out))
    assert ex.returncode == 0
    lines = out.read_text().splitlines()
    assert lines[0].startswith("kind,id,run_id") and len(lines) == 3
    js = json.loads(dlbench("results", "export", "--db", db).stdout)
    assert {d["id"] for d in js} == {d["id"] for d in docs}


@pytest.mark.slow
def test_pad_vocab_flag_reaches_language_models_only(tmp_path):
    from dlbench.cli import build_parser
    assert build_parser().parse_args(["throughput", "-m", "gpt2", "--pad-vocab"]).pad_vocab
    assert not build_parser().parse_args(["throughput", "-m", "gpt2"]).pad_vocab
    p = dlbench("throughput", "-m", "tiny_cnn,tiny_gpt2", "-b", "2", "--device", "cpu",
                "--pad-vocab", "--json", "-q", "--db", str(tmp_path / "p.db"), *FAST)
    assert p.returncode == 0, p.stderr
    docs = json.loads(p.stdout)
    assert {d["config"]["model"]: d["config"]["pad_vocab"] for d in docs} == \
        {"tiny_cnn": False, "tiny_gpt2": True}       # dropped for the image model, not refused
    assert all(d["status"] == "ok" for d in docs)


def test_profile_flag_profiles_after_the_window_and_prints_where_the_time_went(tmp_path):
    p = dlbench("throughput", "-m", "tiny_cnn", "-b", "2", "--device", "cpu", "--profile", "2",
                "--db", str(tmp_path / "p.db"), *FAST)
    assert p.returncode == 0, p.stderr
    assert "Where the time went" in p.stdout and "Top kernels" in p.stdout
    bad = dlbench("throughput", "-m", "tiny_cnn", "--device", "cpu", "--profile", "-1",
                  "--db", str(tmp_path / "p.db"), *FAST)
    assert bad.returncode == 2 and "--profile must be >= 0" in bad.stderr


def test_oom_is_a_row_and_the_sweep_goes_on(tmp_path):
    db = str(tmp_path / "o.db")
    p = dlbench("throughput", "-m", "test_oom,tiny_cnn", "-b", "64", "--db", db, "-q", "--json",
                *FAST)
    assert p.returncode == 3  # finished, but a result is a failure
    docs = json.loads(p.stdout)
    assert [d["error_type"] for d in docs] == ["oom", None]
    assert count_results(db) == 2


def test_resume_skips_what_was_measured(tmp_path):
    db = str(tmp_path / "r.db")
    assert dlbench("throughput", "-m", "tiny_cnn", "-b", "2", "--db", db, "-q", *FAST).returncode == 0
    p = dlbench("throughput", "-m", "tiny_cnn", "-b", "2,3", "--db", db, "--resume", *FAST)
    assert p.returncode == 0
    assert "1 skipped by --resume" in p.stderr
    assert count_results(db) == 2


def test_results_on_missing_db_is_a_clear_error(tmp_path):
    p = dlbench("results", "ls", "--db", str(tmp_path / "none.db"))
    assert p.returncode == 2 and "dlbench run" in p.stderr


def _start_long_sweep(db):
    # Six configs of about 0.6 s each: once two are stored, four (2.4 s) are left to interrupt.
    args = ["throughput", "-m", "tiny_cnn", "-b", "1,2,3,4,5,6", "--db", db, "-q",
            "--min-time", "0.6", "--max-time", "0.6", "--warmup", "1", "--warmup-time", "0"]
    return cli.popen(*args)


def _wait_for_results(db, n, proc, limit=120):
    t = time.time()
    while count_results(db) < n:
        assert proc.poll() is None, proc.communicate()
        assert time.time() - t < limit
        time.sleep(0.1)


@pytest.mark.slow
def test_ctrl_c_keeps_results_and_resume_finishes(tmp_path):
    db = str(tmp_path / "c.db")
    proc = _start_long_sweep(db)
    _wait_for_results(db, 2, proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "--resume" in err
    kept = count_results(db)
    assert 2 <= kept < 6
    con = sqlite3.connect(db)
    assert con.execute("SELECT status FROM runs").fetchone()[0] == "interrupted"
    con.close()
    # the four configs left, in windows of 0.3 s at most: what is tested is what --resume runs
    p = dlbench("throughput", "-m", "tiny_cnn", "-b", "1,2,3,4,5,6", "--db", db, "--resume", "-q",
                *FAST, "--max-time", "0.3")
    assert p.returncode == 0
    assert count_results(db) == 6


@pytest.mark.slow
def test_kill_mid_sweep_keeps_every_stored_result(tmp_path):
    db = str(tmp_path / "k.db")
    proc = _start_long_sweep(db)
    _wait_for_results(db, 2, proc)
    proc.kill()  # SIGKILL: no handler runs
    proc.communicate(timeout=60)
    p = dlbench("results", "export", "--db", db)
    assert p.returncode == 0
    docs = json.loads(p.stdout)
    assert len(docs) >= 2 and all(d["status"] == "ok" and d["step_times_s"] for d in docs)


def test_isolated_worker_runs_in_a_fresh_process(tmp_path):
    db = str(tmp_path / "w.db")
    p = dlbench("throughput", "-m", "tiny_cnn,test_nan", "-b", "4", "--isolate", "--db", db, "-q",
                "--json", *FAST)
    assert p.returncode == 3
    docs = json.loads(p.stdout)
    assert docs[0]["status"] == "ok" and docs[1]["error_type"] == "nan"


def test_env_json():
    p = dlbench("env", "--json")
    assert p.returncode == 0
    e = json.loads(p.stdout)
    assert e["accelerator"] in ("cpu", "cuda") and e["packages"]["torch"]


@pytest.mark.slow
def test_run_smoke_suite_end_to_end(tmp_path):
    db = str(tmp_path / "s.db")
    p = dlbench("run", "--suite", "smoke", "--db", db)
    assert p.returncode == 0, p.stderr
    assert "wall time" in p.stderr and "tiny_gpt" in p.stdout
    assert count_results(db) == 3


def test_old_names_still_work_from_the_shell_and_help_shows_the_new(tmp_path):
    """A script written before the renaming still runs: --method seed002 measures in ms per
    batch, results show --view seed002 lays it out as --view ms-per-batch does."""
    db = str(tmp_path / "old.db")
    p = dlbench("throughput", "-m", "tiny_cnn", "-b", "4", "--mode", "eval,train",
                "--method", "seed002", "--device", "cpu", "--db", db, *FAST)
    assert p.returncode == 0, p.stderr
    assert "ms per batch" in p.stdout
    old = dlbench("results", "show", "latest", "--view", "seed002", "--db", db)
    new = dlbench("results", "show", "latest", "--view", "ms-per-batch", "--db", db)
    assert old.returncode == new.returncode == 0 and old.stdout == new.stdout
    assert "ms per batch" in new.stdout
    h = dlbench("run", "--help")
    assert "classic-cnn" in h.stdout and "ms-per-batch" in h.stdout and "seed0" not in h.stdout
    s = dlbench("run", "--list-suites")
    assert s.returncode == 0 and "classic-cnn" in s.stdout and "seed0" not in s.stdout

"""Stored MLPerf verdicts name their rules and can be re-checked under today's; MLPerf's own
checker gives its own verdict with dlbench's rules file (FAILED naming the rule, never a crash);
the campaign pages state today's verdicts as the committed re-checks found them."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fakes.cli import run as run_cli
from dlbench.training import compliance, mlperf

ROOT = Path(__file__).resolve().parents[1]

needs_mlperf = pytest.mark.skipif(not mlperf.available(),
                                  reason="MLPerf's checker needs the mlperf-logging package")


def _passing_events():
    """A log of dlbench_mnist5k_tiny_mlp at global batch 64 that meets the rules: two epochs,
    the second evaluation at the target."""
    hp = {"opt_name": "sgd", "opt_momentum": 0.9, "opt_nesterov": True,
          "opt_weight_decay": 0.0005, "opt_learning_rate_schedule": "cosine",
          "opt_base_learning_rate": 0.2 * 64 / 256, "opt_learning_rate_warmup_epochs": 0.5,
          "opt_learning_rate_decay_epochs": 8, "precision": "fp32"}
    t = iter(range(1_000_000, 2_000_000, 10))

    def ev(key, value=None, kind="POINT_IN_TIME", **meta):
        return {"namespace": "", "time_ms": float(next(t)), "event_type": kind, "key": key,
                "value": value, "metadata": {"file": "loop.py", "lineno": 1, **meta}}
    out = [ev("init_start", kind="INTERVAL_START"),
           ev("submission_benchmark", "dlbench_mnist5k_tiny_mlp"),
           ev("submission_platform", "cpu"), ev("seed", 3), ev("global_batch_size", 64),
           ev("train_samples", 4000), ev("eval_samples", 1000), ev("target_accuracy", 0.85),
           *(ev(k, v) for k, v in hp.items()),
           ev("init_stop", kind="INTERVAL_END"), ev("run_start", kind="INTERVAL_START")]
    for epoch, acc in ((1, 0.7), (2, 0.86)):
        out += [ev("epoch_start", kind="INTERVAL_START", epoch_num=epoch),
                ev("epoch_stop", kind="INTERVAL_END", epoch_num=epoch, samples_count=4000),
                ev("eval_start", kind="INTERVAL_START", epoch_num=epoch),
                ev("eval_accuracy", acc, epoch_num=epoch),
                ev("eval_stop", kind="INTERVAL_END", epoch_num=epoch)]
    return out + [ev("run_stop", kind="INTERVAL_END", status="success")]


def _write(path, events):
    path.write_text("".join(":::MLLOG " + json.dumps(e) + "\n" for e in events))
    return path


def _tamper(events, how):
    if how == "lr_changed":              # a CHECK of a key fails (the checker prints its state)
        next(e for e in events if e["key"] == "opt_base_learning_rate")["value"] *= 2
    elif how == "decay_removed":         # a REQ and an END check fail
        events = [e for e in events if e["key"] != "opt_learning_rate_decay_epochs"]
    elif how == "last_eval_below_target":
        [e for e in events if e["key"] == "eval_accuracy"][-1]["value"] = 0.80
    return events


# -- what a verdict records -------------------------------------------------------------------
def test_a_verdict_names_the_rules_it_was_reached_under(tmp_path):
    log = _write(tmp_path / "ok.log", _passing_events())
    verdict = mlperf.check_log(log, use_mlperf=False)
    assert verdict.passed, verdict.output
    d = verdict.to_dict()
    assert d["rules_version"] == compliance.rules_version()
    digest = __import__("hashlib").sha256(mlperf.rules_path().read_bytes()).hexdigest()[:12]
    from dlbench import __version__
    assert d["rules_version"] == f"dlbench {__version__}, rules sha256:{digest}"


def test_other_rules_give_another_version(tmp_path):
    other = tmp_path / "other.yaml"
    other.write_text(mlperf.rules_path().read_text().replace("'target': 0.85", "'target': 0.8"))
    assert compliance.rules_version(str(other)) != compliance.rules_version()


# -- MLPerf's own checker, run as MLPerf documents it -------------------------------------------
def _mlperf_checker(log, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training",
         "--ruleset", mlperf.latest_ruleset(), "--config", str(mlperf.rules_path()),
         "--log_output", str(tmp_path / "checker.log"), str(log)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path)
    return proc.returncode, proc.stdout + proc.stderr


@needs_mlperf
def test_mlperfs_checker_says_success_on_a_passing_log(tmp_path):
    rc, out = _mlperf_checker(_write(tmp_path / "ok.log", _passing_events()), tmp_path)
    assert rc == 0 and "Traceback" not in out, out
    assert out.splitlines()[-1].strip() == "INFO - SUCCESS", out     # MLPerf's verdict line
    assert mlperf.mlperf_verdict(out) == "SUCCESS"


@needs_mlperf
@pytest.mark.parametrize("how,rule", [
    ("lr_changed", "CHECK for 'opt_base_learning_rate' failed"),
    ("decay_removed", "Required EXACTLY_ONE occurrence of 'opt_learning_rate_decay_epochs'"),
    ("last_eval_below_target", "failed test:  s['last_accuracy'] >= s['bench']['target']"),
])
def test_mlperfs_checker_says_failed_and_names_the_rule(tmp_path, how, rule):
    log = _write(tmp_path / f"{how}.log", _tamper(_passing_events(), how))
    rc, out = _mlperf_checker(log, tmp_path)
    # no crash: the state the checker prints as JSON beside a failed rule is plain data
    assert "Traceback" not in out and "not JSON serializable" not in out, out
    assert rc == 1
    assert "ERROR - FAILED" in out.splitlines(), out               # MLPerf's verdict line
    assert rule in out, out
    assert mlperf.mlperf_verdict(out) == "FAILED"
    # dlbench keeps the failed rules MLPerf's checker named
    verdict = mlperf.check_log(log, use_mlperf=True)
    assert not verdict.passed and verdict.mlperf_reasons
    assert mlperf.mlperf_verdict(verdict.output) == "FAILED"


# -- the re-check ----------------------------------------------------------------------------
def test_recheck_of_a_log_file(tmp_path):
    log = _write(tmp_path / "lr.log", _tamper(_passing_events(), "lr_changed"))
    (check,) = mlperf.recheck(log, use_mlperf=False)
    assert check.stored is None and not check.today.passed and not check.changed
    text = mlperf.format_recheck([check], "lr.log")
    assert "stored none" in text and "today FAILED" in text
    assert "dlbench rules: opt_base_learning_rate 0.1 is not the rules' 0.05" in text


def test_train_check_cli(tmp_path):
    ok = _write(tmp_path / "ok.log", _passing_events())
    bad = _write(tmp_path / "bad.log", _tamper(_passing_events(), "decay_removed"))
    p = run_cli("train", "--recheck", str(ok))
    assert p.returncode == 0 and "today passed" in p.stdout, p.stdout + p.stderr
    p = run_cli("train", "--recheck", str(bad))
    assert p.returncode == 3 and "today FAILED" in p.stdout, p.stdout + p.stderr
    assert "opt_learning_rate_decay_epochs appears 0 times" in p.stdout


CAMPAIGNS = ["pt2.11-cu130-h100-80gb-hbm3", "pt2.11-cu130-4x-h200"]


def _setups(text):
    """Per-setup lines of a re-check file: {(run, setup): (stored, today, n)}, and the total."""
    rows = {}
    for m in re.finditer(r"^  run (\w+), (.+): stored (\d+) of (\d+) passed, today (\d+) of "
                         r"\d+ passed$", text, re.M):
        rows[(m.group(1), m.group(2))] = (int(m.group(3)), int(m.group(5)), int(m.group(4)))
    total = re.search(r"^total: (\d+) logs; stored (\d+) passed, today (\d+) passed", text, re.M)
    return rows, tuple(map(int, total.groups()))


@pytest.mark.parametrize("folder", CAMPAIGNS)
def test_the_committed_recheck_is_todays_verdict_on_the_committed_store(folder):
    """dlbench's checker alone suffices here: where it fails a log, the verdict fails."""
    text = (ROOT / "results" / folder / "verdicts-recheck.txt").read_text()
    checks = mlperf.recheck(ROOT / "results" / folder / "dlbench.db.gz", use_mlperf=False)
    assert _setups(mlperf.format_recheck(checks, folder)) == _setups(text)
    assert "Traceback" not in text and "no verdict" not in text


def _outside_headlines(page):
    return re.sub(r"<!-- headline:(\S+).*?<!-- /headline:\1 -->", "", page, flags=re.S)


def test_the_h100_page_states_todays_verdicts_from_the_recheck():
    rows, (n, stored, today) = _setups(
        (ROOT / "results" / CAMPAIGNS[0] / "verdicts-recheck.txt").read_text())
    page = " ".join(_outside_headlines(
        (ROOT / "docs/results/2026-11-h100.md").read_text()).split())
    s5, t5, n5 = rows[("49d638dbbc76", "cnn10@fashion-mnist b512 x1 bf16 target=0.9")]
    assert f"{t5} of {n5} of these logs pass (stored: {s5} of {n5})" in page
    assert f"{today} of the store's {n} train logs (stored: {stored} of {n})" in page
    s2, t2, n2 = rows[("4760d1fdbf37", "cnn10@fashion-mnist b512 x1 fp32 target=0.9")]
    assert f"{t2} of {n2} pass today's rules" in page


def test_the_4x_h200_page_states_todays_verdicts_from_the_recheck():
    rows, (n, stored, today) = _setups(
        (ROOT / "results" / CAMPAIGNS[1] / "verdicts-recheck.txt").read_text())
    page = " ".join(_outside_headlines(
        (ROOT / "docs/results/2026-11-4x-h200.md").read_text()).split())
    per = [rows[(run, f"cnn10@fashion-mnist b512 x{g} bf16 target=0.9")]
           for run, g in (("b2d9d8df1a64", 1), ("b2d9d8df1a64", 2), ("657e0e614a26", 4))]
    assert {k for _, _, k in per} == {5}
    assert (f"{' / '.join(str(t) for _, t, _ in per)} of 5 pass "
            f"(stored: {' / '.join(str(s) for s, _, _ in per)} of 5)") in page
    assert f"{today} of the store's {n} train logs (stored: {stored} of {n})" in page

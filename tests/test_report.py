"""The HTML/Markdown report and ``dlbench compare``: records built here with known step times."""

import json
import math
import random
import re
from pathlib import Path

import pytest

from fakes.cli import run as run_cli

from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
from dlbench.report import compare as cmp
from dlbench.report import html as report_html
from dlbench.store import Store
from dlbench.env import env_key

EVIL = "<script>alert(1)</script>"
ENV = {"accelerator": "cpu", "cpu_model": "Test CPU", "cpu_logical_cores": 2,
       "packages": {"torch": "2.9.0"}, "hostname": "bench-host"}


def steps(mean_s: float, n: int = 200, cv: float = 0.02, seed: int = 0) -> tuple[float, ...]:
    rng = random.Random(seed)
    return tuple(mean_s * (1.0 + rng.gauss(0.0, cv)) for _ in range(n))


def record(model="resnet50", batch=32, mean_s=0.1, seed=0, env=ENV, run_id="run-a", **cfg):
    return ThroughputRecord(config=ThroughputConfig(model=model, batch_size=batch, device="cpu",
                                                    **cfg),
                            env=env, step_times_s=steps(mean_s, seed=seed),
                            samples_per_step=batch, unit="images", run_id=run_id)


def fill(db: Path, run_id: str, recs, tag=None, command="dlbench throughput -m resnet50",
         env=ENV) -> None:
    with Store(db) as s:
        s.start_run(run_id, command, env, env_key(env), "CPU", tag=tag)
        for r in recs:
            s.add(r, env_key(env))
        s.finish_run(run_id, "done")


def cli(*args):
    return run_cli(*args, timeout=120)


# -- statistics on known numbers -----------------------------------------------------------------

def test_welch_t_matches_hand_computed_values():
    # a: mean 3, var 2.5; b: mean 6, var 10; n = 5 each.
    # t = -3 / sqrt(2.5/5 + 10/5) = -3 / sqrt(2.5) = -1.8973666
    # df = 2.5^2 / (0.5^2/4 + 2^2/4) = 6.25 / 1.0625 = 5.8823529
    # p (two-sided, t with 5.88 df) = 0.1075312 (SciPy's ttest_ind(equal_var=False) agrees)
    w = cmp.welch_t([1, 2, 3, 4, 5], [2, 4, 6, 8, 10])
    assert w.t == pytest.approx(-3 / math.sqrt(2.5), rel=1e-12)
    assert w.df == pytest.approx(6.25 / 1.0625, rel=1e-12)
    assert w.p == pytest.approx(0.10753119493, rel=1e-6)


def test_welch_t_degenerate_and_symmetric():
    assert cmp.welch_t([1.0, 1.0], [1.0, 1.0]).p == 1.0
    assert cmp.welch_t([1.0, 1.0], [2.0, 2.0]).p == 0.0
    a, b = [1, 2, 3, 4], [2, 3, 5, 9]
    assert cmp.welch_t(a, b).p == pytest.approx(cmp.welch_t(b, a).p)
    with pytest.raises(ValueError):
        cmp.welch_t([1.0], [1.0, 2.0])


def test_ratio_interval_contains_ratio_and_widens():
    lo, hi = cmp.ratio_interval(0.8, 0.01, 0.01)
    assert lo < 0.8 < hi
    lo2, hi2 = cmp.ratio_interval(0.8, 0.05, 0.01)
    assert lo2 < lo and hi2 > hi
    assert cmp.ratio_interval(1.0, math.inf, 0.01) == (0.0, math.inf)


# -- compare on synthetic step times -------------------------------------------------------------

#: A run-to-run spread for the test CPU, as benchmarks/run_spread.py would store it: with one
#: process a side, compare judges against it (without one it cannot tell, and says so).
SPREAD = {"throughput": {"Test CPU": {"rel_sd": 0.005, "df": 20, "configs": [{}]}}}


def test_compare_flags_a_20_percent_regression_and_not_a_tiny_change():
    a = [record(seed=1), record(model="vgg16", seed=2)]
    # resnet50 steps take 25% longer: throughput 0.8x (a 20% regression); vgg16 0.1% slower.
    b = [record(mean_s=0.125, seed=3, run_id="run-b"),
         record(model="vgg16", mean_s=0.1001, seed=4, run_id="run-b")]
    # one process a side and no spread known for this CPU: no verdict either way
    blind = cmp.compare(a, b, threshold=0.05, spreads={})
    assert not blind.regressions and all(p.inconclusive for p in blind.pairs)
    c = cmp.compare(a, b, threshold=0.05, spreads=SPREAD)
    by = {p.label.split()[0]: p for p in c.pairs}
    assert by["resnet50"].ratio == pytest.approx(0.8, rel=0.01)
    assert by["resnet50"].significant and by["resnet50"].regression
    assert by["resnet50"].ratio_low < by["resnet50"].ratio < by["resnet50"].ratio_high
    assert not by["vgg16"].regression
    assert by["vgg16"].ratio == pytest.approx(0.999, abs=0.01)
    assert [p.label for p in c.regressions] == [by["resnet50"].label]
    assert c.env_differences == ()


def test_compare_matches_by_config_and_reports_the_rest():
    a = [record(), record(batch=64, seed=5)]
    b = [record(seed=6, run_id="run-b"), record(precision="bf16", seed=7, run_id="run-b")]
    c = cmp.compare(a, b)
    assert len(c.pairs) == 1
    assert len(c.only_a) == 1 and "b64" in c.only_a[0]
    assert "bf16" in c.only_b[0]
    table = cmp.comparison_table(c)
    assert len(table.rows) == 1 and "B/A" in table.columns


def test_compare_sees_environment_differences():
    other = dict(ENV, packages={"torch": "2.10.0"})
    c = cmp.compare([record()], [record(seed=9, env=other, run_id="run-b")])
    assert any("torch" in d for d in c.env_differences)


# -- the report ----------------------------------------------------------------------------------

@pytest.fixture
def store(tmp_path):
    db = tmp_path / "r.db"
    fill(db, "run-a", [record(batch=16, seed=1, run_id="run-a"),
                       record(batch=32, seed=2, run_id="run-a"),
                       record(model="vgg16", seed=3, run_id="run-a")],
         tag=EVIL, command=f"dlbench throughput -m resnet50,vgg16 -b 16,32 --tag '{EVIL}'")
    return db


def test_html_report_is_self_contained_and_escaped(store, tmp_path):
    out = tmp_path / "report.html"
    p = cli("report", "--db", str(store), "-o", str(out))
    assert p.returncode == 0, p.stderr
    text = out.read_text()
    assert text.startswith("<!DOCTYPE html>")
    # tables and charts
    assert "<table>" in text and "Throughput on CPU: Test CPU" in text
    assert "factor over eager in parentheses" in text
    assert "Memory and throughput against batch size" in text
    assert "seed 0" not in text.lower() and "seed0" not in text.lower()  # articles by name, not number
    assert text.count("<svg") == 2  # throughput per configuration, and against batch size
    assert "Throughput against batch size" in text
    assert "throughput (img/s)" in text or "img/s" in text
    # nothing loaded from elsewhere, no script at all
    assert not re.search(r"<script\b", text, re.I)
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", text, re.I)
    assert "@import" not in text and "url(http" not in text
    # user text shows as text
    assert EVIL not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    # the command that produced the data is beside the chart
    assert "Data from: <code>dlbench throughput -m resnet50,vgg16 -b 16,32" in text
    # chart ids are unique across charts
    ids = re.findall(r'\bid="([^"]+)"', text)
    assert len(ids) == len(set(ids))


def test_html_report_without_data_has_no_charts():
    text = report_html.render_html([], [])
    assert "<svg" not in text and "no results" in text


def test_markdown_report(store, tmp_path):
    out = tmp_path / "report.md"
    p = cli("report", "--db", str(store), "--markdown", "-o", str(out), "--tag", EVIL)
    assert p.returncode == 0, p.stderr
    text = out.read_text()
    assert "**Throughput on CPU: Test CPU (2 threads)**" in text and "| model |" in text
    assert "<script>" not in text


# -- the compare command -------------------------------------------------------------------------

def _group(run_id, mean_s, seed):
    """Three processes of one --repeat group: compare tests across them."""
    return [record(mean_s=mean_s * (1 + 0.002 * i), seed=seed + i, run_id=run_id).in_group(
        f"g-{run_id}", i, 3) for i in range(3)]


def test_compare_cli_exit_codes(tmp_path):
    db = tmp_path / "c.db"
    fill(db, "aaaa1111", _group("aaaa1111", 0.1, 1), tag="base")
    fill(db, "bbbb2222", _group("bbbb2222", 0.125, 11), tag="slow")
    fill(db, "cccc3333", _group("cccc3333", 0.1001, 21), tag="same")
    fill(db, "dddd4444", [record(mean_s=0.125, seed=31, run_id="dddd4444")], tag="one")
    p = cli("compare", "tag:base", "tag:slow", "--db", str(db))
    assert p.returncode == 5, p.stdout + p.stderr
    assert "REGRESSION" in p.stdout
    # one process against three on a CPU with no stored spread: judged against the group's
    # spread across its processes
    p = cli("compare", "tag:base", "tag:one", "--db", str(db))
    assert p.returncode == 5, p.stdout + p.stderr
    p = cli("compare", "aaaa", "cccc", "--db", str(db), "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    d = json.loads(p.stdout)
    assert d["regressions"] == 0 and len(d["pairs"]) == 1
    p = cli("compare", "tag:base", "tag:nope", "--db", str(db))
    assert p.returncode == 2 and "nope" in p.stderr


def test_compare_cli_two_files_warns_on_environment(tmp_path):
    other = dict(ENV, packages={"torch": "2.10.0"})
    fill(tmp_path / "a.db", "run-a", [record(seed=1)])
    fill(tmp_path / "b.db", "run-b", [record(seed=2, env=other, run_id="run-b")], env=other)
    p = cli("compare", "latest", "latest", "--db", str(tmp_path / "a.db"), "--db-b",
            str(tmp_path / "b.db"))
    assert p.returncode == 0, p.stderr
    assert "ENVIRONMENTS DIFFER" in p.stderr and "torch" in p.stderr


def test_messages_are_text_not_markup(capsys):
    from dlbench.report import terminal

    terminal.error("pip install 'dlbench[train]' (see [/docs])")
    terminal.warn("[bold]x[/bold]")
    err = capsys.readouterr().err
    assert "pip install 'dlbench[train]' (see [/docs])" in err and "[bold]x[/bold]" in err

"""The Python API: docs/api.md's example run as written, the API and the command line on one path
into one store, steps timed by the measured window, failures stored and raised, and import
dlbench light."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import dlbench
from conftest import FAST_STOP
from fakes.cli import run as run_cli
from fakes.cli import script
from dlbench.api import MeasurementError
from dlbench.launch import forking
from dlbench.store import StoreError

ROOT = Path(__file__).resolve().parents[1]
SRC = str(ROOT / "src")
EXAMPLE = str(ROOT / "examples" / "my_model.py") + ":build"
QUICK = dict(device="cpu", stop=FAST_STOP, warmup_steps=1, warmup_seconds=0.0)


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))


def doc_examples(path: Path) -> list[str]:
    """The ```python blocks of a Markdown page, in order."""
    return re.findall(r"^```python\n(.*?)^```", path.read_text(), re.S | re.M)


@pytest.mark.slow
def test_the_example_in_docs_api_runs(tmp_path, monkeypatch, capsys):
    # As a script of its own, run in this process from a fresh folder: it is the API's code
    # that the example runs, and this process has imported torch and timm already.
    blocks = doc_examples(ROOT / "docs" / "api.md")
    assert blocks, "docs/api.md has no python example"
    monkeypatch.chdir(tmp_path)
    exec(compile("\n".join(blocks), "docs/api.md", "exec"), {"__name__": "__main__"})
    out = capsys.readouterr().out
    assert "timm:resnet18:" in out and "step:train_step:" in out
    assert (tmp_path / "results.db").is_file()


def test_import_dlbench_loads_no_torch():
    code = ("import sys, dlbench; dlbench.__version__; dlbench.InputSpec; "
            "print('torch' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "False"


def test_api_and_cli_measure_the_same_config_into_one_store(tmp_path):
    db = tmp_path / "r.db"
    rec = dlbench.measure_throughput(EXAMPLE, batch_size=4, input_size=16, db=db,
                                     telemetry_interval_s=None, **QUICK)
    assert rec.ok and rec.summary().throughput > 0 and rec.flops_per_sample > 0
    p = run_cli("throughput", "-m", EXAMPLE, "-b", "4", "--input-size", "16", "--device", "cpu",
                "--warmup", "1", "--warmup-time", "0", "--min-steps", "5", "--min-time", "0.05",
                "--max-time", "1", "--telemetry-interval", "0", "--db", str(db), "-q")
    assert p.returncode == 0, p.stderr
    api, cli = dlbench.load(db)
    assert api.config.key() == cli.config.key()   # one config, whichever way it was asked for
    assert api.config == rec.config and api.run_id != cli.run_id


def test_default_batch_is_the_models(tmp_path):
    rec = dlbench.measure_throughput(EXAMPLE, input_size=8, telemetry_interval_s=None, **QUICK)
    # the CPU default of the command line: a quarter of the model's default batch, at most 16
    assert rec.config.batch_size == 16


def test_measure_step_times_any_callable(tmp_path):
    import torch
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 16)
    calls = []

    def train_step():
        calls.append(1)
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()

    db = tmp_path / "r.db"
    rec = dlbench.measure_step(train_step, 8, "samples", db=db, tag="mine", **QUICK)
    assert rec.ok and rec.config.model == "step:train_step" and rec.unit == "samples"
    s = rec.summary()
    assert s.samples == 8 * s.steps and s.throughput > 0
    # first step + warm-up + window, every one a call of the step
    assert len(calls) == 1 + len(rec.warmup_times_s) + len(rec.step_times_s)
    assert rec.first_step_s is not None and rec.flops_per_sample is None
    [stored] = dlbench.load(db, tag="mine")
    assert stored.id == rec.id and stored.step_times_s == rec.step_times_s


def test_a_failing_step_is_stored_and_raised(tmp_path):
    def broken():
        raise ValueError("bad shapes")

    db = tmp_path / "r.db"
    with pytest.raises(MeasurementError, match="bad shapes") as err:
        dlbench.measure_step(broken, 4, db=db, name="broken", **QUICK)
    assert err.value.record.status == "error"
    [stored] = dlbench.load(db)
    assert stored.config.model == "step:broken" and not stored.ok
    rec = dlbench.measure_step(broken, 4, db=None, check=False, **QUICK)
    assert not rec.ok and "ValueError" in rec.error


def test_bad_arguments_are_clear(tmp_path):
    from dlbench.config import ConfigError
    from dlbench.models import UnknownModelError
    with pytest.raises(UnknownModelError, match="did you mean"):
        dlbench.measure_throughput("timm:resnet181", batch_size=2, **QUICK)
    with pytest.raises(ConfigError, match="^precision fp8 ") as err:
        dlbench.measure_throughput(EXAMPLE, batch_size=2, precision="fp8", **QUICK)
    assert err.value.field == "precision" and "--" not in str(err.value)
    with pytest.raises(StoreError, match="no such store"):
        dlbench.load(tmp_path / "missing.db")


def test_to_dataframe_per_kind(tmp_path):
    db = tmp_path / "r.db"
    dlbench.measure_step(lambda: None, 2, "tokens", name="noop", db=db, **QUICK)
    df = dlbench.to_dataframe(db)
    assert list(df["model"]) == ["step:noop"]
    assert df.loc[0, "samples_per_s"] > 0 and df.loc[0, "unit"] == "tokens"
    assert dlbench.to_dataframe([], kind="peak").empty


def test_to_dataframe_without_pandas_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas now raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'dlbench\[pandas\]'"):
        dlbench.to_dataframe([])


@pytest.mark.slow
def test_the_own_models_benchmark_runs_quick_on_the_cpu(tmp_path, capfd, monkeypatch):
    # The script's main in this process, which is the script's "this one" (its API side): the
    # command line's side is a process of its own either way, here forked by the test
    # session's fork server (tests/conftest.py), which imported torch and transformers once.
    out = tmp_path / "own"
    own = script("own_models")

    def forked(cmd, *args, **kwargs):  # the script's `python -m dlbench ...`
        return subprocess.run([cmd[0], *forking.python_args(*cmd[1:])], *args, **kwargs)
    monkeypatch.setattr(own, "subprocess", SimpleNamespace(run=forked))
    code = own.main(["--out", str(out), "--quick", "--device", "cpu", "--tolerance", "1",
                     "--max-time", "0.2"])
    assert code == 0, capfd.readouterr().err[-3000:]
    rows = json.loads((out / "agreement.json").read_text())
    assert [r["model"] for r in rows] == ["timm:resnet18", "hf:gpt2?n_layer=2&n_embd=64&n_head=2"]
    assert all(r["cli"]["run"] != r["api"]["run"] and r["agree"] for r in rows)
    models = [r.config.model for r in dlbench.load(out / "dlbench.db")]
    assert sorted(models) == sorted(2 * [r["model"] for r in rows])
    assert (out / "throughput.csv").read_text().count("\n") == 5   # header + 4 records

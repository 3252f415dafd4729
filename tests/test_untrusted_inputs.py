"""Inputs dlbench must not trust, tried with real processes on the CPU: files in the working
directory (never imported by a worker, a zygote, torchrun's agent or its ranks), a Hugging Face
directory whose config asks for its own code (never run, never prompted for), sizes that cannot
be built (refused before building: in this process, as that starts none), and model code that
calls ``sys.exit`` (a failure record, not a silent exit 0: in commands forked by the session's
fork server, as what is tested is what dlbench makes of the exit, not a new interpreter)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import cli

from dlbench.launch import forking

#: What a new interpreter imports, and how it ends: for these tests every process starts afresh.
#: (Model code that calls sys.exit is about what dlbench makes of it, in whatever process it
#: runs: those commands and their children are forked by the test session's fork server.)
REAL = pytest.mark.real_processes

SRC = str(Path(__file__).resolve().parents[1] / "src")
FAST = ["--min-steps", "5", "--min-time", "0.05", "--max-time", "0.3", "--warmup", "1",
        "--warmup-time", "0", "--target-ci", "0.05"]

#: A module that leaves a marker (its process id) when imported, wherever it is found.
PLANTED = """\
import os
with open({marker!r}, "a") as f:
    f.write(str(os.getpid()) + "\\n")
"""


def dlbench(*args, cwd, timeout=180, stdin=None, env=None):
    """``dlbench ARGS`` from ``cwd``; the parent itself started with ``-P`` (as the console
    script is: its own directory first, not the working directory), so that what the test
    sees is what dlbench's own children import. In a test not marked :data:`REAL`, forked by
    the session's fork server (``python -m dlbench``: the working directory first)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
    env.pop("PYTHONSAFEPATH", None)
    # no empty entry: an empty PYTHONPATH entry is the working directory, named by the user
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [SRC, *env.get("PYTHONPATH", "").split(
        os.pathsep)]))
    python = ["-P"] if not forking.active() else forking.python_args()
    return subprocess.run([sys.executable, *python, "-m", "dlbench", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=cwd, input=stdin)


def _plant(cwd: Path, marker: Path) -> None:
    for name in ("json.py", "dataclasses.py", "selectors.py"):
        (cwd / name).write_text(PLANTED.format(marker=str(marker)))


# -- files in the working directory -------------------------------------------------------------
@REAL
@pytest.mark.slow
@pytest.mark.parametrize("spawn", [False, True], ids=["zygote", "spawned"])
def test_an_isolated_worker_imports_nothing_from_the_working_directory(tmp_path, monkeypatch,
                                                                         spawn):
    if spawn:  # a new interpreter instead of the zygote's fork
        monkeypatch.setenv("DLBENCH_SPAWN", "1")
    cwd, marker = tmp_path / "cwd", tmp_path / "imported"
    cwd.mkdir()
    _plant(cwd, marker)
    p = dlbench("throughput", "-m", "tiny_cnn", "--device", "cpu", "-b", "4", "--isolate",
                "--db", str(tmp_path / "t.db"), "-q", "--json", *FAST, cwd=cwd)
    assert not marker.exists(), f"imported from the working directory by {marker.read_text()}"
    assert p.returncode == 0, p.stderr[-3000:]
    docs = json.loads(p.stdout)
    assert docs[0]["status"] == "ok"


@REAL
@pytest.mark.slow
def test_torchrun_and_its_ranks_import_nothing_from_the_working_directory(tmp_path):
    cwd, marker = tmp_path / "cwd", tmp_path / "imported"
    cwd.mkdir()
    _plant(cwd, marker)
    p = dlbench("scale", "--device", "cpu", "--gpus", "2", "-m", "tiny_cnn", "-b", "4",
                "--warmup", "1", "--warmup-time", "0", "--min-steps", "5", "--min-time", "0.05",
                "--max-time", "0.5", "--target-ci", "0.05", "--db", str(tmp_path / "s.db"),
                "-q", "--json", cwd=cwd, timeout=240)
    assert not marker.exists(), f"imported from the working directory by {marker.read_text()}"
    assert p.returncode == 0, p.stderr[-3000:]
    docs = json.loads(p.stdout)
    assert docs[0]["status"] == "ok" and len(docs[0]["rank_step_times_s"]) == 2


# -- a Hugging Face directory that names code of its own -----------------------------------------
def _remote_code_dir(tmp_path: Path, model_type: str) -> tuple[Path, Path]:
    model, marker = tmp_path / "model", tmp_path / "ran"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "model_type": model_type, "n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 64,
        "auto_map": {"AutoConfig": "configuration_evil.EvilConfig",
                     "AutoModelForCausalLM": "modeling_evil.EvilModel"}}))
    for name in ("configuration_evil.py", "modeling_evil.py"):
        (model / name).write_text(PLANTED.format(marker=str(marker)))
    return model, marker


@REAL  # transformers reads HF_HOME once, at its import
@pytest.mark.parametrize("model_type", ["evil", "gpt2"])
def test_an_hf_directory_with_its_own_code_is_refused_without_a_prompt(tmp_path, model_type):
    model, marker = _remote_code_dir(tmp_path, model_type)
    # "y" waits on stdin: a trust_remote_code prompt would read it and run the code
    p = dlbench("throughput", "-m", f"hf:{model}", "--device", "cpu", "-b", "1",
                "--seq-len", "8", "--db", str(tmp_path / "h.db"), "-q", *FAST,
                cwd=tmp_path, stdin="y\ny\n", env={"HF_HOME": str(tmp_path / "hf")})
    assert not marker.exists()
    assert p.returncode == 2, p.stdout + p.stderr
    assert "trust_remote_code=False" in p.stderr and "configuration_evil.py" in p.stderr
    assert "Traceback" not in p.stderr and "[y/N]" not in p.stdout + p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    if model_type == "gpt2":
        assert "remove \"auto_map\"" in p.stderr


def test_hf_config_refuses_a_directory_with_its_own_code(tmp_path, monkeypatch):
    from dlbench.models.errors import ModelSourceError
    from dlbench.models.sources import hf_config
    model, marker = _remote_code_dir(tmp_path, "evil")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr("builtins.input", lambda *a: "y")
    with pytest.raises(ModelSourceError, match="needs code of its own"):
        hf_config(f"hf:{model}", str(model))
    assert not marker.exists()


def test_an_hf_directory_without_code_still_builds(tmp_path):
    from dlbench.models.sources import external_model
    model = tmp_path / "plain"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(
        {"model_type": "gpt2", "n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 64}))
    spec = external_model(f"hf:{model}")
    assert spec.kind == "text" and spec.num_classes == 64
    assert sum(p.numel() for p in spec.factory(8).parameters()) > 0


# -- model code that calls sys.exit -------------------------------------------------------------
EXITING_MODEL = """\
import sys
import torch
from torch import nn


class Quits(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        if x.device.type != "meta":
            sys.exit(0)
        return self.conv(x).mean((2, 3))


def in_forward():
    return Quits(), {"kind": "image", "input_size": 8, "num_classes": 4}


def in_factory():
    if torch.empty(0).device.type != "meta":  # the spec is read on the meta device first
        sys.exit(0)
    return Quits(), {"kind": "image", "input_size": 8, "num_classes": 4}


class Stop(BaseException):  # a BaseException of the model's own: no Exception, no Ctrl-C
    pass


class Raises(Quits):
    def forward(self, x):
        if x.device.type != "meta":
            raise Stop("done here")
        return self.conv(x).mean((2, 3))


def own_base_exception():
    return Raises(), {"kind": "image", "input_size": 8, "num_classes": 4}


def ten_classes():  # for dlbench train, whose datasets have 10 classes
    model = Quits()
    model.conv = nn.Conv2d(3, 10, 3)
    return model, {"kind": "image", "input_size": 28, "num_classes": 10}


def at_once():  # exits even while dlbench reads the input it describes
    sys.exit(0)


def language_model():  # dlbench generate: a factory of a causal LM
    sys.exit(0)
"""


EXITING = ("in_forward", "in_factory", "own_base_exception")


@pytest.fixture(scope="module")
def exiting_sweep(tmp_path_factory):
    """``exiting_sweep(isolate)``: one ``dlbench throughput`` sweep of the three exiting models
    of :data:`EXITING`, inline or with ``--isolate``, as its process and its documents by
    model. One new interpreter a mode, not one a model (each costs seconds of imports); each
    model is still measured by itself, a row after the other's failure, as in its own sweep."""
    done = {}

    def run(isolate: bool) -> tuple[subprocess.CompletedProcess, dict]:
        if isolate not in done:
            cwd = tmp_path_factory.mktemp("quits")
            (cwd / "quits.py").write_text(EXITING_MODEL)
            p = dlbench("throughput", "-m", ",".join(f"quits.py:{w}" for w in EXITING),
                        "--device", "cpu", "-b", "2", "--db", str(cwd / "q.db"), "-q", "--json",
                        *FAST, *(["--isolate"] if isolate else []), cwd=cwd)
            docs = json.loads(p.stdout) if p.stdout.strip() else []
            done[isolate] = p, {d["config"]["model"].split(":", 1)[1]: d for d in docs}
        return done[isolate]
    return run


@pytest.mark.slow
@pytest.mark.parametrize("isolate", [False, True], ids=["inline", "isolate"])
@pytest.mark.parametrize("where", EXITING)
def test_a_model_that_calls_sys_exit_is_a_failed_row(exiting_sweep, where, isolate):
    p, docs = exiting_sweep(isolate)
    assert p.returncode == 3, p.stdout + p.stderr   # a failed result, as any other
    assert list(docs) == list(EXITING), p.stdout    # a row each: the sweep went on after it
    doc = docs[where]
    assert doc["status"] == "error"
    said = "raised Stop('done here')" if where == "own_base_exception" else "called sys.exit(0)"
    assert f"ModelExitedError: the model's code {said}" in doc["error"], doc["error"]


def _one_failed_row(p: subprocess.CompletedProcess) -> dict:
    assert p.returncode == 3, p.stdout[-2000:] + p.stderr[-3000:]
    (doc,) = json.loads(p.stdout)
    assert doc["status"] == "error" and doc["error_type"] == "exception", doc
    assert "ModelExitedError: the model's code called sys.exit(0)" in doc["error"], doc["error"]
    return doc


@pytest.mark.slow
def test_a_model_that_calls_sys_exit_in_a_scaling_rank_is_a_failed_row(tmp_path):
    (tmp_path / "quits.py").write_text(EXITING_MODEL)
    doc = _one_failed_row(dlbench(
        "scale", "--device", "cpu", "--gpus", "2", "-m", "quits.py:in_forward", "-b", "2",
        "--warmup", "1", "--warmup-time", "0", "--min-steps", "5", "--min-time", "0.05",
        "--max-time", "0.5", "--target-ci", "0.05", "--db", str(tmp_path / "s.db"), "-q",
        "--json", cwd=tmp_path, timeout=240))
    assert doc["error"].startswith("rank "), doc["error"]   # the rank that exited first


@pytest.mark.slow
def test_a_model_that_calls_sys_exit_in_training_is_a_failed_run(tmp_path):
    from fakes.datasets import mnist5k_dir
    (tmp_path / "quits.py").write_text(EXITING_MODEL)
    data = mnist5k_dir(tmp_path / "mnist5k")
    _one_failed_row(dlbench(
        "train", "--dataset", "mnist5k", *(["--data-dir", data] if data else []),
        "-m", "quits.py:ten_classes", "--target", "0.5", "--max-epochs", "1", "--no-mllog",
        "--db", str(tmp_path / "t.db"), "-q", "--json", cwd=tmp_path))


def test_a_language_model_that_calls_sys_exit_is_a_failed_row(tmp_path):
    (tmp_path / "quits.py").write_text(EXITING_MODEL)
    _one_failed_row(dlbench(
        "generate", "--device", "cpu", "-m", "quits.py:language_model", "--prompt-len", "4",
        "--output-len", "2", "--db", str(tmp_path / "g.db"), "-q", "--json", cwd=tmp_path))


@pytest.mark.parametrize("source,said", [
    ("import sys\nsys.exit(0)\n", "called sys.exit(0) while it was imported"),
    (EXITING_MODEL, "called sys.exit(0) while dlbench read the input it describes")],
    ids=["imported", "reading-its-input"])
def test_a_model_file_that_exits_in_dlbenchs_own_process_is_a_usage_error(tmp_path, source,
                                                                          said):
    (tmp_path / "quits.py").write_text(source)
    db = tmp_path / "q.db"
    p = dlbench("throughput", "-m", "quits.py:at_once", "--device", "cpu", "-b", "2",
                "--db", str(db), "-q", *FAST, cwd=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr   # was exit 0, nothing said, nothing stored
    assert len(p.stderr.strip().splitlines()) == 1 and said in p.stderr, p.stderr
    assert not db.exists()


# -- a reader that stops early ------------------------------------------------------------------
# The model table and its JSON without FLOPs: counting them (every model built on the meta
# device, seconds of work) adds nothing that is written.
@REAL
@pytest.mark.parametrize("args", [["models", "--no-flops"], ["models", "--json", "--no-flops"],
                                  ["results", "ls"]])
def test_stdout_closed_by_its_reader_ends_quietly_with_exit_0(tmp_path, args):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [SRC, *env.get("PYTHONPATH", "").split(
        os.pathsep)]))
    extra = ["--db", str(tmp_path / "r.db")] if args[0] == "results" else []
    if extra:  # a store with a result to list (made in this process: it is not under test)
        assert cli.run("throughput", "-m", "tiny_mlp", "--device", "cpu", "-b", "2", *extra,
                       "-q", *FAST, cwd=tmp_path).returncode == 0
    p = subprocess.Popen([sys.executable, "-P", "-m", "dlbench", *args, *extra],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    p.stdout.close()  # `| head -0`: every write of the command meets a closed pipe
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 0, err
    assert err == ""


# -- sizes no model can have ----------------------------------------------------------------------
@pytest.mark.parametrize("model,field", [("hf:gpt2?n_layer=-1", "n_layer=-1"),
                                         ("hf:gpt2?n_head=0", "n_head=0"),
                                         ("hf:bert?vocab_size=0", "vocab_size=0"),
                                         ("hf:llama?hidden_size=2.5", "hidden_size=2.5")])
def test_a_nonsensical_hf_size_is_refused_before_building(tmp_path, model, field):
    # In this process (what the command says and returns; no process of its own to trust)
    p = cli.run("throughput", "-m", model, "--device", "cpu", "-b", "1",
                "--db", str(tmp_path / "z.db"), "-q", *FAST, cwd=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    assert field in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr

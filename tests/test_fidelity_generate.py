"""benchmarks/fidelity.py --generate on the CPU: dlbench's generation workload against the bare
generation loop, end to end, through the script's main in a process of its own."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import cli

from dlbench.launch import forking

ROOT = Path(__file__).resolve().parents[1]


#: The script's main in a fresh process with its CPU stopping rule's seconds cut from 2-8 to
#: 0.1-0.5 (its 10 requests at least kept): what is tested is that both sides run, round after
#: round, into the record and the verdict line, not how long a window lasts; a round is then
#: about a second instead of sixteen.
SHORT_WINDOWS = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("fidelity", sys.argv[1])
fidelity = importlib.util.module_from_spec(spec)
sys.modules["fidelity"] = fidelity
spec.loader.exec_module(fidelity)
rule = fidelity.StopRule
fidelity.StopRule = lambda **kw: rule(**{**kw, "min_seconds": 0.1, "max_seconds": 0.5})
sys.exit(fidelity.main(sys.argv[2:]))
"""


def _fidelity(*args: str) -> subprocess.CompletedProcess:
    # a process forked by the test session's fork server (tests/conftest.py), which imported
    # torch and transformers once, where it runs one
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, *forking.python_args(
                               "-c", SHORT_WINDOWS, str(ROOT / "benchmarks" / "fidelity.py"),
                               *args)],
                          capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("path, fuse", [
    ("static", True), ("eager", False),
    # with test_generate's compiled test, on one worker (its group says why)
    pytest.param("compile", False, marks=pytest.mark.xdist_group("inductor-cpu"))])
def test_generate_mode_runs_both_sides(tmp_path, path, fuse):
    # Two rounds of a tiny Llama (4+4 tokens; static with fused projections: dlbench's loop
    # against a bare one, both over the same fused model; eager: generate() through dlbench
    # against generate() called bare; compile: one decode step compiled by inductor for the
    # process, run by both sides): each round is a dlbench window of at least 10 requests
    # (the script's CPU stopping rule, its seconds cut: SHORT_WINDOWS) and as many bare ones.
    out = tmp_path / "fidelity.json"
    p = _fidelity("--generate", "--device", "cpu", "--model", "test-llama", "--prompt-len", "4",
                  "--output-len", "4", "--rounds", "2", "--path", path, "--out", str(out),
                  *(["--fuse"] if fuse else []))
    # The verdict is not asserted: on a shared 2-core machine the CPU's speed drifts by 10% and
    # more between two windows seconds apart (other processes take the cores), so the median
    # of two rounds lands outside 0.98-1.02 now and then with nothing wrong in dlbench. The exit
    # code is 0 (PASS) or 1 (FAIL), never a crash; the band is checked on a GPU, where the
    # script's figures come from.
    assert p.returncode in (0, 1), p.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["mode"] == "generate"
    cfg = result["config"]
    assert (cfg["model"], cfg["path"], cfg["precision"], cfg["prompt_len"], cfg["output_len"],
            cfg["batch_size"], cfg.get("fuse", False)) == ("test-llama", path, "fp32", 4, 4, 1, fuse)
    assert len(result["rounds"]) == 2
    assert [r["dlbench_first"] for r in result["rounds"]] == [True, False]
    for r in result["rounds"]:
        assert r["dlbench"] > 0 and r["bare"] > 0
        assert math.isfinite(r["ratio"]) and r["ratio"] > 0
        assert r["ratio"] == pytest.approx(r["dlbench"] / r["bare"])
        assert r["requests"] >= 10 and r["bare_requests"] >= 10  # the CPU rule's min_steps
    # Round 2's bare side runs as many requests as round 1's dlbench window measured.
    assert result["rounds"][1]["bare_requests"] == result["rounds"][0]["requests"]
    med = result["median_ratio"]
    assert math.isfinite(med) and med > 0
    assert result["band"] == [0.98, 1.02] and result["pass"] == (p.returncode == 0)
    if path == "compile":
        # One real compile for the process: the step's guards held for every model and cache
        # the two rounds built (two per round), so dynamo compiled no second graph.
        assert result["compile"] == "shared, once per process"
        assert [r["dynamo_graphs"] for r in result["rounds"]] == [1, 1]
    else:
        assert "compile" not in result and "dynamo_graphs" not in result["rounds"][0]
    lines = p.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:2]] == ["round 1", "round 2"]
    assert "tokens/s" in lines[0]
    label = path + ("+fuse" if fuse else "")
    assert lines[-1].startswith(f"fidelity test-llama b1 fp32 4+4 {label} on ")
    assert ("PASS" if p.returncode == 0 else "FAIL") in lines[-1]


@pytest.mark.parametrize("args, message", [
    (["--generate", "--cuda-graph", "on"], "--cuda-graph"),
    (["--generate", "--path", "graph"], "needs a CUDA GPU"),
    (["--path", "static"], "go with --generate"),
    (["--fuse"], "go with --generate"),
    (["--generate", "--path", "eager", "--fuse"], "model.generate() runs the model as it is"),
    (["--generate", "--path", "eager", "--fold-gqa"], "model.generate() runs the model as it is"),
    (["--generate", "--precision", "fp8"],
     "--precision fp8: fp8 matmuls need an H100/Ada-class GPU"),
    (["--generate", "--precision", "fp8"], "use --precision bf16 (or fp32 on the CPU)"),
    (["--precision", "fp8"], "--precision fp8 goes with --generate"),
])
def test_generate_mode_refuses_training_options_and_graph_on_cpu(args, message, capsys):
    # Refused at parsing, before any model is built: a flag of the training loop, and path
    # graph (a CUDA graph) on the CPU. The script's main in this process: its parser is what
    # is tested, and test_generate_mode_runs_both_sides runs it as a user does.
    with pytest.raises(SystemExit) as e:
        cli.script("fidelity").main(["--device", "cpu", *args])
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_compile_path_runs_one_compiled_step_on_both_sides(tmp_path, monkeypatch):
    # --path compile compiles the decode step once per process, and dlbench's workload and the
    # bare loop both run that one compiled step in every round (each on its own model and
    # cache), so that a round compares the harnesses, not two compiles. torch.compile is faked
    # here (it records its calls and returns the function, counting who calls it): the script's
    # main in this process, two rounds of test-llama 4+4 in short windows.
    import torch

    from dlbench.measure.stopping import StopRule
    from dlbench.workloads import generate as generate_workload

    fid = cli.script("fidelity")
    compiled, runs = [], []  # torch.compile's calls; (side, model, cache) of each step run
    side = ["bare"]

    def fake_compile(fn=None, **kwargs):
        compiled.append((fn, kwargs))

        def step(model, cache, token, position):
            runs.append((side[0], model, cache))
            return fn(model, cache, token, position)
        return step

    measure = generate_workload.measure

    def dlbench_measure(*args, **kwargs):  # marks the steps run inside dlbench's workload
        side[0] = "dlbench"
        try:
            return measure(*args, **kwargs)
        finally:
            side[0] = "bare"

    real_reset = torch._dynamo.reset
    monkeypatch.setattr(torch, "compile", fake_compile)
    monkeypatch.setattr(generate_workload, "measure", dlbench_measure)
    monkeypatch.setattr(fid, "StopRule", lambda **_: StopRule(
        min_steps=3, min_seconds=0.0, max_seconds=0.3, target_rel_ci=0.5))
    # What main sets for its own process, kept from this one.
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", torch.backends.cudnn.allow_tf32)
    out = tmp_path / "fidelity.json"
    code = fid.main(["--generate", "--device", "cpu", "--model", "test-llama", "--path",
                     "compile", "--prompt-len", "4", "--output-len", "4", "--rounds", "2",
                     "--out", str(out)])
    assert code in (0, 1)
    # One compile for the process: the script's decode step, with the arguments dlbench's
    # StaticLoop passes for its own; dlbench's request for StaticLoop.decode never reached it.
    assert compiled == [(fid.decode_step, {"fullgraph": True, "dynamic": False})]
    # Both sides ran it, in both rounds: four models (one per side and round) and four caches.
    assert {s for s, _, _ in runs} == {"dlbench", "bare"}
    models = {id(m): m for _, m, _ in runs}  # the list holds them: no id is reused
    caches = {id(c) for _, _, c in runs}
    assert len(models) == 4 and len(caches) == 4
    by_side = {s: {id(m) for t, m, _ in runs if t == s} for s in ("dlbench", "bare")}
    assert len(by_side["dlbench"]) == 2 and len(by_side["bare"]) == 2
    assert not by_side["dlbench"] & by_side["bare"]
    # The seam is closed after each dlbench run: torch.compile and dynamo's reset are back.
    assert torch.compile is fake_compile and torch._dynamo.reset is real_reset
    result = json.loads(out.read_text())
    assert result["compile"] == "shared, once per process"
    assert [r["dlbench_first"] for r in result["rounds"]] == [True, False]
    graphs = [r["dynamo_graphs"] for r in result["rounds"]]
    assert graphs[0] == graphs[1]  # nothing compiled again in round 2


def test_compile_path_refuses_a_workload_that_no_longer_asks_for_the_step(monkeypatch):
    # The seam is dlbench's own torch.compile call for StaticLoop.decode: a workload run that
    # makes none (its decode loop changed) stops the script, rather than letting dlbench's side
    # compile a step of its own and the rounds compare compiles again.
    import torch

    fid = cli.script("fidelity")
    monkeypatch.setattr(torch, "compile", lambda fn=None, **kw: fn)
    shared = fid.SharedDecode()
    with pytest.raises(SystemExit, match="no longer matches dlbench's workload"):
        with shared.in_dlbench():
            pass  # no torch.compile(StaticLoop.decode) in this "run"
    assert shared.handed == 0
    with pytest.raises(SystemExit, match="update SharedDecode.COMPILE_KWARGS"):
        with shared.in_dlbench():
            loop = object.__new__(fid.generate_workload.StaticLoop)
            torch.compile(loop.decode, fullgraph=True, dynamic=True)

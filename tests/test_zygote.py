"""The zygote: PyTorch workers forked from one process that imported torch once.

Real processes on the CPU. A worker forked by the zygote must be a process of its own (a
fresh module state, its own pid, a child of the zygote), fail the way a new interpreter fails
(a crash with its stderr, a timeout that ends it), and leave the zygote able to fork the next.
JAX workers, and every worker under ``DLBENCH_SPAWN=1``, start a new interpreter instead.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import pytest

from conftest import FAST_STOP
from dlbench.jobs import launchers
from dlbench.launch import zygote
from dlbench.launch.subprocess_launcher import Zygote, _forks
from dlbench.records.base import ErrorType
from dlbench.records.throughput import ThroughputConfig

#: The zygote itself is what is tested: it starts as a new interpreter (real_processes).
pytestmark = [pytest.mark.skipif(not hasattr(os, "fork"), reason="the zygote forks"),
              pytest.mark.real_processes]


@pytest.fixture(autouse=True, scope="module")
def _a_zygote_started_here():
    """The zygote this process shares, started afresh for these tests: one started earlier in
    the session is a child of the test fork server (tests/conftest.py), whose stand-in is not
    the workers' parent."""
    if Zygote._shared is not None:
        Zygote._shared.close()
        Zygote._shared = None


MODEL = '''
import os, sys, time
from torch import nn
from dlbench import InputSpec

BUILT = []  # module state: a fresh process starts with it empty

def build(input_size=None):
    BUILT.append(1)
    if os.environ.get("PROBE_OUT"):
        with open(os.environ["PROBE_OUT"], "a") as f:
            dynamo = int("torch._dynamo" in sys.modules)  # before any optimizer imports it
            f.write(f"{os.getpid()} {os.getppid()} {len(BUILT)} {dynamo}\\n")
    what = os.environ.get("PROBE_DO", "")
    if what == "abort" and len(BUILT) > 1:  # not on the meta-device call that reads the spec
        print("about to abort", flush=True)
        os.abort()
    if what == "hang" and len(BUILT) > 1:
        time.sleep(60)
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 4)), InputSpec("image", 8, 4)
'''


def _cfg(model: str, **kw) -> ThroughputConfig:
    # short windows: what is tested is the worker's process, not its figure
    return ThroughputConfig(model=model, batch_size=2, device="cpu", warmup_steps=1,
                            warmup_seconds=0.0, telemetry_interval_s=None, stop=FAST_STOP, **kw)


@pytest.fixture()
def probe(tmp_path, monkeypatch):
    path = tmp_path / "probe_model.py"
    path.write_text(MODEL)
    out = tmp_path / "builds.txt"
    monkeypatch.setenv("PROBE_OUT", str(out))
    monkeypatch.delenv("DLBENCH_SPAWN", raising=False)
    return f"{path}:build", out


def _builds(out: Path) -> list[tuple[int, int, int, int]]:
    return [tuple(map(int, line.split())) for line in out.read_text().splitlines()]


@pytest.mark.slow
def test_each_worker_is_a_fresh_child_of_one_zygote(probe):
    model, out = probe
    launcher = launchers.isolated(timeout_s=120)
    first = launcher.run(_cfg(model), {})
    second = launcher.for_later_processes().run(_cfg(model), {})
    assert first.ok and second.ok, (first.error, second.error)
    z = Zygote.shared().proc.pid
    workers = [b for b in _builds(out) if b[0] != os.getpid()]
    pids = list(dict.fromkeys(b[0] for b in workers))
    assert len(pids) == 2                                # two processes
    for pid in pids:  # each built the model from a fresh module: its count starts at 1
        assert [b[2] for b in workers if b[0] == pid][0] == 1
    assert {b[1] for b in workers} == {z}                # both forked by the one zygote
    assert {b[3] for b in workers} == {1}  # TorchDynamo imported once, by the zygote


@pytest.mark.slow
def test_a_crashed_worker_is_a_record_with_its_stderr_and_the_zygote_goes_on(probe, monkeypatch):
    model, _ = probe
    monkeypatch.setenv("PROBE_DO", "abort")
    rec = launchers.isolated(timeout_s=120).run(_cfg(model), {})
    assert rec.error_type == ErrorType.CRASHED
    assert "exited with code -6" in rec.error and "about to abort" in rec.error
    monkeypatch.delenv("PROBE_DO")
    assert launchers.isolated(timeout_s=120).run(_cfg("tiny_mlp"), {}).ok


@pytest.mark.slow
def test_a_worker_past_its_timeout_is_ended_and_the_next_one_runs(probe, monkeypatch):
    model, out = probe
    launchers.isolated(timeout_s=120).run(_cfg("tiny_mlp"), {})  # the zygote's imports done
    monkeypatch.setenv("PROBE_DO", "hang")
    t = time.monotonic()
    rec = launchers.isolated(timeout_s=3).run(_cfg(model), {})
    assert rec.error_type == ErrorType.TIMEOUT and time.monotonic() - t < 20
    hung = [b[0] for b in _builds(out) if b[0] != os.getpid()][-1]
    assert not psutil.pid_exists(hung) or psutil.Process(hung).status() == psutil.STATUS_ZOMBIE
    monkeypatch.delenv("PROBE_DO")
    assert launchers.isolated(timeout_s=120).run(_cfg("tiny_mlp"), {}).ok


@pytest.mark.slow
def test_dlbench_spawn_starts_a_new_interpreter(probe, monkeypatch):
    model, out = probe
    monkeypatch.setenv("DLBENCH_SPAWN", "1")
    assert launchers.isolated(timeout_s=120).run(_cfg(model), {}).ok
    assert {b[1] for b in _builds(out) if b[0] != os.getpid()} == {os.getpid()}


def test_jax_workers_are_never_forked(monkeypatch):
    monkeypatch.delenv("DLBENCH_SPAWN", raising=False)
    assert _forks(_cfg("tiny_mlp")) and not _forks(_cfg("tiny_mlp", framework="jax"))


def test_the_zygote_preloads_each_source_s_library_and_never_a_user_file():
    assert zygote.library_for("resnet50") == "torchvision"
    assert zygote.library_for("gpt2") == "transformers"
    assert zygote.library_for("timm:convnext_tiny") == "timm"
    assert zygote.library_for("hf:gpt2?n_layer=2") == "transformers"
    assert zygote.library_for("examples/my_model.py:build") is None
    assert zygote.library_for("no_such_model") is None

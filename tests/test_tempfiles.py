"""Every temporary file dlbench makes lies in its one per-run folder (``dlbench.launch.tempdirs``),
so that it goes when dlbench exits, and with the next run when dlbench was killed outright.

- The algorithm probe of ``dlbench comm`` (NCCL's tuning log, ``NCCL_DEBUG_FILE``): its folder
  is made inside the run's folder and gone once the probe is read; the probe job itself needs
  NCCL, so here its launch is a stand-in that looks at the folder while the job would run. A real
  ``dlbench comm`` on gloo (torchrun, two ranks) leaves its temporary directory as it found it.
- The log of a server ``dlbench serve`` starts (``--stub`` starts dlbench's stub as a server
  command): inside the run's folder while it runs; after a SIGKILL to dlbench, the next run
  removes it with the folder.
- No module makes a temporary file or folder anywhere else: every ``tempfile`` call in the
  sources (the package's and the maintainers' scripts under ``tools/``) names its directory (the
  run's folder, or the folder of the file it will replace).
"""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from dlbench.jobs import launchers
from dlbench.launch import tempdirs
from dlbench.launch import torchrun as torchrun_mod
from dlbench.launch.torchrun import JobOutcome, TorchrunLauncher

#: What the processes leave in the temporary directory: every one starts afresh.
pytestmark = pytest.mark.real_processes

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"


@pytest.fixture
def own_tmp(tmp_path, monkeypatch) -> Path:
    """A fresh temporary directory for this process, and a fresh dlbench folder in it."""
    base = tmp_path / "tmp"
    base.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(base))
    monkeypatch.setattr(tempdirs, "_root", None)
    return base


def test_the_comm_probes_nccl_log_is_in_the_runs_folder_and_gone_after(own_tmp, monkeypatch):
    seen = []

    def launch(self, job, nproc, interconnect="default"):
        logs = job.get("nccl_log_dir")
        if logs:  # the probe job: NCCL would write nccl.HOST.PID.log here
            seen.append((Path(logs), Path(self.extra_env["NCCL_DEBUG_FILE"]).parent,
                         Path(logs).is_dir()))
            (Path(logs) / f"nccl.h0.{os.getpid()}.log").write_text("NCCL INFO\n")
        rows = [dict(op="all_reduce", size_bytes=64, inplace=p, count=16, times_s=[1e-5],
                     wrong=0) for p in (False, True)]
        return JobOutcome(0, [dict(rank=r, rows=rows, world=2, host="h0") for r in range(2)])

    monkeypatch.setattr(TorchrunLauncher, "launch", launch)
    recs = launchers.torchrun().run_comm(["all_reduce"], [64], 2, {}, backend="nccl", probe=True)
    assert len(recs) == 2
    [(logs, debug_file_dir, existed)] = seen
    assert existed and debug_file_dir == logs
    assert logs.parent == tempdirs.root() and tempdirs.root().parent == own_tmp
    assert not logs.exists()  # read, then removed
    assert [p.name for p in tempdirs.root().iterdir()] == ["owner"]


def _env(tmp: Path) -> dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS="1", TMPDIR=str(tmp),
                PYTHONPATH=os.pathsep.join(filter(None, [str(SRC),
                                                         os.environ.get("PYTHONPATH")])))


@pytest.mark.slow
def test_dlbench_comm_on_gloo_leaves_the_temporary_directory_as_it_found_it(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    p = subprocess.run([sys.executable, "-m", "dlbench", "comm", "--device", "cpu", "--gpus", "2",
                        "--op", "all_reduce", "--min", "8B", "--max", "8B", "--iters", "2",
                        "--warmup", "0", "--timing", "batched", "-q",
                        "--db", str(tmp_path / "c.db")],
                       env=_env(tmp), capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert list(tmp.iterdir()) == []  # torchrun's torchelastic_* folders included


def _serve_logs(tmp: Path) -> list[Path]:
    return sorted(tmp.rglob("dlbench-serve-*.log"))


@pytest.mark.slow
def test_a_launched_servers_log_is_in_the_runs_folder_and_goes_after_a_sigkill(tmp_path):
    pytest.importorskip("aiohttp")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    db = str(tmp_path / "s.db")
    long_run = subprocess.Popen(
        [sys.executable, "-m", "dlbench", "serve", "--stub", "--duration", "120", "--rate", "2",
         "--output-len", "4", "--prompt-len", "8", "--warmup", "0", "--telemetry-interval", "0",
         "-q", "--db", db], env=_env(tmp), cwd=tmp_path, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not _serve_logs(tmp) and long_run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert long_run.poll() is None, long_run.stderr.read()[-3000:]
        [log] = _serve_logs(tmp)
        assert log.parent.name.startswith(tempdirs.PREFIX) and log.parent.parent == tmp
        # the shell and the stub it started (the log is made just before them)
        server = _descendants(long_run.pid)
        while len(server) < 2 and long_run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
            server = _descendants(long_run.pid)
        assert len(server) >= 2, server
    finally:
        long_run.send_signal(signal.SIGKILL)
        long_run.communicate(timeout=60)
    assert _serve_logs(tmp) == [log]  # SIGKILL: no clean-up ran
    # the server goes with dlbench: the shell gets its parent-death signal, the stub from it
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in server) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in server if Path(f"/proc/{pid}").exists()]
    again = subprocess.run(
        [sys.executable, "-m", "dlbench", "serve", "--stub", "--num-requests", "2",
         "--output-len", "2", "--prompt-len", "4", "--warmup", "0", "--telemetry-interval", "0",
         "-q", "--db", db], env=_env(tmp), cwd=tmp_path, capture_output=True, text=True,
        timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    deadline = time.monotonic() + 10  # the killed run's stub ends on its parent's death
    while list(tmp.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(tmp.iterdir()) == []  # the killed run's folder, its log in it, and this run's


def _descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (from /proc's parent links)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


#: Where a temporary file beside its destination is right: it is renamed over the destination
#: once whole, which only works within one file system.
BESIDE_THE_OUTPUT = {"report/outfile.py", "store.py", "commands/results.py"}


def test_every_temporary_file_or_folder_names_the_runs_folder():
    makers = {"mkstemp", "mkdtemp", "TemporaryDirectory", "NamedTemporaryFile", "TemporaryFile",
              "SpooledTemporaryFile"}
    found = {}
    for path in sorted((SRC / "dlbench").rglob("*.py")) + sorted((ROOT / "tools").glob("*.py")):
        rel = (path.relative_to(SRC / "dlbench") if path.is_relative_to(SRC) else
               path.relative_to(ROOT)).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "attr", getattr(node.func, "id", None))
            if name not in makers:
                continue
            where = next((ast.unparse(k.value) for k in node.keywords if k.arg == "dir"), None)
            found[f"{rel}:{node.lineno}"] = where
            if rel == "launch/tempdirs.py":
                assert where == "base"  # the run's folder itself, in the temporary directory
            elif rel in BESIDE_THE_OUTPUT:
                assert where and "parent" in where, (rel, node.lineno, where)
            else:
                assert where == "tempdirs.root()", (rel, node.lineno, where)
    assert len(found) >= 15, found  # the scan sees them (a rename would hide nothing)

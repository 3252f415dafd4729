"""Signals end dlbench the way Ctrl-C does, and leave nothing behind.

Real subprocesses on the CPU: a throughput sweep with ``--isolate`` workers, a 2-rank gloo
``scale`` job through torchrun, and a ``maxbatch --isolate`` search. Each is stopped with
SIGINT, SIGTERM (or SIGHUP) or SIGKILL while a child computes, and the test checks: the exit
code (130, as Ctrl-C), no process left behind (every process dlbench started carries a marker in
its environment, found with psutil), every result stored before the signal still stored, the run
``interrupted`` (or ``stale`` after SIGKILL, once the next command opened the store), no
temporary directory left, and ``--resume`` redoing nothing finished.

The command is started through ``signals.install()`` and ``cli.main`` so that these tests hold
whether or not ``cli.main`` installs the handlers itself. The commands that follow it (a
``--resume``, a listing) read and finish the store in this process: no signal reaches them.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest
from fakes import cli

from dlbench.launch import signals
from dlbench.store import Store

#: What these tests check is about the processes themselves: every one starts afresh.
pytestmark = pytest.mark.real_processes

SRC = str(Path(__file__).resolve().parents[1] / "src")
FAST = ["--min-steps", "5", "--min-time", "0.05", "--max-time", "1", "--warmup", "1",
        "--warmup-time", "0", "--target-ci", "0.05"]
#: The windows of the commands run after the signal (a --resume, an inline run): no signal is
#: timed against them, so they may be shorter than those of the command that is signalled.
AFTER = [*FAST, "--max-time", "0.3"]
# The command starts with SIGHUP at its default, as from a terminal, whatever the test runner
# inherited (under `nohup` it is ignored, and dlbench rightly leaves an ignored SIGHUP alone).
WRAPPER = ("import signal, sys; signal.signal(signal.SIGHUP, signal.SIG_DFL); "
           "from dlbench.launch import signals; signals.install(); "
           "from dlbench.cli import main; sys.argv[0] = 'dlbench'; raise SystemExit(main())")
EXIT_INTERRUPTED = 130


class Cmd:
    """One dlbench command in its own process, with a marker that every descendant inherits."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.marker = uuid.uuid4().hex
        self.tmp = tmp_path / "tmp"
        self.tmp.mkdir(exist_ok=True)
        env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   OMP_NUM_THREADS="1", TMPDIR=str(self.tmp), DLBENCH_SIGNAL_TEST=self.marker)
        self.err = open(tmp_path / f"err-{self.marker[:6]}.txt", "w+")
        self.proc = subprocess.Popen([sys.executable, "-c", WRAPPER, *args], env=env,
                                     stdout=subprocess.DEVNULL, stderr=self.err)

    def stderr(self) -> str:
        self.err.flush()
        return Path(self.err.name).read_text()

    def marked(self) -> list[psutil.Process]:
        """Live processes of this command other than the command itself."""
        out = []
        for p in psutil.process_iter(["pid"]):
            if p.pid == self.proc.pid:
                continue
            try:
                if p.status() == psutil.STATUS_ZOMBIE:
                    continue
                if p.environ().get("DLBENCH_SIGNAL_TEST") == self.marker:
                    out.append(p)
            except (psutil.Error, OSError):
                continue
        return out

    def wait_for(self, what, timeout: float = 60.0, label: str = "") -> None:
        deadline = time.monotonic() + timeout
        while not what():
            if self.proc.poll() is not None:
                pytest.fail(f"dlbench exited ({self.proc.returncode}) before {label}:\n"
                            f"{self.stderr()[-3000:]}")
            if time.monotonic() > deadline:
                self.kill_all()
                pytest.fail(f"timed out waiting for {label}:\n{self.stderr()[-3000:]}")
            time.sleep(0.1)

    def children_running(self, needle: str) -> bool:
        return any(needle in " ".join(_cmdline(p)) for p in self.marked())

    def worker_running(self) -> bool:
        """A throughput worker computes: a new interpreter, or a child forked by the zygote
        (which shows the zygote's command line; its parent is the zygote)."""
        for p in self.marked():
            line = " ".join(_cmdline(p))
            if "dlbench.launch.worker" in line:
                return True
            try:
                if "dlbench.launch.zygote" in line and \
                        "dlbench.launch.zygote" in " ".join(_cmdline(p.parent())):
                    return True
            except (psutil.Error, AttributeError):
                continue
        return False

    def signal(self, sig: int, timeout: float = 20.0) -> int | None:
        os.kill(self.proc.pid, sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_all()
            pytest.fail(f"dlbench did not end within {timeout} s of {signal.Signals(sig).name}:\n"
                        f"{self.stderr()[-3000:]}")

    def orphans_after(self, within: float = 5.0) -> list[str]:
        """The processes of this command still alive ``within`` seconds from now (none, if
        dlbench cleaned up); any found are killed so that the test leaves nothing either."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            left = self.marked()
            if not left:
                return []
            time.sleep(0.1)
        left = self.marked()
        names = [f"{p.pid}: {' '.join(_cmdline(p))[:160]}" for p in left]
        self.kill_all()
        return names

    def kill_all(self) -> None:
        for p in self.marked():
            try:
                p.kill()
            except psutil.Error:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)

    def temp_left(self) -> list[str]:
        """dlbench's temporary directories still there, and torchrun's log folders (its agent
        is dlbench's child); torch's compile cache is its to keep."""
        return sorted(p.name for p in self.tmp.iterdir()
                      if p.name.startswith(("dlbench", "torchelastic")))

    def kill_child(self, needle: str) -> None:
        """SIGKILL to the first child of this command whose command line holds ``needle``."""
        for p in self.marked():
            if needle in " ".join(_cmdline(p)):
                p.kill()
                return
        pytest.fail(f"no child with {needle!r} to kill")


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def _rows(db: Path, sql: str) -> list[tuple]:
    if not db.exists():
        return []
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return con.execute(sql).fetchall()
        finally:
            con.close()
    except sqlite3.OperationalError:
        return []


def _count(db: Path) -> int:
    rows = _rows(db, "SELECT COUNT(*) FROM results")
    return rows[0][0] if rows else 0


def _statuses(db: Path) -> list[str]:
    return [r[0] for r in _rows(db, "SELECT status FROM runs ORDER BY started_at, rowid")]


def _result_ids(db: Path) -> list[str]:
    return [r[0] for r in _rows(db, "SELECT id FROM results ORDER BY created_at, rowid")]


# -- the handler itself -----------------------------------------------------------------------
def test_install_turns_sigterm_and_sighup_into_keyboard_interrupt_and_restores():
    inherited = {s: signal.signal(s, signal.SIG_DFL) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:  # from the defaults, as a terminal starts dlbench (a runner under nohup ignores SIGHUP)
        with signals.installed():
            for sig in (signal.SIGTERM, signal.SIGHUP):
                with pytest.raises(KeyboardInterrupt):
                    os.kill(os.getpid(), sig)
                    time.sleep(1.0)  # the handler runs at the next bytecode
        assert all(signal.getsignal(s) is signal.SIG_DFL for s in inherited)
    finally:
        for s, handler in inherited.items():
            signal.signal(s, handler)


def test_an_ignored_sighup_stays_ignored_under_nohup():
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with signals.installed():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    finally:
        signal.signal(signal.SIGHUP, old)


def test_stop_ends_a_process_group_that_ignores_sigterm_within_the_grace(tmp_path):
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    time.sleep(0.5)
    t = time.monotonic()
    signals.stop([proc], grace_s=1.0)
    assert proc.returncode is not None and time.monotonic() - t < 5


# -- a throughput sweep with --isolate workers -------------------------------------------------
def _sweep(tmp_path: Path, db: Path, *extra: str) -> Cmd:
    return Cmd(tmp_path, "throughput", "-m", "tiny_mlp,tiny_cnn", "-b", "2", "--device", "cpu",
               "--isolate", "--db", str(db), "-q", *FAST, *extra)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_during_an_isolated_sweep_ends_it_like_ctrl_c(tmp_path, sig):
    db = tmp_path / "s.db"
    cmd = _sweep(tmp_path, db)
    # the first result is stored and the second config's worker is computing
    cmd.wait_for(lambda: _count(db) >= 1 and cmd.worker_running(),
                 label="the second worker")
    kept = _result_ids(db)
    code = cmd.signal(sig)
    assert code == EXIT_INTERRUPTED, cmd.stderr()[-2000:]
    assert cmd.orphans_after() == []
    assert cmd.temp_left() == []
    assert _result_ids(db) == kept
    assert _statuses(db) == ["interrupted"]
    again = cli.run("throughput", "-m", "tiny_mlp,tiny_cnn", "-b", "2", "--device", "cpu",
                    "--db", str(db), "--resume", *AFTER)
    assert again.returncode == 0, again.stderr
    assert "1 skipped by --resume" in again.stderr
    assert len(_result_ids(db)) == len(kept) + 1  # the finished config was not measured again


@pytest.mark.slow
def test_sigkill_leaves_no_worker_and_the_next_command_marks_the_run_stale(tmp_path):
    db = tmp_path / "s.db"
    cmd = _sweep(tmp_path, db)
    cmd.wait_for(lambda: _count(db) >= 1 and cmd.worker_running(),
                 label="the second worker")
    kept = _result_ids(db)
    cmd.signal(signal.SIGKILL)
    assert cmd.orphans_after() == []   # the worker sees its parent gone and ends
    assert _statuses(db) == ["running"]
    # reading writes nothing: the run stays as it was
    ls = cli.run("results", "ls", "--db", str(db), "--json")
    assert ls.returncode == 0, ls.stderr
    assert _statuses(db) == ["running"]
    again = cli.run("throughput", "-m", "tiny_mlp,tiny_cnn", "-b", "2", "--device", "cpu",
                    "--db", str(db), "--resume", *AFTER)
    assert again.returncode == 0, again.stderr
    assert _statuses(db) == ["stale", "done"]
    assert _result_ids(db)[:len(kept)] == kept and len(_result_ids(db)) == len(kept) + 1


@pytest.mark.slow
def test_the_temporary_folder_of_a_killed_dlbench_goes_with_the_next_run(tmp_path):
    db = tmp_path / "s.db"
    cmd = _sweep(tmp_path, db)
    cmd.wait_for(lambda: cmd.worker_running(), label="a worker")
    cmd.signal(signal.SIGKILL)
    assert cmd.orphans_after() == []
    assert [n.split("-")[:2] for n in cmd.temp_left()] == [["dlbench", "run"]]  # one folder
    # an inline run makes no folder of its own, and removes the dead one all the same (on an
    # H100 an inline run after a SIGKILL once left the killed run's folder in place); it starts
    # no process, so it runs in this one, with the killed command's TMPDIR
    again = cli.run("throughput", "-m", "tiny_mlp", "-b", "2", "--device", "cpu",
                    "--db", str(db), *AFTER, env=dict(os.environ, TMPDIR=str(cmd.tmp)))
    assert again.returncode == 0, again.stderr
    assert cmd.temp_left() == []   # the killed run's folder, and this run's own


@pytest.mark.slow
def test_a_killed_isolated_worker_is_a_row_and_leaves_no_temporary_folder(tmp_path):
    db = tmp_path / "s.db"
    cmd = Cmd(tmp_path, "throughput", "-m", "tiny_cnn", "-b", "2", "--device", "cpu",
              "--isolate", "--db", str(db), "-q", *FAST, "--max-time", "60",
              "--target-ci", "0.00001")
    cmd.wait_for(lambda: cmd.worker_running(), label="a worker")
    for p in cmd.marked():  # the worker: a child of the zygote
        if "dlbench.launch.zygote" in " ".join(_cmdline(p.parent())):
            p.kill()
            break
    assert cmd.proc.wait(timeout=120) == 3, cmd.stderr()[-3000:]   # a failed row; sweep went on
    docs = [json.loads(r[0]) for r in _rows(db, "SELECT record_json FROM results")]
    assert docs[0]["error_type"] == "crashed" and "code -9" in docs[0]["error"], docs[0]
    assert cmd.orphans_after() == [] and cmd.temp_left() == []


def test_a_run_of_a_live_process_or_another_host_is_not_stale(tmp_path):
    db = tmp_path / "s.db"
    with Store(db) as store:
        store.start_run("live", "x", {}, "k", "cpu")
        store.start_run("dead", "x", {}, "k", "cpu")
        store.start_run("elsewhere", "x", {}, "k", "cpu")
        store._db.execute("UPDATE runs SET pid=2147483646 WHERE run_id='dead'")
        store._db.execute("UPDATE runs SET pid=2147483646, host='not-this-host' "
                          "WHERE run_id='elsewhere'")
        store._db.commit()
        assert store.mark_stale() == ["dead"]
    status = dict(_rows(db, "SELECT run_id, status FROM runs"))
    assert status == {"live": "running", "dead": "stale", "elsewhere": "running"}


def test_an_old_store_still_reads_and_gains_the_columns_only_when_written(tmp_path):
    import shutil
    old = Path(__file__).parent / "data" / "store-before-records.db"
    db = tmp_path / "old.db"
    shutil.copy(old, db)
    raw = db.read_bytes()
    with Store(db) as store:
        store.runs()
        list(store.iter_results())
    assert db.read_bytes() == raw
    with Store(db) as store:
        store.start_run("new", "x", {}, "k", "cpu")
        assert store.runs()[0].run_id == "new"
    cols = [r[1] for r in _rows(db, "PRAGMA table_info(runs)")]
    assert "pid" in cols and "host" in cols


def test_merging_a_store_with_pid_columns_into_an_old_one(tmp_path):
    import shutil
    old = Path(__file__).parent / "data" / "store-before-records.db"
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    shutil.copy(old, a)
    with Store(b) as store:
        store.start_run("r1", "x", {}, "k", "cpu")
        store.finish_run("r1", "done")
    with Store(a) as store:
        runs, _ = store.merge_from(b)
    assert runs == 1


# -- a 2-rank gloo scaling job through torchrun ------------------------------------------------
def _scale(tmp_path: Path, db: Path) -> Cmd:
    return Cmd(tmp_path, "scale", "--device", "cpu", "--gpus", "2", "-m", "tiny_cnn", "-b", "4",
               "--warmup", "1", "--warmup-time", "0", "--min-steps", "100000",
               "--min-time", "60", "--max-time", "60", "--target-ci", "0.0001",
               "--db", str(db), "-q")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_a_scaling_job_ends_torchrun_and_its_ranks(tmp_path, sig):
    db = tmp_path / "d.db"
    cmd = _scale(tmp_path, db)
    cmd.wait_for(lambda: sum("dlbench.launch.rank_entry" in " ".join(_cmdline(p))
                             for p in cmd.marked()) >= 2, label="two ranks")
    time.sleep(1.0)
    code = cmd.signal(sig)
    assert code == EXIT_INTERRUPTED, cmd.stderr()[-2000:]
    assert cmd.orphans_after() == []
    assert cmd.temp_left() == []
    assert _statuses(db) == ["interrupted"]


@pytest.mark.slow
def test_a_rank_killed_with_sigkill_is_a_row_and_leaves_no_temporary_folder(tmp_path):
    db = tmp_path / "d.db"
    cmd = _scale(tmp_path, db)
    cmd.wait_for(lambda: sum("dlbench.launch.rank_entry" in " ".join(_cmdline(p))
                             for p in cmd.marked()) >= 2, label="two ranks")
    time.sleep(1.0)
    cmd.kill_child("dlbench.launch.rank_entry")
    assert cmd.proc.wait(timeout=60) == 3, cmd.stderr()[-3000:]   # the job's failure is a row
    assert cmd.orphans_after() == []
    assert cmd.temp_left() == []   # torchrun's log folder (was left by every job) and dlbench's
    assert _statuses(db) == ["done"]


@pytest.mark.slow
def test_sigkill_during_a_scaling_job_leaves_no_rank(tmp_path):
    db = tmp_path / "d.db"
    cmd = _scale(tmp_path, db)
    cmd.wait_for(lambda: sum("dlbench.launch.rank_entry" in " ".join(_cmdline(p))
                             for p in cmd.marked()) >= 2, label="two ranks")
    cmd.signal(signal.SIGKILL)
    assert cmd.orphans_after(within=8.0) == []


# -- a maxbatch search, each probe in its own process ------------------------------------------
#: A model whose steps take half a second from batch 4 on: a probe of a tiny model is over in
#: milliseconds once its process has started, so without it the test could not be sure to find
#: the second probe computing.
SLOW_FROM_BATCH_4 = """\
import time
from torch import nn


class SlowFromBatch4(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        if x.device.type != "meta" and x.shape[0] >= 4:
            time.sleep(0.5)
        return self.conv(x).mean((2, 3))


def build():
    return SlowFromBatch4(), {"kind": "image", "input_size": 8, "num_classes": 4}
"""


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_signal_during_a_maxbatch_search(tmp_path, sig):
    db = tmp_path / "m.db"
    (tmp_path / "slow.py").write_text(SLOW_FROM_BATCH_4)
    args = ["maxbatch", "-m", f"{tmp_path / 'slow.py'}:build", "--device", "cpu", "--isolate",
            "--no-measure", "--start", "2", "--max", "4", "--db", str(db)]
    cmd = Cmd(tmp_path, *args)
    # the first probe finished, the second is computing
    cmd.wait_for(lambda: "batch 2: fits" in cmd.stderr()
                 and cmd.worker_running(), label="the second probe")
    code = cmd.signal(sig)
    assert cmd.orphans_after() == []
    if sig == signal.SIGKILL:
        assert _statuses(db) == ["running"]
        again = cli.run(*args, "--resume")
        assert again.returncode == 0, again.stderr
        assert _statuses(db)[0] == "stale"
        return
    assert code == EXIT_INTERRUPTED, cmd.stderr()[-2000:]
    assert cmd.temp_left() == []
    assert _statuses(db) == ["interrupted"]
    docs = [json.loads(r[0]) for r in _rows(db, "SELECT record_json FROM results")]
    assert [p["batch"] for p in docs[0]["probes"]] == [2]   # the finished probe is kept
    again = cli.run(*args, "--resume")
    assert again.returncode == 0, again.stderr
    assert "batch 2: probing" not in again.stderr              # and not probed again

"""docs/reliability.md's tries on a GPU against what they left: every outcome its "On a GPU"
section states for the four-H100 host is read here from the logs and the stores committed in
results/pt2.11-cu130-4x-h100/faults/, and its word on stale temporary folders from the code."""

from __future__ import annotations

import gzip
import inspect
import json
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from fakes.pages import assert_says

from dlbench.jobs import sweep
from dlbench.jobs.stored_run import StoredRun
from dlbench.store import Store

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "reliability.md").read_text()
FAULTS = ROOT / "results" / "pt2.11-cu130-4x-h100" / "faults"

KILLED, NEXT = "3ad835b82ff4", "11ec8aa9806e"                # the first call's SIGKILL try
KILLED_2, NEXT_2 = "3691fa631d4c", "c0235aeb8f36"            # the second call's
FULL_RUN, RECOVERED = "b12d21bcd0fd", "02b8ab2568f2"         # the full-disk try
RECOVERY = f"/root/.cache/dlbench/recovered/s.db.recovered-{RECOVERED}.json"


def says(text: str) -> None:
    assert_says(PAGE, text)


def log(name: str) -> list[str]:
    # the call logs hold rich's tables cut at the terminal's width, mid-character at times
    return (FAULTS / name).read_text(errors="replace").splitlines()


def gpu_section() -> str:
    return PAGE.split("### Four H100s, GPU 3 alone (2026-11-26)", 1)[1].split("\n## ", 1)[0]


def _open(name: str, workdir: Path) -> tuple[Store, dict[str, sqlite3.Row]]:
    """A copy of the committed store ``name``.db.gz (opening one may add columns to it), and
    its ``runs`` rows as they were committed (pid and environment too), by run id."""
    target = workdir / f"{name}.db"
    with gzip.open(FAULTS / f"{name}.db.gz", "rb") as src, open(target, "wb") as dst:
        shutil.copyfileobj(src, dst)
    with closing(sqlite3.connect(target)) as db:
        db.row_factory = sqlite3.Row
        rows = {r["run_id"]: r for r in db.execute("SELECT * FROM runs")}
    return Store(target), rows


@pytest.fixture(scope="module")
def kill(tmp_path_factory):
    store, rows = _open("kill", tmp_path_factory.mktemp("kill"))
    yield {r.run_id: r for r in store.runs()}, rows
    store.close()


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    store, rows = _open("full", tmp_path_factory.mktemp("full"))
    yield {r.run_id: r for r in store.runs()}, rows
    store.close()


def test_a_killed_process_s_folder_goes_with_the_next_run_inline_too():
    says("a folder whose process was killed with SIGKILL is removed by the next dlbench run, "
         "inline runs included (`sweep.run_sweep` and `StoredRun` call `tempdirs.remove_stale` "
         "as a run starts), or by the next dlbench process that makes its own folder")
    assert "is removed by the next dlbench process that makes its own (only" not in PAGE
    for starts in (sweep.run_sweep, StoredRun.__enter__):
        src = inspect.getsource(starts)
        assert "tempdirs.remove_stale()" in src, starts
        assert src.index("tempdirs.remove_stale()") < src.index("start_run("), starts


def test_the_page_names_the_host_the_date_and_the_folder(kill, full):
    says("### Four H100s, GPU 3 alone (2026-11-26)")
    says("On a host of four NVIDIA H100 80GB HBM3, on GPU 3 alone (`CUDA_VISIBLE_DEVICES=3`)")
    says("are in `results/pt2.11-cu130-4x-h100/faults/`")
    for name in ("first-call.log", "second-call.log", "full.log", "full.db.gz", "kill.db.gz",
                 "kill-check.txt", "kill-next.log", "kill-run.log"):
        assert f"`{name}`" in gpu_section(), name
        assert (FAULTS / name).is_file(), name
    rows = list(kill[1].values()) + list(full[1].values())
    assert len(rows) == 5
    for row in rows:
        env = json.loads(row["env_json"])
        assert row["device"] == "NVIDIA H100 80GB HBM3"
        assert env["env_vars"]["CUDA_VISIBLE_DEVICES"] == "3" and env["gpu_count"] == 1
        assert "GPU3\t" in env["topology"] and "GPU4" not in env["topology"]  # four on the host
        assert row["started_at"].startswith("2026-11-26T")
        assert env["packages"]["torch"] == "2.11.0+cu130"


def test_the_first_sigkill_left_no_process_on_the_gpu_and_its_folder_in_place(kill):
    runs, rows = kill
    says("| SIGKILL to `dlbench throughput -m resnet50,vgg16 -b 128 --precision bf16 --isolate` "
         f"30 s in (run `{KILLED}`) | before it, one process on GPU 3 and one folder "
         "`$TMPDIR/dlbench-run-PID-*`; the `--isolate` worker ended by itself: 10 s later no "
         "process on GPU 3; the killed process's folder was still there")
    lines = log("first-call.log")
    assert "before: gpu3 processes 1; run dirs 1" in lines
    assert "10 s after SIGKILL: gpu3 processes 0; run dirs of the killed pid 1" in lines
    killed = next(ln for ln in lines if " Killed " in ln)
    assert f" {rows[KILLED]['pid']} Killed " in killed           # the pid of the run in the store
    assert "throughput -m resnet50,vgg16 -b 128 --precision bf16 --isolate" in killed
    assert runs[KILLED].command.startswith(
        "dlbench throughput -m resnet50,vgg16 -b 128 --precision bf16 --isolate ")
    assert runs[KILLED].results == 0


def test_the_inline_next_run_marked_it_stale_and_left_its_folder(kill):
    runs, rows = kill
    says("| the next run on that store, inline: `dlbench throughput -m resnet50 -b 64 "
         f"--precision bf16 --max-time 3` (run `{NEXT}`) | exit 0; the killed run marked "
         "`stale`, and `dlbench results check` names it and exits 3; but the killed process's "
         "folder was still there after it")
    says("The fix has not been run on a GPU yet")
    lines = log("first-call.log")
    assert "next run rc 0" in lines
    assert "after the next run: run dirs of the killed pid 1" in lines
    assert "results check rc 3" in lines
    cmd = runs[NEXT].command
    assert cmd.startswith("dlbench throughput -m resnet50 -b 64 --precision bf16 --max-time 3 ")
    assert "--isolate" not in cmd                                 # inline
    assert (runs[NEXT].status, runs[NEXT].results, runs[NEXT].errors) == ("done", 1, 0)
    assert runs[KILLED].status == "stale"
    assert runs[KILLED].finished_at == runs[NEXT].started_at     # marked as the next run opened
    check = log("kill-check.txt")
    assert check[0].startswith(f"stale: run {KILLED} started ")
    assert check[1].endswith(": 2 run(s); integrity, rows and run states checked: 1 problem(s)")
    assert len(check) == 2


def test_the_second_sigkill_s_folder_went_with_an_isolated_next_run(kill):
    runs, rows = kill
    says(f"| the same SIGKILL a few minutes later (`-m resnet50` alone, run `{KILLED_2}`), then a "
         f"next run with `--isolate` (run `{NEXT_2}`) | the killed run marked `stale`; the next "
         "run exit 0 (2,048 img/s), and the killed process's folder gone")
    lines = log("second-call.log")
    pid = rows[KILLED_2]["pid"]
    assert any(f" {pid} Killed " in ln and "throughput -m resnet50 -b 128 --precision bf16 "
               "--isolate" in ln for ln in lines)
    assert f"killed pid {pid}: run dirs 1" in lines
    assert "next --isolate run rc 0" in lines
    assert "after an --isolate run: run dirs of the killed pid 0" in lines
    assert runs[KILLED_2].command.startswith(
        "dlbench throughput -m resnet50 -b 128 --precision bf16 --isolate ")
    assert (runs[KILLED_2].status, runs[KILLED_2].results) == ("stale", 0)
    assert runs[NEXT_2].command.startswith("dlbench throughput -m resnet50 -b 64 --precision bf16 "
                                           "--isolate ")
    assert (runs[NEXT_2].status, runs[NEXT_2].results, runs[NEXT_2].errors) == ("done", 1, 0)
    assert runs[KILLED_2].finished_at == runs[NEXT_2].started_at
    assert runs[KILLED_2].started_at > runs[NEXT].finished_at     # the second call came later
    nxt = log("kill-next.log")
    assert "✓ resnet50 b64 bf16 train: 2,048 img/s ±0.05% (69 steps)" in nxt
    assert nxt[-1].endswith(f"(run {NEXT_2})")
    # the killed process's own output: its header line alone, one benchmark (resnet50)
    says("`kill-run.log` (the second killed process's output: its header line alone")
    assert log("kill-run.log") == [
        "dlbench 1 benchmark(s) on NVIDIA H100 80GB HBM3; torch 2.11.0+cu130; results -> "
        "/tmp/w/kill.db"]


def test_a_full_disk_sent_the_record_to_the_fallback_directory_exit_2(full):
    runs, _ = full
    says("| a full disk: `dlbench throughput -m resnet50 -b 64 --precision bf16 --isolate "
         "--min-time 20 --max-time 25 --db /mnt/full/s.db`, the store on a 1 MiB tmpfs that "
         f"`dd` filled 12 s in (run `{FULL_RUN}`) | the worker's result (`{RECOVERED}`) came back "
         "(the progress line read 34 s) and storing it failed (`database or disk is full`); the "
         "store's own folder was full too, so the record went to the fallback directory, "
         f"`{RECOVERY}` (nothing was added beside the store), and the error line gave the "
         "`dlbench results merge` command that takes it in; exit 2. A warning said the run could "
         "not be marked failed and still reads `running`, and so it does in `full.db.gz`, with "
         "no result |")
    out = log("full.log")
    assert any(ln.startswith("resnet50 b64 bf16 train") and " 0/1 0:00:34 " in ln for ln in out)
    assert (f"warning: /mnt/full/s.db could not be written (database or disk is full): run "
            f"{FULL_RUN} could not be marked failed and still reads 'running'") in out
    assert (f"error: /mnt/full/s.db could not be written (database or disk is full): result "
            f"{RECOVERED} was saved to {RECOVERY}; add it to the store later with 'dlbench "
            f"results merge --db /mnt/full/s.db {RECOVERY}'; the run stopped here") in out
    assert out[-1] == "full-disk run rc 2"
    first = log("first-call.log")
    assert "full-disk run rc 2" in first
    assert "tmpfs of 1 MiB mounted" in first
    assert any(ln.startswith("disk filled: tmpfs ") and ln.split()[-2:] == ["100%", "/mnt/full"]
               for ln in first)
    listing = first[first.index("/mnt/full:"):]                   # ls -la /mnt/full afterwards
    assert sorted(ln.split()[-1] for ln in listing if ln.startswith("-")) == ["fill", "s.db"]
    assert not any("recovered" in ln for ln in first if ln.startswith(("-", "/mnt")))
    assert list(runs) == [FULL_RUN]
    run = runs[FULL_RUN]
    assert (run.status, run.finished_at, run.results) == ("running", None, 0)
    assert run.command.startswith("dlbench throughput -m resnet50 -b 64 --precision bf16 "
                                  "--isolate --min-time 20 --max-time 25 --db /mnt/full/s.db")


def test_the_page_says_the_recovery_file_was_not_brought_back_nor_merged():
    says("The full-disk try's recovery file was neither copied back from the machine nor merged "
         "there (the script looked for it beside the store, where it was not)")
    assert not any(p.name.endswith(".json") for p in FAULTS.iterdir())
    # the only word of a merge in what the calls printed is the error line's advice
    merges = [ln for name in ("first-call.log", "second-call.log") for ln in log(name)
              if "merge" in ln]
    assert merges and all(ln.startswith("error: /mnt/full/s.db could not be written")
                          for ln in merges)


def test_the_one_h100_rows_stay():
    says("| SIGKILL to `dlbench throughput -m resnet50,vgg16 -b 128 --precision bf16 --isolate` "
         "40 s in | the `--isolate` worker ended by itself: 10 s later no process on the GPU; the "
         "run read `running` |")

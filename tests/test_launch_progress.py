"""Rank 0's progress while a torchrun job runs (dlbench.launch.progress): the file it keeps, the
line the parent shows, and a real two-rank gloo job whose launcher passes the line on."""

import pytest

from dlbench.jobs import launchers
from dlbench.launch import progress
from dlbench.measure.stopping import StopRule
from dlbench.records.scaling import ScalingConfig
from dlbench.records.throughput import ThroughputConfig


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_a_phase_is_written_at_once_and_steps_when_flushed(tmp_path):
    clock = FakeClock()
    rp = progress.RankProgress(tmp_path, clock=clock, thread=False)
    rp.phase("warm-up")
    assert progress.read_progress(tmp_path)["phase"] == "warm-up"
    step = rp.counting(lambda: "out")
    clock.t += 0.4
    assert step() == "out"                      # the step's own result comes back
    assert progress.read_progress(tmp_path)["steps"] == 0   # a step never writes
    clock.t += 0.7
    step()
    rp.flush()                                   # what the thread does once a second
    doc = progress.read_progress(tmp_path)
    assert (doc["steps"], doc["phase_s"]) == (2, 1.1)
    rp.phase("measured window")                  # a new phase counts from 0
    assert progress.read_progress(tmp_path)["steps"] == 0


def test_the_thread_writes_the_steps(tmp_path):
    import time
    rp = progress.RankProgress(tmp_path, every_s=0.05)
    rp.phase("measured window")
    step = rp.counting(lambda: None)
    for _ in range(3):
        step()
    deadline = time.monotonic() + 10
    while progress.read_progress(tmp_path)["steps"] != 3:
        assert time.monotonic() < deadline, "the thread never wrote the steps"
        time.sleep(0.02)


def test_the_line_the_parent_shows():
    assert progress.describe(None) == "starting the ranks"
    doc = {"phase": "measured window", "steps": 4, "phase_s": 8.0, "time": 1000.0}
    assert progress.describe(doc, now=1003.0) == \
        "rank 0: measured window, step 4 (2.00 s a step), 0:11 in it"
    assert progress.describe({"phase": "building the model", "steps": 0, "phase_s": 75.0}) == \
        "rank 0: building the model, 1:15 in it"
    # whatever the file holds, the launcher that waits on the job is never stopped by it
    assert progress.describe({"phase": "warm-up", "steps": "many"}) == "running"


def test_an_unreadable_or_unwritable_progress_file_is_no_error(tmp_path):
    (tmp_path / progress.PROGRESS_FILE).write_text("{half")
    assert progress.read_progress(tmp_path) is None
    assert progress.read_progress(tmp_path / "missing") is None
    rp = progress.RankProgress(tmp_path / "missing", thread=False)   # no such folder
    rp.phase("warm-up")                                 # progress must never fail a job
    assert rp.counting(lambda: 1)() == 1


def test_only_rank_0_of_a_job_with_a_folder_reports(tmp_path):
    assert isinstance(progress.for_rank({"out_dir": str(tmp_path)}, 0), progress.RankProgress)
    assert isinstance(progress.for_rank({"out_dir": str(tmp_path)}, 1), progress.NoProgress)
    assert isinstance(progress.for_rank({}, 0), progress.NoProgress)


@pytest.mark.slow
def test_a_running_scale_job_reports_its_phases_to_the_parent(monkeypatch):
    # Rank 0 writes its window's step count about once a second (progress.WRITE_EVERY_S), so
    # a window of 2 s holds at least one such report for a second or more; the launcher polls
    # every 0.1 s here (once a second in use) and sees it at several polls.
    from dlbench.launch import torchrun
    monkeypatch.setattr(torchrun, "STATUS_EVERY_S", 0.1)
    stop = StopRule(min_steps=2, max_steps=100_000, min_seconds=2.0, max_seconds=2.5,
                    target_rel_ci=0.5)
    base = ThroughputConfig(model="tiny_mlp", batch_size=4, input_size=8, device="cpu",
                            warmup_steps=2, telemetry_interval_s=None, stop=stop)
    seen: list[str] = []
    launcher = launchers.torchrun(timeout_s=180, on_status=seen.append)
    rec = launcher.run(ScalingConfig(base=base, gpus=2, strategy="ddp",
                                     comm_profile_steps=0), {})
    assert rec.ok, rec.error
    window = [s for s in seen if s.startswith("rank 0: measured window, step ")]
    assert window, seen
    # the phases come in the order they run
    order = ["building the model", "first step", "warm-up", "measured window"]
    firsts = [next((i for i, s in enumerate(seen) if phase in s), None) for phase in order]
    present = [i for i in firsts if i is not None]
    assert present == sorted(present)
    # the profile is off: no line may say it runs
    assert not any("profiling communication" in s for s in seen), seen

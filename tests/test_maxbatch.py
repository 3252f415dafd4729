"""The largest batch that fits: the search, its records, -b auto, memory, OOM handling."""

import json
import math
import re
from dataclasses import replace

import pytest
import torch
from conftest import FAST_STOP

from fakes.cli import run as run_cli

from dlbench.config import ConfigError
from dlbench.jobs import launchers
from dlbench.launch.inline import InlineLauncher
from dlbench.records.base import ErrorType
from dlbench.records.maxbatch import MaxBatchConfig, Probe
from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
from dlbench.store import Store
from dlbench.jobs.sweep import run_sweep
from dlbench.workloads import maxbatch as mb
from dlbench.workloads.checkpointing import enable_checkpointing
from dlbench.workloads.devices import UnsupportedError
from dlbench.workloads.throughput import measure

FAST = ["--min-steps", "5", "--min-time", "0.05", "--max-time", "0.3", "--warmup", "1",
        "--target-ci", "0.05"]


def dlbench(*args, timeout=300):
    return run_cli(*args, timeout=timeout)


# -- the pure search ---------------------------------------------------------------------------
def _bound(limit: int, start: int) -> int:
    """Probes needed at most: bracket by doubling or halving, then bisect the bracket."""
    return 2 * math.ceil(math.log2(max(limit, start, 2))) + 3


@pytest.mark.parametrize("start", [1, 16, 1024])
@pytest.mark.parametrize("boundary", [1, 2, 3, 7, 32, 33, 100, 1000, 2047, 4096])
def test_search_finds_the_exact_boundary_of_a_fake_memory_limit(boundary, start):
    calls = []

    def fits(b):
        calls.append(b)
        return b <= boundary

    r = mb.find_max_batch(fits, start=start)
    assert r.best == boundary
    assert r.first_fail == boundary + 1           # exact: the bracket is [boundary, boundary + 1)
    assert len(calls) == len(set(calls))          # no batch probed twice
    assert len(calls) <= _bound(boundary, start)
    assert r.probed == tuple((b, b <= boundary) for b in calls)


def test_search_probe_sequence_doubles_then_bisects():
    r = mb.find_max_batch(lambda b: b <= 32, start=16)
    assert [b for b, _ in r.probed] == [16, 32, 64, 48, 40, 36, 34, 33]


def test_search_respects_the_limit_and_reports_when_nothing_fits():
    r = mb.find_max_batch(lambda b: True, start=16, limit=40)
    assert (r.best, r.first_fail) == (40, None)
    assert max(b for b, _ in r.probed) == 40
    r = mb.find_max_batch(lambda b: b <= 20, start=64, limit=40)   # start above the limit
    assert r.best == 20 and all(b <= 40 for b, _ in r.probed)
    r = mb.find_max_batch(lambda b: False, start=8)
    assert (r.best, r.first_fail) == (None, 1)
    assert [b for b, _ in r.probed] == [8, 4, 2, 1]


def test_search_tolerance_trades_probes_for_a_bracket():
    exact = mb.find_max_batch(lambda b: b <= 1500, start=1024)
    loose = mb.find_max_batch(lambda b: b <= 1500, start=1024, tolerance=0.05)
    assert loose.best <= 1500 < loose.first_fail
    assert loose.first_fail - loose.best <= 0.05 * loose.best
    assert len(loose.probed) < len(exact.probed)


# -- a guess from the memory the probes used ------------------------------------------------------
def test_predict_max_batch_draws_a_line_through_the_two_largest_fitting_probes():
    gib = 1 << 30
    # 8 GiB per 1,000 samples; 95% of 100 GiB leaves 77 GiB above 2,000 samples' 18: 9,625 more.
    assert mb.predict_max_batch([(1000, 10 * gib), (2000, 18 * gib)], 100 * gib) == 11625
    assert mb.predict_max_batch([(500, 99 * gib), (1000, 10 * gib), (2000, 18 * gib)],
                                100 * gib) == 11625           # the two largest batches count
    assert mb.predict_max_batch([(1000, 10 * gib)], 100 * gib) is None       # one point
    assert mb.predict_max_batch([(1000, 10 * gib), (2000, 10 * gib)], 100 * gib) is None  # flat
    assert mb.predict_max_batch([(1000, 10 * gib), (2000, 18 * gib)], 0) is None
    assert mb.predict_max_batch([(1000, 0), (2000, 18 * gib)], 100 * gib) is None  # no reading


def test_one_probe_and_the_fixed_memory_predict_a_batch_that_errs_low():
    gib = 1 << 30
    # 10 GiB at batch 1,000 of which 1 GiB is parameters, gradients and optimizer state: 9 MiB
    # a sample puts 95% of 100 GiB at batch 10,444.
    assert mb.predict_max_batch([(1000, 10 * gib)], 100 * gib, fixed_bytes=gib) == 10444
    # A constant the fixed bytes do not hold (a 2 GiB workspace) is taken as per-sample memory:
    # the guess falls short of the true boundary (13,142), never past it.
    true_limit = (95 * gib - 3 * gib) // ((7 * gib) // 1000)
    guess = mb.predict_max_batch([(1000, 10 * gib)], 100 * gib, fixed_bytes=gib)
    assert guess < true_limit
    # Two probes: the line through them wins over the fixed bytes.
    assert mb.predict_max_batch([(1000, 10 * gib), (2000, 18 * gib)], 100 * gib,
                                fixed_bytes=gib) == 11625
    assert mb.predict_max_batch([(1000, 10 * gib)], 100 * gib, fixed_bytes=None) is None
    assert mb.predict_max_batch([(1000, gib)], 100 * gib, fixed_bytes=2 * gib) is None  # no growth


def test_a_probe_record_gives_its_fixed_memory():
    assert mb.fixed_bytes({"params_bytes": 4, "grads_bytes": 4, "optimizer_state_bytes": 8}) == 16
    assert mb.fixed_bytes({"params_bytes": 4, "grads_bytes": 4,
                           "optimizer_state_bytes": None}) == 8      # eval: no optimizer
    assert mb.fixed_bytes({"allocated_peak_bytes": 10}) is None      # not counted


@pytest.mark.parametrize("boundary", [1, 7, 33, 100, 1000, 2047, 3200])
@pytest.mark.parametrize("error", [None, 0.0, -0.1, 0.1, 9.0, -0.9])
def test_a_guess_never_changes_the_answer(boundary, error):
    """Right, short, long, wild or no guess: the same exact answer, no batch probed twice."""
    def guess():
        return None if error is None else max(1, int(boundary * (1 + error)))
    calls = []

    def fits(b):
        calls.append(b)
        return b <= boundary

    r = mb.find_max_batch(fits, start=16, guess=guess)
    assert (r.best, r.first_fail) == (boundary, boundary + 1)
    assert len(calls) == len(set(calls))


def test_a_right_guess_saves_probes():
    plain = mb.find_max_batch(lambda b: b <= 3200, start=1024, tolerance=0.1)
    guided = mb.find_max_batch(lambda b: b <= 3200, start=1024, tolerance=0.1,
                               guess=lambda: 3200)
    assert [b for b, _ in plain.probed] == [1024, 2048, 4096, 3072, 3584, 3328]
    assert [b for b, _ in guided.probed] == [1024, 3200, 3520]
    assert (guided.best, guided.first_fail) == (3200, 3520)     # and a tighter answer


def test_search_guesses_from_the_first_probe_when_it_knows_the_fixed_memory():
    # The same device with the fixed memory counted (1 MiB): the first probe alone predicts
    # 3,039, one probe sooner than the line through two probes does.
    launcher = FakeLauncher(3200, fixed_mib=1)
    rec = mb.search(_mbcfg(tolerance=0.1), {}, default_start=1024, launcher=launcher)
    assert launcher.calls == [1024, 3039, 3343, 3191]
    assert rec.best_batch == 3191 and rec.first_oom_batch == 3343
    assert rec.probes[0].fixed_bytes == 1 << 20 and rec.probes[2].fixed_bytes is None  # OOM


def test_search_guesses_from_the_probes_reserved_memory():
    # 1 MiB per sample, 3,200 MiB of device: the line through 1,024 and 2,048 predicts 3,039
    # (95% of the device); it fits, one bracket above does not, bisection closes the bracket.
    launcher = FakeLauncher(3200)
    rec = mb.search(_mbcfg(tolerance=0.1), {}, default_start=1024, launcher=launcher)
    assert launcher.calls == [1024, 2048, 3039, 3343, 3191]
    assert rec.best_batch == 3191 and rec.first_oom_batch == 3343


# -- the search with a launcher ------------------------------------------------------------------
class FakeLauncher:
    """A memory of ``capacity`` bytes, 1 MiB per sample; records every batch asked for."""

    def __init__(self, capacity_samples: int, error_at: int | None = None,
                 fixed_mib: int | None = None) -> None:
        self.capacity = capacity_samples
        self.error_at = error_at
        self.fixed = None if fixed_mib is None else {"params_bytes": fixed_mib << 20,
                                                     "grads_bytes": 0,
                                                     "optimizer_state_bytes": 0}
        self.calls: list[int] = []

    def run(self, cfg: ThroughputConfig, env: dict) -> ThroughputRecord:
        self.calls.append(cfg.batch_size)
        assert cfg.stop == mb.PROBE_STOP and cfg.warmup_steps == 0   # a probe is short
        assert cfg.telemetry_interval_s is None   # and waits for no idle power baseline
        if cfg.batch_size == self.error_at:
            return ThroughputRecord(config=cfg, env=env, status="error",
                                    error_type=ErrorType.EXCEPTION, error="ValueError: broken")
        if cfg.batch_size > self.capacity:
            return ThroughputRecord(config=cfg, env=env, status="error",
                                    error_type=ErrorType.OOM, error="OutOfMemoryError: simulated")
        return ThroughputRecord(config=cfg, env=env, step_times_s=(0.01, 0.01),
                                samples_per_step=cfg.batch_size,
                                memory={"allocated_peak_bytes": cfg.batch_size << 20,
                                        "reserved_peak_bytes": (cfg.batch_size + 1) << 20,
                                        "device_total_bytes": self.capacity << 20,
                                        **(self.fixed or {})})


def _mbcfg(**kw):
    base = ThroughputConfig(model="tiny_cnn", batch_size=1, device="cpu")
    return MaxBatchConfig(base=base, **kw)


def test_search_keeps_every_probe_with_its_memory_and_the_oom_rows():
    rec = mb.search(_mbcfg(tolerance=0), {}, default_start=16, launcher=FakeLauncher(50))
    assert rec.ok and rec.best_batch == 50 and rec.first_oom_batch == 51
    oom = [p for p in rec.probes if not p.fits]
    assert oom and all(p.outcome == ErrorType.OOM and p.allocated_peak_bytes is None for p in oom)
    best = rec.best_probe()
    assert best.allocated_peak_bytes == 50 << 20 and best.device_total_bytes == 50 << 20
    assert rec.headline() == 50.0


def test_search_stops_on_an_error_that_is_not_about_memory():
    launcher = FakeLauncher(50, error_at=16)
    rec = mb.search(_mbcfg(), {}, default_start=16, launcher=launcher)
    assert not rec.ok and rec.error_type == ErrorType.EXCEPTION
    assert launcher.calls == [16]                     # no further probes after it
    assert "batch 16" in rec.error and rec.probes[-1].outcome == ErrorType.EXCEPTION


def test_an_error_above_a_batch_that_ran_bounds_the_search():
    # cuDNN failed with INTERNAL_ERROR at batch 3328 of a ResNet-50 whose 2048 had run: the
    # boundary, not a reason to give up. The probe keeps its own error type.
    launcher = FakeLauncher(50, error_at=32)
    rec = mb.search(_mbcfg(tolerance=0), {}, default_start=16, launcher=launcher)
    assert rec.ok and rec.best_batch == 31 and rec.first_oom_batch == 32
    assert [p.outcome for p in rec.probes if p.batch == 32] == [ErrorType.EXCEPTION]


def test_maxbatch_record_round_trips_through_the_store(tmp_path):
    cfg = _mbcfg(start=4, limit=100)
    rec = mb.search(cfg, {"accelerator": "cpu"}, default_start=16, launcher=FakeLauncher(24))
    with Store(tmp_path / "s.db") as store:
        store.add(rec.with_run("r1"), "envkey")
        back = store.results(kind="maxbatch")
    assert back == [rec.with_run("r1")]
    assert isinstance(back[0].probes[0], Probe)
    # The identity is the setup alone: not the batch, not the search bounds.
    assert cfg.key() == _mbcfg().key() == MaxBatchConfig(
        base=replace(cfg.base, batch_size=512)).key()
    assert cfg.key() != MaxBatchConfig(base=replace(cfg.base, precision="bf16")).key()
    assert cfg.label == "maxbatch tiny_cnn fp32 train"


def test_auto_batches_search_once_then_reuse(tmp_path):
    from dlbench.jobs.maxbatch_search import auto_batches
    db = str(tmp_path / "auto.db")
    setups = [ThroughputConfig(model="test_oom", batch_size=1, device="cpu", stop=FAST_STOP)]
    launcher = FakeLauncher(32)
    [found] = auto_batches(setups, db, "test", probe_launcher=launcher)
    assert found.config == setups[0] and found.search.best_batch == 32
    assert found.sized == replace(setups[0], batch_size=32)
    n = len(launcher.calls)
    [again] = auto_batches(setups, db, "test", probe_launcher=launcher)
    assert again.sized == found.sized and len(launcher.calls) == n      # reused: no new probe
    with Store(db) as store:
        assert len(store.results(kind="maxbatch")) == 1


def test_auto_batches_where_nothing_fits_has_no_sized_config(tmp_path):
    from dlbench.jobs.maxbatch_search import auto_batches
    setups = [ThroughputConfig(model="test_oom", batch_size=1, device="cpu", stop=FAST_STOP)]
    [found] = auto_batches(setups, str(tmp_path / "none.db"), "test",
                           probe_launcher=FakeLauncher(0))
    assert found.sized is None and not found.search.ok


def test_with_auto_batches_keeps_the_fixed_batches_only_when_asked(tmp_path):
    # -b 8,auto: the config at 8 and the same setup at its largest batch; -b auto: only that.
    from dlbench.jobs.maxbatch_search import with_auto_batches
    db = str(tmp_path / "auto.db")
    at8 = ThroughputConfig(model="test_oom", batch_size=8, device="cpu", stop=FAST_STOP)
    both, found = with_auto_batches([at8], db, "t", keep=True, probe_launcher=FakeLauncher(32))
    assert [c.batch_size for c in both] == [8, 32] and found[0].search.best_batch == 32
    only, _ = with_auto_batches([replace(at8, batch_size=1)], db, "t",
                                probe_launcher=FakeLauncher(32))
    assert [c.batch_size for c in only] == [32]
    none, found = with_auto_batches([at8], str(tmp_path / "none.db"), "t",
                                    probe_launcher=FakeLauncher(0))
    assert none == [] and found[0].sized is None


class Heard:
    """A SearchProgress that keeps what it hears."""

    def __init__(self) -> None:
        self.events = []

    def __getattr__(self, name):
        return lambda *a: self.events.append((name, *a))


def test_run_searches_tells_its_progress_and_prints_nothing(tmp_path, capsys):
    from dlbench.jobs.maxbatch_search import run_searches
    heard = Heard()
    cfg = _mbcfg(start=16, tolerance=0)
    with Store(tmp_path / "s.db") as store:
        run_searches([cfg], store, {}, "test", probe_launcher=FakeLauncher(40), progress=heard)
        run_searches([cfg], store, {}, "test", reuse=True, probe_launcher=FakeLauncher(40),
                     progress=heard)
    names = [e[0] for e in heard.events]
    assert names[0] == "searching" and "probing" in names and "probed" in names
    assert names.count("searched") == 1 and names[-1] == "reused"
    assert capsys.readouterr() == ("", "")


class MeasureLauncher:
    """Full measurements that run out of memory above ``capacity`` (probes said more fits)."""
    survives_fatal = True

    def __init__(self, capacity: int) -> None:
        self.capacity, self.calls = capacity, []

    def run(self, cfg, env):
        self.calls.append(cfg.batch_size)
        if cfg.batch_size > self.capacity:
            return ThroughputRecord(config=cfg, env=env, status="error", error_type="oom",
                                    error="OutOfMemoryError: fragmented")
        return ThroughputRecord(config=cfg, env=env, step_times_s=(0.01,) * 3,
                                samples_per_step=cfg.batch_size)


def test_a_measurement_that_runs_out_of_memory_steps_down_and_corrects_the_search(tmp_path):
    from dlbench.jobs.maxbatch_search import run_searches, stored
    cfg = _mbcfg(start=16, tolerance=0)
    with Store(tmp_path / "s.db") as store:
        found, measured = run_searches([cfg], store, {}, "test", measure_with=MeasureLauncher(36),
                                       probe_launcher=FakeLauncher(40))
        # Probes fitted 16, 32, the guess 37 and 38-40 near it; the measurement steps down by at
        # least 5% each time: 40, then 38, then 32.
        assert [(t.config.batch_size, t.error_type) for t in measured] == [
            (40, "oom"), (38, "oom"), (32, None)]
        [rec] = found
        assert rec.best_batch == 32 and rec.first_oom_batch == 38
        assert [(p.batch, p.outcome) for p in rec.probes[-2:]] == [(40, "oom"), (38, "oom")]
        assert [r.best_batch for r in store.results(kind="maxbatch")] == [40, 32]
        assert stored(store, cfg, {}).best_batch == 32        # the correction is what is reused


def test_resume_steps_down_below_a_measurement_that_ran_out_of_memory_before(tmp_path):
    # The job was stopped while the measurement stepped down (the best batch had run out of memory):
    # --resume does not run the failed batch again, it measures the next one down.
    from dlbench.jobs.maxbatch_search import run_searches

    class CutAfterFirst(MeasureLauncher):
        def run(self, cfg, env):
            if len(self.calls) == 1:
                raise KeyboardInterrupt
            return super().run(cfg, env)
    cfg = _mbcfg(start=16, tolerance=0)
    probes, cut = FakeLauncher(40), CutAfterFirst(36)
    with Store(tmp_path / "s.db") as store:
        with pytest.raises(KeyboardInterrupt):
            run_searches([cfg], store, {}, "cut", measure_with=cut, probe_launcher=probes)
        assert cut.calls == [40]                      # 40 ran out of memory, 38 was cut
        again = MeasureLauncher(36)
        found, measured = run_searches([cfg], store, {}, "resume", reuse=True,
                                       measure_with=again, probe_launcher=probes)
    assert again.calls == [38, 32]                    # 40 is not run again
    assert [(t.config.batch_size, t.error_type) for t in measured] == [(38, "oom"), (32, None)]
    [rec] = found
    assert rec.best_batch == 32 and [p.batch for p in rec.probes if not p.fits][-2:] == [40, 38]


class InterruptingLauncher(FakeLauncher):
    """Ctrl-C arrives while the ``stop_at``-th probe runs (1-based); later calls run."""

    def __init__(self, capacity_samples: int, stop_at: int) -> None:
        super().__init__(capacity_samples)
        self.stop_at = stop_at

    def run(self, cfg, env):
        if len(self.calls) + 1 == self.stop_at:
            self.stop_at = None
            raise KeyboardInterrupt
        return super().run(cfg, env)


def test_an_interrupted_search_keeps_its_probes_and_resume_probes_only_what_it_lacked(tmp_path):
    from dlbench.jobs.maxbatch_search import run_searches
    cfg = _mbcfg(start=16, tolerance=0)
    whole = FakeLauncher(50)
    expected = mb.search(cfg, {}, default_start=16, launcher=whole)
    launcher = InterruptingLauncher(50, stop_at=4)
    with Store(tmp_path / "s.db") as store:
        with pytest.raises(KeyboardInterrupt):
            run_searches([cfg], store, {}, "test", probe_launcher=launcher)
        [partial] = store.results(kind="maxbatch")
        assert partial.error_type == ErrorType.INTERRUPTED and not partial.ok
        assert [p.batch for p in partial.probes] == whole.calls[:3]   # the 4th never finished
        assert [r.status for r in store.runs()] == ["interrupted"]
        found, _ = run_searches([cfg], store, {}, "test", reuse=True, probe_launcher=launcher)
    # The resumed search took the same path: only the probes the first one lacked ran again.
    assert launcher.calls == whole.calls
    [rec] = found
    assert (rec.best_batch, rec.first_oom_batch) == (expected.best_batch, expected.first_oom_batch)
    assert [p.batch for p in rec.probes] == [p.batch for p in expected.probes]


def test_resume_measures_a_stored_search_whose_throughput_was_never_measured(tmp_path):
    # The job was stopped after the search was stored and before its measurement: --resume probes
    # nothing again and measures at the stored batch; once measured, it opens no run at all.
    from dlbench.jobs.maxbatch_search import run_searches
    cfg = _mbcfg(start=16, tolerance=0)
    probes, measurer = FakeLauncher(40), MeasureLauncher(40)
    with Store(tmp_path / "s.db") as store:
        run_searches([cfg], store, {}, "search only", probe_launcher=probes)
        n = len(probes.calls)
        found, measured = run_searches([cfg], store, {}, "resume", reuse=True,
                                       measure_with=measurer, probe_launcher=probes)
        assert len(probes.calls) == n and measurer.calls == [40]
        assert [t.config.batch_size for t in measured] == [40] and found[0].best_batch == 40
        runs = len(store.runs())
        _, again = run_searches([cfg], store, {}, "resume", reuse=True, measure_with=measurer,
                                probe_launcher=probes)
        assert again == [] and measurer.calls == [40] and len(store.runs()) == runs


def test_known_probes_are_reused_only_when_they_speak_of_memory(tmp_path):
    from dlbench.jobs.maxbatch_search import run_searches
    known = (Probe(batch=16, outcome="ok"), Probe(batch=64, outcome=ErrorType.EXCEPTION))
    launcher = FakeLauncher(50)
    rec = mb.search(_mbcfg(start=16, tolerance=0), {}, default_start=16, launcher=launcher,
                    known=known)
    # 16 is taken from the earlier search; 64 failed for a reason that is not memory, so it
    # is probed again rather than trusted.
    assert launcher.calls[0] == 32 and 64 in launcher.calls and 16 not in launcher.calls
    assert rec.best_batch == 50
    # Without --resume (reuse=False) an interrupted search's probes are not looked up.
    stopper = InterruptingLauncher(50, stop_at=2)
    with Store(tmp_path / "s.db") as store:
        with pytest.raises(KeyboardInterrupt):
            run_searches([_mbcfg(start=16, tolerance=0)], store, {}, "t", probe_launcher=stopper)
        run_searches([_mbcfg(start=16, tolerance=0)], store, {}, "t", probe_launcher=stopper)
    assert stopper.calls.count(16) == 2


def test_the_report_shows_one_search_per_setup_the_latest_that_found_a_batch():
    from dlbench.records.maxbatch import MaxBatchRecord
    from dlbench.report.tables import latest_searches
    cfg = _mbcfg()
    stopped = MaxBatchRecord(config=cfg, env={}, status="error", error_type="interrupted")
    done = MaxBatchRecord(config=cfg, env={}, best_batch=40)
    corrected = MaxBatchRecord(config=cfg, env={}, best_batch=32)
    other = MaxBatchRecord(config=MaxBatchConfig(base=replace(cfg.base, precision="bf16")),
                           env={}, status="error", error_type="oom")
    assert latest_searches([stopped, done, corrected, other]) == [corrected, other]
    assert latest_searches([done, stopped]) == [done]


# -- the real OOM path: test_oom through the subprocess launcher, via the CLI ------------------
@pytest.fixture(scope="module")
def maxbatch_db(tmp_path_factory):
    db = str(tmp_path_factory.mktemp("mb") / "mb.db")
    # start 32, at most 34: doubling (32, then 34, the cap) and bisection (33), each probe in a
    # fresh process (start-up dominates a probe here: about 6 s each on 2 busy cores).
    p = dlbench("maxbatch", "-m", "test_oom", "--device", "cpu", "--start", "32", "--max", "34",
                "--tolerance", "0", "--db", db, *FAST, "--warmup-time", "0")
    return db, p


@pytest.mark.slow
def test_maxbatch_cli_finds_32_for_test_oom_through_fresh_processes(maxbatch_db):
    db, p = maxbatch_db
    assert p.returncode == 0, p.stderr
    assert "32" in p.stdout and "34 OOM" in p.stdout
    # Progress: each probe says when it starts (an fp32 probe can autotune for minutes) and
    # how long it took.
    assert "batch 34: probing" in p.stderr and re.search(r"batch 34: oom \(\d+ s\)", p.stderr)
    with Store(db) as store:
        [rec] = store.results(kind="maxbatch")
        tputs = store.results(kind="throughput")
    assert rec.best_batch == 32 and rec.first_oom_batch == 33
    assert [(q.batch, q.outcome) for q in rec.probes] == [(32, "ok"), (34, "oom"), (33, "oom")]
    assert "test_oom: batch 34 > 32" in rec.probes[1].error     # the child's own OOM message
    assert rec.probes[0].allocated_peak_bytes is None          # no allocator peak on the CPU
    # The throughput at the batch found: a normal record, measured with the normal stop rule.
    [t] = tputs
    assert t.ok and t.config.batch_size == 32 and t.run_id == rec.run_id
    assert t.config.stop.min_steps == 5 and len(t.step_times_s) >= 5
    assert t.config.warmup_steps == 1 and t.config.warmup_seconds == 0  # --warmup, --warmup-time


@pytest.mark.slow
def test_throughput_b_auto_reuses_the_stored_search(maxbatch_db):
    db, _ = maxbatch_db
    p = dlbench("throughput", "-m", "test_oom", "-b", "auto", "--device", "cpu", "--db", db,
                "--json", "-q", *FAST, "--warmup-time", "0")
    assert p.returncode == 0, p.stderr
    assert "-b auto: test_oom fp32 train -> batch 32" in p.stderr
    [rec] = json.loads(p.stdout)
    assert rec["config"]["batch_size"] == 32 and rec["status"] == "ok"
    with Store(db) as store:
        assert len(store.results(kind="maxbatch")) == 1          # reused, not searched again


# -- OOM that never kills a sweep -----------------------------------------------------------------
def test_inline_sweep_goes_on_after_an_oom(tmp_path, cpu_env):
    cfgs = [ThroughputConfig(model=m, batch_size=b, device="cpu", warmup_steps=1,
                             warmup_seconds=0, stop=FAST_STOP)
            for m, b in (("test_oom", 64), ("tiny_cnn", 8), ("test_oom", 32))]
    with Store(tmp_path / "s.db") as store:
        out = run_sweep(cfgs, store, launchers.inline(), cpu_env, command="test")
    assert out.status == "done"
    assert [(r.status, r.error_type) for r in out.records] == [
        ("error", "oom"), ("ok", None), ("ok", None)]


def test_fatal_error_inline_says_to_isolate_and_releases_nothing(monkeypatch):
    from dlbench.launch import inline
    released = []
    monkeypatch.setattr(inline, "release_memory", lambda: released.append(1))

    def broken(cfg, env):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    rec = InlineLauncher({"throughput": broken}).run(ThroughputConfig(model="tiny_cnn", batch_size=2), {})
    assert rec.error_type == ErrorType.FATAL
    assert "--isolate" in rec.error and "illegal memory access" in rec.error
    assert released == []        # empty_cache on a broken context would raise again


def test_a_probe_process_counts_no_flops(cpu_env):
    cfg = mb.probe_config(ThroughputConfig(model="tiny_cnn", batch_size=4, device="cpu"), 4)
    assert launchers.inline(count_flops=False).run(cfg, cpu_env).flops_per_sample is None
    assert launchers.inline().run(cfg, cpu_env).flops_per_sample > 0


# -- memory accounting -----------------------------------------------------------------------------
def _run(**kw):
    cfg = ThroughputConfig(model="tiny_cnn", batch_size=8, device="cpu", warmup_steps=1,
                           warmup_seconds=0, stop=FAST_STOP, **kw)
    return measure(cfg, {}, flops=lambda *a: None)


def test_memory_breakdown_counts_params_grads_and_optimizer_state():
    from dlbench.models import get_model
    n_params = sum(p.numel() for p in get_model("tiny_cnn").build().parameters())
    sgd = _run().memory
    assert sgd["params_bytes"] == 4 * n_params            # fp32
    assert sgd["grads_bytes"] == sgd["params_bytes"]
    assert sgd["optimizer_state_bytes"] == sgd["params_bytes"]   # one momentum buffer each
    assert sgd["batch_bytes"] == 8 * 3 * 32 * 32 * 4 + 8 * 8     # images + int64 targets
    # No allocator peak on the CPU: activations cannot be told apart, and the record says why.
    assert sgd["activations_bytes"] is None and sgd["breakdown_note"]
    known = sgd["params_bytes"] + sgd["grads_bytes"] + sgd["optimizer_state_bytes"]
    assert known <= sgd["host_rss_peak_bytes"]
    adamw = _run(optimizer="adamw").memory
    assert adamw["optimizer_state_bytes"] >= 2 * adamw["params_bytes"]  # exp_avg, exp_avg_sq
    ev = _run(mode="eval").memory
    assert ev["grads_bytes"] == 0 and ev["optimizer_state_bytes"] is None


def test_breakdown_subtracts_what_it_counts_from_the_allocator_peak():
    from dlbench.measure.memory import memory_breakdown
    model = torch.nn.Linear(10, 10)
    out = memory_breakdown(model, None, [torch.zeros(5, 10)], {"allocated_peak_bytes": 10_000})
    assert out["params_bytes"] == 440 and out["batch_bytes"] == 200
    assert out["activations_bytes"] == 10_000 - 440 - 200 and "breakdown_note" not in out


# -- activation checkpointing ---------------------------------------------------------------------
def test_checkpointing_wraps_blocks_and_keeps_the_gradients():
    from dlbench.models import get_model
    spec = get_model("tiny_cnn")
    torch.manual_seed(0)
    plain = spec.build()
    ckpt = spec.build()
    ckpt.load_state_dict(plain.state_dict())
    assert enable_checkpointing(ckpt) == "blocks"
    assert sum(type(m).__name__ == "CheckpointedBlock" for m in ckpt.modules()) == 3
    x = torch.randn(4, 3, 32, 32)
    for m in (plain, ckpt):
        m.train()
        m(x).square().mean().backward()
    for a, b in zip(plain.parameters(), ckpt.parameters()):
        torch.testing.assert_close(a.grad, b.grad)


def test_checkpointing_segments_a_stage_of_single_layers_at_weighted_layers():
    from torch import nn
    layers = []
    for _ in range(9):
        layers += [nn.Conv2d(3, 3, 3, padding=1), nn.ReLU(inplace=True)]
    model = nn.Sequential(nn.Sequential(*layers), nn.Flatten())
    enable_checkpointing(model)
    segs = list(model[0])
    assert len(segs) == 3 and all(isinstance(s.inner[0], nn.Conv2d) for s in segs)
    model(torch.randn(2, 3, 8, 8, requires_grad=True)).sum().backward()  # in-place ReLU is safe


def test_checkpointing_config_label_key_and_refusals():
    cfg = ThroughputConfig(model="tiny_cnn", batch_size=8)
    assert "checkpointing" not in cfg.label and "ckpt" in replace(cfg, checkpointing=True).label
    assert cfg.key() != replace(cfg, checkpointing=True).key()
    with pytest.raises(ConfigError, match='^checkpointing needs mode="train"'):
        ThroughputConfig(model="tiny_cnn", batch_size=8, mode="eval", checkpointing=True)
    from dlbench.models import get_model
    with pytest.raises(UnsupportedError, match="^checkpointing: TinyGPT has no sequential"):
        enable_checkpointing(get_model("tiny_gpt").build())   # blocks in a ModuleList, no stages
    rec = _run(checkpointing=True)
    assert rec.ok and rec.memory["grads_bytes"] == rec.memory["params_bytes"]


def test_no_autotune_is_part_of_the_setup_and_reaches_cudnn_in_every_probe(monkeypatch):
    # True-fp32 autotuning takes minutes per probe; --no-autotune is a setup of its own, said
    # in labels and tables, handed to every probe and to cuDNN's flags in the run itself.
    import dlbench.workloads.throughput as tp
    from dlbench.cli import build_parser
    from dlbench.report.tables import maxbatch_table
    cfg = ThroughputConfig(model="tiny_cnn", batch_size=8)
    off = replace(cfg, autotune=False)
    assert "no-autotune" in off.label and "autotune" not in cfg.label
    assert off.key() != cfg.key()
    assert MaxBatchConfig(base=off).key() != MaxBatchConfig(base=cfg).key()  # -b auto's lookup
    assert ThroughputConfig.from_dict(off.to_dict()) == off
    for cmd in ("maxbatch", "throughput"):
        assert not build_parser().parse_args([cmd, "-m", "tiny_cnn", "--no-autotune"]).autotune
        assert build_parser().parse_args([cmd, "-m", "tiny_cnn"]).autotune

    seen = []
    real = tp.precision_flags

    def spy(precision, device, autotune=True):
        seen.append(autotune)
        return real(precision, device, autotune)
    monkeypatch.setattr(tp, "precision_flags", spy)
    assert _run(autotune=False).ok and _run().ok
    assert seen == [False, True]

    class Recording(FakeLauncher):
        def run(self, cfg, env):
            seen.append(cfg.autotune)
            return super().run(cfg, env)
    seen.clear()
    rec = mb.search(MaxBatchConfig(base=replace(off, batch_size=1, device="cpu"), tolerance=0),
                    {}, default_start=16, launcher=Recording(20))
    assert rec.best_batch == 20 and seen and not any(seen)
    [row] = maxbatch_table([rec]).rows
    assert "no-autotune" in row[3]


# -- tables --------------------------------------------------------------------------------
def test_batch_sweep_table_orders_by_batch_and_marks_oom():
    from dlbench.report.tables import batch_sweep_table
    base = ThroughputConfig(model="tiny_cnn", batch_size=1)
    recs = [ThroughputRecord(config=replace(base, batch_size=b), env={}, step_times_s=(0.1,) * 4,
                             samples_per_step=b, unit="images",
                             memory={"allocated_peak_bytes": b << 30,
                                     "device_total_bytes": 80 << 30, "params_bytes": 1 << 30})
            for b in (64, 16)]
    recs.append(ThroughputRecord(config=replace(base, batch_size=128), env={}, status="error",
                                 error_type="oom", error="OutOfMemoryError"))
    t = batch_sweep_table(recs)
    assert [r[5] for r in t.rows] == ["16", "64", "128"]
    assert t.rows[0][7] == "1.00" and t.rows[1][7] == "4.00"   # 4x the batch at the same step time
    assert t.rows[1][8] == "64.00" and t.rows[1][10] == "80%"
    assert t.rows[2][-1] == "OOM"
    # The same setup without cuDNN autotuning is a setup of its own, and its rows say so.
    recs.append(replace(recs[2], config=replace(recs[2].config, autotune=False)))
    t = batch_sweep_table(recs)
    assert [(r[4], r[5]) for r in t.rows][-1] == ("eager no-autotune", "128")
    assert [r[4] for r in t.rows[:3]] == ["eager"] * 3


def test_maxbatch_table_shows_the_bracket_and_every_probe():
    from dlbench.report.tables import maxbatch_table
    rec = mb.search(_mbcfg(tolerance=0), {}, default_start=16, launcher=FakeLauncher(20))
    [row] = maxbatch_table([rec]).rows
    assert row[4] == "20" and row[5] == "21"
    assert row[-1].startswith("16 ok, 32 OOM, 24 OOM, 20 ok")


def test_maxbatch_table_compares_the_largest_batch_with_the_fastest_smaller_one():
    from dlbench.report.tables import maxbatch_table
    rec = mb.search(_mbcfg(tolerance=0), {}, default_start=16, launcher=FakeLauncher(20))
    base = rec.config.base

    def measured(batch, step):
        return ThroughputRecord(config=replace(base, batch_size=batch), env={},
                                step_times_s=(step,) * 10, samples_per_step=batch,
                                unit="images", stop_reason="converged", first_step_s=0.1)

    other = measured(8, 0.01)   # another setup's faster figure is no comparison
    other = replace(other, config=replace(other.config, mode="eval"))
    # 20 at 0.25 s/step = 80/s; 16 at 0.16 s = 100/s (the fastest smaller); 8 at 0.1 s = 80/s
    recs = [measured(20, 0.25), measured(16, 0.16), measured(8, 0.1), other]
    [row] = maxbatch_table([rec], recs).rows
    assert row[8] == "80.00 img/s" and row[10] == "-20.0% vs 16"
    [row] = maxbatch_table([rec], recs[:1]).rows
    assert row[10] == "-"
    # A measurement at the largest batch that ran out of memory and was never corrected (the
    # step-down was cut) says so; a failure at another batch does not.
    oom = ThroughputRecord(config=replace(base, batch_size=20), env={}, status="error",
                           error_type="oom", error="OutOfMemoryError")
    [row] = maxbatch_table([rec], [oom, measured(16, 0.16)]).rows
    assert row[8] == "OOM when measured" and row[9] == "-"
    [row] = maxbatch_table([rec], [replace(oom, config=replace(oom.config, batch_size=16))]).rows
    assert row[8] == "-"
    [row] = maxbatch_table([rec], [oom, measured(20, 0.25)]).rows
    assert row[8] == "80.00 img/s"


# -- GPU -----------------------------------------------------------------------------------
@pytest.mark.gpu
def test_gpu_search_finds_a_real_boundary_below_device_memory():
    # ResNet-50 bf16 NHWC peaks near 43 GiB at 1024 on an 80 GB card: 2048 does not fit.
    base = ThroughputConfig(model="resnet50", batch_size=1, precision="bf16", channels_last=True,
                            device="cuda")
    rec = mb.search(MaxBatchConfig(base=base, tolerance=0.25), {}, default_start=1024)
    assert rec.ok, rec.error
    assert rec.first_oom_batch is not None and rec.best_batch < rec.first_oom_batch
    best = rec.best_probe()
    assert 0 < best.allocated_peak_bytes <= best.device_total_bytes
    assert any(p.outcome == ErrorType.OOM for p in rec.probes)


@pytest.mark.gpu
def test_gpu_memory_breakdown_adds_up_to_the_allocator_peak():
    cfg = ThroughputConfig(model="tiny_cnn", batch_size=64, device="cuda", warmup_steps=1,
                           warmup_seconds=0, stop=FAST_STOP)
    m = measure(cfg, {}, flops=lambda *a: None).memory
    parts = (m["params_bytes"] + m["grads_bytes"] + m["optimizer_state_bytes"]
             + m["batch_bytes"] + m["activations_bytes"])
    assert parts == m["allocated_peak_bytes"] <= m["reserved_peak_bytes"]
    assert m["reserved_peak_bytes"] <= m["device_total_bytes"]
    assert m["activations_bytes"] > 0

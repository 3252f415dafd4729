"""--repeat: a config in N fresh processes, grouped in the store, reported across processes."""

import json
import math
import sys
from pathlib import Path

import pytest

from dlbench.records.base import ErrorType, repeat_groups
from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
from dlbench.report.table import fmt_ms, fmt_num
from dlbench.report.tables import ONE_PROCESS, group_figure, throughput_table
from dlbench.store import Store
from dlbench.jobs.sweep import run_sweep

sys.path.insert(0, str(Path(__file__).parent))
from fakes.cli import FAST  # noqa: E402
from fakes.cli import run as dlbench  # noqa: E402

ENV = {"accelerator": "cpu"}


class ProcessLauncher:
    """A launcher whose every run is a 'process': a figure of its own (unit test only);
    ``fail`` maps a call number to an error type; ``stop_at`` raises Ctrl-C on that call."""

    name = "fake-subprocess"
    survives_fatal = True

    def __init__(self, fail: dict[int, str] | None = None, stop_at: int | None = None) -> None:
        self.calls = 0
        self.fail = fail or {}
        self.stop_at = stop_at
        self.flops_counted = 0

    def for_later_processes(self):
        parent = self

        class Quick:
            def run(self, cfg, env):
                return parent.run(cfg, env, count=False)
        return Quick()

    def run(self, cfg: ThroughputConfig, env: dict, count: bool = True) -> ThroughputRecord:
        n = self.calls
        self.calls += 1
        if n == self.stop_at:
            raise KeyboardInterrupt
        if n in self.fail:
            return ThroughputRecord(config=cfg, env=env, status="error", error_type=self.fail[n],
                                    error="simulated")
        self.flops_counted += count
        step = 0.010 * (1 + 0.01 * n)          # each process a little slower than the last
        return ThroughputRecord(config=cfg, env=env, step_times_s=(step,) * 10,
                                samples_per_step=cfg.batch_size,
                                flops_per_sample=1000 if count else None)


def _cfgs(*batches):
    return [ThroughputConfig(model="tiny_cnn", batch_size=b, device="cpu") for b in batches]


def test_each_config_in_n_processes_grouped(tmp_path):
    launcher = ProcessLauncher()
    with Store(str(tmp_path / "r.db")) as store:
        out = run_sweep(_cfgs(4, 8), store, launcher, ENV, "test", repeat=3)
        stored = store.results()
    assert out.status == "done" and launcher.calls == 6
    groups = repeat_groups(stored)
    assert [len(g) for g in groups] == [3, 3]
    for g in groups:
        assert len({r.repeat_group for r in g}) == 1
        assert [r.repeat_index for r in g] == [0, 1, 2] and {r.repeat_count for r in g} == {3}
        assert {r.flops_per_sample for r in g} == {1000}   # counted once, taken by the rest
    assert launcher.flops_counted == 2
    assert groups[0][0].repeat_group != groups[1][0].repeat_group


def test_the_group_figure_is_the_mean_of_processes_with_a_t_interval(tmp_path):
    with Store(str(tmp_path / "r.db")) as store:
        run_sweep(_cfgs(100), store, ProcessLauncher(), ENV, "test", repeat=3)
        group = store.results()
    figs = [100 / (0.010 * (1 + 0.01 * n)) for n in range(3)]
    fig = group_figure(group)
    assert fig.mean == pytest.approx(sum(figs) / 3)
    sd = math.sqrt(sum((f - fig.mean) ** 2 for f in figs) / 2)
    assert fig.halfwidth == pytest.approx(4.3026527 * sd / math.sqrt(3), rel=1e-6)
    row = throughput_table(group).rows[0]
    assert row[8].startswith("±") and row[8].endswith("(3)") and row[10] == "10/10/10"


def test_a_single_process_figure_says_so():
    r = ThroughputRecord(config=_cfgs(4)[0], env=ENV, step_times_s=(0.01,) * 10,
                         samples_per_step=4)
    row = throughput_table([r]).rows[0]
    assert row[8] == ONE_PROCESS


def test_a_failed_process_is_a_record_of_the_group_and_the_group_goes_on(tmp_path):
    launcher = ProcessLauncher(fail={1: ErrorType.CRASHED})
    with Store(str(tmp_path / "r.db")) as store:
        out = run_sweep(_cfgs(4), store, launcher, ENV, "test", repeat=3)
        group = store.results()
    assert out.status == "done" and len(group) == 3
    assert [r.status for r in group] == ["ok", "error", "ok"]
    assert group_figure(group).ok == 2 and group_figure(group).ran == 3
    row = throughput_table(group).rows[0]
    assert "2 of 3 ok" in row[8] and "1 process(es) failed: crashed" in row[-1]


def test_an_out_of_memory_ends_the_group(tmp_path):
    launcher = ProcessLauncher(fail={0: ErrorType.OOM})
    with Store(str(tmp_path / "r.db")) as store:
        run_sweep(_cfgs(4, 8), store, launcher, ENV, "test", repeat=3)
        stored = store.results()
    # the OOM is not retried in two more processes; the next config runs its three
    assert launcher.calls == 4 and [len(g) for g in repeat_groups(stored)] == [1, 3]
    assert "all 1 processes failed: oom" in throughput_table(stored).rows[0][-1]


def test_ctrl_c_mid_group_keeps_its_processes_and_resume_completes_the_group(tmp_path):
    db = str(tmp_path / "r.db")
    with Store(db) as store:
        out = run_sweep(_cfgs(4, 8), store, ProcessLauncher(stop_at=4), ENV, "test", repeat=3)
    assert out.status == "interrupted" and "--resume" in out.message
    with Store(db) as store:
        assert [len(g) for g in repeat_groups(store.results())] == [3, 1]
        again = ProcessLauncher()
        out = run_sweep(_cfgs(4, 8), store, again, ENV, "test", resume=True, repeat=3)
        stored = store.results()
    assert again.calls == 2 and out.skipped == 4      # 3 of the first config, 1 of the second
    groups = repeat_groups(stored)
    assert [len(g) for g in groups] == [3, 3]
    assert sorted(r.repeat_index for r in groups[1]) == [0, 1, 2]
    with Store(db) as store:  # a complete group: nothing more to do
        nothing = ProcessLauncher()
        run_sweep(_cfgs(4, 8), store, nothing, ENV, "test", resume=True, repeat=3)
    assert nothing.calls == 0


def test_resume_with_another_repeat_count_measures_a_new_group(tmp_path):
    db = str(tmp_path / "r.db")
    with Store(db) as store:
        run_sweep(_cfgs(4), store, ProcessLauncher(), ENV, "test", repeat=2)
        again = ProcessLauncher()
        run_sweep(_cfgs(4), store, again, ENV, "test", resume=True, repeat=3)
    assert again.calls == 3


def test_repeat_needs_fresh_processes(tmp_path):
    class Inline(ProcessLauncher):
        survives_fatal = False
    with Store(str(tmp_path / "r.db")) as store, pytest.raises(ValueError, match="fresh"):
        run_sweep(_cfgs(4), store, Inline(), ENV, "test", repeat=2)


@pytest.mark.slow
def test_repeat_through_the_cli_in_fresh_processes(tmp_path):
    db = str(tmp_path / "cli.db")
    p = dlbench("throughput", "-m", "tiny_cnn,test_nan", "-b", "4", "--device", "cpu",
                "--repeat", "2", "--telemetry-interval", "0", "--db", db, "--json", *FAST)
    assert p.returncode == 3, p.stderr         # test_nan's processes fail, as data
    docs = json.loads(p.stdout)
    assert [(d["config"]["model"], d["repeat_index"], d["repeat_count"]) for d in docs] == [
        ("tiny_cnn", 0, 2), ("tiny_cnn", 1, 2), ("test_nan", 0, 2), ("test_nan", 1, 2)]
    assert docs[0]["repeat_group"] == docs[1]["repeat_group"] != docs[2]["repeat_group"]
    assert [d["status"] for d in docs] == ["ok", "ok", "error", "error"]
    assert "each in 2 fresh processes" in p.stderr
    shown = dlbench("results", "show", "--db", db)
    assert shown.returncode == 0, shown.stderr
    assert "(2)" in shown.stdout and "all 2 processes failed" in shown.stdout


def test_the_published_layouts_show_a_group_by_its_mean():
    from dlbench.report.tables import classic_cnn_table, ms_per_batch_table
    cfg = ThroughputConfig(model="tiny_cnn", batch_size=10, precision="fp16", device="cpu")
    group = [ThroughputRecord(config=cfg, env=ENV, step_times_s=(t,) * 4, samples_per_step=10,
                              unit="images").in_group("g", i, 3)
             for i, t in enumerate((0.1, 0.05, 0.025))]     # 100, 200 and 400 img/s
    table = classic_cnn_table(group)
    assert table.rows[0][table.columns.index("fp16 eager")] == fmt_num(700 / 3)
    ms = ms_per_batch_table(group, "cpu")
    assert ms.rows[0][2 + 1] == fmt_ms((0.1 + 0.05 + 0.025) / 3)    # tiny_cnn train


def test_on_record_sees_each_stored_record_before_the_next_config_is_taken(tmp_path):
    """The tuner's feed: a config iterable reads the last record through ``on_record`` and
    picks the next config from it (a search), apart from the display's progress."""
    seen: list[ThroughputRecord] = []

    class Search:  # two configs, the second chosen from the first's stored record
        def __len__(self) -> int:
            return 2

        def __iter__(self):
            yield ThroughputConfig(model="tiny_cnn", batch_size=4, device="cpu")
            assert seen and {r.config.batch_size for r in seen} == {4}  # stored, then taken
            yield ThroughputConfig(model="tiny_cnn", batch_size=2 * seen[-1].config.batch_size,
                                   device="cpu")

    for repeat in (1, 3):
        seen.clear()
        with Store(str(tmp_path / f"r{repeat}.db")) as store:
            out = run_sweep(Search(), store, ProcessLauncher(), ENV, "test", repeat=repeat,
                            on_record=seen.append)
            stored = {r.id for r in store.results()}
        assert out.status == "done"
        assert [r.config.batch_size for r in seen] == [4] * repeat + [8] * repeat
        assert {r.id for r in seen} == stored

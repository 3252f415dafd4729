"""The SQLite store: round trip, resume keys, refusing foreign or newer files, and the sweep."""

import sqlite3

import pytest
from conftest import FAST_STOP

from dlbench.jobs import launchers
from dlbench.launch.inline import InlineLauncher
from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
from dlbench.store import Store, StoreError
from dlbench.env import env_key
from dlbench.jobs.sweep import run_sweep
from dlbench.workloads import workers


def cfg(**kw):
    base = dict(model="tiny_cnn", batch_size=4, device="cpu", warmup_steps=1, warmup_seconds=0.0,
                stop=FAST_STOP)
    base.update(kw)
    return ThroughputConfig(**base)


def fake_record(c, env, times=(0.01, 0.011, 0.009, 0.01), **kw):
    return ThroughputRecord(config=c, env=env, step_times_s=tuple(times), samples_per_step=c.batch_size,
                            stop_reason="converged", first_step_s=0.1, window_wall_s=sum(times), **kw)


def test_round_trip(tmp_path, cpu_env):
    with Store(tmp_path / "r.db") as st:
        st.start_run("run1", "dlbench test", cpu_env, env_key(cpu_env), "CPU")
        rec = fake_record(cfg(), cpu_env).with_run("run1")
        st.add(rec, env_key(cpu_env))
        st.finish_run("run1", "done")
    with Store(tmp_path / "r.db") as st:
        back = st.results(run_id="run1")
        assert back == [rec]
        assert back[0].summary() == rec.summary()
        assert st.get(rec.id[:6]) == rec
        (run,) = st.runs()
        assert (run.run_id, run.status, run.results, run.errors) == ("run1", "done", 1, 0)
        assert st.resolve_run("latest") == "run1" and st.resolve_run("ru") == "run1"


def test_measured_keys_skip_ok_and_oom_not_other_errors(tmp_path, cpu_env):
    k = env_key(cpu_env)
    with Store(tmp_path / "r.db") as st:
        st.start_run("r", "x", cpu_env, k, "CPU")
        ok, oom, boom = cfg(batch_size=1), cfg(batch_size=2), cfg(batch_size=3)
        st.add(fake_record(ok, cpu_env, run_id="r"), k)
        st.add(ThroughputRecord(config=oom, env=cpu_env, status="error", error_type="oom", run_id="r"), k)
        st.add(ThroughputRecord(config=boom, env=cpu_env, status="error", error_type="exception",
                                run_id="r"), k)
        assert st.measured_keys(k) == {ok.key(), oom.key()}
        assert st.measured_keys("another-env") == set()


def test_foreign_file_is_refused(tmp_path):
    bad = tmp_path / "notes.db"
    bad.write_text("this is not sqlite" * 100)
    with pytest.raises(StoreError, match="not a dlbench result store"):
        Store(bad)


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "new.db"
    Store(path).close()
    con = sqlite3.connect(path)
    con.execute("UPDATE meta SET value='999' WHERE key='schema_version'")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="newer dlbench"):
        Store(path)


def test_sweep_goes_on_after_oom_and_nan_and_resume_skips(tmp_path, cpu_env):
    configs = [cfg(), cfg(model="test_oom", batch_size=64), cfg(model="test_nan"),
               cfg(mode="eval")]
    with Store(tmp_path / "s.db") as st:
        out = run_sweep(configs, st, launchers.inline(), cpu_env, command="test")
        assert out.status == "done"
        assert [r.error_type for r in out.records] == [None, "oom", "nan", None]
        stored = st.results(run_id=out.run_id)
        assert [r.id for r in stored] == [r.id for r in out.records]
        again = run_sweep(configs, st, launchers.inline(), cpu_env, command="test", resume=True)
        # ok and oom results are skipped; the NaN one is measured again
        assert again.skipped == 3
        assert [r.config.model for r in again.records] == ["test_nan"]


def test_interrupt_keeps_results_and_marks_the_run(tmp_path, cpu_env):
    class InterruptSecond(InlineLauncher):
        calls = 0

        def run(self, c, env):
            self.calls += 1
            if self.calls == 2:
                raise KeyboardInterrupt
            return super().run(c, env)

    with Store(tmp_path / "i.db") as st:
        out = run_sweep([cfg(), cfg(batch_size=5), cfg(batch_size=6)], st,
                        InterruptSecond(workers.BY_KIND), cpu_env, command="test")
        assert out.status == "interrupted" and "--resume" in out.message
        assert len(st.results(run_id=out.run_id)) == 1
        assert st.runs()[0].status == "interrupted"


def test_merge_copies_what_is_missing_and_keeps_what_is_there(tmp_path, cpu_env):
    recs = {}
    for name in ("a", "b"):
        with Store(tmp_path / f"{name}.db") as st:
            st.start_run(f"run-{name}", "dlbench test", cpu_env, env_key(cpu_env), "CPU")
            recs[name] = fake_record(cfg(), cpu_env).with_run(f"run-{name}")
            st.add(recs[name], env_key(cpu_env))
            st.finish_run(f"run-{name}", "done")
    from dlbench.cli import main
    assert main(["results", "merge", "--db", str(tmp_path / "a.db"), str(tmp_path / "b.db")]) == 0
    with Store(tmp_path / "a.db") as st:
        assert st.merge_from(tmp_path / "b.db") == (0, 0)  # a second merge adds nothing
        assert {r.run_id for r in st.runs()} == {"run-a", "run-b"}
        assert sorted(r.id for r in st.results()) == sorted(r.id for r in recs.values())
        with pytest.raises(StoreError):
            st.merge_from(tmp_path / "missing.db")
        # a foreign SQLite file is refused and left as it was (sources are only read)
        other = tmp_path / "other.db"
        con = sqlite3.connect(other)
        con.execute("CREATE TABLE t (x)")
        con.commit()
        con.close()
        with pytest.raises(StoreError, match="not a dlbench result store"):
            st.merge_from(other)
        con = sqlite3.connect(other)
        assert [r[0] for r in con.execute("SELECT name FROM sqlite_master")] == ["t"]
        con.close()

"""JAX data parallel on two CPU devices (XLA_FLAGS, set before JAX starts: a subprocess): one
sharded step equals one step on one device over the same global batch, ``dlbench scale
--framework jax`` stores a 1- and a 2-device result, and two processes joined by
jax.distributed run one window over both."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from dlbench.launch import forking

pytest.importorskip("jax", reason="the jax extra is not installed")
pytest.importorskip("flax", reason="the jax extra is not installed")


def _xla_flags(*flags: str) -> str:
    """``XLA_FLAGS``: the test session's (tests/conftest.py), with no device count, and
    ``flags``."""
    kept = [f for f in os.environ.get("XLA_FLAGS", "").split()
            if not f.startswith("--xla_force_host_platform_device_count")]
    return " ".join([*kept, *flags])


def _run(code: str, *args: str) -> subprocess.CompletedProcess:
    """``code`` in a process of its own, where JAX starts with the flags (forked by the test
    session's fork server where it runs one: it imported torch, never JAX)."""
    env = {**os.environ, "XLA_FLAGS": _xla_flags("--xla_force_host_platform_device_count=2"),
           "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, *forking.python_args(
                               "-c", textwrap.dedent(code), *args)], env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_sharded_step_equals_the_one_device_step():
    out = _run("""
        import json, jax, numpy as np
        from dlbench.frameworks.jax import step as s
        from dlbench.frameworks.jax.models import JAX_MODELS
        m = JAX_MODELS["tiny_cnn"].build(s.jnp.float32, 16, 10)
        one = s.build(m, "image", "train", "standard", "sgd", 8, 16, 10, 0)
        shard, repl = s.batch_sharding(jax.devices()[:2])
        two = s.build(m, "image", "train", "standard", "sgd", 8, 16, 10, 0, shard, repl)
        a, la = one.fn(one.state, one.x, one.y)
        b, lb = two.fn(two.state, two.x, two.y)
        diff = max(float(np.max(np.abs(np.asarray(p) - np.asarray(q)))) for p, q in
                   zip(jax.tree_util.tree_leaves(a["params"]), jax.tree_util.tree_leaves(b["params"])))
        moved = max(float(np.max(np.abs(np.asarray(p) - np.asarray(q)))) for p, q in
                    zip(jax.tree_util.tree_leaves(a["params"]),
                        jax.tree_util.tree_leaves(s.init_state(m, one.x, None, 0)["params"])))
        print(json.dumps({"devices": len(two.x.sharding.device_set), "loss": [float(la), float(lb)],
                          "diff": diff, "moved": moved}))
    """)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["devices"] == 2  # the batch really is split
    assert r["loss"][0] == pytest.approx(r["loss"][1], rel=1e-5)
    assert r["moved"] > 1e-6 and r["diff"] < 1e-5  # the step did update, identically


@pytest.mark.slow
def test_scale_with_jax_stores_one_and_two_device_results(tmp_path):
    db = str(tmp_path / "s.db")
    out = _run("""
        import sys
        from dlbench.cli import main
        sys.exit(main(["scale", "-m", "tiny_cnn", "-b", "4", "--gpus", "1,2", "--framework", "jax",
                       "--strategy", "dp", "--device", "cpu", "--warmup", "1", "--warmup-time", "0",
                       "--min-steps", "3", "--min-time", "0", "--max-steps", "6", "--db", sys.argv[1],
                       "-q"]))
    """, db)
    assert out.returncode == 0, out.stderr[-2000:]
    from dlbench.store import Store
    with Store(db) as store:
        recs = store.results(kind="scaling")
    assert sorted(r.config.gpus for r in recs) == [1, 2]
    assert all(r.ok and r.config.base.framework == "jax" for r in recs)
    two = next(r for r in recs if r.config.gpus == 2)
    assert two.samples_per_step == 8 and two.summary().throughput > 0


def test_jax_scale_refuses_other_strategies(capsys, tmp_path):
    from dlbench.cli import main
    assert main(["scale", "-m", "tiny_cnn", "--framework", "jax", "--strategy", "ddp",
                 "--device", "cpu", "--db", str(tmp_path / "x.db")]) == 2
    assert "--strategy dp" in capsys.readouterr().err


MULTI = """
    import json, sys, jax
    from dlbench.frameworks.jax.data_parallel import initialize, measure_scaling
    from dlbench.measure.stopping import StopRule
    from dlbench.records.scaling import ScalingConfig
    from dlbench.records.throughput import ThroughputConfig
    initialize(f"127.0.0.1:{sys.argv[1]}", 2, int(sys.argv[2]))
    base = ThroughputConfig(model="tiny_cnn", batch_size=4, framework="jax", device="cpu",
                            warmup_steps=1, warmup_seconds=0, telemetry_interval_s=None,
                            stop=StopRule(min_steps=3, min_seconds=0, max_steps=3))
    rec = measure_scaling(ScalingConfig(base=base, gpus=2, strategy="dp"), {},
                          flops=lambda *_: None, devices=jax.devices())
    print(json.dumps({"ok": rec.ok, "samples": rec.samples_per_step, "procs": jax.process_count(),
                      "steps": len(rec.step_times_s), "loss": rec.final_loss}))
"""


@pytest.mark.slow
def test_two_processes_through_jax_distributed():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    env = {**os.environ, "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": _xla_flags()}  # one CPU device per process: two in the job
    procs = [subprocess.Popen([sys.executable, *forking.python_args(
                                   "-c", textwrap.dedent(MULTI), port, str(i))],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    assert all(r["ok"] and r["procs"] == 2 and r["steps"] == 3 for r in results)
    assert all(r["samples"] == 8 for r in results)  # the global batch: 4 per device x 2
    assert results[0]["loss"] == pytest.approx(results[1]["loss"])  # one program, one loss

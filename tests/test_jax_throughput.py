"""dlbench throughput --framework jax: the JAX timer hook on a fake clock, the shared window on
real tiny models on the CPU, the record's environment, and the flags JAX refuses."""

import pytest

from dlbench.config import ConfigError
from dlbench.measure.stopping import StopRule
from dlbench.records.throughput import ThroughputConfig

jax = pytest.importorskip("jax", reason="the jax extra is not installed")
pytest.importorskip("flax", reason="the jax extra is not installed")
pytest.importorskip("optax", reason="the jax extra is not installed")

from dlbench.frameworks.jax.measure import JaxStepTimer  # noqa: E402
from dlbench.workloads.throughput import measure  # noqa: E402

QUICK = StopRule(min_steps=4, min_seconds=0.0, max_seconds=2.0, max_steps=12)


class FakeDevice:
    """Steps that finish at set times on a fake clock: waiting on one moves the clock there."""

    def __init__(self, ends):
        self.now, self.ends, self.waited = 0.0, ends, []

    def clock(self):
        return self.now

    def wait(self, step):
        self.waited.append(step)
        self.now = max(self.now, self.ends[step])


def test_timer_waits_on_older_steps_only_and_its_steps_tile_the_window():
    dev = FakeDevice({0: 1.0, 1: 2.5, 2: 3.0, 3: 4.5})
    issued = []
    timer = JaxStepTimer(lambda: issued[-1], dev.clock, dev.wait)
    timer.start()
    for i in range(4):
        issued.append(i)
        timer.lap()
        timer.throttle(2)  # the window allows two; JAX's timer keeps one: never the newest
        assert dev.waited == list(range(i))  # step i-1, right after step i was issued
    assert timer.finish() == pytest.approx([1.0, 1.5, 0.5, 1.5])
    assert dev.waited == [0, 1, 2, 3]  # the last one once the window ends


def test_each_completion_is_read_as_it_happens_not_in_bursts():
    """Steps of 40 ms back to back on the device, and a runtime whose dispatch blocks once 8
    executions are in flight (XLA's GPU client bounds them too). Had the timer kept the
    window's bound of 25 steps, dispatch would block first, the timer's waits would find their
    steps long done, and the step times would come in bursts of 0 s and 320 ms; keeping one
    step queued, the timer reads each step's own 40 ms."""
    ends = {i: 0.04 * (i + 1) for i in range(60)}
    dev = FakeDevice(ends)
    issued = []
    timer = JaxStepTimer(lambda: issued[-1], dev.clock, dev.wait)
    timer.start()
    for i in range(60):
        if i >= 8:  # the runtime's own bound: dispatch waits for step i - 8
            dev.now = max(dev.now, ends[i - 8])
        issued.append(i)
        timer.lap()
        timer.throttle(25)
    assert timer.finish() == pytest.approx([0.04] * 60)


def test_the_zero_default_keeps_old_keys_and_jax_changes_the_key():
    torch_cfg = ThroughputConfig(model="resnet50", batch_size=8)
    assert torch_cfg.key() == ThroughputConfig.from_dict(
        {k: v for k, v in torch_cfg.to_dict().items() if k != "framework"}).key()
    assert ThroughputConfig(model="resnet50", batch_size=8, framework="jax").key() != \
        torch_cfg.key()


@pytest.mark.parametrize("flags, match", [
    (dict(compile="default"), "^compile with"), (dict(cuda_graph=True), "^cuda_graph=True"),
    (dict(channels_last=True), "^channels_last=True"), (dict(optimizer_impl="fused"),
                                                        "^optimizer_impl with"),
    (dict(precision="fp16"), "fp16"), (dict(framework="tf"), "^framework must be one of")])
def test_pytorch_levers_are_refused_with_jax(flags, match):
    with pytest.raises(ConfigError, match=match):
        ThroughputConfig(**{"model": "resnet50", "batch_size": 8, "framework": "jax", **flags})


@pytest.mark.slow
@pytest.mark.parametrize("model, mode, method", [
    ("tiny_cnn", "train", "standard"), ("tiny_cnn", "eval", "standard"),
    ("tiny_gpt", "train", "standard"), ("tiny_cnn", "train", "fwd-bwd")])
def test_a_jax_window_on_the_cpu(model, mode, method):
    cfg = ThroughputConfig(model=model, batch_size=4, mode=mode, method=method, framework="jax",
                           device="cpu", warmup_steps=2, warmup_seconds=0.0, stop=QUICK, telemetry_interval_s=None,
                           optimizer="adamw" if model == "tiny_gpt" else "sgd")
    rec = measure(cfg, {"packages": {}}, flops=lambda *_: None)
    assert rec.ok and rec.stop_reason in ("step_cap", "converged", "time_cap")
    assert len(rec.warmup_times_s) == 2 and rec.first_step_s > 0
    assert 4 <= len(rec.step_times_s) <= 12 and all(t > 0 for t in rec.step_times_s)
    assert rec.summary().throughput > 0
    assert (rec.final_loss is None) == (mode == "eval")
    assert rec.env["jax"]["jax"] == jax.__version__ and rec.env["jax"]["xla_platform"] == "cpu"
    assert rec.env["jax"]["xla_python_client_preallocate"] == "false"
    # What the step dropped, for the comparison view: the rule's rates (dlbench.frameworks.
    # dropout; none for these tiny models, as for their PyTorch models).
    from dlbench.frameworks import dropout
    assert rec.env["jax"]["dropout"] == dropout.applied(model, mode) == {}


@pytest.mark.slow
def test_training_lowers_the_loss_on_its_fixed_batch():
    from dlbench.frameworks.jax import step as jstep
    from dlbench.frameworks.jax.models import JAX_MODELS
    built = jstep.build(JAX_MODELS["tiny_cnn"].build(jstep.jnp.float32, 32, 10), "image",
                        "train", "standard", "sgd", 8, 32, 10, 0)
    state, first = built.fn(built.state, built.x, built.y)
    for _ in range(30):
        state, last = built.fn(state, built.x, built.y)
    assert float(last) < float(first)
    assert int(state["step"]) == 31


def test_cli_refuses_pytorch_flags_and_models_without_a_twin(tmp_path, capsys):
    from dlbench.cli import main
    db = str(tmp_path / "x.db")
    assert main(["throughput", "-m", "resnet50", "-b", "2", "--framework", "jax",
                 "--compile", "default", "--db", db]) == 2
    assert "--compile with --framework jax" in capsys.readouterr().err
    assert main(["throughput", "-m", "resnet152", "-b", "2", "--framework", "jax",
                 "--db", db]) == 2
    assert "no JAX version" in capsys.readouterr().err


def test_missing_jax_names_the_extra(monkeypatch, tmp_path, capsys):
    from dlbench.cli import main
    from dlbench.frameworks import jax as jaxpath
    monkeypatch.setattr(jaxpath, "available", lambda: False)
    assert main(["throughput", "-m", "tiny_cnn", "-b", "2", "--framework", "jax",
                 "--db", str(tmp_path / "x.db")]) == 2
    assert "pip install 'dlbench[jax]'" in capsys.readouterr().err


@pytest.mark.slow
def test_the_api_takes_the_framework(tmp_path):
    import dlbench
    rec = dlbench.measure_throughput("tiny_cnn", 4, device="cpu", framework="jax",
                                     stop=QUICK, warmup_steps=1, warmup_seconds=0.0,
                                     telemetry_interval_s=None, db=str(tmp_path / "a.db"))
    assert rec.ok and rec.config.framework == "jax" and rec.env["jax"]["flax"]
    assert dlbench.load(str(tmp_path / "a.db"))[0].config.framework == "jax"


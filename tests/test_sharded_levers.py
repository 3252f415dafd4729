"""The sharded strategies' levers of ``dlbench scale``: ``--offload`` (FSDP2's CPU offload) and
``--fp8`` (torchao's float8 training). Offload trains on a real 2-process gloo group; fp8 has no
CPU kernel and torchao is optional, so its conversion is checked against a fake torchao, its
refusals for real, and its GPU path left to a test skipped without an fp8 GPU."""

import sys
import types
from dataclasses import replace

import pytest
import torch
from torch import nn

from dlbench import cli
from dlbench.config import ConfigError
from dlbench.jobs import launchers
from dlbench.measure.stopping import StopRule
from dlbench.records import record_from_dict
from dlbench.records.base import config_key
from dlbench.records.scaling import ScalingConfig, ScalingRecord
from dlbench.records.throughput import ThroughputConfig
from dlbench.workloads import fp8
from dlbench.workloads.devices import UnsupportedError

THREE = StopRule(min_steps=3, max_steps=3, min_seconds=0, max_seconds=60)
FAST = StopRule(min_steps=5, min_seconds=0.05, max_seconds=0.5, target_rel_ci=0.05)
CPU = torch.device("cpu")


def base(**kw):
    d = dict(model="tiny_llama", batch_size=2, device="cpu", warmup_steps=0, warmup_seconds=0,
             stop=THREE, optimizer="adamw")
    d.update(kw)
    return ThroughputConfig(**d)


# -- --offload on a real gloo group --------------------------------------------------------------
@pytest.mark.slow
def test_offload_trains_to_the_parameters_fsdp_does_without_it(llama_job):
    """FSDP2 with CPUOffloadPolicy on every unit (2 gloo ranks, 1 + 3 AdamW steps) ends with the
    parameters FSDP2 reaches without it: offload moves the shards, never the arithmetic."""
    params = {}
    for offload in (False, True):  # conftest.llama_job: base()'s config
        params[offload], rec = llama_job("fsdp", 2, offload=offload)
        assert [len(t) for t in rec.rank_step_times_s] == [3, 3]
    assert rec.config.label.endswith("x2 fsdp offload")
    assert params[True].keys() == params[False].keys()
    for name in params[False]:
        torch.testing.assert_close(params[True][name], params[False][name], rtol=1e-5,
                                   atol=1e-6, msg=name)
    fresh = dict(build("tiny_llama").named_parameters())
    name = "model.model.layers.0.mlp.down_proj.weight"
    assert not torch.allclose(fresh[name], params[True][name])   # and they moved


def build(model):
    from dlbench.models import get_model
    torch.manual_seed(0)
    return get_model(model).build(32)


def test_the_offload_policy_reaches_every_fully_shard_call(monkeypatch):
    """Each block of the stack and the root get CPUOffloadPolicy, beside the mixed-precision
    policy; unpinned on the CPU (pinning needs CUDA), PyTorch's pinned default on a GPU."""
    import torch.distributed.fsdp as fsdp_api
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy

    from dlbench.workloads.fsdp import offload_policy, repeated_blocks, shard
    calls = []
    monkeypatch.setattr(fsdp_api, "fully_shard",
                        lambda module, **kw: calls.append((module, kw)) or module)
    model = build("tiny_llama")
    shard(model, "bf16", offload=True)
    assert [m for m, _ in calls] == repeated_blocks(model) + [model]
    for _, kw in calls:
        assert isinstance(kw["offload_policy"], CPUOffloadPolicy)
        assert kw["offload_policy"].pin_memory is False          # a CPU model
        assert isinstance(kw["mp_policy"], MixedPrecisionPolicy)
    calls.clear()
    shard(model, "bf16")
    assert len(calls) == 3 and not any("offload_policy" in kw for _, kw in calls)

    on_gpu = types.SimpleNamespace(parameters=lambda: iter([types.SimpleNamespace(
        device=torch.device("cuda", 0))]))
    assert offload_policy(on_gpu).pin_memory is True


def test_wrap_strategy_passes_offload_to_fsdp_and_fsdp_tp(monkeypatch):
    from dlbench.models import get_model
    from dlbench.workloads import scaling
    seen = []
    monkeypatch.setattr(scaling, "shard",
                        lambda m, precision, **kw: seen.append(("fsdp", kw)) or m)
    monkeypatch.setattr(scaling, "parallelize",
                        lambda m, device, tp, **kw: seen.append(("fsdp+tp", kw)) or m)
    spec = get_model("tiny_llama")
    x, y = spec.make_batch(2, CPU, 32)
    for strategy in ("fsdp", "fsdp+tp"):
        cfg = ScalingConfig(base=base(), gpus=2, strategy=strategy, offload=True)
        scaling.wrap_strategy(cfg, spec, spec.build(32), x, y, CPU)
    assert [(s, kw["offload"]) for s, kw in seen] == [("fsdp", True), ("fsdp+tp", True)]
    assert seen[1][1]["sharded"] is True


# -- configs: identity, labels, refusals ---------------------------------------------------------
def test_levers_keep_old_keys_and_join_the_identity_only_when_on():
    c = ScalingConfig(base=base(), gpus=2, strategy="fsdp")
    d = {k: v for k, v in c.to_dict().items()
         if k not in ("tp", "offload", "fp8", "comm_profile_steps")}
    d["base"] = c.base.key()
    assert c.key() == config_key(d)                      # the key records had before the levers
    off, f8 = replace(c, offload=True), replace(c, fp8=True)
    both = replace(c, offload=True, fp8=True)
    assert len({c.key(), off.key(), f8.key(), both.key()}) == 4
    assert off.label.endswith("x2 fsdp offload") and f8.label.endswith("x2 fsdp fp8")
    assert both.label.endswith("x2 fsdp offload fp8")
    assert ScalingConfig(base=base(), gpus=4, strategy="fsdp+tp", offload=True,
                         fp8=True).label.endswith("x4 fsdp+tp tp=2 offload fp8")
    rec = ScalingRecord(config=both, env={}, rank_step_times_s=((0.1,) * 3,) * 2,
                        rank_samples_per_step=(2, 2), unit="tokens")
    back = record_from_dict(rec.to_dict())
    assert back == rec and back.config.offload and back.config.fp8
    # a record stored before the levers reads back with them off
    old = rec.to_dict()
    del old["config"]["offload"], old["config"]["fp8"]
    assert record_from_dict(old).config == c


@pytest.mark.parametrize("strategy", ["ddp", "ps", "dp", "tp"])
def test_offload_is_refused_outside_fsdp_saying_what_to_do(strategy):
    with pytest.raises(ConfigError, match=f'not {strategy}; drop offload=True or use '
                                          'strategy="fsdp"'):
        ScalingConfig(base=base(), gpus=2, strategy=strategy, offload=True)


@pytest.mark.parametrize("strategy", ["ps", "dp"])
def test_fp8_is_refused_for_ps_and_dp(strategy):
    with pytest.raises(ConfigError, match=f"not {strategy}; drop fp8=True"):
        ScalingConfig(base=base(), gpus=2, strategy=strategy, fp8=True)
    for ok in ("ddp", "fsdp", "tp", "fsdp+tp"):
        assert ScalingConfig(base=base(), gpus=2, strategy=ok, fp8=True).fp8


def test_the_strategy_table_shows_the_levers_and_compares_like_with_like():
    from dlbench.report.strategy_tables import strategy_table
    b = ThroughputConfig(model="llama-3.2-1b", batch_size=2, input_size=2048, precision="bf16",
                         optimizer="adamw", stop=FAST, compile="default")

    def rec(strategy, gpus, step_s, **kw):
        return ScalingRecord(config=ScalingConfig(base=b, gpus=gpus, strategy=strategy, **kw),
                             env={}, rank_step_times_s=((step_s,) * 10,) * gpus,
                             rank_samples_per_step=(2,) * gpus, unit="tokens",
                             units_per_sample=2048)
    plain = strategy_table([rec("fsdp", 1, 0.25), rec("fsdp", 2, 0.5)])
    assert "offload" not in plain.notes[0] and "fp8 =" not in plain.notes[0]
    t = strategy_table([rec("fsdp", 1, 0.25), rec("fsdp", 2, 0.5),
                        rec("fsdp", 2, 1.0, offload=True), rec("fsdp", 1, 0.2, fp8=True),
                        rec("fsdp", 2, 0.4, fp8=True), rec("ddp", 2, 0.4, fp8=True)])
    assert [r[4] for r in t.rows] == ["compiled/block", "compiled/block",
                                      "compiled/block, offload", "compiled/block, fp8",
                                      "compiled/block, fp8", "compiled, fp8"]
    factors = [r[-1] for r in t.rows]
    assert factors[1] == "1.00"                      # fsdp over fsdp at 1 GPU
    assert factors[2] == "0.50 (fsdp)"               # offload over plain fsdp, named
    assert factors[4] == "1.00"                      # fp8 over fp8
    assert factors[5] == "1.00 (fsdp fp8)"           # ddp fp8 over fsdp fp8, named
    assert "offload = FSDP2's shards" in t.notes[0] and "fp8 = the linear layers'" in t.notes[0]


# -- --fp8 ---------------------------------------------------------------------------------------
@pytest.fixture
def fake_torchao(monkeypatch):
    """A torchao whose convert_to_float8_training records its call and the layers the filter
    accepts (it swaps nothing)."""
    calls = []

    def convert_to_float8_training(module, *, module_filter_fn=None, config=None):
        chosen = [n for n, m in module.named_modules()
                  if isinstance(m, nn.Linear) and module_filter_fn(m, n)]
        calls.append({"module": module, "chosen": chosen, "config": config})
        return module
    # A model built first: transformers looks the real torchao up (find_spec, then its
    # submodules) when its model code first loads, which a stand-in in sys.modules breaks.
    from dlbench.models import get_model
    get_model("tiny_llama").build(16)
    pkg = types.ModuleType("torchao")
    sub = types.ModuleType("torchao.float8")
    sub.convert_to_float8_training = convert_to_float8_training
    pkg.float8 = sub
    monkeypatch.setitem(sys.modules, "torchao", pkg)
    monkeypatch.setitem(sys.modules, "torchao.float8", sub)
    return calls


def test_fp8_converts_the_blocks_and_leaves_the_lm_head(fake_torchao):
    model = build("tiny_llama")
    names = fp8.convert(model)
    [call] = fake_torchao
    assert call["module"] is model and call["config"] is None    # torchao's default recipe
    assert call["chosen"] == names and len(names) == 14          # 2 blocks x 7 projections
    assert all(".layers." in n for n in names)
    assert "model.lm_head" not in names
    fp8.check_installed()                                        # importable: no error


class Mixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(32, 64)        # fp8
        self.odd = nn.Linear(64, 40)       # 40 % 16: kept
        self.small = nn.Linear(40, 48)     # 40 % 16: kept
        self.down = nn.Linear(48, 32)      # fp8
        self.head = nn.Linear(32, 16)      # the output layer: kept

    def forward(self, x):
        return self.head(self.down(self.small(self.odd(self.up(x)))))


def test_fp8_skips_layers_whose_features_do_not_divide_by_16(fake_torchao):
    assert fp8.convert(Mixed()) == ["up", "down"]
    assert fake_torchao[0]["chosen"] == ["up", "down"]
    with pytest.raises(UnsupportedError, match="no linear layer to train in fp8"):
        fp8.convert(build("tiny_cnn"))    # one linear layer: its head
    assert len(fake_torchao) == 1         # refused before torchao was called


def test_fp8_converts_before_the_strategy_wraps_the_model(fake_torchao, monkeypatch):
    from dlbench.models import get_model
    from dlbench.workloads import scaling
    events = []
    real = fp8.convert
    monkeypatch.setattr(fp8, "convert", lambda m: events.append("fp8") or real(m))
    monkeypatch.setattr(scaling, "shard", lambda m, precision, **kw: events.append("shard") or m)
    monkeypatch.setattr(scaling, "parallelize",
                        lambda m, device, tp, **kw: events.append("tp") or m)
    spec = get_model("tiny_llama")
    x, y = spec.make_batch(2, CPU, 32)
    for strategy in ("fsdp", "fsdp+tp"):
        scaling.wrap_strategy(ScalingConfig(base=base(), gpus=2, strategy=strategy, fp8=True),
                              spec, spec.build(32), x, y, CPU)
    assert events == ["fp8", "shard", "fp8", "tp"]


def test_without_torchao_fp8_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchao", None)     # `import torchao` raises ImportError
    monkeypatch.delitem(sys.modules, "torchao.float8", raising=False)
    with pytest.raises(ConfigError, match=r"pip install torchao \(a version matching your "
                                          r"torch\)"):
        fp8.check_installed()
    with pytest.raises(ConfigError, match="^fp8 needs torchao's float8 training"):
        fp8.convert(build("tiny_llama"))


def test_fp8_needs_an_ada_or_hopper_gpu(monkeypatch):
    with pytest.raises(UnsupportedError, match="^fp8: fp8 matmuls need an H100/Ada-class "
                                               "GPU.*on the CPU: drop fp8=True$"):
        fp8.check_device(CPU)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d: "NVIDIA A100-SXM4-80GB")
    with pytest.raises(UnsupportedError, match="A100-SXM4-80GB is sm_80"):
        fp8.check_device(torch.device("cuda", 0))
    for cap in ((8, 9), (9, 0), (10, 0)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d, c=cap: c)
        fp8.check_device(torch.device("cuda", 0))


@pytest.mark.slow
def test_fp8_on_the_cpu_is_an_unsupported_row():
    """A job asked for fp8 on the CPU: each rank refuses before building the model, and the
    job is a row saying why (torchao is not needed to say it)."""
    rec = launchers.torchrun(timeout_s=120).run(
        ScalingConfig(base=base(), gpus=2, strategy="fsdp", fp8=True), {})
    assert rec.status == "error" and rec.error_type == "unsupported"
    assert "fp8 matmuls need an H100/Ada-class GPU" in rec.error


# -- the command ---------------------------------------------------------------------------------
SCALE = ["scale", "-m", "tiny_llama", "-b", "2", "--gpus", "2", "--device", "cpu",
         "--optimizer", "adamw", "--min-steps", "3", "--min-time", "0", "--max-time", "2",
         "--warmup", "0"]


def test_cli_refuses_offload_with_ddp_saying_what_to_do(tmp_path, capfd):
    assert cli.main(SCALE + ["--db", str(tmp_path / "s.db"), "--offload"]) == 2
    err = capfd.readouterr().err
    assert "--offload" in err and "not ddp" in err and "use --strategy fsdp" in err
    assert not (tmp_path / "s.db").exists()                 # nothing ran


def test_cli_refuses_fp8_without_torchao_before_anything_starts(tmp_path, capfd, monkeypatch):
    monkeypatch.setitem(sys.modules, "torchao", None)
    monkeypatch.delitem(sys.modules, "torchao.float8", raising=False)
    assert cli.main(SCALE + ["--db", str(tmp_path / "s.db"), "--strategy", "fsdp",
                             "--fp8"]) == 2
    err = capfd.readouterr().err
    assert "--fp8 needs torchao's float8 training: pip install torchao" in err
    assert not (tmp_path / "s.db").exists()


def test_scale_help_names_the_levers(capsys):
    with pytest.raises(SystemExit):
        cli.main(["scale", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--offload" in out and "optimizer step then runs on the CPU" in out
    assert "--fp8" in out and "pip install torchao" in out


# -- on a GPU (skipped without one) --------------------------------------------------------------
@pytest.mark.gpu
def test_offload_and_fp8_train_on_a_gpu(tmp_path):
    """fsdp with --offload on one GPU (pinned host shards, the optimizer on the CPU), and with
    --fp8 where torchao and an sm_89+ GPU are there: finite losses."""
    gpu = base(device="auto", precision="bf16", batch_size=2)
    rec = launchers.torchrun(timeout_s=300).run(
        ScalingConfig(base=gpu, gpus=1, strategy="fsdp", offload=True), {})
    assert rec.ok, rec.error
    pytest.importorskip("torchao.float8")
    if torch.cuda.get_device_capability() < fp8.MIN_CAPABILITY:
        pytest.skip("fp8 matmuls need sm_89 or newer")
    rec = launchers.torchrun(timeout_s=300).run(
        ScalingConfig(base=gpu, gpus=1, strategy="fsdp", fp8=True), {})
    assert rec.ok, rec.error


# -- the offload ranks' CPU threads ----------------------------------------------------------------
def test_offload_ranks_share_the_hosts_cores_unless_the_user_chose():
    """Under --offload the optimizer step runs on the CPU: each rank gets its share of the
    cores, not torchrun's one thread; a user's OMP_NUM_THREADS and non-offload jobs are left
    alone."""
    from dlbench.launch.torchrun import offload_threads
    assert offload_threads(True, 2, {}, 64) == "32"
    assert offload_threads(True, 8, {}, 4) == "1"
    assert offload_threads(True, 2, {"OMP_NUM_THREADS": "3"}, 64) is None
    assert offload_threads(False, 2, {}, 64) is None

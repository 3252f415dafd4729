"""Tensor parallelism (``--strategy tp``, ``fsdp+tp``) and per-block compile on the CPU: real
gloo process groups through torchrun, tiny_llama, a few steps; the accounting on known numbers."""

import json
import math
import sqlite3
from dataclasses import replace

import pytest
import torch

from fakes import cli
from dlbench.config import ConfigError
from dlbench.jobs import launchers
from dlbench.measure.stopping import StopRule
from dlbench.records import record_from_dict
from dlbench.records.scaling import ScalingConfig, ScalingRecord
from dlbench.records.throughput import ThroughputConfig
from dlbench.workloads.devices import UnsupportedError

THREE = StopRule(min_steps=3, max_steps=3, min_seconds=0, max_seconds=60)
FAST = StopRule(min_steps=5, min_seconds=0.05, max_seconds=0.5, target_rel_ci=0.05)


def base(**kw):
    d = dict(model="tiny_llama", batch_size=2, device="cpu", warmup_steps=0, warmup_seconds=0,
             stop=THREE, optimizer="adamw")
    d.update(kw)
    return ThroughputConfig(**d)


def _same(a, b):
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-5, msg=name)


# -- real gloo jobs (conftest.llama_job: base()'s config) ----------------------------------------
@pytest.mark.slow
def test_tp_trains_to_the_parameters_of_one_process(llama_job):
    """Two ranks split each block (q/k/v, gate/up colwise; o, down rowwise) and feed the same
    batch: after the steps the whole parameters are one process's, and the job counts that
    batch once."""
    params, rec = llama_job("tp", 2)
    ref, one = llama_job("ddp", 1)     # tiny_llama trained by one process on replica 0's batch
    _same(params, ref)
    assert rec.final_loss == pytest.approx(one.final_loss, rel=1e-5)
    assert rec.config.tp == 2 and rec.config.label.endswith("x2 tp")
    assert rec.rank_samples_per_step == (2, 2)   # each rank fed the batch...
    assert rec.samples_per_step == 2             # ...which is trained on once
    s = rec.summary()
    assert s.samples == 2 * len(rec.step_times_s)


@pytest.mark.slow
def test_fsdp_tp_on_two_ranks_is_one_tp_group(llama_job):
    """fsdp+tp on 2 processes: a (dp=1, tp=2) mesh, FSDP2 over the dp dimension of one rank."""
    params, rec = llama_job("fsdp+tp", 2)
    _same(params, llama_job("ddp", 1)[0])
    assert rec.config.tp == 2 and rec.config.label.endswith("x2 fsdp+tp tp=2")
    assert rec.samples_per_step == 2


@pytest.mark.slow
def test_fsdp_tp_on_four_ranks_trains_as_ddp_on_two(llama_job):
    """A (dp=2, tp=2) mesh: two replicas, each a TP group feeding its replica's batch, FSDP2
    across them, give the parameters DDP's two ranks do; 4 sequences a step, not 8."""
    sharded, rec = llama_job("fsdp+tp", 4)
    ddp, _ = llama_job("ddp", 2)
    _same(sharded, ddp)
    assert rec.rank_samples_per_step == (2, 2, 2, 2)
    assert rec.counted_samples_per_step() == (2, 0, 2, 0) and rec.samples_per_step == 4


@pytest.mark.slow
def test_an_unsupported_layout_is_an_error_row_naming_the_supported_models():
    rec = launchers.torchrun(timeout_s=120).run(
        ScalingConfig(base=base(model="tiny_gpt2"), gpus=2, strategy="tp"), {})
    assert rec.status == "error" and rec.error_type == "unsupported"
    assert "GPT2LMHeadModel" in rec.error and "llama-3.2-1b" in rec.error
    assert "self_attn.q_proj" in rec.error


@pytest.mark.slow
def test_tp_through_the_cli_stores_a_record(tmp_path):
    db = str(tmp_path / "s.db")
    p = cli.run("scale", "-m", "tiny_llama", "-b", "2", "--gpus", "2", "--strategy", "tp",
                "--optimizer", "adamw", "--device", "cpu", "--db", db, "--json",
                "--min-steps", "3", "--min-time", "0", "--max-time", "0.2", "--warmup", "1",
                "--warmup-time", "0")
    assert p.returncode == 0, p.stderr[-3000:]
    [rec] = [record_from_dict(d) for d in json.loads(p.stdout)]
    assert rec.ok and rec.config.strategy == "tp" and rec.config.tp == 2
    assert math.isfinite(rec.final_loss)
    # 2 sequences of 32 tokens a step in all: the slowest rank's window, not x 2 ranks
    s = rec.summary()
    assert s.throughput == pytest.approx(2 * len(rec.step_times_s) / sum(rec.step_times_s))
    assert rec.units_per_s() == pytest.approx(s.throughput * 32)
    with sqlite3.connect(db) as con:
        [(n,)] = con.execute("SELECT count(*) FROM results").fetchall()
    assert n == 1


# -- accounting on known numbers -----------------------------------------------------------------
def _rec(strategy, gpus, step_s, **kw):
    b = ThroughputConfig(model="llama-3.2-1b", batch_size=2, input_size=2048, precision="bf16",
                         optimizer="adamw", stop=FAST)
    env = {"accelerator": "cuda", "gpus": [{"name": "NVIDIA H100 80GB HBM3"}]}
    return ScalingRecord(config=ScalingConfig(base=b, gpus=gpus, strategy=strategy, **kw),
                         env=env, rank_step_times_s=((step_s,) * 10,) * gpus,
                         rank_samples_per_step=(2,) * gpus, unit="tokens",
                         units_per_sample=2048, flops_per_sample=int(6e9 * 2048))


def test_tp_does_not_count_a_batch_once_per_gpu():
    """2 GPUs of one TP group train 2 sequences per 0.5 s step: 4 sequences/s, 8,192 tokens/s
    in all and 4,096 per GPU; DDP's 2 GPUs train 4 distinct sequences per step."""
    from dlbench.report.strategy_tables import per_gpu_tflops, strategy_table
    tp, ddp = _rec("tp", 2, 0.5), _rec("ddp", 2, 0.5)
    assert tp.samples_per_step == 2 and ddp.samples_per_step == 4
    assert tp.summary().throughput == pytest.approx(4.0)
    assert ddp.summary().throughput == pytest.approx(8.0)
    assert tp.units_per_s() == pytest.approx(8192)
    assert per_gpu_tflops(tp) == pytest.approx(6e9 * 4096 / 1e12)
    two_d = _rec("fsdp+tp", 4, 0.5, tp=2)     # 2 replicas of 2 GPUs
    assert two_d.counted_samples_per_step() == (2, 0, 2, 0)
    assert two_d.summary().throughput == pytest.approx(8.0)
    rows = strategy_table([tp, ddp, two_d]).rows
    assert [r[3] for r in rows] == ["tp", "ddp", "fsdp+tp tp=2"]
    assert [r[7:9] for r in rows] == [("8,192", "4,096"), ("16,384", "8,192"),
                                      ("16,384", "4,096")]
    back = record_from_dict(two_d.to_dict())
    assert back == two_d and back.summary().throughput == pytest.approx(8.0)


def test_tp_configs_check_and_resolve_their_degree():
    assert ScalingConfig(base=base(), gpus=4, strategy="tp").tp == 4
    assert ScalingConfig(base=base(), gpus=8, strategy="fsdp+tp").tp == 2       # the default
    assert ScalingConfig(base=base(), gpus=3, strategy="fsdp+tp").tp == 1
    assert ScalingConfig(base=base(), gpus=8, strategy="fsdp+tp", tp=4).replicas == 2
    assert ScalingConfig(base=base(), gpus=2).tp is None
    with pytest.raises(ConfigError, match="^tp applies to strategy fsdp\\+tp"):
        ScalingConfig(base=base(), gpus=2, strategy="ddp", tp=2)
    with pytest.raises(ConfigError, match="divide the GPUs per host"):
        ScalingConfig(base=base(), gpus=4, strategy="fsdp+tp", tp=3)
    with pytest.raises(ConfigError, match="one host"):
        ScalingConfig(base=base(), gpus=4, nnodes=2, strategy="fsdp+tp", tp=4)
    with pytest.raises(ConfigError, match='across hosts use strategy="fsdp\\+tp"'):
        ScalingConfig(base=base(), gpus=4, nnodes=2, strategy="tp")
    with pytest.raises(ConfigError, match="fp16"):
        ScalingConfig(base=base(precision="fp16"), gpus=2, strategy="tp")
    # A record of a data-parallel strategy keeps the key it had before tp (and the levers
    # --offload, --fp8) existed.
    from dlbench.records.base import config_key
    c = ScalingConfig(base=base(), gpus=2)
    d = {k: v for k, v in c.to_dict().items()
         if k not in ("tp", "offload", "fp8", "comm_profile_steps")}
    d["base"] = c.base.key()
    assert c.key() == config_key(d)


def test_unknown_layouts_and_degrees_are_refused_before_any_collective():
    from dlbench.models import get_model
    from dlbench.workloads.tp import tp_blocks
    with pytest.raises(UnsupportedError, match="llama-3.1-8b"):
        tp_blocks(get_model("tiny_gpt2").build(32), 2)
    with pytest.raises(UnsupportedError, match="tiny_llama"):
        tp_blocks(get_model("tiny_cnn").build(32), 2)
    llama = get_model("tiny_llama").build(32)
    assert len(tp_blocks(llama, 2)) == 2
    with pytest.raises(UnsupportedError, match="2 key/value heads"):  # 4 heads, 2 kv heads
        tp_blocks(llama, 4)


# -- per-block compile ---------------------------------------------------------------------------
def test_fsdp_compiles_each_block_before_sharding(monkeypatch):
    """--compile under fsdp compiles each block's forward, then shards; the root is left
    eager. A model with no stack of blocks is compiled whole after sharding, as before."""
    from dlbench.models import get_model
    from dlbench.workloads import scaling
    from dlbench.workloads.fsdp import repeated_blocks
    events = []

    def fake_compile(fn, mode=None):
        events.append(("compile", getattr(fn, "__self__", fn), mode))
        return fn
    monkeypatch.setattr(torch, "compile", fake_compile)
    monkeypatch.setattr(scaling, "shard",
                        lambda m, precision, **kw: events.append(("shard", m)) or m)
    spec = get_model("tiny_llama")
    cfg = ScalingConfig(base=base(compile="max-autotune"), gpus=2, strategy="fsdp")
    model = spec.build(32)
    x, y = spec.make_batch(2, torch.device("cpu"), 32)
    scaling.wrap_strategy(cfg, spec, model, x, y, torch.device("cpu"))
    blocks = repeated_blocks(model)
    assert events == [("compile", b, "max-autotune") for b in blocks] + [("shard", model)]
    assert all(b.__dict__["forward"] for b in blocks)           # the instance's own forward
    names = {n for n, _ in model.named_parameters()}
    assert not any("_orig_mod" in n for n in names)             # names as an eager model's

    events.clear()
    cnn = get_model("tiny_cnn")
    model = cnn.build(32)
    x, y = cnn.make_batch(2, torch.device("cpu"), 32)
    scaling.wrap_strategy(replace(cfg, base=base(model="tiny_cnn", compile="default")), cnn,
                          model, x, y, torch.device("cpu"))
    assert events == [("shard", model), ("compile", model, "default")]


def test_an_optimizer_steps_dtensor_shards_and_plain_tensors_together():
    """A tensor-parallel model mixes DTensor shards (its blocks' matmuls) with whole tensors
    (embeddings, norms): the foreach kernels a GPU's optimizer uses by default take one kind
    per call ("got mixed torch.Tensor and DTensor" on two H200s), so each kind is a group."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    from dlbench.workloads.throughput import make_optimizer

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        shard = torch.nn.Parameter(distribute_tensor(torch.ones(4, 4), mesh, [Shard(0)]))
        whole = torch.nn.Parameter(torch.ones(4))
        opt = make_optimizer("adamw", [shard, whole], "foreach")
        assert [len(g["params"]) for g in opt.param_groups] == [1, 1]
        (shard.full_tensor().sum() + whole.sum()).backward()
        opt.step()
        assert shard.full_tensor().max() < 1 and whole.max() < 1
    finally:
        dist.destroy_process_group()


def test_measured_mfu_takes_the_ceiling_of_a_card_the_run_used():
    """A store merging two hosts' runs: each run's measured MFU is against its own host's peak
    run (the card a peak run measured is among the run's cards), not the latest of the model;
    a run with no peak of its own host falls back to the latest of its GPU model."""
    from dlbench.records.peak import PeakConfig, PeakRecord
    from dlbench.report.strategy_tables import strategy_table

    def host(*uuids):
        return {"accelerator": "cuda",
                "gpus": [{"name": "NVIDIA H100 80GB HBM3", "uuid": u} for u in uuids]}

    def peak(tflops, env, run_id):
        return PeakRecord(config=PeakConfig("matmul", precision="bf16", shape=(8, 8, 8)),
                          env=env, times_s=(1.0, 1.0, 1.0), work=tflops * 1e12, run_id=run_id)
    a, b, c = host("GPU-a0", "GPU-a1"), host("GPU-b0", "GPU-b1"), host("GPU-c0", "GPU-c1")
    runs = [replace(_rec("ddp", 2, 0.5), env=env) for env in (a, b, c)]
    per_gpu = 6e9 * 8192 / 1e12                  # TFLOP/s per GPU of each run
    peaks = [peak(800.0, a, "peak-a"), peak(700.0, b, "peak-b")]   # b's is the latest
    rows = strategy_table(runs, peaks)
    col = rows.columns.index("MFU (measured)")
    assert [r[col] for r in rows.rows] == [f"{per_gpu / 800:.1%}", f"{per_gpu / 700:.1%}",
                                           f"{per_gpu / 700:.1%}"]

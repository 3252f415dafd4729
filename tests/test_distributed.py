"""Scaling across processes on the CPU: a real 2-process gloo group through torchrun."""

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from fakes import cli
from dlbench.config import ConfigError
from dlbench.jobs import launchers
from dlbench.launch import forking
from dlbench.launch.interconnect import SAFETY_ENV, interconnect_env
from dlbench.launch.torchrun import Rendezvous, free_port, slurm_settings
from dlbench.measure.stats import aggregate
from dlbench.measure.stopping import StopRule
from dlbench.records import record_from_dict
from dlbench.records.scaling import ScalingConfig, ScalingRecord, scaling_efficiency, scaling_factor
from dlbench.records.throughput import ThroughputConfig
from dlbench.report.tables import interconnect_table, scaling_table
from dlbench.workloads.ps import assign_shards

SRC = str(Path(__file__).resolve().parents[1] / "src")
FAST = StopRule(min_steps=5, min_seconds=0.05, max_seconds=0.5, target_rel_ci=0.05)


def base(**kw):
    d = dict(model="tiny_cnn", batch_size=4, device="cpu", warmup_steps=1, warmup_seconds=0,
             stop=FAST)
    d.update(kw)
    return ThroughputConfig(**d)


# -- pure arithmetic -----------------------------------------------------------------------------
def test_aggregate_is_total_samples_over_slowest_rank():
    s = aggregate([[0.1, 0.1, 0.1], [0.2, 0.1, 0.1]], [4, 4])
    assert s.samples == 24 and s.total_s == pytest.approx(0.4)
    assert s.throughput == pytest.approx(24 / 0.4)   # not the mean of 40 and 30 img/s per rank
    with pytest.raises(ValueError):
        aggregate([[0.1, 0.1], [0.1]], [4, 4])


def test_factor_and_efficiency_arithmetic():
    # the tf_cnn_benchmarks study, ResNet50 fp16: 1046.94 -> 2047.45 (1.96) -> 4066.72 (3.88)
    assert round(scaling_factor(2047.45, 1046.94), 2) == 1.96
    assert round(scaling_factor(4066.72, 1046.94), 2) == 3.88
    assert scaling_efficiency(scaling_factor(4066.72, 1046.94), 4) == pytest.approx(0.9711, abs=1e-4)
    assert scaling_efficiency(2.0, 2) == 1.0


def _rec(gpus, step, profile="default", strategy="ddp"):
    cfg = ScalingConfig(base=base(), gpus=gpus, strategy=strategy, interconnect=profile)
    return ScalingRecord(config=cfg, env={}, rank_step_times_s=((step,) * 4,) * gpus,
                         rank_samples_per_step=(4,) * gpus, unit="images")


def test_scaling_and_interconnect_tables():
    recs = [_rec(1, 0.010), _rec(2, 0.0104), _rec(2, 0.0125, "no-p2p")]
    t = scaling_table(recs)
    row = t.rows[0]
    assert row[:4] == ("tiny_cnn", "fp32", "ddp", "4")
    assert row[4] == "400.0" and row[5].endswith("(1.92)") and row[6] == "96.2% at 2"
    ab = interconnect_table(recs)
    assert "default 2G" in ab.columns and "no-p2p 2G" in ab.columns
    cell = ab.rows[0][ab.columns.index("no-p2p 2G")]
    assert cell.endswith("(0.832)")  # 0.0104 / 0.0125
    assert "default 1G" not in ab.columns  # no other profile was measured on 1 GPU
    # The report and `results show` lay a store's records out the same way: one scaling table
    # per profile, and the A/B table.
    from dlbench.report.tables import tables_for
    titles = [t.title for t in tables_for(recs, "")]
    assert sum("by GPU count" in t for t in titles) == 2 and any("Interconnect" in t for t in titles)
    # with telemetry, the data-parallel energy table: one row per run, labelled with its GPUs
    from dataclasses import replace
    tele = {"summary": {"gpus": [{"mean_sm_clock_mhz": 1980.0, "throttle": {"flags": []}}] * 2,
                        "total": {"energy_j": 600.0, "mean_power_w": 1200.0,
                                  "j_per_sample": 0.5, "methods": ["counter"]},
                        "throttled": []}}
    tables = tables_for([replace(r, telemetry=tele) for r in recs], "")
    energy = next(t for t in tables if t.title.startswith("Energy"))
    assert energy.rows[0][0] == "tiny_cnn x1 ddp" and energy.rows[1][0] == "tiny_cnn x2 ddp"
    assert energy.rows[0][energy.columns.index("J/sample")] == "0.500"


def test_records_round_trip_through_the_registry():
    r = _rec(2, 0.01)
    back = record_from_dict(r.to_dict())
    assert isinstance(back, ScalingRecord) and back == r and back.headline() == r.headline()


def test_safety_variables_always_and_profiles():
    assert interconnect_env("default") == SAFETY_ENV
    e = interconnect_env("no-p2p+no-shm")
    assert e["NCCL_P2P_DISABLE"] == "1" and e["NCCL_SHM_DISABLE"] == "1"
    assert e["NCCL_NVLS_ENABLE"] == "0" and e["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    with pytest.raises(ConfigError, match="^interconnect must be one of"):
        interconnect_env("nvlink-turbo")
    with pytest.raises(ConfigError, match="^strategy must be one of"):
        ScalingConfig(base=base(), gpus=2, strategy="horovod")


def test_slurm_settings_and_rendezvous_args():
    s = slurm_settings({"SLURM_JOB_ID": "77", "SLURM_NNODES": "2", "SLURM_NODEID": "1",
                        "MASTER_ADDR": "n01", "MASTER_PORT": "29400"})
    assert s == {"run_id": "slurm-77", "nnodes": 2, "node_rank": 1, "endpoint": "n01:29400"}
    assert slurm_settings({}) == {}
    args = Rendezvous(**s).args(8)
    assert args[args.index("--rdzv-endpoint") + 1] == "n01:29400" and "--standalone" not in args
    assert Rendezvous().args(2)[:1] == ["--standalone"]


def test_shards_balance_bytes():
    owners = assign_shards([100, 10, 10, 90, 5], 2)
    load = [sum(s for s, o in zip([100, 10, 10, 90, 5], owners) if o == r) for r in range(2)]
    assert sorted(load) == [105, 110]  # greedy by size: {100, 10} and {90, 10, 5}


# -- real 2-process gloo jobs ------------------------------------------------------------------
@pytest.mark.slow
def test_ps_and_ddp_give_the_same_parameters(tmp_path):
    k = StopRule(min_steps=3, max_steps=3, min_seconds=0, max_seconds=60)
    cfg = base(model="tiny_mlp", input_size=8, warmup_steps=0, stop=k)
    params = {}
    for strategy in ("ddp", "ps"):
        out = str(tmp_path / f"{strategy}.pt")
        rec = launchers.torchrun(timeout_s=120).run(ScalingConfig(base=cfg, gpus=2,
                                                                strategy=strategy), {},
                                                  params_out=out)
        assert rec.ok, rec.error
        assert [len(t) for t in rec.rank_step_times_s] == [3, 3]
        params[strategy] = torch.load(out)
        assert rec.telemetry is None  # gloo on the CPU: no sampler thread in the ranks
    assert params["ddp"].keys() == params["ps"].keys()
    for name in params["ddp"]:
        torch.testing.assert_close(params["ps"][name], params["ddp"][name], rtol=1e-5, atol=1e-6)
    # and they moved: 1 + 3 SGD steps changed the weights
    from dlbench.models import get_model
    torch.manual_seed(0)
    fresh = dict(get_model("tiny_mlp").build(8).named_parameters())
    assert not torch.allclose(fresh["net.1.weight"], params["ddp"]["net.1.weight"])


@pytest.mark.slow
def test_a_rank_that_raises_ends_the_job_with_its_traceback():
    t = time.perf_counter()
    rec = launchers.torchrun(timeout_s=120, pg_timeout_s=60).run(
        ScalingConfig(base=base(stop=StopRule(min_steps=5, max_seconds=60, min_seconds=30)),
                      gpus=2), {}, fail_rank=1, fail_at_step=2)
    took = time.perf_counter() - t
    assert rec.status == "error" and rec.failed_rank == 1
    assert "failure injected on rank 1" in rec.error and 'File "' in rec.error  # its traceback
    assert "scaling.py" in rec.error                 # the frame that raised
    assert took < 45, took                           # not the 60 s collective timeout


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "ps"])
def test_ranks_agree_on_the_warm_up_when_one_host_is_slower(strategy):
    # Rank 1 sleeps after each warm-up step, so its clock passes --warmup-time a step before
    # rank 0's; a warm-up ended by each rank's own clock leaves rank 0 in a collective rank 1
    # never joins (VGG-16 with ps on two H200s hung until the group's timeout).
    k = StopRule(min_steps=3, max_steps=3, min_seconds=0, max_seconds=30)
    cfg = base(model="tiny_mlp", input_size=8, warmup_steps=1, warmup_seconds=0.5, stop=k)
    rec = launchers.torchrun(timeout_s=90, pg_timeout_s=30).run(
        ScalingConfig(base=cfg, gpus=2, strategy=strategy), {}, lag_rank=1, lag_s=0.12)
    assert rec.ok, rec.error
    assert [len(t) for t in rec.rank_warmup_times_s] == [len(rec.rank_warmup_times_s[0])] * 2
    assert len(rec.rank_warmup_times_s[0]) >= 2


# A rank of a 2-process gloo group started by hand (not through torchrun), so that the test can
# give measure_rank slow steps.
_SLOW_RANK = """
import json, os, sys
import torch, torch.distributed as dist
torch.set_num_threads(1)
from dlbench.records.scaling import ScalingConfig
from dlbench.workloads.scaling import measure_rank
dist.init_process_group("gloo")
res = measure_rank(ScalingConfig.from_dict(json.loads(sys.argv[1])), 0, dist.group.WORLD,
                   step_lag_s=float(sys.argv[2]))
print(json.dumps({k: res[k] for k in ("rank", "step_times_s", "warmup_times_s",
                                      "window_wall_s", "stop_reason")}), flush=True)
# Both ranks done, then out without tearing gloo down: its teardown at interpreter exit now and
# then aborts ("terminate called without an active exception"), which is not what is tested.
dist.barrier()
os._exit(0)
"""


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "ps"])
def test_a_slow_step_cannot_overrun_max_time_in_scaling(strategy):
    # Every step sleeps 60 ms on both ranks (a model at its memory boundary, scaled down): the
    # window must end at the first agreed check past --max-time, both ranks at the same step.
    # On the CPU a step is done when it returns, so no queue lies behind it; on a GPU the
    # window's bounded queue adds at most its depth (tests/test_window.py).
    from dlbench.measure.window import check_every
    lag, cap = 0.06, 0.6
    # sleeps jitter, and no interval reaches 1e-9: the cap ends the window (a huge minimum,
    # which wins over the cap, would not let it)
    stop = StopRule(min_steps=2, max_steps=100_000, min_seconds=0, max_seconds=cap,
                    target_rel_ci=1e-9)
    cfg = ScalingConfig(base=base(model="tiny_mlp", input_size=8, warmup_steps=2, stop=stop),
                        gpus=2, strategy=strategy)
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="1", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()))
    # two ranks, each forked by the test session's fork server (tests/conftest.py) where it
    # runs one: what is tested is the window both run, not their interpreters' start
    procs = [subprocess.Popen([sys.executable, *forking.python_args(
                                   "-c", _SLOW_RANK, json.dumps(cfg.to_dict()), str(lag))],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=dict(env, RANK=str(r))) for r in (0, 1)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    r0, r1 = (json.loads(out.strip().splitlines()[-1]) for out, _ in outs)
    times = r0["step_times_s"]
    assert r0["stop_reason"] == r1["stop_reason"] == "time_cap"
    assert len(times) == len(r1["step_times_s"])     # the ranks stopped at the same step
    assert min(times) >= lag
    # Rank 0 asks the rule every `every` steps; the check before the last one found the
    # window's time under the cap, so at most `every` steps ran past it (a step-count bound,
    # which a loaded machine cannot break: slower steps only mean fewer of them).
    every = check_every(r0["warmup_times_s"])
    assert every <= 2                                # 0.1 s of 60 ms steps (or fewer)
    assert sum(times[:-every]) < cap + 0.01
    assert len(times) <= math.ceil(cap / lag) + every


def _cli(*args: str) -> subprocess.Popen:
    """``dlbench ARGS`` in a process of its own, left running: forked by the test session's
    fork server where it runs one (tests/conftest.py), as ``python -m dlbench`` otherwise."""
    return subprocess.Popen([sys.executable, *forking.python_args("-m", "dlbench", *args)],
                            env=cli.child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_two_nodes_on_localhost_through_the_cli(tmp_path):
    port = free_port()
    common = ["scale", "-m", "tiny_cnn", "-b", "4", "--gpus", "1", "--device", "cpu",
              "--nnodes", "2", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "t2n",
              "--warmup", "1", "--warmup-time", "0", "--min-steps", "5", "--min-time", "0.05",
              "--max-time", "0.5", "--target-ci", "0.05", "--json", "-q"]
    procs = [_cli(*common, "--node-rank", str(r), "--db", str(tmp_path / f"n{r}.db"))
             for r in (0, 1)]
    outs = [p.communicate(timeout=150) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    import json
    docs = [json.loads(o)[0] for o, _ in outs]
    for d in docs:
        assert d["config"]["gpus"] == 2 and d["config"]["nnodes"] == 2
        assert len(d["rank_step_times_s"]) == 2 and d["summary"]["samples_per_s"] > 0
    # both hosts store the same job: the same raw samples
    assert docs[0]["rank_step_times_s"] == docs[1]["rank_step_times_s"]


def test_scale_help_teaches_multinode_and_slurm():
    p = cli.run("scale", "--help")
    out = p.stdout
    assert p.returncode == 0
    for text in ("examples:", "--nnodes N --node-rank R --rdzv-endpoint HOST:PORT", "srun",
                 "SLURM_NODEID", "NCCL_NVLS_ENABLE=0", "gloo"):
        assert text in out, text


@pytest.mark.gpu
def test_ddp_on_two_gpus():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    rec = launchers.torchrun(timeout_s=300).run(
        ScalingConfig(base=base(device="auto", precision="bf16"), gpus=2), {})
    assert rec.ok, rec.error and rec.backend == "nccl"
    assert rec.launch_env["NCCL_NVLS_ENABLE"] == "0"
    # both GPUs sampled by local rank 0, energy summed over them
    summ = rec.telemetry["summary"]
    assert len(summ["gpus"]) == 2 and summ["total"]["energy_j"] > 0
    assert summ["total"]["j_per_sample"] is not None


def test_dataparallel_replicas_autocast_to_the_runs_dtype_in_their_own_threads():
    # nn.DataParallel's worker threads re-enter autocast without the caller's dtype; the
    # wrapper enters it with the run's dtype inside each replica (here: a fresh thread).
    import threading

    import torch

    from dlbench.workloads.scaling import ReplicaAutocast
    out = {}
    model = ReplicaAutocast(torch.nn.Linear(8, 8), "fp16")
    plain = torch.nn.Linear(8, 8)

    def replica():
        x = torch.randn(2, 8)
        out["wrapped"] = model(x).dtype
        with torch.autocast("cpu", enabled=True):  # as parallel_apply does: no dtype
            out["plain"] = plain(x).dtype
    t = threading.Thread(target=replica)
    t.start()
    t.join()
    assert out["wrapped"] == torch.float16
    assert out["plain"] != torch.float16   # the thread's default, not the run's fp16
    assert ReplicaAutocast(torch.nn.Linear(8, 8), "fp32")(torch.randn(2, 8)).dtype == torch.float32


@pytest.mark.slow
@pytest.mark.parametrize("checkpointing", [None, "full", "selective"])
def test_fsdp_and_ddp_give_the_same_parameters(checkpointing, llama_job):
    """FSDP2 (parameters, gradients and optimizer state sharded over 2 gloo ranks, each block of
    the model's stack a unit) trains to the very parameters DDP does, in fp32; with activation
    checkpointing under FSDP too, either policy (recomputation changes no result). DDP's job,
    without checkpointing, is the one reference of all three."""
    params = {}
    for strategy in ("ddp", "fsdp"):
        params[strategy], rec = llama_job(strategy, 2,
                                          checkpointing if strategy == "fsdp" else None)
        assert [len(t) for t in rec.rank_step_times_s] == [3, 3]
        assert rec.config.label.endswith("x2 " + strategy)
    assert params["ddp"].keys() == params["fsdp"].keys()
    for name in params["ddp"]:
        torch.testing.assert_close(params["fsdp"][name], params["ddp"][name], rtol=1e-4,
                                   atol=1e-5)


def test_fsdp_shards_each_block_of_the_stack():
    from dlbench.models import get_model
    from dlbench.workloads.fsdp import repeated_blocks
    gpt = get_model("tiny_gpt2").build(32)
    blocks = repeated_blocks(gpt)
    assert len(blocks) == 2 and all(type(b).__name__ == "GPT2Block" for b in blocks)
    llama = repeated_blocks(get_model("tiny_llama").build(32))
    assert [type(b).__name__ for b in llama] == ["LlamaDecoderLayer"] * 2
    assert repeated_blocks(get_model("tiny_cnn").build(32)) == []  # one unit: the root


@pytest.mark.slow
def test_fsdp_in_bf16_through_the_cli(tmp_path):
    db = str(tmp_path / "s.db")
    p = cli.run("scale", "-m", "tiny_llama", "-b", "2", "--gpus", "2", "--strategy", "fsdp",
                "--precision", "bf16", "--optimizer", "adamw", "--device", "cpu", "--db", db,
                "--json", "--min-steps", "3", "--min-time", "0", "--max-time", "0.2",
                "--warmup", "1", "--warmup-time", "0")
    assert p.returncode == 0, p.stderr[-3000:]
    [rec] = [record_from_dict(d) for d in json.loads(p.stdout)]
    assert rec.ok and rec.config.strategy == "fsdp" and rec.config.base.precision == "bf16"
    assert rec.summary().throughput > 0 and math.isfinite(rec.final_loss)


def test_strategy_table_per_gpu_figures_and_mfu():
    """Known numbers: 2 ranks of 2 sequences of 2048 tokens in 0.5 s steps on H100s."""
    from dlbench.report.strategy_tables import strategy_table
    env = {"accelerator": "cuda", "gpus": [{"name": "NVIDIA H100 80GB HBM3"}]}
    b = ThroughputConfig(model="llama-3.2-1b", batch_size=2, input_size=2048, precision="bf16",
                         optimizer="adamw", stop=FAST)
    flops = 6e9 * 2048  # per sequence: 6 GFLOPs a token

    def rec(strategy, gpus, step_s):
        return ScalingRecord(config=ScalingConfig(base=b, gpus=gpus, strategy=strategy),
                             env=env, rank_step_times_s=((step_s,) * 10,) * gpus,
                             rank_samples_per_step=(2,) * gpus, unit="tokens",
                             units_per_sample=2048, flops_per_sample=flops,
                             memory={"allocated_peak_bytes": 30 * 2**30})
    table = strategy_table([rec("fsdp", 1, 0.25), rec("fsdp", 2, 0.5)])
    one, two = table.rows
    assert one[1:7] == ("2048", "bf16", "fsdp", "-", "1", "2")
    assert one[7:10] == ("16,384", "16,384", "98.3")   # 2 x 2048 / 0.25 s; 6e9 x 16,384
    assert two[7:9] == ("16,384", "8,192")             # 2 ranks x 4,096 tokens / 0.5 s
    assert two[10] == f"{6e9 * 8192 / 1e12 / 989.5:.1%}"  # H100 SXM's dense bf16 peak
    assert two[12] == "30.0" and two[13].startswith("1.00")

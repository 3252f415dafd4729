"""``dlbench scale``: data-parallel training throughput at several GPU counts, strategies and
interconnect profiles; seed 000's scaling and NVLink tables."""

from __future__ import annotations

import argparse
import os
import sys
import time

from dlbench.commands.common import (EXIT_FAILED_RESULTS, EXIT_INTERRUPTED, EXIT_OK,
                                     add_sweep_flags, batch_size, compile_mode, csv_list, flatten,
                                     on_off)

ORDER = 20

MULTINODE = """\
several hosts: run the same command on every host, adding
  --nnodes N --node-rank R --rdzv-endpoint HOST:PORT     (HOST = any one of the hosts)
dlbench starts one torchrun agent per host (torch.distributed.run --nnodes N --node-rank R
--rdzv-backend c10d --rdzv-endpoint HOST:PORT); --gpus is then GPUs per host. Every host's
--db receives the whole job's record (all ranks' step times).
Slurm: one task per node, e.g. in an sbatch script
  export MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n1) MASTER_PORT=29500
  srun --ntasks-per-node 1 dlbench scale -m resnet50 --gpus 8 --slurm --db run-$SLURM_NODEID.db
--slurm reads SLURM_NNODES, SLURM_NODEID, SLURM_JOB_ID and MASTER_ADDR:MASTER_PORT.
dlbench never turns NVLink multicast on: every rank gets NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "scale", help="training throughput over GPU counts: ddp, dp, ps; interconnect A/B",
        description="Weak scaling as seed 000 measured it: the batch is per GPU, and the figure "
                    "is all GPUs' samples over the slowest rank's window time. Each config runs "
                    "as a fresh torchrun job (python -m torch.distributed.run), one process per "
                    "GPU (dp: one process driving every GPU). Without CUDA, --gpus counts gloo "
                    "processes on the CPU.",
        epilog="examples:\n"
               "  dlbench scale -m resnet50,inception_v3 --gpus 1,2 --precision fp16\n"
               "  dlbench scale -m resnet50 --gpus 1,2 --strategy ddp,dp,ps --precision bf16\n"
               "  dlbench scale -m vgg16 --gpus 2 --interconnect default,no-p2p,no-p2p+no-shm\n"
               "  dlbench scale -m tiny_cnn -b 8 --gpus 1,2 --device cpu     (gloo, on a CPU)\n\n"
               "strategies: ddp = DistributedDataParallel (--bucket-mb); dp = nn.DataParallel "
               "(one process, seed 003); ps = synchronous parameter server (gradients reduced to "
               "each shard's owner rank, which updates it and broadcasts it back; seed 004).\n"
               "interconnect profiles: default; no-p2p (NCCL_P2P_DISABLE=1: no NVLink/PCIe P2P); "
               "no-shm (NCCL_SHM_DISABLE=1); no-p2p+no-shm; no-ib (NCCL_IB_DISABLE=1).\n\n"
               + MULTINODE + "\n\nexit codes: 0 all ok; 2 usage error; 3 some results are "
               "failures (stored as rows); 130 interrupted (results so far are kept).",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", action="append", type=csv_list(), required=True,
                   help="model name(s); 'dlbench models' lists them")
    p.add_argument("-b", "--batch-size", action="append", type=csv_list(batch_size),
                   help="batch size(s) per GPU; 'default' = the model's GPU default (default)")
    p.add_argument("--gpus", action="append", type=csv_list(int),
                   help="GPU counts (per host with --nnodes); default: 1 and every visible GPU. "
                        "Without CUDA: gloo processes")
    p.add_argument("--strategy", action="append", type=csv_list(),
                   help="ddp (default), dp, ps")
    p.add_argument("--interconnect", action="append", type=csv_list(),
                   help="default, no-p2p, no-shm, no-p2p+no-shm, no-ib (default: default)")
    p.add_argument("--precision", action="append", type=csv_list(),
                   help="fp32, tf32, fp16 (autocast+GradScaler), bf16 (default: fp32)")
    p.add_argument("--compile", action="append", type=csv_list(compile_mode),
                   help="none (default) or a torch.compile mode")
    p.add_argument("--channels-last", action="append", type=csv_list(on_off), help="on/off")
    p.add_argument("--optimizer", choices=("sgd", "adamw"), default="sgd")
    p.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket size, MiB (25)")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto",
                   help="auto = nccl on GPUs, gloo on the CPU")
    p.add_argument("--device", default="auto", help="auto (default) or cpu")
    p.add_argument("--seq-len", "--input-size", dest="input_size", type=int)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--warmup-time", type=float, default=1.0)
    p.add_argument("--min-steps", type=int, default=20)
    p.add_argument("--min-time", type=float, default=2.0)
    p.add_argument("--max-time", type=float, default=15.0)
    p.add_argument("--max-steps", type=int, default=100_000)
    p.add_argument("--target-ci", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=900.0,
                   help="seconds one config's job may take in all, start-up included (900)")
    p.add_argument("--pg-timeout", type=float, default=120.0,
                   help="seconds one collective may wait for a peer (process-group timeout, 120)")
    add_dist_flags(p)
    add_sweep_flags(p)
    p.set_defaults(handler=cmd_scale)


def add_dist_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nnodes", type=int, default=1, help="hosts in the job (default 1)")
    p.add_argument("--node-rank", type=int, default=0, help="this host's index, 0..N-1")
    p.add_argument("--rdzv-endpoint", metavar="HOST:PORT",
                   help="rendezvous (c10d store) address for --nnodes > 1")
    p.add_argument("--rdzv-id", default="dlbench", help="job id shared by the hosts")
    p.add_argument("--slurm", action="store_true",
                   help="take --nnodes, --node-rank, --rdzv-* from Slurm's environment")


def rendezvous(args: argparse.Namespace):
    from dlbench.config import ConfigError
    from dlbench.launch.torchrun import Rendezvous, slurm_settings
    kw = dict(nnodes=args.nnodes, node_rank=args.node_rank, endpoint=args.rdzv_endpoint,
              run_id=args.rdzv_id)
    if args.slurm:
        found = slurm_settings(os.environ)
        if not found:
            raise ConfigError("--slurm: no SLURM_JOB_ID in the environment; run under srun")
        kw.update(found)
    if kw["nnodes"] > 1 and not kw["endpoint"]:
        raise ConfigError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT (or --slurm with "
                          "MASTER_ADDR set)")
    return Rendezvous(**kw)


def cmd_scale(args: argparse.Namespace) -> int:
    from dlbench import env as envmod
    from dlbench.commands.common import preflight
    from dlbench.records.throughput import expand
    from dlbench.launch.torchrun import TorchrunLauncher
    from dlbench.measure.stopping import StopRule
    from dlbench.models import get_model
    from dlbench.report import export, terminal
    from dlbench.records.scaling import ScalingConfig
    from dlbench.store import Store
    from dlbench.suites import gpu_batch
    from dlbench.sweep import NullProgress, run_sweep

    import torch
    cuda = args.device != "cpu" and torch.cuda.is_available()
    rdzv = rendezvous(args)
    models = [get_model(m).name for m in flatten(args.model, [])]
    stop = StopRule(min_steps=args.min_steps, min_seconds=args.min_time,
                    max_seconds=args.max_time, max_steps=args.max_steps,
                    target_rel_ci=args.target_ci)
    mem = torch.cuda.get_device_properties(0).total_memory if cuda else 0
    bases = expand(models, flatten(args.batch_size, [None]), modes=["train"],
                   precisions=flatten(args.precision, ["fp32"]),
                   compiles=flatten(args.compile, [None]),
                   channels_last=flatten(args.channels_last, [False]),
                   default_batch=lambda m: gpu_batch(m, mem) if cuda else
                   max(1, min(16, get_model(m).default_batch // 4)),
                   optimizer=args.optimizer, input_size=args.input_size,
                   device="cpu" if not cuda else "auto", warmup_steps=args.warmup,
                   warmup_seconds=args.warmup_time, stop=stop, seed=args.seed)
    preflight(bases)
    visible = torch.cuda.device_count() if cuda else 2
    gpus = flatten(args.gpus, sorted({1, visible}))
    configs = [ScalingConfig(base=b, gpus=n * rdzv.nnodes, strategy=s, interconnect=i,
                             bucket_mb=args.bucket_mb, backend=args.backend, nnodes=rdzv.nnodes)
               for i in flatten(args.interconnect, ["default"])
               for b in bases for s in flatten(args.strategy, ["ddp"]) for n in gpus
               if not (s == "dp" and rdzv.nnodes > 1)]
    env = envmod.capture_environment()
    launcher = TorchrunLauncher(timeout_s=args.timeout, pg_timeout_s=args.pg_timeout,
                                rendezvous=rdzv)
    if not args.quiet:
        terminal.stderr.print(f"[bold]dlbench scale[/bold] {len(configs)} config(s) on "
                              f"{envmod.device_label(env)}; results -> {args.db}")
    t0 = time.perf_counter()
    with Store(args.db) as store:
        outcome = run_sweep(configs, store, launcher, env, command=args.command_line,
                            tag=args.tag, resume=args.resume,
                            progress=NullProgress() if args.quiet else terminal.RichProgress())
    recs = outcome.records
    if args.json:
        sys.stdout.write(export.to_json(recs) + "\n")
    else:
        show_scaling(recs)
    if outcome.message:
        terminal.error(outcome.message)
    terminal.stderr.print(f"wall time {time.perf_counter() - t0:.1f} s; {len(recs)} result(s) "
                          f"stored in {args.db} (run {outcome.run_id})")
    if outcome.status == "interrupted":
        return EXIT_INTERRUPTED
    return EXIT_FAILED_RESULTS if any(not r.ok for r in recs) else EXIT_OK


def show_scaling(recs) -> None:
    from dlbench.report import tables, terminal
    if not recs:
        terminal.stdout.print("no results")
        return
    for table in tables.tables_for(recs, ""):
        terminal.print_table(table)
    for r in recs:
        if not r.ok:
            terminal.error(f"{r.config.label}: {r.error_type}: {(r.error or '')[:2000]}")

"""``dlbench scale``: data-parallel training throughput at several GPU counts, strategies and
interconnect profiles; the scaling and NVLink on/off tables of the tf_cnn_benchmarks study."""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace

from dlbench import env as envmod
from dlbench.commands.common import (
    COUNT,
    EXIT_FAILED_RESULTS,
    EXIT_INTERRUPTED,
    EXIT_OK,
    FRACTION,
    MULTINODE,
    POSITIVE,
    POSITIVE_REAL,
    SECONDS,
    SECONDS_OR_ZERO,
    SEED,
    add_checkpointing,
    add_command,
    add_dist_flags,
    add_strategy_flags,
    add_sweep_flags,
    batch_size,
    checkpointing_fields,
    compile_mode,
    csv_list,
    device,
    flatten,
    integer,
    on_off,
    rendezvous_flags,
    show_failures,
    show_tables,
)
from dlbench.config import ConfigError
from dlbench.frameworks import jax as jaxpath
from dlbench.jobs.sweep import NullProgress
from dlbench.measure.stopping import StopRule
from dlbench.report import export, terminal

ORDER = 20


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub, "scale", help="training throughput over GPU counts: ddp, dp, ps, fsdp, tp, fsdp+tp; "
             "interconnect A/B",
        description="Weak scaling as tf_cnn_benchmarks measures it: the batch is per GPU, and the figure "
                    "is all GPUs' samples over the slowest rank's window time. Each config runs "
                    "as a fresh torchrun job (python -m torch.distributed.run), one process per "
                    "GPU (dp: one process driving every GPU). Without CUDA, --gpus counts gloo "
                    "processes on the CPU.",
        epilog="examples:\n"
               "  dlbench scale -m resnet50,inception_v3 --gpus 1,2 --precision fp16\n"
               "  dlbench scale -m resnet50 --gpus 1,2 --strategy ddp,dp,ps --precision bf16\n"
               "  dlbench scale -m gpt2 --gpus 2 --strategy ddp,fsdp --precision bf16 --optimizer adamw\n"
               "  dlbench scale -m llama-3.1-8b -b 1 --gpus 8 --strategy fsdp,fsdp+tp --tp 2 "
               "--precision bf16 --optimizer adamw --compile default\n"
               "  dlbench scale -m llama-3.1-8b -b 1 --gpus 8 --strategy fsdp --offload "
               "--precision bf16 --optimizer adamw\n"
               "  dlbench scale -m llama-3.2-1b -b 4 --gpus 8 --strategy fsdp --fp8 "
               "--precision bf16 --optimizer adamw --compile default\n"
               "  dlbench scale -m vgg16 --gpus 2 --interconnect default,no-p2p,no-p2p+no-shm\n"
               "  dlbench scale -m tiny_cnn -b 8 --gpus 1,2 --device cpu     (gloo, on a CPU)\n"
               "  dlbench scale -m llama-3.2-1b -b 4 --gpus 8 --strategy fsdp --precision bf16 "
               "--optimizer adamw --repeat 3 --tag before\n"
               "      (each config as 3 fresh jobs; then the same with --tag after, and\n"
               "       dlbench compare tag:before tag:after   tests the two groups, exit 5 on a "
               "regression)\n\n"
               "strategies: ddp = DistributedDataParallel (--bucket-mb); dp = nn.DataParallel "
               "(one process, as the 2019 CIFAR-10 framework comparison used it); ps = "
               "synchronous parameter server (gradients reduced to each shard's owner rank, which "
               "updates it and broadcasts it back; as the 2017 distributed-TensorFlow cluster); "
               "fsdp = FSDP2 (fully_shard on each block of the model's repeated stack and on its "
               "root: parameters, gradients and optimizer state sharded over the ranks, gathered "
               "in the run's precision, gradients reduced in fp32; with --compile each block "
               "is compiled before it is sharded); tp = tensor parallelism over every GPU "
               "(DTensor: each block's q/k/v and gate/up projections split colwise, o and "
               "down rowwise, as torchtitan does for Llama; Llama-layout models only: "
               "llama-3.2-1b, llama-3.2-3b, llama-3.1-8b); fsdp+tp = a 2-D mesh, TP in groups "
               "of --tp GPUs of one host and FSDP2 across the groups. Under TP a group's GPUs "
               "train on one batch: -b is the batch per TP group, and samples count once per "
               "group, not once per GPU.\n"
               "levers of the sharded strategies: --offload keeps FSDP2's shards (parameters, "
               "gradients, optimizer state) in host memory; --fp8 trains the linear layers in "
               "fp8 (torchao). Each is in the result's label and the strategy table's levers "
               "column; docs/scaling.md.\n"
               "interconnect profiles: default; no-p2p (NCCL_P2P_DISABLE=1: no NVLink/PCIe P2P); "
               "no-shm (NCCL_SHM_DISABLE=1); no-p2p+no-shm; no-ib (NCCL_IB_DISABLE=1).\n\n"
               + MULTINODE + "\n\nexit codes: 0 all ok; 2 usage error; 3 some results are "
               "failures (stored as rows); 130 interrupted (results so far are kept).",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", action="append", type=csv_list(), required=True,
                   help="model name(s); 'dlbench models' lists them")
    p.add_argument("-b", "--batch-size", action="append", type=csv_list(batch_size),
                   help="batch size(s) per GPU; 'default' = the model's GPU default (default)")
    add_strategy_flags(p, strategies="ddp (default), dp, ps, fsdp, tp, fsdp+tp",
                       gpus="GPU counts (per host with --nnodes); default: 1 and every visible "
                            "GPU. Without CUDA: gloo processes")
    p.add_argument("--interconnect", action="append", type=csv_list(),
                   help="default, no-p2p, no-shm, no-p2p+no-shm, no-ib (default: default)")
    p.add_argument("--precision", action="append", type=csv_list(),
                   help="fp32, tf32, fp16 (autocast+GradScaler), bf16 (default: fp32)")
    p.add_argument("--compile", action="append", type=csv_list(compile_mode),
                   help="none (default) or a torch.compile mode")
    p.add_argument("--channels-last", action="append", type=csv_list(on_off), help="on/off")
    p.add_argument("--optimizer", choices=("sgd", "adamw"), default="sgd")
    add_checkpointing(p, ": less memory, more compute")
    p.add_argument("--bucket-mb", type=POSITIVE_REAL, default=25.0, help="DDP bucket size, MiB (25)")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto",
                   help="auto = nccl on GPUs, gloo on the CPU")
    p.add_argument("--device", default="auto", type=device, help="auto (default) or cpu")
    p.add_argument("--seq-len", "--input-size", dest="input_size", type=POSITIVE)
    p.add_argument("--warmup", type=COUNT, default=10)
    p.add_argument("--warmup-time", type=SECONDS_OR_ZERO, default=1.0)
    p.add_argument("--min-steps", type=integer(2), default=20)
    p.add_argument("--min-time", type=SECONDS_OR_ZERO, default=2.0)
    p.add_argument("--max-time", type=SECONDS, default=15.0)
    p.add_argument("--max-steps", type=integer(2), default=100_000)
    p.add_argument("--target-ci", type=FRACTION, default=0.01)
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--framework", choices=("torch", "jax"), default="torch",
                   help="torch (default) or jax: with --strategy dp, one process drives the "
                        "GPUs with the batch sharded over them (jax.sharding); docs/frameworks.md")
    p.add_argument("--repeat", type=POSITIVE, default=1, metavar="N",
                   help="run each config as N fresh torchrun jobs, one after another (each "
                        "with its own processes, NCCL communicators, allocator and clocks), "
                        "store every job's record as one repeat group, and show the mean of "
                        "their figures with a 95%% interval across jobs; 'dlbench compare' then "
                        "tests two such groups across processes (Welch's t). A failed job is a "
                        "row of its group and the others still run (an out-of-memory ends the "
                        "group: every job would meet it); Ctrl-C keeps the jobs that finished, "
                        "--resume completes the group (default 1)")
    p.add_argument("--no-profile-comm", dest="profile_comm", action="store_false",
                   help="skip the exposed-communication profile. By default each rank of a "
                        "multi-process job runs 1 + 3 more steps after its measured window "
                        "(never inside it) under torch.profiler and keeps, per step, the time "
                        "its collectives ran that no compute overlapped: NCCL kernels against "
                        "the compute kernels on a GPU, gloo's collectives against PyTorch's "
                        "operators on the CPU; the strategy table's 'exposed comm' column. It "
                        "adds those 4 steps and the profiler's start to each job")
    p.add_argument("--timeout", type=SECONDS, default=900.0,
                   help="seconds one config's job may take in all, start-up included (900)")
    p.add_argument("--pg-timeout", type=SECONDS, default=120.0,
                   help="seconds one collective may wait for a peer (process-group timeout, 120)")
    add_dist_flags(p)
    add_sweep_flags(p)
    p.set_defaults(handler=cmd_scale)


def _check_jax(args: argparse.Namespace, gpu: bool, nnodes: int) -> None:
    """--framework jax: one process over the local devices (strategy dp), the extra installed."""
    if not jaxpath.available():
        raise ConfigError(jaxpath.INSTALL_HINT)
    if set(flatten(args.strategy, ["dp"])) != {"dp"} or nnodes > 1:
        raise ConfigError("--framework jax runs --strategy dp on one host: one process, the batch "
                          "sharded over its GPUs; add --strategy dp (several hosts: "
                          "docs/frameworks.md)")
    args.strategy = [["dp"]]
    if not gpu:  # CPU devices for JAX to shard over; read when JAX starts, so set it now
        most = max(flatten(args.gpus, [2]))
        os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count={most}")


def cmd_scale(args: argparse.Namespace) -> int:
    dist = rendezvous_flags(args)  # checked before anything is imported or started
    import torch  # heavy: the GPUs to count

    from dlbench.jobs import plans  # heavy: torch
    from dlbench.jobs.runs import run_scaling  # heavy: torch
    from dlbench.models import get_model  # heavy: torch

    facts = plans.device_facts()
    gpu = plans.on_gpu(args.device, facts)
    visible = torch.cuda.device_count() if gpu else 2
    counts = flatten(args.gpus, sorted({1, visible}))
    plans.check_gpu_counts(counts, gpu, visible)  # per host: more ranks than GPUs, refused now
    rdzv = plans.rendezvous(**dist)
    models = [get_model(m).name for m in flatten(args.model, [])]
    stop = StopRule(min_steps=args.min_steps, min_seconds=args.min_time,
                    max_seconds=args.max_time, max_steps=args.max_steps,
                    target_rel_ci=args.target_ci)
    bases = plans.expand(models, flatten(args.batch_size, [None]), modes=["train"],
                         precisions=flatten(args.precision, ["fp32"]),
                         compiles=flatten(args.compile, [None]),
                         channels_last=flatten(args.channels_last, [False]),
                         default_batch=plans.default_batch(facts, gpu),
                         optimizer=args.optimizer, input_size=args.input_size,
                         device="auto" if gpu else "cpu", warmup_steps=args.warmup,
                         warmup_seconds=args.warmup_time, stop=stop, seed=args.seed,
                         **checkpointing_fields(args), framework=args.framework)
    if args.framework == "jax":
        _check_jax(args, gpu, rdzv.nnodes)
        if args.repeat > 1:  # its one process drives the devices in this one: none is fresh
            raise ConfigError("--repeat N runs each config as N fresh torchrun jobs; --framework "
                              "jax measures in this process: drop --repeat")
    plans.preflight(bases, fits=False)  # FSDP and TP split the model across GPUs
    configs = plans.scaling_configs(bases, counts, flatten(args.strategy, ["ddp"]),
                                    flatten(args.interconnect, ["default"]), nnodes=rdzv.nnodes,
                                    bucket_mb=args.bucket_mb, backend=args.backend)
    # ScalingConfig refuses a lever where its strategy does not take it
    configs = plans.with_levers(configs, tp=args.tp, offload=args.offload, fp8=args.fp8)
    if not args.profile_comm:  # not part of a config's identity: --resume matches either way
        configs = [replace(c, comm_profile_steps=0) for c in configs]
    # each rank's share of the model fits its device; TP can split the model
    plans.preflight_scaling(configs)
    if args.fp8:  # torchao importable here, before any process starts (the ranks import it)
        from dlbench.workloads import fp8  # heavy: torch
        fp8.check_installed()
    env = envmod.capture_environment()
    if not args.quiet:
        terminal.stderr.print(f"[bold]dlbench scale[/bold] {len(configs)} config(s)"
                              + (f", each as {args.repeat} fresh jobs" if args.repeat > 1 else "")
                              + f" on {envmod.device_label(env)}; results -> {args.db}")
    t0 = time.perf_counter()
    outcome = run_scaling(configs, args.db, args.command_line, env, rdzv,
                          timeout_s=args.timeout, pg_timeout_s=args.pg_timeout, tag=args.tag,
                          resume=args.resume, repeat=args.repeat,
                          progress=NullProgress() if args.quiet else terminal.RichProgress())
    recs = outcome.records
    if args.json:
        sys.stdout.write(export.to_json(recs) + "\n")
    else:
        show_tables(recs, "throughput", "")
        show_failures(recs, 2000)
    if outcome.message:
        terminal.error(outcome.message)
    terminal.stderr.print(f"wall time {time.perf_counter() - t0:.1f} s; {len(recs)} result(s) "
                          f"stored in {args.db} (run {outcome.run_id})")
    if outcome.status == "interrupted":
        return EXIT_INTERRUPTED
    return EXIT_FAILED_RESULTS if any(not r.ok for r in recs) else EXIT_OK

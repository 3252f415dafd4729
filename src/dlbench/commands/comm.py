"""``dlbench comm``: collective bandwidth (time, algbw, busbw, #wrong) as nccl-tests reports it."""

from __future__ import annotations

import argparse
import json
import sys
import time

from dlbench import env as envmod
from dlbench.commands.common import (
    COUNT,
    MULTINODE,
    POSITIVE,
    SECONDS,
    add_command,
    add_dist_flags,
    add_store_flags,
    csv_list,
    device,
    exit_code,
    flatten,
    hidden_alias,
    integer,
    rendezvous_flags,
    show_failures,
)
from dlbench.records.collective import APIS, BUFFERS, TIMINGS
from dlbench.report import comm_tables, terminal

ORDER = 21


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub, "comm", help="collective bandwidth: all_reduce, all_gather, ... (nccl-tests' figures)",
        description="Time each collective from --min to --max bytes (doubling), out-of-place and "
                    "in-place, and report algbw = size / time and busbw = algbw x the factor of "
                    "nccl-tests' doc/PERFORMANCE.md: all_reduce 2(n-1)/n, all_gather and "
                    "reduce_scatter (n-1)/n, broadcast 1, all_to_all (n-1)/n. Every size is also "
                    "checked: #wrong counts elements that differ from the exact expected result "
                    "(summed over ranks), and a row with #wrong > 0 is stored as a failure. NCCL "
                    "on GPUs (one process per GPU), gloo on the CPU (--ranks = processes per "
                    "host).",
        epilog="examples:\n"
               "  dlbench comm --ranks 2\n"
               "  dlbench comm --op all_reduce,all_gather --min-bytes 8B --max-bytes 4GiB "
               "--ranks 2\n"
               "  dlbench comm --op all_reduce --min-bytes 1M --max-bytes 1G --interconnect "
               "no-p2p --ranks 2\n"
               "  dlbench comm --op all_reduce --max-bytes 64MiB --ranks 2 --timing eager\n"
               "  dlbench comm --op all_reduce --ranks 2 --api nccl --buffers nccl     (as "
               "nccl-tests: NCCL itself, on ncclMemAlloc's memory)\n"
               "  dlbench comm --device cpu --ranks 2 --max-bytes 1MiB     (gloo on the CPU)\n\n"
               "--timing graph (the default on GPUs) captures --iters-per-sample iterations in a "
               "CUDA graph and replays it, as nccl-tests -G: small sizes then show the fabric, "
               "not Python's launch cost; eager times each call alone (nccl-tests -I). Before "
               "the timed job a short probe job reads which algorithm and protocol NCCL chose "
               "per size from its tuning log (--no-algo-probe skips it).\n\n"
               "--api torch (the default) times torch.distributed's collectives, what a PyTorch "
               "program gets; --api nccl calls NCCL's C API itself, as nccl-tests does: what "
               "the two read apart is torch.distributed's own cost per call. torch.distributed "
               "has no out-of-place all_reduce or broadcast: through it their out-of-place rows "
               "call them in place on a second buffer; --api nccl calls them out of place. "
               "--buffers nccl allocates with ncclMemAlloc, as nccl-tests does. Each call of a "
               "sample works on the next copy of its buffers, as nccl-tests moves its own, so "
               "none reads what the last left in L2 (--no-rotate: one set, the old method).\n\n"
               "--ranks is processes per host (one per GPU); in scale and train --gpus counts "
               "GPUs. The old spellings --gpus, --min and --max are still taken here.\n\n"
               "sizes: nccl-tests' size column (all_gather: the gathered buffer; reduce_scatter: "
               "the input; all_to_all: one rank's send buffer). all_to_all has no in-place form "
               "in torch.distributed.\n\n" + MULTINODE,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--op", action="append", type=csv_list(),
                   help="all_reduce, all_gather, reduce_scatter, broadcast, all_to_all (all)")
    p.add_argument("--min-bytes", dest="min", default="8B",
                   help="smallest size (8B, 64K, 1MiB...; default 8B)")
    hidden_alias(p, "--min", "min")
    p.add_argument("--max-bytes", dest="max", default="1GiB",
                   help="largest size (default 1GiB; 4GiB as nccl-tests)")
    hidden_alias(p, "--max", "max")
    p.add_argument("--factor", type=integer(2), default=2, help="size step factor (default 2)")
    p.add_argument("--dtype", default="float32",
                   choices=("float32", "float16", "bfloat16", "float64", "int32"))
    p.add_argument("--iters", type=POSITIVE, default=20,
                   help="timed samples per size (20): one iteration each in eager mode, "
                        "--iters-per-sample each in batched and graph modes")
    p.add_argument("--warmup", type=COUNT, default=5, help="untimed samples per size (5)")
    p.add_argument("--timing", choices=("auto",) + TIMINGS, default="auto",
                   help="how the timed iterations are issued: graph (captured in a CUDA graph "
                        "and replayed, as nccl-tests -G: no launch cost; NCCL only), batched "
                        "(queued back to back, one event per batch), eager (one Python call and "
                        "event each, as nccl-tests -I). auto: graph on NCCL, eager on gloo")
    p.add_argument("--iters-per-sample", type=POSITIVE, default=None, metavar="K",
                   help="iterations in one timed sample of batched and graph modes (10); "
                        "eager times each alone")
    p.add_argument("--api", choices=APIS, default="torch",
                   help="whose collectives are timed: torch (torch.distributed's, what a "
                        "PyTorch program gets; default) or nccl (NCCL's own C API called "
                        "directly, one communicator per rank, as nccl-tests calls it: the "
                        "library and the fabric without torch.distributed's cost per call; "
                        "NCCL only)")
    p.add_argument("--buffers", choices=BUFFERS, default="torch",
                   help="where the buffers come from: torch (PyTorch's caching allocator, what "
                        "a PyTorch program's tensors are; default) or nccl (ncclMemAlloc, as "
                        "nccl-tests allocates; NCCL only). On NVLink the two can read several "
                        "percent apart from 16 MiB (docs/scaling.md)")
    p.add_argument("--no-rotate", dest="rotate", action="store_false",
                   help="every call on the same buffers, as dlbench did before November 2026; "
                        "by default each call of a sample works on the next copy of its "
                        "buffers, as nccl-tests does, so none finds the last one's data in the "
                        "GPU's L2 cache (which lifted 1-16 MiB by up to 12.6%% on two H200s)")
    p.add_argument("--no-algo-probe", dest="algo_probe", action="store_false",
                   help="skip the short job, run first, that reads which algorithm and "
                        "protocol NCCL chooses per size (NCCL_DEBUG=INFO, "
                        "NCCL_DEBUG_SUBSYS=TUNING); the records then say unknown")
    p.add_argument("--ranks", dest="gpus", type=POSITIVE,
                   help="processes per host, one per GPU (default: every GPU; 2 on a CPU)")
    hidden_alias(p, "--gpus", "gpus", type=POSITIVE)
    p.add_argument("--interconnect", action="append", type=csv_list(),
                   help="default, no-p2p, no-shm, no-p2p+no-shm, no-ib")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    p.add_argument("--device", default="auto", type=device, help="auto or cpu (gloo)")
    p.add_argument("--timeout", type=SECONDS, default=600.0, help="seconds per job (600)")
    p.add_argument("--pg-timeout", type=SECONDS, default=120.0, help="process-group timeout (120)")
    add_dist_flags(p)
    p.add_argument("--tag", help="label this run")
    p.add_argument("--json", action="store_true", help="print the records as JSON")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress line per link profile on stderr")
    add_store_flags(p)
    p.set_defaults(handler=cmd_comm)


def cmd_comm(args: argparse.Namespace) -> int:
    dist = rendezvous_flags(args)  # checked before anything is imported or started
    from dlbench.jobs import plans, runs  # heavy: torch

    plan = runs.comm_plan(flatten(args.op, []), flatten(args.interconnect, []), args.min,
                          args.max, args.factor, device=args.device, backend=args.backend,
                          ranks=args.gpus, dtype=args.dtype, iters=args.iters,
                          warmup=args.warmup, timing=args.timing,
                          iters_per_sample=args.iters_per_sample, probe=args.algo_probe,
                          api=args.api, buffers=args.buffers, rotate=args.rotate)
    rdzv = plans.rendezvous(**dist)
    ranks = plan.ranks * rdzv.nnodes
    env = envmod.capture_environment()
    t0 = time.perf_counter()

    def started(prof: str) -> None:
        if not args.quiet:
            terminal.stderr.print(f"[bold]dlbench comm[/bold] {len(plan.ops)} op(s) x "
                                  f"{len(plan.sizes)} sizes, {ranks} ranks ({plan.backend}, "
                                  f"{prof}, timing {plan.timing})")
    run = runs.run_comm(plan, args.db, args.command_line, env, rdzv, timeout_s=args.timeout,
                        pg_timeout_s=args.pg_timeout, tag=args.tag, on_profile=started)
    recs = run.records
    if args.json:
        sys.stdout.write(json.dumps([dict(r.to_dict(), time_s=r.time_s, algbw=r.algbw(),
                                          busbw=r.busbw(), latency_us=_us(r.time_s),
                                          p50_us=_us(r.p50_s), p99_us=_us(r.p99_s),
                                          busbw_comparable=r.busbw_comparable)
                                     for r in recs], indent=1) + "\n")
    else:
        for prof in plan.profiles:
            sel = [r for r in recs if r.config.interconnect == prof]
            terminal.print_table(comm_tables.comm_table(
                sel, f"Collectives, {ranks} ranks, {plan.backend}, {prof}, timing "
                     f"{comm_tables.timing_label(sel[0]) if sel else plan.timing}, "
                     f"{envmod.device_label(env)}"))
        ref = comm_tables.reference_table(recs)
        if ref is not None:
            terminal.print_table(ref)
        show_failures(recs)
    terminal.stderr.print(f"wall time {time.perf_counter() - t0:.1f} s; {len(recs)} result(s) "
                          f"stored in {args.db} (run {run.run_id})")
    return exit_code(recs, run.interrupted)


def _us(t: float | None) -> float | None:
    return None if t is None else t * 1e6

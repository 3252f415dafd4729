"""``dlbench net``: data-parallel training across emulated hosts joined by shaped links."""

from __future__ import annotations

import argparse
import signal
import sys
import time

from dlbench import env as envmod
from dlbench.commands.common import (
    COUNT,
    EXIT_FAILED_RESULTS,
    EXIT_OK,
    EXIT_USAGE,
    POSITIVE,
    POSITIVE_REAL,
    SECONDS,
    SEED,
    add_command,
    add_store_flags,
    batch_size,
    csv_list,
    exit_code,
    flatten,
    integer,
    show_failures,
)
from dlbench.config import ConfigError
from dlbench.netemu.topology import NetEmuUnavailable, cleanup_leftovers, privilege_problem
from dlbench.report import export, terminal
from dlbench.report.network import check_table, loss_table, net_table

ORDER = 22

DESCRIPTION = """\
A 2017 distributed-TensorFlow study trained across 5 servers over 1 GbE, 10 GbE and InfiniBand.
dlbench net repeats that kind of experiment on one Linux machine: it makes --hosts emulated hosts (network namespaces,
each with a veth port on one bridge, addresses from 10.231.0.0/24 that exist only inside them),
gives every port the --link's rate in both directions (tc tbf; a delay needs tc netem), and
trains the model across them with one gloo rank per host (started with 'ip netns exec';
MASTER_ADDR = host 0's address). For each link and strategy it reports the step time and
throughput, the bytes each host's interface sent and received per step (the kernel's counters),
the busiest host's traffic (that study's parameter-server host carried the most), the link's
measured round-trip time and goodput, and the loss against iteration and wall time. Each host
also times the same steps without communication, the compute time 'dlbench whatif' starts from.

Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN): without, it says so and stops. Every
namespace and link it makes is removed when it ends, on an error, or on Ctrl-C; after a run that
was killed outright, 'dlbench net --cleanup' removes what is left (names start with dlbench- and
dlb, and carry the owner's pid); the ranks' temporary folder lies in dlbench's own, which the
next dlbench run removes (one left directly in the temporary directory by an older dlbench,
dlbench-net-PID-*, goes with --cleanup)."""

EPILOG = """\
examples:
  sudo dlbench net -m tiny_mlp --link unshaped,100mbit,20mbit --strategy ddp,ps
  sudo dlbench net -m cnn10 --hosts 4 --link 1gbit,100mbit --strategy ps,ddp --steps 50
  sudo dlbench net -m tiny_cnn --link 10mbit/2ms           (2 ms one-way delay: needs netem)
  sudo dlbench net --cleanup                               (after a killed run)
  dlbench whatif --check --db dlbench.db                   (the model against these runs)

links: a rate as tc writes it (100kbit .. 100gbit: kbit, mbit, gbit), a network name from
'dlbench whatif --networks' (1gbe, 10gbe, ...: its rate), or 'unshaped' (the veth's own
speed); '/DELAY' adds a one-way delay (500us, 2ms). Rates are of Ethernet frames as the kernel
counts them; TCP payload moves at about 95% of them. This machine's cores run every host: a
rate the CPU cannot fill shows up as a probe goodput below the rate.

strategies: ddp = DistributedDataParallel (gloo's ring all-reduce); ps = dlbench's parameter
server (each host owns a shard: gradients reduced to it, parameters broadcast from it).

exit codes: 0 all ok; 2 usage error or no privileges (nothing ran); 3 some results are
failures (stored as rows); 130 interrupted (results so far are kept, namespaces removed)."""


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "net", help="training across emulated hosts over shaped links (root)",
                         description=DESCRIPTION, epilog=EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", help="model name ('dlbench models'; tests: tiny_mlp)")
    p.add_argument("--hosts", type=integer(2), default=2, help="emulated hosts, one rank each (2)")
    p.add_argument("--link", action="append", type=csv_list(),
                   help="link(s): RATE[/DELAY], a network name, or unshaped "
                        "(default: unshaped,100mbit,10mbit)")
    p.add_argument("--strategy", action="append", type=csv_list(), help="ddp, ps (default both)")
    p.add_argument("-b", "--batch-size", type=batch_size, default=None,
                   help="batch per host (default: the model's GPU batch / 4, at most 16)")
    p.add_argument("--steps", type=POSITIVE, default=30, help="measured steps per run (30)")
    p.add_argument("--warmup", type=COUNT, default=3, help="untimed steps before them (3)")
    p.add_argument("--compute-steps", type=POSITIVE, default=5,
                   help="steps timed without communication, for the model (5)")
    p.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    p.add_argument("--optimizer", choices=("sgd", "adamw"), default="sgd")
    p.add_argument("--input-size", type=POSITIVE)
    p.add_argument("--bucket-mb", type=POSITIVE_REAL, default=25.0, help="DDP bucket size, MiB (25)")
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--timeout", type=SECONDS, default=600.0,
                   help="seconds one (link, strategy) window may take, start-up included "
                        "(600)")
    p.add_argument("--pg-timeout", type=SECONDS, default=120.0,
                   help="seconds one collective may wait for a peer (120)")
    p.add_argument("--check", action="store_true",
                   help="after the runs, set the what-if model's predictions beside them")
    p.add_argument("--cleanup", action="store_true",
                   help="remove namespaces and links left by killed runs, then exit")
    p.add_argument("--tag", help="label this run")
    p.add_argument("--json", action="store_true", help="print the records as JSON")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress line per result on stderr")
    add_store_flags(p)
    p.set_defaults(handler=cmd_net)


def _terminate(signum, frame):  # SIGTERM/SIGHUP: unwind like Ctrl-C, so clean-up runs
    raise KeyboardInterrupt


def cmd_net(args: argparse.Namespace) -> int:
    problem = privilege_problem()
    if problem:
        terminal.error(problem)
        return EXIT_USAGE
    if args.cleanup:
        try:
            removed, errors = cleanup_leftovers()
        except NetEmuUnavailable as exc:
            terminal.error(str(exc))
            return EXIT_USAGE
        terminal.stdout.print(f"removed {len(removed)}: {', '.join(removed)}" if removed
                              else "nothing left behind by dlbench net")
        for e in errors:
            terminal.error(e)
        return EXIT_OK if not errors else EXIT_FAILED_RESULTS
    if not args.model:
        raise ConfigError("-m/--model is required (e.g. -m tiny_mlp)")
    old = {s: signal.signal(s, _terminate) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        return _run(args)
    except NetEmuUnavailable as exc:
        terminal.error(str(exc))
        return EXIT_USAGE
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _run(args: argparse.Namespace) -> int:
    from dlbench.jobs.net_runs import net_plan, run_net  # heavy: torch (via netemu.launch)
    from dlbench.whatif.check import check_net, skill_summary  # heavy: torch (via whatif.model)

    plan = net_plan(args.model, hosts=args.hosts, links=flatten(args.link, []),
                    strategies=flatten(args.strategy, []), batch=args.batch_size,
                    precision=args.precision, optimizer=args.optimizer,
                    input_size=args.input_size, seed=args.seed, steps=args.steps,
                    warmup=args.warmup, compute_steps=args.compute_steps,
                    bucket_mb=args.bucket_mb)
    env = envmod.capture_environment(include_topology=False)
    total = sum(len(c) for _, c in plan)
    t0 = time.perf_counter()
    seen = []

    def line(rec) -> None:
        seen.append(rec)
        if not args.quiet:
            terminal.stderr.print(_line(rec, len(seen), total), highlight=False)
    out = run_net(plan, args.hosts, args.db, args.command_line, env, timeout_s=args.timeout,
                  pg_timeout_s=args.pg_timeout, compute_steps=args.compute_steps, tag=args.tag,
                  on_record=line)
    recs = out.run.records
    for e in out.cleanup_errors:
        terminal.error(f"clean-up: {e}; run 'dlbench net --cleanup'")
    if args.json:
        sys.stdout.write(export.to_json(recs) + "\n")
    elif recs:
        terminal.print_table(net_table(recs, f"Training over emulated links, {args.hosts} hosts "
                                              f"(measured, {envmod.device_label(env)})"))
        terminal.print_table(loss_table(recs))
        show_failures(recs)
        if args.check:
            rows = check_net(recs)
            terminal.print_table(check_table(rows, "The what-if model against these runs"))
            for k in skill_summary(rows):   # the model beside the perfect-scaling baseline
                terminal.stdout.print(f"vs baseline, {k.line()}", highlight=False)
    terminal.stderr.print(f"wall time {time.perf_counter() - t0:.1f} s; {len(recs)} result(s) "
                          f"stored in {args.db} (run {out.run.run_id})")
    return exit_code(recs, out.run.interrupted)


def _line(r, i: int, total: int) -> str:
    head = f"[{i}/{total}] {r.config.link} {r.config.strategy}:"
    if not r.ok:
        return f"✗ {head} {r.error_type}: {(r.error or '').splitlines()[0][:120]}"
    tx = max(r.tx_per_step())
    return (f"✓ {head} {r.step_s * 1e3:.1f} ms/step, {r.headline():,.1f} samples/s, "
            f"{tx / 1e3:,.1f} kB/step sent by the busiest host")

"""``dlbench whatif``: predicted scaling of a measured model on a cluster you do not have."""

from __future__ import annotations

import argparse
import json
import sys

from dlbench.commands.common import EXIT_OK, add_store_flags, csv_list, flatten

ORDER = 23

DESCRIPTION = """\
An analytic model of data-parallel training. It takes the one-GPU step time dlbench measured
(a training record in --db, or --step-ms / --throughput), the gradient bytes of the model
(parameters x 4 bytes), and a strategy's communication under the alpha-beta cost (every message
costs latency + bytes / bandwidth):

  ddp       all-reduce: ring, 2(n-1)/n x G bytes per GPU in 2(n-1) steps, or tree (--allreduce);
            on N nodes x G GPUs hierarchical: inside the node over --intra, across nodes over
            --network (the node's --nics shared by its GPUs)
  ps        dlbench's parameter server: per shard a reduce to its owner and a broadcast back
  pushpull  seed 004's parameter servers: workers push gradients to --ps-shards server tasks
            and pull the variables back; the server holding the biggest variables is busiest

It predicts step time, throughput and scaling efficiency, prints seed 000's table (img/s with
the factor over 1 GPU) for the cluster, and says where communication stops hiding behind the
compute. Overlap: 'full' lets DDP's all-reduce hide behind the backward pass (assumed 2/3 of the
compute, --backward-fraction) but not the forward; 'none' adds it to the step. dlbench's ps
never overlaps. Every figure but the input is a prediction, and is labelled so."""

EPILOG = """\
examples:
  dlbench whatif -m resnet50 -b 256 --step-ms 310 --nodes 1,2,4,8 --gpus-per-node 8 \\
      --network 25gbe,100gbe,ib-ndr --intra nvlink4
  dlbench whatif -m resnet50 --db h200.db --nodes 1 --gpus-per-node 2,4 --intra nvlink4
      (compute from the newest one-GPU training record of resnet50 in h200.db)
  dlbench whatif -m resnet50 --db h200.db --busbw-from h200.db --gpus-per-node 2,4
      (intra-node link = the busbw and latency that 'dlbench comm' measured)
  dlbench whatif -m vgg16 -b 64 --throughput 400 --bandwidth 10gbit --latency 30us --nodes 2,4
  dlbench whatif --check --db net.db            (model vs 'dlbench net' and 'dlbench scale')
  dlbench whatif --seed004                      (seed 004's 5 servers x 4 GPUs, predicted)
  dlbench whatif --networks                     (the named links and their sources)"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("whatif", help="predicted scaling on clusters you do not have "
                       "(alpha-beta model)", description=DESCRIPTION, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", action="append", type=csv_list(), help="model name(s)")
    p.add_argument("-b", "--batch-size", type=int, help="batch per GPU (with --step-ms/"
                   "--throughput); with --db, take only records of this batch")
    p.add_argument("--precision", help="with --db, take only records of this precision")
    p.add_argument("--step-ms", action="append", type=csv_list(float),
                   help="one-GPU step time(s) in ms, one per model")
    p.add_argument("--throughput", action="append", type=csv_list(float),
                   help="one-GPU samples/s, one per model (instead of --step-ms)")
    p.add_argument("--record", help="take the compute time from this result id in --db")
    p.add_argument("--grad-mb", type=float, help="gradient MB per step (default: parameters x "
                   "--bytes-per-param)")
    p.add_argument("--bytes-per-param", type=int, default=4, help="gradient bytes per "
                   "parameter (4: fp32)")
    p.add_argument("--nodes", action="append", type=csv_list(int), help="node counts "
                   "(default 1,2,4,8)")
    p.add_argument("--gpus-per-node", action="append", type=csv_list(int),
                   help="GPUs per node (default 8)")
    p.add_argument("--network", action="append", type=csv_list(),
                   help="between nodes: names from --networks (default 10gbe,100gbe,ib-ndr)")
    p.add_argument("--bandwidth", help="a network of your own: payload per direction, e.g. "
                   "10gbit or 12GB/s (with --latency)")
    p.add_argument("--latency", help="its latency per message, e.g. 5us")
    p.add_argument("--intra", default="nvlink4", help="between GPUs of a node (nvlink4)")
    p.add_argument("--busbw-from", metavar="DB", help="intra-node link = the busbw and latency "
                   "of the newest 'dlbench comm' all-reduce records in DB")
    p.add_argument("--nics", type=int, default=1, help="network ports per node (1)")
    p.add_argument("--strategy", action="append", type=csv_list(),
                   help="ddp (default), ps, pushpull")
    p.add_argument("--allreduce", choices=("ring", "tree"), default="ring")
    p.add_argument("--ps-shards", type=int, help="pushpull server tasks (default: one per node)")
    p.add_argument("--ps-backend", choices=("nccl", "gloo"), default="nccl")
    p.add_argument("--overlap", choices=("none", "full"), default="full",
                   help="communication behind the backward pass (full, default) or not")
    p.add_argument("--backward-fraction", type=float, default=2 / 3)
    p.add_argument("--check", action="store_true", help="prediction vs measurement for the "
                   "net and scaling records in --db")
    p.add_argument("--seed004", action="store_true", help="seed 004's setup, predicted")
    p.add_argument("--networks", action="store_true", help="list the named links and exit")
    p.add_argument("--json", action="store_true")
    add_store_flags(p)
    p.set_defaults(handler=cmd_whatif)


def cmd_whatif(args: argparse.Namespace) -> int:
    from dlbench.report import terminal
    from dlbench.report.network import networks_table

    if args.networks:
        terminal.print_table(networks_table())
        return EXIT_OK
    if args.seed004:
        return _seed004(args)
    if args.check:
        return _check(args)
    return _predict(args)


def _records(path: str) -> list:
    from pathlib import Path

    from dlbench.store import Store, StoreError
    if not Path(path).exists():
        raise StoreError(f"no result store at {path}; pass one with --db")
    with Store(path) as store:
        return store.results()


def _intra(args: argparse.Namespace):
    from dlbench.whatif.inputs import link_from_comm
    from dlbench.whatif.networks import Network, get_network
    if not args.busbw_from:
        return get_network(args.intra)
    m = link_from_comm(_records(args.busbw_from))
    return Network(name=f"measured busbw ({m.ranks} ranks, {m.backend})", kind="intra",
                   bandwidth_Bps=m.bandwidth_Bps, latency_s=m.latency_s, efficiency=1.0,
                   source=f"dlbench comm record {m.record_id}: busbw of "
                          f"{m.size_bytes} B all_reduce",
                   latency_source="dlbench comm: smallest all_reduce time / 2(n-1)")


def _workloads(args: argparse.Namespace) -> list:
    from dlbench.config import ConfigError
    from dlbench.whatif.inputs import compute_inputs, model_gradients
    from dlbench.whatif.model import Workload

    models = flatten(args.model, [])
    steps = flatten(args.step_ms, [])
    rates = flatten(args.throughput, [])
    given = steps or rates
    found = {}
    if args.record:
        from dlbench.store import Store
        with Store(args.db) as store:
            rec = store.get(args.record)
        found = compute_inputs([rec])
        models = models or list(found)
    elif not given:
        found = compute_inputs(_records(args.db), args.batch_size, args.precision)
    if not models:
        raise ConfigError("name the model(s) with -m (and give --step-ms, --throughput, or a "
                          "--db holding a one-GPU training record)")
    if given and len(given) != len(models):
        raise ConfigError(f"--step-ms/--throughput: {len(given)} value(s) for {len(models)} "
                          "model(s); give one per model")
    out = []
    for i, m in enumerate(models):
        from dlbench.models import get_model
        name = get_model(m).name
        if given:
            if not args.batch_size:
                raise ConfigError("-b/--batch-size is needed with --step-ms/--throughput")
            batch = args.batch_size
            compute = steps[i] / 1e3 if steps else batch / rates[i]
            source = "given"
        else:
            inp = found.get(name)
            if inp is None:
                raise ConfigError(f"no one-GPU training record of {name} in {args.db}; measure "
                                  f"one ('dlbench throughput -m {name}') or give --step-ms")
            compute, batch, source = inp.compute_s, inp.batch, f"{inp.kind} {inp.record_id}"
        grad, variables = model_gradients(name, bytes_per_param=args.bytes_per_param)
        if args.grad_mb:
            grad, variables = args.grad_mb * 1e6, ()
        out.append(Workload(compute_s=compute, grad_bytes=grad, batch=batch,
                            variable_bytes=tuple(float(v) for v in variables),
                            backward_fraction=args.backward_fraction, name=name, source=source))
    return out


def _predict(args: argparse.Namespace) -> int:
    from dlbench.report import terminal
    from dlbench.report.network import hiding_lines, prediction_table, seed000_prediction_table
    from dlbench.whatif.model import Cluster, hiding, predict
    from dlbench.whatif.networks import custom_network, get_network

    workloads = _workloads(args)
    nets = [get_network(n) for n in flatten(args.network, [] if args.bandwidth else
                                            ["10gbe", "100gbe", "ib-ndr"])]
    if args.bandwidth:
        nets.append(custom_network(args.bandwidth, args.latency or "0us"))
    intra = _intra(args)
    nodes = flatten(args.nodes, [1, 2, 4, 8])
    gpn = flatten(args.gpus_per_node, [8])
    preds, hide = [], []
    for w in workloads:
        for s in flatten(args.strategy, ["ddp"]):
            for net in nets:
                clusters = [Cluster(n, g, net, intra, nics=args.nics, ps_shards=args.ps_shards,
                                    allreduce=args.allreduce, ps_backend=args.ps_backend)
                            for n in nodes for g in gpn]
                preds += [predict(w, c, s, args.overlap) for c in clusters]
                biggest = max(clusters, key=lambda c: (c.gpus, c.nodes))
                hide.append((w, biggest, hiding(w, biggest, s, args.overlap)))
                if all(c.nodes == 1 for c in clusters):
                    break   # one node: the network plays no part
    # A one-node cluster does not depend on the network: list it once in the detail table (the
    # seed-000 table repeats it in every network's row, as its own layout does).
    seen, detail = set(), []
    for p in preds:
        key = (p.workload.name, p.strategy, p.cluster.gpus_per_node,
               p.cluster.nodes if p.cluster.nodes > 1 else None,
               p.cluster.network.name if p.cluster.nodes > 1 else None)
        if key not in seen:
            seen.add(key)
            detail.append(p)
    if args.json:
        sys.stdout.write(json.dumps([_pred_dict(p) for p in detail], indent=1) + "\n")
        return EXIT_OK
    terminal.print_table(prediction_table(detail, f"PREDICTED step time (overlap {args.overlap}, "
                                                 f"{args.allreduce} all-reduce)"))
    from dlbench.models import get_model
    units = sorted({get_model(w.name).unit for w in workloads})
    terminal.print_table(seed000_prediction_table(preds, "/".join(units)))
    for line in hiding_lines(hide):
        terminal.stdout.print(line, highlight=False)
    for w in workloads:
        terminal.stdout.print(f"[dim]{w.name}: compute {w.compute_s * 1e3:.2f} ms per step "
                              f"({w.source}), batch {w.batch}, gradients "
                              f"{w.grad_bytes / 1e6:.2f} MB[/dim]")
    return EXIT_OK


def _pred_dict(p) -> dict:
    return {"predicted": True, "model": p.workload.name, "strategy": p.strategy,
            "overlap": p.overlap, "cluster": p.cluster.label, "gpus": p.cluster.gpus,
            "compute_s": p.compute_s, "compute_source": p.workload.source,
            "comm_s": p.comm.time_s, "step_s": p.step_s, "throughput": p.throughput,
            "factor": p.factor, "efficiency": p.efficiency, "busiest_bytes": p.comm.busiest_bytes,
            "hidden": p.hidden}


def _check(args: argparse.Namespace) -> int:
    from dlbench.report import terminal
    from dlbench.report.network import check_table
    from dlbench.whatif.check import check_net, check_scaling, error_summary
    from dlbench.whatif.comm import Link
    from dlbench.whatif.inputs import model_gradients

    recs = _records(args.db)
    rows = check_net(recs, args.backward_fraction)
    if rows:
        terminal.print_table(check_table(rows, "The what-if model against dlbench net "
                                               "(emulated links, gloo)"))
        _summary(error_summary(rows))
    scaling = [r for r in recs if r.kind == "scaling" and r.ok]
    if scaling:
        grads = {}
        for m in {r.config.model for r in scaling}:
            grads[m] = model_gradients(m, bytes_per_param=args.bytes_per_param)[0]
        link_for, where = _scaling_links(args)
        srows = check_scaling(scaling, link_for, grads, args.backward_fraction)
        if srows:
            terminal.print_table(check_table(srows, f"The what-if model against dlbench scale "
                                                    f"(intra-node link: {where})"))
            _summary(error_summary(srows))
            for profile in dict.fromkeys(r.link for r in srows):
                part = [r for r in srows if r.link == profile]
                terminal.stdout.print(f"  {profile} ({len(part)} rows): ", end="")
                _summary(error_summary(part))
    if not rows and not scaling:
        terminal.stdout.print(f"no net or scaling records in {args.db} to check against")
    return EXIT_OK


def _scaling_links(args: argparse.Namespace):
    """The intra-node link per interconnect profile and GPU count: with --busbw-from, the
    all-reduce busbw 'dlbench comm' measured under that profile at that rank count (a profile
    or count it never measured is left out of the check); else --intra for the default profile."""
    from dlbench.config import ConfigError
    from dlbench.whatif.comm import Link
    from dlbench.whatif.inputs import link_from_comm
    if not args.busbw_from:
        named = _intra(args)
        link = Link(named.payload_Bps, named.latency_s)
        return (lambda profile, n: link if profile == "default" else None), named.name
    comm = _records(args.busbw_from)
    cache: dict = {}

    def link_for(profile: str, n: int):
        if (profile, n) not in cache:
            try:
                m = link_from_comm(comm, interconnect=profile, ranks=n)
                cache[(profile, n)] = Link(m.bandwidth_Bps, m.latency_s)
            except ConfigError:
                cache[(profile, n)] = None
        return cache[(profile, n)]
    return link_for, "all_reduce busbw measured by dlbench comm, per profile and GPU count"


def _summary(s: dict) -> None:
    from dlbench.report import terminal
    parts = [f"{k}: {v:.1%}" for k, v in s.items()]
    terminal.stdout.print("mean absolute error " + ", ".join(parts), highlight=False)


def _seed004(args: argparse.Namespace) -> int:
    from dlbench.report import terminal
    from dlbench.report.network import seed004_table
    from dlbench.whatif.check import (SEED004_1GBE_STEP_S, seed004_implied_compute,
                                      seed004_rows)
    from dlbench.whatif.networks import get_network

    nets = [get_network(n) for n in ("1gbe", "10gbe", "ib-fdr")]
    implied = seed004_implied_compute(nets[2])
    computes = sorted({0.05, 0.1, round(implied, 4)})
    rows = seed004_rows(nets, computes)
    terminal.print_table(seed004_table(rows))
    by = {(r.network, r.compute_s): r for r in rows}
    c = round(implied, 4)
    ratio = by[("1gbe", c)].step_s / by[("ib-fdr", c)].step_s
    terminal.stdout.print(
        f"If the busiest server carried 2.5 Gbit/s each way on InfiniBand, the model implies "
        f"{c * 1e3:.0f} ms of compute per step; then 1 GbE is predicted {ratio:.1f}x slower than "
        f"InfiniBand (seed 004: over 5x) and takes "
        f"{by[('1gbe', c)].step_s * 1e5 / 3600:.1f} h per 100,000 iterations (seed 004: "
        f"{SEED004_1GBE_STEP_S * 1e5 / 3600:.0f} h).", highlight=False)
    return EXIT_OK

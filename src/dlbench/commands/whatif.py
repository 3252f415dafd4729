"""``dlbench whatif``: predicted scaling of a measured model on a cluster you do not have."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from dlbench.commands.common import (
    EXIT_OK,
    POSITIVE,
    POSITIVE_REAL,
    add_command,
    add_output_flags,
    add_store_flags,
    csv_list,
    flatten,
    print_json,
    real,
    show_table,
)
from dlbench.records import compat
from dlbench.report import terminal
from dlbench.report.network import (
    check_table,
    hiding_lines,
    networks_table,
    predicted_scaling_table,
    prediction_table,
    ps_cluster_table,
)
from dlbench.whatif.networks import NETWORKS

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
  pushpull  TensorFlow's parameter servers (SyncReplicasOptimizer): workers push gradients to
            --ps-shards server tasks and pull the variables back; the server holding the
            biggest variables is busiest
  fsdp      FSDP2 (ZeRO-3), unit by unit (each block of the model's layer stack, then the
            root): parameters all-gathered in forward and again in backward (bf16/fp16: 2
            bytes each, fp32: 4), gradients reduce-scattered in fp32, (n-1)/n of each per GPU;
            overlap 'full' runs each block's collectives beside its neighbour's compute
            (the first gathers and the last reduce-scatters stay exposed); one ring over
            every GPU (across nodes at the node's --nics together)
  tp        tensor parallelism over every GPU (dlbench's layout: q, k, v, gate, up
            column-parallel, o and down row-parallel): the blocks' compute / GPUs (the
            embeddings and head stay whole), plus per layer 2 all-reduces of batch x seq x
            hidden activations forward and 5 of their gradients (fp32) backward, never
            overlapped; the GPUs share one batch
  fsdp+tp   TP over --tp GPUs of a node (default: all of them), FSDP across the TP groups
            (each block's 1/tp gathered, the root whole)

It predicts step time, throughput and scaling efficiency, prints the table tf_cnn_benchmarks
reports (img/s with the factor over 1 GPU) for the cluster, and says where communication stops
hiding behind the
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
  dlbench whatif -m llama-3.2-1b --db h100.db --strategy ddp,fsdp,fsdp+tp --nodes 1,2,4 \
      --gpus-per-node 8 --network 100gbe,ib-ndr --nics 8
      (sharded: the model's units and width from its config, bf16 unless the record says)
  dlbench whatif --check --db net.db            (model vs 'dlbench net' and 'dlbench scale')
  dlbench whatif --ps-cluster                   (the 2017 parameter-server cluster, predicted)
  dlbench whatif --networks                     (the named links and their sources)"""


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "whatif", help="predicted scaling on clusters you do not have "
                         "(alpha-beta model)", description=DESCRIPTION, epilog=EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", action="append", type=csv_list(), help="model name(s)")
    p.add_argument("-b", "--batch-size", type=POSITIVE, help="batch per GPU (with --step-ms/"
                   "--throughput); with --db, take only records of this batch")
    p.add_argument("--precision", help="with --db, take only records of this precision")
    p.add_argument("--step-ms", action="append", type=csv_list(POSITIVE_REAL),
                   help="one-GPU step time(s) in ms, one per model")
    p.add_argument("--throughput", action="append", type=csv_list(POSITIVE_REAL),
                   help="one-GPU samples/s, one per model (instead of --step-ms)")
    p.add_argument("--record", help="take the compute time from this result id in --db")
    p.add_argument("--grad-mb", type=POSITIVE_REAL, help="gradient MB per step (default: parameters x "
                   "--bytes-per-param)")
    p.add_argument("--bytes-per-param", type=POSITIVE, default=4, help="gradient bytes per "
                   "parameter (4: fp32)")
    p.add_argument("--nodes", action="append", type=csv_list(POSITIVE), help="node counts "
                   "(default 1,2,4,8)")
    p.add_argument("--gpus-per-node", action="append", type=csv_list(POSITIVE),
                   help="GPUs per node (default 8)")
    p.add_argument("--network", action="append", type=csv_list(),
                   help="between nodes: names from --networks (default 10gbe,100gbe,ib-ndr)")
    p.add_argument("--bandwidth", help="a network of your own: payload per direction, e.g. "
                   "10gbit or 12GB/s (with --latency)")
    p.add_argument("--latency", help="its latency per message, e.g. 5us")
    p.add_argument("--intra", default="nvlink4", help="between GPUs of a node (nvlink4)")
    p.add_argument("--busbw-from", metavar="DB", help="intra-node link = the busbw and latency "
                   "of the newest 'dlbench comm' all-reduce records in DB")
    p.add_argument("--nics", type=POSITIVE, default=1, help="network ports per node (1)")
    p.add_argument("--strategy", action="append", type=csv_list(),
                   help="ddp (default), ps, pushpull, fsdp, tp, fsdp+tp")
    p.add_argument("--seq-len", "--input-size", dest="input_size", type=POSITIVE,
                   help="fsdp/tp: tokens per sample (default: the record's, else the model's)")
    p.add_argument("--tp", type=POSITIVE, metavar="N", help="fsdp+tp: GPUs per TP group, "
                   "dividing --gpus-per-node (default: all of a node's)")
    p.add_argument("--allreduce", choices=("ring", "tree"), default="ring")
    p.add_argument("--ps-shards", type=POSITIVE, help="pushpull server tasks (default: one per node)")
    p.add_argument("--ps-backend", choices=("nccl", "gloo"), default="nccl")
    p.add_argument("--overlap", choices=("none", "full"), default="full",
                   help="communication behind the backward pass (full, default) or not")
    p.add_argument("--backward-fraction", type=real(0, 1), default=2 / 3,
                   help="the share of the compute that is the backward pass, in [0, 1] (2/3)")
    p.add_argument("--check", action="store_true", help="prediction vs measurement for the "
                   "net and scaling records in --db")
    p.add_argument("--ps-cluster", action="store_true",
                   help="the 2017 distributed-TensorFlow parameter-server cluster (5 servers x "
                        "4 GPUs, 10 parameter-server tasks, CIFAR-10) over 1 GbE, 10 GbE and "
                        "InfiniBand, predicted")
    # its old name, still accepted, never shown
    p.add_argument(*compat.former(compat.FLAGS, "--ps-cluster"), dest="ps_cluster",
                   action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--networks", action="store_true", help="list the named links and exit")
    add_output_flags(p, "print as JSON on stdout: the predictions (one object per model, strategy, "
                        "cluster and network: compute, communication, step time, throughput, "
                        "efficiency); with --check the rows of prediction against measurement, "
                        "with --ps-cluster its rows and figures, with --networks the links",
                     "print only the tables, without titles and notes, nor the lines on where "
                     "communication stops hiding and where the compute time came from")
    add_store_flags(p)
    p.set_defaults(handler=cmd_whatif)


def cmd_whatif(args: argparse.Namespace) -> int:
    if args.networks:
        if args.json:
            print_json([dataclasses.asdict(n) for n in NETWORKS])
        else:
            show_table(networks_table(), args.quiet)
        return EXIT_OK
    if args.ps_cluster:
        return _ps_cluster(args)
    if args.check:
        return _check(args)
    return _predict(args)


def _predict(args: argparse.Namespace) -> int:
    from dlbench.whatif import scenarios  # heavy: torch (model sizes)
    strategies = flatten(args.strategy, ["ddp"])
    sharded = [s for s in strategies if s in scenarios.SHARDED]
    workloads = scenarios.workloads(
        flatten(args.model, []), step_ms=flatten(args.step_ms, []),
        throughput=flatten(args.throughput, []), batch=args.batch_size,
        precision=args.precision, db=args.db, record=args.record, grad_mb=args.grad_mb,
        bytes_per_param=args.bytes_per_param, backward_fraction=args.backward_fraction,
        sharded=bool(sharded), input_size=args.input_size)
    p = scenarios.predict_all(
        workloads, scenarios.networks(flatten(args.network, []), args.bandwidth, args.latency),
        scenarios.intra_link(args.intra, args.busbw_from),
        nodes=flatten(args.nodes, list(scenarios.DEFAULT_NODES)),
        gpus_per_node=flatten(args.gpus_per_node, list(scenarios.DEFAULT_GPUS_PER_NODE)),
        strategies=strategies, overlap=args.overlap, nics=args.nics,
        ps_shards=args.ps_shards, allreduce=args.allreduce, ps_backend=args.ps_backend,
        tp=args.tp)
    if args.json:
        sys.stdout.write(json.dumps([scenarios.prediction_dict(x) for x in p.detail], indent=1)
                         + "\n")
        return EXIT_OK
    show_table(prediction_table(p.detail, f"PREDICTED step time (overlap {args.overlap}, "
                                          f"{args.allreduce} all-reduce)"), args.quiet)
    show_table(predicted_scaling_table(p.all, scenarios.units(workloads)), args.quiet)
    if args.quiet:
        return EXIT_OK
    for line in hiding_lines(p.hiding):
        terminal.stdout.print(line, highlight=False)
    for w in workloads:
        terminal.stdout.print(f"[dim]{w.name}: compute {w.compute_s * 1e3:.2f} ms per step "
                              f"({w.source}), batch {w.batch}, gradients "
                              f"{w.grad_bytes / 1e6:.2f} MB[/dim]")
        if sharded and w.shape is not None:
            terminal.stdout.print(f"[dim]  {_shape_line(w)}[/dim]", highlight=False)
    if sharded:
        terminal.stdout.print(
            "[dim]fsdp: comm ms = every all-gather and reduce-scatter added; exposed = what the "
            "step pays with each block's collectives beside its neighbour's compute. tp: "
            "compute ms = the one-GPU step with the blocks' share split over the GPUs sharing "
            "a batch (optimistic: their norms and element-wise work do not split); no overlap. "
            "No line on where communication stops hiding for these.[/dim]", highlight=False)
    return EXIT_OK


def _shape_line(w) -> str:
    s = w.shape
    width = (f", hidden {s.hidden}, {s.seq_len} tokens per sample (TP all-reduces "
             f"{w.batch * s.seq_len * s.hidden / 1e6:.2f}M elements: 2 forward and 5 backward "
             f"per layer)" if s.hidden and s.seq_len else "")
    block = sum(s.block_params) / max(s.layers, 1)
    return (f"{s.params / 1e6:,.1f}M parameters: {s.layers} blocks of {block / 1e6:,.1f}M, "
            f"root {s.root_params / 1e6:,.1f}M; FSDP gathers {w.param_bytes} bytes per "
            f"parameter, reduces 4{width}")


def _check(args: argparse.Namespace) -> int:
    from dlbench.whatif import scenarios  # heavy: torch (model sizes)
    from dlbench.whatif.check import error_summary, skill_summary  # heavy: torch (via whatif.model)
    c = scenarios.check_against(args.db, intra=args.intra, busbw_from=args.busbw_from,
                                bytes_per_param=args.bytes_per_param,
                                backward_fraction=args.backward_fraction)
    if args.json:
        print_json({"net": [_row(r) for r in c.net], "scaling": [_row(r) for r in c.scaling],
                    "scaling_link": c.scaling_link,
                    "net_error": error_summary(c.net) if c.net else None,
                    "scaling_error": error_summary(c.scaling) if c.scaling else None,
                    "net_skill": [_skill(k) for k in skill_summary(c.net)],
                    "scaling_skill": [_skill(k) for k in skill_summary(c.scaling)]})
        return EXIT_OK
    if c.net:
        show_table(check_table(c.net, "The what-if model against dlbench net "
                                      "(emulated links, gloo)"), args.quiet)
        if not args.quiet:
            _summary(error_summary(c.net))
            _skills(skill_summary(c.net))
    if c.scaling:
        show_table(check_table(c.scaling, f"The what-if model against dlbench scale "
                                          f"(intra-node link: {c.scaling_link})"), args.quiet)
        if args.quiet:
            return EXIT_OK
        _summary(error_summary(c.scaling))
        _skills(skill_summary(c.scaling))
        for profile in dict.fromkeys(r.link for r in c.scaling):
            part = [r for r in c.scaling if r.link == profile]
            terminal.stdout.print(f"  {profile} ({len(part)} rows): ", end="")
            _summary(error_summary(part))
            _skills(skill_summary(part), "    ")
        for strategy in dict.fromkeys(r.strategy for r in c.scaling):
            part = [r for r in c.scaling if r.strategy == strategy]
            terminal.stdout.print(f"  {strategy} ({len(part)} rows): ", end="")
            _summary(error_summary(part))
        if any(r.strategy in ("fsdp", "tp", "fsdp+tp") for r in c.scaling):
            terminal.stdout.print(
                "fsdp: no overlap = compute + every all-gather (forward, and backward for the "
                "blocks) and reduce-scatter; overlap = each block's collectives beside its "
                "neighbour's compute. tp: the blocks' compute / TP GPUs + 2 all-reduces forward "
                "and 5 backward per layer, no overlap. "
                "perfect scaling = the one-GPU step (/ the TP GPUs), no communication.",
                highlight=False)
    if not c.net and not c.any_scaling:
        terminal.stdout.print(f"no net or scaling records in {args.db} to check against")
    return EXIT_OK


def _summary(s: dict) -> None:
    parts = [f"{k}: {v:.1%}" for k, v in s.items()]
    terminal.stdout.print("mean absolute error " + ", ".join(parts), highlight=False)


def _skills(skills, indent: str = "") -> None:
    """The model against the perfect-scaling baseline, one line per prediction: a skill is
    stated only where the model's error is below the baseline's."""
    for k in skills:
        terminal.stdout.print(f"{indent}vs baseline, {k.line()}", highlight=False)


def _skill(k) -> dict:
    return dataclasses.asdict(k) | {"skill": k.skill}


def _row(r) -> dict:
    """A check row with its errors (properties, which ``asdict`` leaves out)."""
    return dataclasses.asdict(r) | {"error_none": r.error_none, "error_full": r.error_full,
                                    "error_fit": r.error_fit, "error_perfect": r.error_perfect}


def _ps_cluster(args: argparse.Namespace) -> int:
    from dlbench.whatif import scenarios  # heavy: torch (model sizes)
    c = scenarios.ps_cluster()
    if args.json:
        print_json(dataclasses.asdict(c))
        return EXIT_OK
    show_table(ps_cluster_table(c.rows), args.quiet)
    if args.quiet:
        return EXIT_OK
    terminal.stdout.print(
        f"If the busiest server carried 2.5 Gbit/s each way on InfiniBand, the model implies "
        f"{c.implied_compute_s * 1e3:.0f} ms of compute per step; then 1 GbE is predicted "
        f"{c.slowdown_1gbe:.1f}x slower than InfiniBand (observed in 2017: over 5x) and takes "
        f"{c.hours_1gbe:.1f} h per 100,000 iterations (observed: "
        f"{c.observed_hours_1gbe:.0f} h).", highlight=False)
    return EXIT_OK

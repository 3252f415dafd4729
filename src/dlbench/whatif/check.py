"""The what-if model against measurements: emulated links, GPU scaling runs, and the 2017
parameter-server CIFAR-10 cluster over 1/10 GbE and InfiniBand.

For every ``dlbench net`` record the model is given only what a user would know before the run
(the link's rate, the compute time measured alone, the gradient bytes, the strategy) plus the
latency the link probe measured, and its predicted step time and bytes per host are set beside
the measured ones. The error is (predicted - measured) / measured. Every row also carries what perfect scaling
predicts (the compute alone: the one-GPU step, / the GPUs sharing a batch under tensor
parallelism), so the model's error can be read against that assumption's; ``dlbench scale``
records of fsdp, tp and fsdp+tp are predicted by :mod:`~dlbench.whatif.sharded`.

The emulated link counts whole frames: where tbf cuts segments into MTU frames (rates below about
500 Mbit/s, whose 1 ms bucket is smaller than a 64 KiB segment) TCP moves 1448 payload bytes per
1514-byte frame, and the acknowledgements of the opposite flow (a 66-byte frame every second
segment) share the direction: payload is 1448 / (1514 + 33) of the shaped rate. Above that, and
unshaped, the kernel's 64 KiB segments pass whole and headers cost about 1%; unshaped, the
veth's rate is the probe's measured goodput.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from dlbench.measure.stats import mean
from dlbench.netemu.shaping import burst_bytes
from dlbench.whatif.model import SHARDED, ps_shard_bytes
from dlbench.whatif.networks import Network
from dlbench.whatif.patterns import CommCost, Link, ps_collectives, push_pull, ring_allreduce
from dlbench.whatif.sharded import ModelShape, dtype_bytes, fsdp_step, fsdp_tp_step, tp_step

EMULATED_EFFICIENCY = 1448 / (1514 + 33)
UNSHAPED_HEADER_SHARE = 1.01
#: The largest segment the kernel hands a device (GSO): 64 KiB.
GSO_MAX_BYTES = 65536


@dataclass(frozen=True)
class CheckRow:
    """One measurement beside its prediction (seconds, bytes per step per host)."""

    label: str
    link: str
    strategy: str
    ranks: int
    measured_s: float
    compute_s: float
    predicted_none_s: float
    predicted_full_s: float | None       # ddp only: communication hidden behind backward
    measured_bytes: float | None = None  # busiest host, one direction, per step (wire)
    predicted_bytes: float | None = None
    record_id: str = ""
    predicted_fit_s: float | None = None  # no overlap, latency fitted on the unshaped link
    fitted_latency_s: float | None = None
    # Perfect scaling: the one-GPU compute, split over the GPUs sharing a batch (tensor
    # parallelism), with no communication at all: what assuming linear scaling predicts.
    predicted_perfect_s: float | None = None
    # Exposed communication per step: the model's (its step with overlap, else without, less
    # its compute) and the profiler's, from the steps the record's ranks profiled after the
    # window (dlbench.measure.overlap); None where the record has none.
    predicted_exposed_s: float | None = None
    measured_exposed_s: float | None = None

    @property
    def error_perfect(self) -> float | None:
        if self.predicted_perfect_s is None:
            return None
        return (self.predicted_perfect_s - self.measured_s) / self.measured_s

    @property
    def error_fit(self) -> float | None:
        if self.predicted_fit_s is None:
            return None
        return (self.predicted_fit_s - self.measured_s) / self.measured_s

    @property
    def error_none(self) -> float:
        return (self.predicted_none_s - self.measured_s) / self.measured_s

    @property
    def error_full(self) -> float | None:
        if self.predicted_full_s is None:
            return None
        return (self.predicted_full_s - self.measured_s) / self.measured_s

    @property
    def bytes_error(self) -> float | None:
        if not self.measured_bytes or self.predicted_bytes is None:
            return None
        return (self.predicted_bytes - self.measured_bytes) / self.measured_bytes


def emulated_link(record: Any) -> tuple[Link, float]:
    """(the model's link for a net record, wire bytes per payload byte)."""
    probe = record.probe or {}
    latency = probe.get("rtt_s", 0.0) / 2
    if record.config.rate_bps is None:
        goodput = probe.get("goodput_bps")
        if not goodput:
            raise ValueError(f"{record.id}: an unshaped link needs its probe's goodput")
        return Link(goodput / 8, latency + record.config.delay_s), UNSHAPED_HEADER_SHARE
    rate = record.config.rate_bps
    # tbf cuts a segment larger than its bucket into MTU frames (each with its headers); from
    # about 500 Mbit/s up the bucket holds a whole 64 KiB segment and the kernel's large
    # segments pass as they are, with headers once per segment, as on the unshaped veth.
    share = UNSHAPED_HEADER_SHARE if burst_bytes(rate) >= GSO_MAX_BYTES else 1 / EMULATED_EFFICIENCY
    return Link(rate / 8 / share, latency + record.config.delay_s), share


def net_comm(record: Any, link: Link) -> CommCost:
    """What the model says the record's strategy sends per step over ``link``."""
    n = record.config.hosts
    if record.config.strategy == "ps":
        return ps_collectives(record.shard_bytes, link, backend="gloo")
    return ring_allreduce(record.grad_bytes, n, link)   # gloo's all-reduce on CPU: a ring


def fitted_latency(record: Any) -> float | None:
    """The latency per message that makes the model match an *unshaped* record exactly:
    (measured step - compute - bytes / goodput) / message rounds. On the unshaped veth the
    bandwidth term is small, so what is left is the software's cost per collective step (gloo's
    threads and both ranks sharing this machine's cores), which the probe's TCP ping-pong does
    not see."""
    if record.config.rate_bps is not None or not record.compute_s or not record.step_s:
        return None
    link, _ = emulated_link(record)
    comm = net_comm(record, link)
    if comm.rounds == 0:
        return None
    bandwidth_s = comm.time_s - comm.rounds * link.latency_s
    return max(0.0, (record.step_s - record.compute_s - bandwidth_s) / comm.rounds)


def check_net(records: Sequence[Any], backward_fraction: float = 2 / 3) -> list[CheckRow]:
    """Every ok net record beside its predictions: with the probe's latency (no overlap, and
    overlap for ddp), and, where the same model, batch, hosts and strategy ran unshaped too,
    with the latency fitted there (the unshaped row itself is then the fit, not a check)."""
    ok = [r for r in records if r.kind == "net" and r.ok and r.compute_s and r.grad_bytes]
    fits = {}
    for r in ok:
        a = fitted_latency(r)
        if a is not None:
            fits[_net_key(r)] = a
    rows = []
    for r in ok:
        link, wire = emulated_link(r)
        comm = net_comm(r, link)
        compute = r.compute_s
        none = compute + comm.time_s
        full = None
        if r.config.strategy == "ddp":
            bwd = compute * backward_fraction
            full = compute - bwd + max(bwd, comm.time_s)
        fit = fits.get(_net_key(r))
        fit_s = None
        if fit is not None and r.config.rate_bps is not None:
            fit_s = compute + net_comm(r, Link(link.bandwidth_Bps,
                                               fit + r.config.delay_s)).time_s
        h = r.busiest_host()
        measured_bytes = max(r.tx_per_step()[h], r.rx_per_step()[h]) if h is not None else None
        rows.append(CheckRow(
            label=r.config.base.label, link=r.config.link, strategy=r.config.strategy,
            ranks=r.config.hosts, measured_s=r.step_s, compute_s=compute,
            predicted_none_s=none, predicted_full_s=full, measured_bytes=measured_bytes,
            predicted_bytes=comm.busiest_bytes * wire, record_id=r.id, predicted_fit_s=fit_s,
            fitted_latency_s=fit, predicted_perfect_s=compute))
    return rows


def _net_key(r: Any) -> tuple:
    c = r.config
    return (c.model, c.base.batch_size, c.base.precision, c.hosts, c.strategy, c.bucket_mb)


#: The strategies whose one-GPU record may stand in for a sharded strategy's own, in order of
#: preference (at one GPU FSDP has nothing to gather and TP nothing to split).
_ONE_GPU_STAND_INS = {"fsdp": ("ddp", "ps"), "tp": ("ddp", "ps"),
                      "fsdp+tp": ("fsdp", "ddp", "ps")}


def check_scaling(records: Sequence[Any], intra: Link | Callable[[str, int], Link | None],
                  grad_bytes: dict[str, int], backward_fraction: float = 2 / 3,
                  shapes: dict[str, ModelShape] | None = None) -> list[CheckRow]:
    """``dlbench scale`` records of 2+ GPUs on one node against the model, given the 1-GPU
    record of the same model, batch, precision and strategy as the compute time, and ``intra``:
    a link (named, or measured by ``dlbench comm``), or a function of the record's interconnect
    profile and GPU count giving the link measured under that profile (None: not measured, the
    record is left out). One GPU does not communicate: its record serves every profile.

    fsdp, tp and fsdp+tp records need the model's ``shapes``
    (:func:`dlbench.whatif.inputs.model_shape`); without its own one-GPU record a sharded
    strategy takes another's (fsdp+tp: fsdp's; then ddp's, ps's). Every row also carries the perfect-scaling prediction (the
    one-GPU compute, / the TP ranks), so the model's error can be set beside that assumption's.
    """
    link_for = intra if callable(intra) else (lambda profile, n: intra)
    shapes = shapes or {}
    ones = {}
    for r in records:
        if r.kind == "scaling" and r.ok and r.config.gpus == 1:
            ones.setdefault(_scale_key(r), r)  # the default profile's record, if listed first
            if r.config.interconnect == "default":
                ones[_scale_key(r)] = r
    rows = []
    for r in records:
        if r.kind != "scaling" or not r.ok or r.config.gpus < 2 or r.config.nnodes != 1:
            continue
        strategy = r.config.strategy
        base = ones.get(_scale_key(r))
        if base is None and strategy in SHARDED:
            keys = (_scale_key(r, s) for s in _ONE_GPU_STAND_INS[strategy])
            base = next((ones[k] for k in keys if k in ones), None)
        g = grad_bytes.get(r.config.model)
        link = link_for(r.config.interconnect, r.config.gpus)
        # dp has no collectives to model (its scatter and gather go through GPU 0).
        if base is None or g is None or link is None or strategy == "dp":
            continue
        if strategy in SHARDED and r.config.model not in shapes:
            continue
        compute = base.summary().mean_s
        n = r.config.gpus
        t = 1
        if strategy in SHARDED:
            t, none, full, exposed = _sharded_check(r, shapes[r.config.model], compute, link,
                                                    backward_fraction)
        else:
            if strategy == "ps":
                comm = ps_collectives(ps_shard_bytes([g], n), link, backend="nccl")
            else:
                comm = ring_allreduce(g, n, link)
            none = compute + comm.time_s
            bwd = compute * backward_fraction
            full = compute - bwd + max(bwd, comm.time_s) if strategy == "ddp" else None
            exposed = (none if full is None else full) - compute
        measured = r.exposed_comm() if hasattr(r, "exposed_comm") else None
        rows.append(CheckRow(
            label=r.config.base.label, link=r.config.interconnect, strategy=strategy,
            ranks=n, measured_s=r.summary().mean_s, compute_s=compute,
            predicted_none_s=none, predicted_full_s=full, record_id=r.id,
            predicted_perfect_s=compute / t, predicted_exposed_s=exposed,
            measured_exposed_s=None if measured is None else measured.per_step_s))
    return rows


def tp_degree(config: Any) -> int:
    """The tensor-parallel ranks of a scaling config (``ScalingConfig.tp_degree``: all its GPUs
    for tp, ``--tp`` for fsdp+tp, 1 for the others)."""
    degree = getattr(config, "tp_degree", None)
    if degree is not None:
        return degree
    return config.gpus if config.strategy == "tp" else 1   # a config from before tp


def _sharded_check(r: Any, shape: ModelShape, compute: float, link: Link,
                   backward_fraction: float) -> tuple[int, float, float | None, float]:
    """(TP ranks, predicted step with no overlap, with overlap, exposed communication with
    overlap) of a sharded scaling record. One node: every collective over the record's link
    (the all-reduce busbw measured at its GPU count)."""
    c = r.config
    base = c.base
    size = base.input_size or shape.seq_len
    shape = replace(shape, seq_len=size) if shape.seq_len is not None else shape
    pb = ab = dtype_bytes(base.precision)
    t = tp_degree(c)
    if c.strategy == "fsdp":
        steps = [fsdp_step(shape, compute, c.gpus, link, param_bytes=pb,
                           backward_fraction=backward_fraction, overlap=o)
                 for o in ("none", "full")]
    elif c.strategy == "tp":
        steps = [tp_step(shape, compute, base.batch_size, t, link, act_bytes=ab)] * 2
    else:
        steps = [fsdp_tp_step(shape, compute, base.batch_size, t, c.gpus // t, link, link,
                              param_bytes=pb, act_bytes=ab,
                              backward_fraction=backward_fraction, overlap=o)
                 for o in ("none", "full")]
    return (t, steps[0].step_s, None if c.strategy == "tp" else steps[1].step_s,
            steps[1].exposed_s)


def _scale_key(r: Any, strategy: str | None = None) -> tuple:
    """What a multi-GPU run and its one-GPU reference share: the model and its batch, sequence,
    precision and compile, and every lever that changes a step's compute (checkpointing and
    its policy, fp8, offload): a checkpointed run predicted from a plain one's compute would
    blame the recomputation on the links."""
    c, b = r.config, r.config.base
    ckpt = getattr(b, "checkpoint_policy", "full") if getattr(b, "checkpointing", False) else None
    return (c.model, b.batch_size, b.input_size, b.precision, b.compile, ckpt,
            getattr(c, "fp8", False), getattr(c, "offload", False), strategy or c.strategy)


def error_summary(rows: Sequence[CheckRow]) -> dict[str, float]:
    """Mean absolute error of each prediction kind over the rows (fractions)."""
    out = {}
    if rows:
        perfect = [abs(r.error_perfect) for r in rows if r.error_perfect is not None]
        if perfect:
            out["perfect scaling"] = mean(perfect)
        out["none"] = mean([abs(r.error_none) for r in rows])
        fulls = [abs(r.error_full) for r in rows if r.error_full is not None]
        if fulls:
            out["full"] = mean(fulls)
        fits = [abs(r.error_fit) for r in rows if r.error_fit is not None]
        if fits:
            out["fitted latency"] = mean(fits)
        bytes_ = [abs(r.bytes_error) for r in rows if r.bytes_error is not None]
        if bytes_:
            out["bytes"] = mean(bytes_)
    return out


#: The model's predictions set against the perfect-scaling baseline, and their errors' names.
_PREDICTIONS = {"none": "error_none", "full": "error_full", "fitted latency": "error_fit"}
_PREDICTED = {"none": "predicted_none_s", "full": "predicted_full_s",
              "fitted latency": "predicted_fit_s"}


@dataclass(frozen=True)
class Skill:
    """One prediction of the model against the perfect-scaling baseline on the same rows.

    ``model`` and ``baseline`` are mean absolute errors (fractions) over the ``rows`` where
    both exist; ``skill`` = 1 - model / baseline, the share of the baseline's error the model
    removes, and None where the model does not beat the baseline (no skill is claimed there);
    ``closer`` counts the rows where the model is nearer the measurement, ``same`` those where
    its prediction is the baseline's (no communication left exposed)."""

    prediction: str
    rows: int
    model: float
    baseline: float
    closer: int
    same: int

    @property
    def skill(self) -> float | None:
        if self.baseline <= 0 or self.model >= self.baseline:
            return None
        return 1 - self.model / self.baseline

    def line(self) -> str:
        head = (f"{self.prediction}: {self.model:.1%} against perfect scaling's "
                f"{self.baseline:.1%} over {self.rows} rows")
        if self.same == self.rows:
            return f"{head}: no skill, its prediction is the one-GPU step in every row"
        if self.skill is None:
            return f"{head}: no skill, the baseline does as well or better"
        return (f"{head}: skill {self.skill:.0%} (closer in {self.closer} of {self.rows} "
                f"rows{f', the same in {self.same}' if self.same else ''})")


def skill_summary(rows: Sequence[CheckRow]) -> list[Skill]:
    """Every prediction of the model beside the perfect-scaling baseline on the rows both
    have: the baseline's error, the model's, and a skill only where the model beats it."""
    out = []
    for name, attr in _PREDICTIONS.items():
        pairs = [(r, getattr(r, attr)) for r in rows
                 if getattr(r, attr) is not None and r.error_perfect is not None]
        if not pairs:
            continue
        model = mean([abs(e) for _, e in pairs])
        base = mean([abs(r.error_perfect) for r, _ in pairs])
        closer = sum(abs(e) < abs(r.error_perfect) for r, e in pairs)
        same = sum(math.isclose(getattr(r, _PREDICTED[name]), r.predicted_perfect_s,
                                rel_tol=1e-9) for r, _ in pairs)
        out.append(Skill(name, len(pairs), model, base, closer, same))
    return out


# -- the 2017 parameter-server cluster ----------------------------------------------------------
# TensorFlow 0.12's distributed CIFAR-10 (SyncReplicasOptimizer, parameter servers) on 5 servers of
# 4 TITAN X (Maxwell), over 1 GbE, 10 GbE and InfiniBand FDR (IPoIB).
#: The TensorFlow CIFAR-10 tutorial model (tensorflow/models, tutorials/image/cifar10/
#: cifar10.py, ``inference``) on 24x24 crops, variables in creation order, after the global step
#: that ``train`` creates first: (name, elements).
CIFAR10_VARIABLES: tuple[tuple[str, int], ...] = (
    ("global_step", 1),
    ("conv1/weights", 5 * 5 * 3 * 64), ("conv1/biases", 64),
    ("conv2/weights", 5 * 5 * 64 * 64), ("conv2/biases", 64),
    ("local3/weights", 6 * 6 * 64 * 384), ("local3/biases", 384),
    ("local4/weights", 384 * 192), ("local4/biases", 192),
    ("softmax_linear/weights", 192 * 10), ("softmax_linear/biases", 10),
)
#: What was observed on that cluster: 100,000 iterations took 23 h on 1 GbE, over 5x the
#: InfiniBand time; the busiest server carried about 2.5 Gbit/s (on 10 GbE and InfiniBand).
PS_CLUSTER_1GBE_STEP_S = 23 * 3600 / 100_000
PS_CLUSTER_1GBE_OVER_IB = 5.0
PS_CLUSTER_BUSIEST_BPS = 2.5e9


@dataclass(frozen=True)
class PsClusterRow:
    network: str
    compute_s: float
    step_s: float
    comm_s: float
    busiest_bytes: float        # per step, one direction, the busiest server
    busiest_bps: float          # that, in bits per second, over the step


def ps_cluster_cost(network: Network, latency_s: float | None = None) -> CommCost:
    """The cluster's 5 servers x 4 workers with 10 parameter-server tasks (2 per server) over
    ``network``: TensorFlow places variables round robin on the tasks (replica_device_setter's
    default), task t on server t // 2; fp32 gradients and variables."""
    var_bytes = [4.0 * n for _, n in CIFAR10_VARIABLES]
    task = [i % 10 for i in range(len(var_bytes))]
    host = [t // 2 for t in task]
    lat = network.latency_s if latency_s is None else latency_s
    return push_pull(var_bytes, host, [4] * 5, Link(network.payload_Bps, lat))


def ps_cluster_rows(networks: Sequence[Network], compute_values: Sequence[float]
                    ) -> list[PsClusterRow]:
    out = []
    for c in compute_values:
        for net in networks:
            cost = ps_cluster_cost(net)
            step = c + cost.time_s   # synchronous: the servers wait for every worker's push
            out.append(PsClusterRow(net.name, c, step, cost.time_s, cost.busiest_bytes,
                                    cost.busiest_bytes * 8 / step))
    return out


def ps_cluster_implied_compute(network: Network, busiest_bps: float = PS_CLUSTER_BUSIEST_BPS
                               ) -> float:
    """The compute time per step at which the busiest server would carry ``busiest_bps`` in one
    direction over ``network`` (what the observed 2.5 Gbit/s implies, if the model holds)."""
    cost = ps_cluster_cost(network)
    step = cost.busiest_bytes * 8 / busiest_bps
    return max(0.0, step - cost.time_s) if math.isfinite(step) else math.nan

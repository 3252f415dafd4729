"""The what-if model: a measured compute time plus a strategy's communication -> a step time.

Weak scaling, as the 2020 tf_cnn_benchmarks study measured it: every GPU keeps its batch, so its
compute per step is the one-GPU step time ``compute_s`` that dlbench measured (or that the user
gives). A step is that compute plus whatever communication is not hidden behind it:

- overlap ``none``: step = compute + comm. dlbench's ``ps`` always (its exchange starts after
  the backward pass), and a DDP that cannot overlap (one bucket, or a CPU with no spare core);
- overlap ``full``: step = forward + max(backward, comm). DDP all-reduces each bucket as soon as
  its gradients exist, so communication can hide behind the backward pass but not behind the
  forward pass. Assumption: backward is ``backward_fraction`` of the compute (2/3 by default:
  a backward pass costs about twice the forward's FLOPs); the optimizer step is counted in the
  forward share, and the last bucket's all-reduce, which cannot overlap, is ignored.

The sharded strategies (``fsdp``, ``tp``, ``fsdp+tp``) have their own collectives and overlap,
in :mod:`~dlbench.whatif.sharded`; ``tp`` splits the compute over its ranks (which then share one
batch).

Everything returned is a *prediction*: tables built from it say so in their titles.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence

from dlbench.config import ConfigError
from dlbench.whatif.networks import Network
from dlbench.whatif.patterns import (
    CommCost,
    Link,
    hierarchical_allreduce,
    ps_collectives,
    push_pull,
)
from dlbench.whatif.sharded import ModelShape, ShardedStep, fsdp_step, fsdp_tp_step, tp_step

#: Sharded strategies: FSDP, Megatron tensor parallelism, and the two together (TP inside a node,
#: FSDP across nodes).
SHARDED = ("fsdp", "tp", "fsdp+tp")
STRATEGIES = ("ddp", "ps", "pushpull") + SHARDED
OVERLAPS = ("none", "full")
#: The largest cluster the searches below look at (they double the node count up to this).
MAX_NODES = 4096


@dataclass(frozen=True)
class Workload:
    """What one GPU does per step, measured or given.

    Attributes:
        compute_s: one GPU's step time with no communication (a one-GPU training record).
        grad_bytes: bytes of gradients per step (parameters x bytes per element).
        batch: samples per GPU per step.
        variable_bytes: bytes of each parameter tensor, in model order (for ps and push-pull
            placement); empty: the gradient in one piece.
        backward_fraction: share of ``compute_s`` in the backward pass (overlap ``full``).
        name: the model's name, for tables.
        source: where ``compute_s`` came from (a record id, or "given").
        shape: the model's units, width and sequence (for fsdp and tp); None: not known.
        param_bytes: bytes per parameter FSDP gathers (2 in bf16/fp16, 4 in fp32).
        act_bytes: bytes per activation element TP all-reduces (2 under bf16/fp16 autocast).
        units_per_sample: what one sample counts in the model's throughput unit: a language
            model's tokens per sequence, 1 for an image (the predicted tokens/s of a table).
    """

    compute_s: float
    grad_bytes: float
    batch: int = 1
    variable_bytes: tuple[float, ...] = ()
    backward_fraction: float = 2 / 3
    name: str = "model"
    source: str = "given"
    shape: ModelShape | None = None
    param_bytes: int = 2
    act_bytes: int = 2
    units_per_sample: int = 1

    def __post_init__(self) -> None:
        if not self.compute_s > 0:
            raise ConfigError(f"the compute time per step must be > 0 s, got {self.compute_s}")
        if self.grad_bytes < 0 or self.batch < 1:
            raise ConfigError("gradient bytes must be >= 0 and the batch >= 1")
        if not 0 <= self.backward_fraction <= 1:
            raise ConfigError("--backward-fraction must be in [0, 1]")

    @property
    def variables(self) -> tuple[float, ...]:
        return self.variable_bytes or (float(self.grad_bytes),)


@dataclass(frozen=True)
class Cluster:
    """N nodes x G GPUs: GPUs of a node joined by ``intra``, nodes by ``network``.

    ``nics`` network ports per node (one per GPU on a DGX-like node, one on a typical server).
    ``ps_shards`` parameter-server tasks for push-pull (default: one per node), placed round
    robin on the nodes; ``allreduce`` the DDP algorithm (ring or tree); ``ps_backend`` the
    collectives dlbench's ps runs on (gloo on CPUs, nccl on GPUs).
    """

    nodes: int
    gpus_per_node: int
    network: Network
    intra: Network
    nics: int = 1
    ps_shards: int | None = None
    allreduce: str = "ring"
    ps_backend: str = "nccl"
    network_latency_s: float | None = None   # overrides the table's latency
    intra_latency_s: float | None = None
    tp: int | None = None                    # fsdp+tp's TP degree (None: the GPUs per node)

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.gpus_per_node < 1 or self.nics < 1:
            raise ConfigError("--nodes, --gpus-per-node and --nics must be >= 1")
        if self.tp is not None and (self.tp < 1 or self.gpus_per_node % self.tp):
            raise ConfigError(f"--tp {self.tp} must divide the GPUs per node "
                              f"({self.gpus_per_node}): a TP group stays in one node")
        if self.allreduce not in ("ring", "tree"):
            raise ConfigError(f"--allreduce must be ring or tree, got {self.allreduce!r}")

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def net_link(self, scale: float = 1.0) -> Link:
        lat = self.network.latency_s if self.network_latency_s is None else self.network_latency_s
        return Link(self.network.payload_Bps * scale, lat)

    def intra_link(self, scale: float = 1.0) -> Link:
        lat = self.intra.latency_s if self.intra_latency_s is None else self.intra_latency_s
        return Link(self.intra.payload_Bps * scale, lat)

    @property
    def label(self) -> str:
        if self.nodes == 1:
            return f"1 node x {self.gpus_per_node} GPU(s), {self.intra.name}"
        return (f"{self.nodes} nodes x {self.gpus_per_node} GPU(s), {self.network.name}"
                + (f" + {self.intra.name}" if self.gpus_per_node > 1 else ""))


@dataclass(frozen=True)
class Prediction:
    """A predicted step (never a measurement): its parts and the figures derived from them."""

    workload: Workload
    cluster: Cluster
    strategy: str
    overlap: str
    comm: CommCost
    step_s: float
    notes: tuple[str, ...] = field(default=())
    tp: int = 1                     # tensor-parallel ranks that share one batch
    gpu_compute_s: float | None = None   # each GPU's compute, where TP splits it

    @property
    def compute_s(self) -> float:
        """Each GPU's compute per step: the one-GPU step (its blocks' share split over the
        tensor-parallel ranks, for tp)."""
        return self.workload.compute_s if self.gpu_compute_s is None else self.gpu_compute_s

    @property
    def exposed_s(self) -> float:
        """Communication time the step pays for (not hidden behind compute)."""
        return self.step_s - self.compute_s

    @property
    def hidden(self) -> bool:
        """Whether communication hides entirely behind the backward pass."""
        return self.exposed_s <= 1e-12 * max(1.0, self.step_s)

    @property
    def throughput(self) -> float:
        """Samples per second, all GPUs together (a tensor-parallel group shares one batch)."""
        return self.cluster.gpus // self.tp * self.workload.batch / self.step_s

    @property
    def factor(self) -> float:
        """The scaling factor: throughput over one GPU's (batch / compute)."""
        return self.throughput / (self.workload.batch / self.workload.compute_s)

    @property
    def efficiency(self) -> float:
        return self.factor / self.cluster.gpus

    @property
    def busiest_bps(self) -> float:
        """Bits per second the busiest network port carries in one direction, over the step."""
        return self.comm.busiest_bytes * 8 / self.step_s


def ps_shard_bytes(variables: Sequence[float], ranks: int) -> list[float]:
    """Bytes each rank owns under dlbench's ps assignment (greedy by size)."""
    from dlbench.workloads.ps import assign_shards  # slow: the whole training step (--help)
    owners = assign_shards([int(v) for v in variables], ranks)
    shard = [0.0] * ranks
    for v, o in zip(variables, owners):
        shard[o] += v
    return shard


def tp_ranks(c: Cluster, strategy: str) -> int:
    """GPUs that share one batch: every GPU for ``tp``, ``c.tp`` (or a node's GPUs) for
    ``fsdp+tp``, else 1."""
    return {"tp": c.gpus, "fsdp+tp": c.tp or c.gpus_per_node}.get(strategy, 1)


def sharded_step(w: Workload, c: Cluster, strategy: str, overlap: str = "full",
                 net_scale: float = 1.0) -> ShardedStep:
    """A step of a sharded strategy on ``c``.

    Every collective is a ring. Inside one node it runs over ``intra``. Across nodes a ring
    leaves each node once per NCCL channel, a channel per NIC, so each ring step is as fast as
    the node's NICs together allow, shared by the k rings that run at once (fsdp+tp's one per
    TP rank; k = 1 for fsdp and tp), at most ``intra``, at the network's latency. fsdp+tp's TP
    groups stay in a node (``intra``).
    """
    if w.shape is None:
        raise ConfigError(f"{strategy}: the model's shape is needed (its parameters per block)")
    inter = c.net_link(net_scale)
    intra = c.intra_link(net_scale if c.nodes == 1 else 1.0)

    def ring(k: int) -> Link:
        if c.nodes == 1:
            return intra
        return Link(min(inter.bandwidth_Bps * c.nics / k, intra.bandwidth_Bps), inter.latency_s)

    kw = dict(backward_fraction=w.backward_fraction, overlap=overlap)
    if strategy == "fsdp":
        return fsdp_step(w.shape, w.compute_s, c.gpus, ring(1), param_bytes=w.param_bytes, **kw)
    if strategy == "tp":
        return tp_step(w.shape, w.compute_s, w.batch, c.gpus, ring(1), act_bytes=w.act_bytes)
    t = tp_ranks(c, strategy)
    return fsdp_tp_step(w.shape, w.compute_s, w.batch, t, c.gpus // t, intra, ring(t),
                        param_bytes=w.param_bytes, act_bytes=w.act_bytes, **kw)


def _sharded_comm(s: ShardedStep, c: Cluster, strategy: str) -> CommCost:
    """A sharded step's communication, in the other patterns' terms: per GPU on one node; per
    node on the network across nodes, where a ring's node boundary carries what one of its
    ranks sends (fsdp+tp: its t FSDP rings' traffic; its TP stays in the node)."""
    if c.nodes == 1:
        per, hosts = s.rank_bytes, c.gpus
    elif strategy == "fsdp+tp":
        fsdp = sum(b for name, _, b in s.parts if not name.startswith("tp "))
        per, hosts = tp_ranks(c, strategy) * fsdp, c.nodes
    else:
        per, hosts = s.rank_bytes, c.nodes
    return CommCost(s.comm_s, (per,) * hosts, (per,) * hosts, s.rounds, strategy)


def communication(w: Workload, c: Cluster, strategy: str, net_scale: float = 1.0) -> CommCost:
    """One step's communication of ``strategy`` on ``c`` (the network's bandwidth x net_scale)."""
    if strategy not in STRATEGIES:
        raise ConfigError(f"--strategy must be one of {', '.join(STRATEGIES)}; got {strategy!r}")
    if strategy in SHARDED:
        return _sharded_comm(sharded_step(w, c, strategy, "none", net_scale), c, strategy)
    inter = c.net_link(net_scale)
    intra = c.intra_link(net_scale if c.nodes == 1 else 1.0)
    if strategy == "ddp":
        return hierarchical_allreduce(w.grad_bytes, c.nodes, c.gpus_per_node, intra, inter,
                                      c.nics, c.allreduce)
    if strategy == "ps":
        # dlbench's ps over every rank; its chains cross the slowest link in the job.
        link = intra if c.nodes == 1 else Link(min(inter.bandwidth_Bps * c.nics,
                                                   intra.bandwidth_Bps), inter.latency_s)
        return ps_collectives(ps_shard_bytes(w.variables, c.gpus), link, c.ps_backend)
    # push-pull: parameter-server tasks as the 2017 TensorFlow cluster placed them, round robin
    # over variables (TensorFlow's replica_device_setter default), task t on node t % nodes.
    shards = c.ps_shards or c.nodes
    task_of = [i % shards for i in range(len(w.variables))]
    host_of = [t % c.nodes for t in task_of]
    if c.nodes == 1:
        return push_pull(w.variables, host_of, [c.gpus_per_node], intra)
    return push_pull(w.variables, host_of, [c.gpus_per_node] * c.nodes, inter.scaled(c.nics))


def predict(w: Workload, c: Cluster, strategy: str = "ddp", overlap: str = "none",
            net_scale: float = 1.0) -> Prediction:
    """The predicted step of ``strategy`` on ``c`` for workload ``w``."""
    if overlap not in OVERLAPS:
        raise ConfigError(f"--overlap must be none or full, got {overlap!r}")
    if strategy in SHARDED:
        eff = "none" if strategy == "tp" else overlap
        step = sharded_step(w, c, strategy, eff, net_scale)
        notes = ("tensor parallelism's all-reduces are on the critical path: no overlap",) \
            if strategy == "tp" and overlap == "full" else ()
        return Prediction(w, c, strategy, eff, _sharded_comm(step, c, strategy), step.step_s,
                          notes, tp=tp_ranks(c, strategy), gpu_compute_s=step.compute_s)
    comm = communication(w, c, strategy, net_scale)
    notes = []
    eff_overlap = overlap
    if strategy == "ps" and overlap == "full":
        eff_overlap = "none"
        notes.append("dlbench's ps exchanges after the backward pass: no overlap")
    if eff_overlap == "none" or c.gpus == 1:
        step = w.compute_s + comm.time_s
    else:
        bwd = w.compute_s * w.backward_fraction
        step = w.compute_s - bwd + max(bwd, comm.time_s)
    return Prediction(w, c, strategy, eff_overlap, comm, step, tuple(notes))


@dataclass(frozen=True)
class Hiding:
    """Where communication stops hiding (overlap full) or costs 10% (overlap none)."""

    strategy: str
    overlap: str
    budget_s: float                  # the compute time communication may take
    latency_s: float                 # the part of comm no bandwidth removes
    bytes_per_Bps: float             # comm = latency + this / bandwidth multiplier
    needed_Bps: float | None         # network (or intra-node) payload bandwidth to fit the budget
    max_nodes: int | None            # the largest node count (doubling) still within budget

    @property
    def possible(self) -> bool:
        return self.needed_Bps is not None


def hiding(w: Workload, c: Cluster, strategy: str, overlap: str) -> Hiding:
    """The bandwidth at which communication fits its budget, and the node count where it stops.

    Budget: the backward pass with overlap ``full``; 10% of the compute (90% efficiency) with
    ``none``, where communication never hides. Communication is linear in 1/bandwidth
    (``latency + V / (k B)``), so two evaluations give both parts.
    """
    if strategy in SHARDED:
        raise ConfigError(f"where communication stops hiding is not modelled for {strategy}")
    eff = "none" if strategy == "ps" else overlap
    budget = w.compute_s * (w.backward_fraction if eff == "full" else 0.1)
    t1 = communication(w, c, strategy, 1.0).time_s
    t2 = communication(w, c, strategy, 2.0).time_s
    v = 2 * (t1 - t2)                 # seconds of bandwidth term at scale 1
    lat = max(0.0, t1 - v)
    link = c.net_link() if c.nodes > 1 else c.intra_link()
    needed = None if lat >= budget else (v * link.bandwidth_Bps / (budget - lat) if v > 0
                                         else 0.0)
    max_nodes = None
    n = 1
    while n <= MAX_NODES:
        if communication(w, replace(c, nodes=n), strategy).time_s > budget:
            break
        max_nodes = n
        n *= 2
    return Hiding(strategy, eff, budget, lat, v, needed, max_nodes)

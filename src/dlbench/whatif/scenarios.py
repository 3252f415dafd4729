"""The what-if scenarios ``dlbench whatif`` asks for: workloads from records or given figures,
clusters over named or measured links, their predictions, the model against measured runs, and
the 2017 parameter-server cluster. Nothing here prints; ``dlbench.report.network`` lays it out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from dlbench.config import ConfigError
from dlbench.store import Store, StoreError
from dlbench.whatif import check
from dlbench.whatif.check import check_net, check_scaling
from dlbench.whatif.inputs import compute_inputs, link_from_comm, model_gradients, model_shape
from dlbench.whatif.model import SHARDED, Cluster, Workload, hiding, predict
from dlbench.whatif.networks import Network, custom_network, get_network
from dlbench.whatif.patterns import Link
from dlbench.whatif.sharded import dtype_bytes

DEFAULT_NETWORKS = ("10gbe", "100gbe", "ib-ndr")
DEFAULT_NODES = (1, 2, 4, 8)
DEFAULT_GPUS_PER_NODE = (8,)
#: The precision the sharded strategies are predicted in when neither a record nor --precision
#: says: FSDP gathers bf16 parameters, TP all-reduces bf16 activations.
SHARDED_PRECISION = "bf16"


def stored_records(path: str) -> list:
    """Every record of the store at ``path`` (an error that names the flag if there is none)."""
    if not Path(path).exists():
        raise StoreError(f"no result store at {path}; pass one with --db")
    with Store(path) as store:
        return store.results()


def intra_link(intra: str, busbw_from: str | None = None) -> Network:
    """The link between GPUs of a node: a named one, or the busbw and latency that
    ``dlbench comm`` measured (the newest all-reduce records in ``busbw_from``)."""
    if not busbw_from:
        return get_network(intra)
    m = link_from_comm(stored_records(busbw_from))
    return Network(name=f"measured busbw ({m.ranks} ranks, {m.backend})", kind="intra",
                   bandwidth_Bps=m.bandwidth_Bps, latency_s=m.latency_s, efficiency=1.0,
                   source=f"dlbench comm record {m.record_id}: busbw of "
                          f"{m.size_bytes} B all_reduce",
                   latency_source="dlbench comm: smallest all_reduce time / 2(n-1)")


def workloads(models: Sequence[str], *, step_ms: Sequence[float] = (),
              throughput: Sequence[float] = (), batch: int | None = None,
              precision: str | None = None, db: str | None = None, record: str | None = None,
              grad_mb: float | None = None, bytes_per_param: int = 4,
              backward_fraction: float = 2 / 3, sharded: bool = False,
              input_size: int | None = None) -> list:
    """One :class:`~dlbench.whatif.model.Workload` per model: its one-GPU compute time given
    (``step_ms`` or ``throughput``, one per model, with ``batch``), taken from a record id, or
    from the newest one-GPU training record in ``db``; gradient bytes from the model's
    parameters (or ``grad_mb``). ``sharded``: with the model's shape (units, width, sequence
    of ``input_size`` or the record's or the model's default) and the bytes FSDP gathers and
    TP all-reduces per element in ``precision`` (the record's where it comes from one;
    bf16 where neither says: dlbench's sharded runs are bf16)."""
    from dlbench.models import get_model  # imports torch: only where a model is named

    models = list(models)
    given = list(step_ms) or list(throughput)
    found = {}
    if record:
        with Store(db) as store:
            rec = store.get(record)
        found = compute_inputs([rec])
        models = models or list(found)
    elif not given:
        found = compute_inputs(stored_records(db), batch, precision)
    if not models:
        raise ConfigError("name the model(s) with -m (and give --step-ms, --throughput, or a "
                          "--db holding a one-GPU training record)")
    if given and len(given) != len(models):
        raise ConfigError(f"--step-ms/--throughput: {len(given)} value(s) for {len(models)} "
                          "model(s); give one per model")
    out = []
    for i, m in enumerate(models):
        name = get_model(m).name
        if given:
            if not batch:
                raise ConfigError("-b/--batch-size is needed with --step-ms/--throughput")
            compute = step_ms[i] / 1e3 if step_ms else batch / throughput[i]
            size, source = batch, "given"
            prec, seq = precision, input_size
        else:
            inp = found.get(name)
            if inp is None:
                raise ConfigError(f"no one-GPU training record of {name} in {db}; measure "
                                  f"one ('dlbench throughput -m {name}') or give --step-ms")
            compute, size, source = inp.compute_s, inp.batch, f"{inp.kind} {inp.record_id}"
            prec, seq = inp.precision or precision, input_size or inp.input_size
        grad, variables = model_gradients(name, bytes_per_param=bytes_per_param)
        if grad_mb:
            grad, variables = grad_mb * 1e6, ()
        extra = {}
        if sharded:
            b = dtype_bytes(prec or SHARDED_PRECISION)
            extra = dict(shape=model_shape(name, seq), param_bytes=b, act_bytes=b)
        out.append(Workload(compute_s=compute, grad_bytes=grad, batch=size,
                            variable_bytes=tuple(float(v) for v in variables),
                            backward_fraction=backward_fraction, name=name, source=source,
                            units_per_sample=_units_per_sample(name, seq), **extra))
    return out


def networks(names: Sequence[str], bandwidth: str | None = None,
             latency: str | None = None) -> list[Network]:
    """The networks between nodes: the named ones (default: 10gbe, 100gbe, ib-ndr, unless a
    ``bandwidth`` of one's own is given), plus that one."""
    nets = [get_network(n) for n in (names or ([] if bandwidth else DEFAULT_NETWORKS))]
    if bandwidth:
        nets.append(custom_network(bandwidth, latency or "0us"))
    return nets


@dataclass
class Predictions:
    """Every prediction; ``detail`` the same with each one-node cluster once (it does not
    depend on the network); ``hiding`` per workload, strategy and network, on the biggest
    cluster: (workload, cluster, Hiding)."""
    all: list = field(default_factory=list)
    detail: list = field(default_factory=list)
    hiding: list = field(default_factory=list)


def predict_all(workloads: Sequence, nets: Sequence[Network], intra: Network, *,
                nodes: Sequence[int] = DEFAULT_NODES,
                gpus_per_node: Sequence[int] = DEFAULT_GPUS_PER_NODE,
                strategies: Sequence[str] = ("ddp",), overlap: str = "full", nics: int = 1,
                ps_shards: int | None = None, allreduce: str = "ring",
                ps_backend: str = "nccl", tp: int | None = None) -> Predictions:
    """Each workload x strategy x network x cluster (nodes x GPUs per node), predicted;
    ``tp``: fsdp+tp's TP degree (None: the GPUs per node)."""
    out = Predictions()
    for w in workloads:
        for s in strategies:
            for net in nets:
                clusters = [Cluster(n, g, net, intra, nics=nics, ps_shards=ps_shards,
                                    allreduce=allreduce, ps_backend=ps_backend,
                                    tp=tp if s == "fsdp+tp" else None)
                            for n in nodes for g in gpus_per_node]
                out.all += [predict(w, c, s, overlap) for c in clusters]
                biggest = max(clusters, key=lambda c: (c.gpus, c.nodes))
                if s not in SHARDED:   # their exposed time is not one budget's worth
                    out.hiding.append((w, biggest, hiding(w, biggest, s, overlap)))
                if all(c.nodes == 1 for c in clusters):
                    break   # one node: the network plays no part
    # A one-node cluster does not depend on the network: listed once in the detail (the
    # classic-CNN layout repeats it in every network's row, as its own layout does).
    seen = set()
    for p in out.all:
        key = (p.workload.name, p.strategy, p.cluster.gpus_per_node,
               p.cluster.nodes if p.cluster.nodes > 1 else None,
               p.cluster.network.name if p.cluster.nodes > 1 else None)
        if key not in seen:
            seen.add(key)
            out.detail.append(p)
    return out


def _units_per_sample(name: str, seq: int | None) -> int:
    """A sample of ``name`` in its throughput's unit: a language model's sequence counts its
    tokens (the record's sequence length, else the model's), an image one."""
    from dlbench.models import get_model  # imports torch: only where a model is named
    spec = get_model(name)
    if spec.unit != "tokens":
        return 1
    if not (seq or spec.input_size):
        raise ConfigError(f"{name}: its throughput counts tokens and its sequence length is not "
                          "known: give --seq-len")
    return seq or spec.input_size


def units(workloads: Sequence) -> str:
    """What the workloads' throughput counts: ``images``, ``tokens``, or both (``images/tokens``)."""
    from dlbench.models import get_model  # imports torch: only where a model is named
    return "/".join(sorted({get_model(w.name).unit for w in workloads}))


def prediction_dict(p) -> dict:
    """One prediction as JSON, labelled as predicted."""
    return {"predicted": True, "model": p.workload.name, "strategy": p.strategy,
            "overlap": p.overlap, "cluster": p.cluster.label, "gpus": p.cluster.gpus,
            "compute_s": p.compute_s, "compute_source": p.workload.source,
            "comm_s": p.comm.time_s, "step_s": p.step_s, "throughput": p.throughput,
            "factor": p.factor, "efficiency": p.efficiency, "busiest_bytes": p.comm.busiest_bytes,
            "hidden": p.hidden, "exposed_s": p.exposed_s, "tp_ranks": p.tp,
            "units_per_sample": p.workload.units_per_sample}


# -- the model against measurements -------------------------------------------------------------
def scaling_links(intra: str, busbw_from: str | None = None
                  ) -> tuple[Callable[[str, int], Link | None], str]:
    """(link per interconnect profile and GPU count, what it is): with ``busbw_from``, the
    all-reduce busbw ``dlbench comm`` measured under that profile at that rank count (a profile
    or count it never measured gives None: left out of the check); else ``intra`` for the
    default profile."""
    if not busbw_from:
        named = intra_link(intra)
        link = Link(named.payload_Bps, named.latency_s)
        return (lambda profile, n: link if profile == "default" else None), named.name
    comm = stored_records(busbw_from)
    cache: dict = {}

    def link_for(profile: str, n: int) -> Link | None:
        if (profile, n) not in cache:
            try:
                m = link_from_comm(comm, interconnect=profile, ranks=n)
                cache[(profile, n)] = Link(m.bandwidth_Bps, m.latency_s)
            except ConfigError:
                cache[(profile, n)] = None
        return cache[(profile, n)]
    return link_for, "all_reduce busbw measured by dlbench comm, per profile and GPU count"


@dataclass
class CheckResult:
    """The model against ``dlbench net`` rows and ``dlbench scale`` rows (CheckRow each)."""
    net: list = field(default_factory=list)
    scaling: list = field(default_factory=list)
    scaling_link: str = ""
    any_scaling: bool = False       # the store held scaling records (checked or not)


def check_against(db: str, *, intra: str = "nvlink4", busbw_from: str | None = None,
                  bytes_per_param: int = 4, backward_fraction: float = 2 / 3) -> CheckResult:
    """Prediction against measurement for the net and scaling records in ``db``."""
    recs = stored_records(db)
    out = CheckResult(net=check_net(recs, backward_fraction))
    scaling = [r for r in recs if r.kind == "scaling" and r.ok]
    out.any_scaling = bool(scaling)
    if scaling:
        grads = {m: model_gradients(m, bytes_per_param=bytes_per_param)[0]
                 for m in {r.config.model for r in scaling}}
        shapes = {m: model_shape(m) for m in {r.config.model for r in scaling
                                              if r.config.strategy in SHARDED}}
        link_for, out.scaling_link = scaling_links(intra, busbw_from)
        out.scaling = check_scaling(scaling, link_for, grads, backward_fraction, shapes)
    return out


# -- the 2017 parameter-server cluster ----------------------------------------------------------
#: Its networks: 1 GbE, 10 GbE and InfiniBand FDR (used as IPoIB).
PS_CLUSTER_NETWORKS = ("1gbe", "10gbe", "ib-fdr")


@dataclass
class PsCluster:
    """The 2017 distributed-TensorFlow cluster (5 servers x 4 GPUs, 10 parameter-server tasks)
    predicted: rows per network and compute time, the compute the observed 2.5 Gbit/s implies,
    and at that compute 1 GbE's slowdown over InfiniBand and hours per 100,000 iterations."""
    rows: list
    implied_compute_s: float
    slowdown_1gbe: float
    hours_1gbe: float
    observed_hours_1gbe: float


def ps_cluster() -> PsCluster:

    nets = [get_network(n) for n in PS_CLUSTER_NETWORKS]
    implied = round(check.ps_cluster_implied_compute(nets[2]), 4)
    rows = check.ps_cluster_rows(nets, sorted({0.05, 0.1, implied}))
    by = {(r.network, r.compute_s): r for r in rows}
    return PsCluster(rows=rows, implied_compute_s=implied,
                     slowdown_1gbe=by[("1gbe", implied)].step_s / by[("ib-fdr", implied)].step_s,
                     hours_1gbe=by[("1gbe", implied)].step_s * 1e5 / 3600,
                     observed_hours_1gbe=check.PS_CLUSTER_1GBE_STEP_S * 1e5 / 3600)

"""Communication patterns of data-parallel training under the alpha-beta cost model. Pure.

Every message costs ``alpha + bytes / beta``: ``alpha`` the link's latency, ``beta`` its payload
bandwidth per direction. Links are full duplex (a host sends and receives at ``beta`` at once) and
the switch is non-blocking, so a phase of a collective lasts as long as its busiest port needs.
Each function returns a :class:`CommCost`: the time, the payload bytes each host sends and
receives, and the count of latency terms (sequential message rounds).

Patterns (G = gradient bytes, n = hosts or ranks):

- ring all-reduce: reduce-scatter then all-gather, 2(n-1) steps of G/n: each host sends and
  receives 2(n-1)/n x G (nccl-tests' busbw factor), time 2(n-1) alpha + 2(n-1)/n G / beta;
- tree all-reduce (NCCL's double binary tree, Sanders, Speck and Traeff, "Two-tree algorithms
  for full bandwidth broadcast, reduction and scan", Parallel Computing 2009): each host sends
  and receives about 2G, pipelined, in 2 log2(n) latency steps: better than the ring only where
  latency dominates;
- ``ps_collectives``: dlbench's own parameter server (:mod:`dlbench.workloads.ps`): for every
  shard, a reduce to its owner then a broadcast from it, one after the other, with the algorithms
  the backend uses: gloo (ring reduce-scatter + gather to the root; binomial-tree broadcast, as in
  gloo/reduce.cc and gloo/broadcast.cc) or NCCL (pipelined ring chains);
- ``push_pull``: the parameter servers of the 2017 distributed-TensorFlow cluster
  (TensorFlow's SyncReplicasOptimizer, ``whatif --ps-cluster``): every
  worker pushes each variable's gradient to the server task holding it, then pulls the updated
  variable back, point to point. The host of the biggest variable carries the most.
- ``hierarchical_allreduce``: N nodes x G GPUs: reduce-scatter inside each node, all-reduce of
  each GPU's 1/G share across nodes (the node's NICs shared by its G GPUs), all-gather inside.
- ``ring_allgather`` / ``ring_reduce_scatter``: half a ring all-reduce each, n-1 steps of G/n
  (G the whole tensor): each host sends and receives (n-1)/n x G (nccl-tests' busbw factor for
  both), time (n-1) alpha + (n-1)/n G / beta. FSDP's collectives (:mod:`~dlbench.whatif.sharded`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Link:
    """What the cost model needs of a link: payload bytes/s per direction, and latency (s)."""

    bandwidth_Bps: float
    latency_s: float

    def __post_init__(self) -> None:
        if not self.bandwidth_Bps > 0 or self.latency_s < 0:
            raise ValueError("a link needs bandwidth > 0 and latency >= 0")

    def scaled(self, factor: float) -> "Link":
        return Link(self.bandwidth_Bps * factor, self.latency_s)


@dataclass(frozen=True)
class CommCost:
    """One step's communication: time, payload bytes per host (sent, received), latency terms."""

    time_s: float
    sent: tuple[float, ...]
    received: tuple[float, ...]
    rounds: int
    pattern: str

    @property
    def busiest(self) -> int:
        """Index of the host that carries the most in one direction."""
        load = [max(s, r) for s, r in zip(self.sent, self.received)]
        return max(range(len(load)), key=lambda i: load[i]) if load else 0

    @property
    def busiest_bytes(self) -> float:
        i = self.busiest
        return max(self.sent[i], self.received[i]) if self.sent else 0.0


def alpha_beta(nbytes: float, link: Link, rounds: int = 1) -> float:
    """``rounds`` x latency + bytes / bandwidth: the cost of ``rounds`` sequential messages
    carrying ``nbytes`` in all over one link."""
    return rounds * link.latency_s + nbytes / link.bandwidth_Bps


def _none(n: int, pattern: str) -> CommCost:
    return CommCost(0.0, (0.0,) * n, (0.0,) * n, 0, pattern)


def ring_allreduce(nbytes: float, n: int, link: Link) -> CommCost:
    if n <= 1:
        return _none(max(n, 1), "ring")
    per_host = 2 * (n - 1) / n * nbytes
    rounds = 2 * (n - 1)
    return CommCost(alpha_beta(per_host, link, rounds), (per_host,) * n, (per_host,) * n, rounds,
                    "ring")


def ring_allgather(nbytes: float, n: int, link: Link, pattern: str = "all-gather") -> CommCost:
    """A ring all-gather of a tensor of ``nbytes`` in all (each host starts with ``nbytes / n``)."""
    if n <= 1:
        return _none(max(n, 1), pattern)
    per_host = (n - 1) / n * nbytes
    return CommCost(alpha_beta(per_host, link, n - 1), (per_host,) * n, (per_host,) * n, n - 1,
                    pattern)


def ring_reduce_scatter(nbytes: float, n: int, link: Link) -> CommCost:
    """A ring reduce-scatter of ``nbytes`` (each host ends with its reduced ``nbytes / n``): the
    all-gather's traffic in the other order, so its cost."""
    return ring_allgather(nbytes, n, link, "reduce-scatter")


def tree_allreduce(nbytes: float, n: int, link: Link) -> CommCost:
    if n <= 2:  # two hosts: the tree is the ring (each sends G once, in 2 steps)
        c = ring_allreduce(nbytes, n, link)
        return CommCost(c.time_s, c.sent, c.received, c.rounds, "tree")
    rounds = 2 * math.ceil(math.log2(n))
    per_host = 2 * nbytes
    return CommCost(alpha_beta(per_host, link, rounds), (per_host,) * n, (per_host,) * n, rounds,
                    "tree")


def allreduce(nbytes: float, n: int, link: Link, algorithm: str = "ring") -> CommCost:
    if algorithm == "ring":
        return ring_allreduce(nbytes, n, link)
    if algorithm == "tree":
        return tree_allreduce(nbytes, n, link)
    raise ValueError(f"all-reduce algorithm must be ring or tree, got {algorithm!r}")


def _binomial_sends(n: int, root: int) -> list[int]:
    """How many copies each rank sends in gloo's binomial-tree broadcast from ``root``
    (gloo/broadcast.cc: virtual rank v sends at round i when v's low bits are clear)."""
    dim = math.ceil(math.log2(n)) if n > 1 else 0
    sends = [0] * n
    mask = (1 << dim) - 1
    for i in range(dim):
        mask ^= 1 << i
        for v in range(n):
            if v & mask:
                continue
            peer = v ^ (1 << i)
            if peer < n and not v & (1 << i):
                sends[(v + root) % n] += 1
    return sends


def _binomial_span(n: int) -> float:
    """How many times g / beta gloo's binomial broadcast of g bytes takes to finish.

    gloo/broadcast.cc: a rank sends nothing before it has received the whole buffer, then
    issues all its sends at once; they share its link, so they all end together, ``copies``
    transfers later. Virtual rank v receives from v - 2^hb(v) (hb = its highest set bit) and sends
    to v + 2^i for every i above hb(v) with v + 2^i < n. The root's copies slow its first child,
    which forwards only then: with 4 ranks 3 g / beta, not the 2 that sequential rounds suggest.
    """
    if n <= 1:
        return 0.0
    dim = math.ceil(math.log2(n))
    received = {0: 0.0}
    span = 0.0
    for v in range(n):   # every v's parent is smaller, so it is known by then
        hb = v.bit_length() - 1
        children = [v + (1 << i) for i in range(hb + 1, dim) if v + (1 << i) < n]
        done = received[v] + len(children)
        for c in children:
            received[c] = done
        span = max(span, done)
    return span


def ps_collectives(shard_bytes: Sequence[float], link: Link, backend: str = "gloo") -> CommCost:
    """dlbench's ps: per shard (rank r owns ``shard_bytes[r]``), reduce to r then broadcast from r.

    The collectives run one after the other (each ``dist.reduce``/``dist.broadcast`` blocks), so
    times add. gloo's reduce is a ring reduce-scatter (n-1 steps of g/n, every host at once)
    followed by a gather of the n-1 other chunks into the root's one link; its broadcast is a
    binomial tree in which every rank sends its copies at once once it holds the buffer
    (:func:`_binomial_span`).
    NCCL's reduce and broadcast are pipelined chains through the ring: g / beta plus n-1
    latencies each.
    """
    n = len(shard_bytes)
    sent, recv = [0.0] * n, [0.0] * n
    time_s, rounds = 0.0, 0
    for r, g in enumerate(shard_bytes):
        if g <= 0 or n == 1:
            continue   # ParameterServer skips a rank that owns nothing
        if backend == "gloo":
            chunk = g / n
            for h in range(n):   # reduce-scatter
                sent[h] += (n - 1) * chunk
                recv[h] += (n - 1) * chunk
            time_s += (n - 1) * (link.latency_s + chunk / link.bandwidth_Bps)
            for h in range(n):   # gather to the root
                if h != r:
                    sent[h] += chunk
            recv[r] += (n - 1) * chunk
            time_s += link.latency_s + (n - 1) * chunk / link.bandwidth_Bps
            copies = _binomial_sends(n, r)   # broadcast
            for h in range(n):
                sent[h] += copies[h] * g
                if h != r:
                    recv[h] += g
            dim = math.ceil(math.log2(n))
            time_s += dim * link.latency_s + _binomial_span(n) * g / link.bandwidth_Bps
            rounds += (n - 1) + 1 + dim
        elif backend == "nccl":
            # Reduce: a chain r+1 -> r+2 -> ... -> r-1 -> r; broadcast: r -> r+1 -> ... -> r-1.
            chain = [(r + 1 + k) % n for k in range(n - 1)]
            for a, b in zip(chain, chain[1:] + [r]):       # reduce hops
                sent[a] += g
                recv[b] += g
            for a, b in zip([r] + chain[:-1], chain):      # broadcast hops
                sent[a] += g
                recv[b] += g
            time_s += 2 * ((n - 1) * link.latency_s + g / link.bandwidth_Bps)
            rounds += 2 * (n - 1)
        else:
            raise ValueError(f"backend must be gloo or nccl, got {backend!r}")
    return CommCost(time_s, tuple(sent), tuple(recv), rounds, f"ps ({backend})")


def push_pull(variable_bytes: Sequence[float], variable_host: Sequence[int],
              workers_per_host: Sequence[int], link: Link) -> CommCost:
    """TensorFlow's synchronous parameter servers (the 2017 cluster of ``--ps-cluster``): push
    every gradient to its variable's host, then pull every variable back, point to point;
    traffic inside a host does not touch its NIC.

    ``variable_host[v]`` is the host of the server task holding variable v;
    ``workers_per_host[h]`` the workers (GPUs, one worker task each) on host h. The push phase
    ends when the busiest port has moved its bytes, then the pull phase likewise.
    """
    hosts = len(workers_per_host)
    total_workers = sum(workers_per_host)
    local = [0.0] * hosts          # bytes of the variables each host holds
    for b, h in zip(variable_bytes, variable_host):
        local[h] += b
    total = float(sum(variable_bytes))
    push_in = [(total_workers - w) * local[h] for h, w in enumerate(workers_per_host)]
    push_out = [w * (total - local[h]) for h, w in enumerate(workers_per_host)]
    # The pull mirrors the push: what came in as gradients goes out as variables.
    t_push = max(max(i, o) for i, o in zip(push_in, push_out)) / link.bandwidth_Bps
    t = 2 * link.latency_s + 2 * t_push
    sent = tuple(o + i for i, o in zip(push_in, push_out))
    return CommCost(t, sent, sent, 2, "push-pull")


def hierarchical_allreduce(nbytes: float, nodes: int, gpus: int, intra: Link, inter: Link,
                           nics: int = 1, algorithm: str = "ring") -> CommCost:
    """N nodes x G GPUs: intra-node reduce-scatter, inter-node all-reduce of 1/G each (the G
    concurrent all-reduces share the node's ``nics`` NICs), intra-node all-gather.

    ``sent``/``received`` are per *node* on the network.
    """
    if nodes <= 1:
        c = allreduce(nbytes, gpus, intra, algorithm)
        return CommCost(c.time_s, (0.0,), (0.0,), c.rounds, f"{algorithm} (one node)")
    if gpus <= 1:
        c = allreduce(nbytes, nodes, inter.scaled(nics), algorithm)
        return CommCost(c.time_s, c.sent, c.received, c.rounds, f"{algorithm} across nodes")
    rs = (gpus - 1) * (intra.latency_s + nbytes / gpus / intra.bandwidth_Bps)
    # Each GPU's 1/G share crosses the network; the node's NICs carry all G shares at once.
    cross = allreduce(nbytes / gpus, nodes, inter.scaled(nics / gpus), algorithm)
    ag = rs
    per_node = tuple(s * gpus for s in cross.sent)
    return CommCost(rs + cross.time_s + ag, per_node, per_node,
                    2 * (gpus - 1) + cross.rounds, f"hierarchical {algorithm}")

"""The sharded strategies under the alpha-beta cost: FSDP's all-gathers and reduce-scatters, tensor
parallelism's per-layer all-reduces, the step time they leave. Pure: figures in, figures out.

**FSDP** (ZeRO-3; PyTorch's FSDP2 as :mod:`dlbench.workloads.fsdp` applies it). The units are the
blocks of the model's repeated stack (a transformer's layers), each sharded on its own, and the
root (embeddings, head, final norm: what is left). Per step, on n ranks:

- forward: each unit's parameters all-gathered just before it runs, in the gather dtype
  (``param_bytes``: 2 for bf16/fp16, 4 for fp32/tf32);
- backward: each *block's* parameters all-gathered again: FSDP2 frees a unit's gathered
  parameters after its forward (``reshard_after_forward=True``), the default for every unit but
  the root, whose parameters stay gathered to the end of the step;
- backward: each unit's gradients reduce-scattered in fp32 (``reduce_bytes`` 4: dlbench's reduce
  dtype whatever the precision).

Every collective is a ring over the whole unit (n-1 steps of 1/n each: (n-1) latencies, (n-1)/n
of the unit's bytes per rank). With P parameters, P_root of them in the root, a rank sends (and
receives) per step

    (n-1)/n x [(2P - P_root) x param_bytes + P x reduce_bytes]

-- for a model all in blocks, 2 all-gathers of P x param_bytes and a reduce-scatter of
P x reduce_bytes: at P = 1e9, bf16, 2 ranks, 2 GB of all-gather and 2 GB of reduce-scatter.

Overlap ``full``: FSDP2 runs a unit's all-gather on its own stream ahead of the compute that needs
it (the next block's in forward, as the CPU runs ahead of the GPU; the next block's in backward,
prefetched explicitly) and a block's reduce-scatter as soon as its backward is done, so
communication runs beside the compute of the neighbouring block. The model: one link, the
collectives on it in issue order; each unit's compute lasts the longer of itself and the
collectives issued beside it:

    forward  = AG(root) + AG(b_1) + sum_i max(f_i, AG(b_i+1)) + f_root
    backward = max(g_root, AG(b_L)) + sum_i=L..1 max(g_i, AG(b_i-1) + RS(b_i+1))
               + RS(b_1) + RS(root)

f_u and g_u are unit u's forward and backward compute: the one-GPU step split forward
(1 - ``backward_fraction``) and backward, then over the units in proportion to their parameters
that take part in a matrix product (a transformer layer's FLOPs per token are 6x its matmul
parameters; attention's sequence-squared term and an embedding's table lookup are left out; a
head tied to the embedding counts). The root's and the first block's all-gathers come before any
compute and the last two reduce-scatters after it: always exposed. The head's compute is at the
end of forward and the start of backward; the optimizer step counts with the rest of the compute
(FSDP's optimizer updates the local shards: no collective). Overlap ``none``: step = compute +
every collective.

**Tensor parallelism** (Megatron-LM: Shoeybi et al., "Megatron-LM: Training Multi-Billion
Parameter Language Models Using Model Parallelism", 2019, section 3): each layer's attention and
MLP split over t ranks, column-parallel then row-parallel. Every all-reduce moves one activation
or its gradient, batch x seq x hidden elements: in forward 2 per layer (the outputs of the
attention's output projection and of the MLP's down projection, in the activations' dtype,
``act_bytes``); in backward one per column-parallel projection, of its input's gradient.
Megatron-LM fuses q/k/v and gate/up, so 2; dlbench's layout (:mod:`dlbench.workloads.tp`,
torchtitan's plan for Llama) keeps q, k, v, gate and up apart, each its own all-reduce: 5. Their
dtype is the block input's (``grad_bytes``): fp32 under autocast alone, where the residual
stream stays fp32; the gather dtype under FSDP's mixed precision (fsdp+tp), which casts each
block's inputs. (Counted on 2 ranks of tiny_llama in bf16: tp issues 2 bf16 + 5 fp32
all-reduces per layer, fsdp+tp 7 bf16; ``tests/test_whatif_sharded.py`` counts them.) They sit
on the critical path: never overlapped. The embeddings, the norms and the head stay whole on
every rank (as :mod:`dlbench.workloads.tp` leaves them): no collectives of their own, and their
compute is not split. The compute per rank is the one-GPU step x (root's share + blocks'
share / t), the shares as for FSDP; the blocks' norms and element-wise work do not split
either, so this is optimistic.

**FSDP + TP** (2-D, as torchtitan and :mod:`dlbench.workloads.tp`): TP over t ranks, FSDP over
the d ranks of the same TP index: each block's parameters / t and the root's whole gathered and
reduced over d ranks, the compute as for TP, TP's all-reduces added unoverlapped.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dlbench.config import ConfigError
from dlbench.whatif.patterns import Link, ring_allgather, ring_allreduce, ring_reduce_scatter

#: Tensor parallelism's all-reduces per layer: forward (row-parallel outputs), backward
#: (column-parallel inputs' gradients) in dlbench's layout (q, k, v, gate, up apart:
#: ``dlbench.workloads.tp.COLWISE``) and in Megatron-LM's (q/k/v and gate/up fused).
TP_FORWARD_ALLREDUCES = 2
TP_BACKWARD_ALLREDUCES = 5
MEGATRON_BACKWARD_ALLREDUCES = 2

#: Bytes per element of the low-precision dtypes: FSDP's gather dtype
#: (``dlbench.workloads.fsdp.PARAM_DTYPES``) and autocast's activation dtype
#: (``dlbench.workloads.throughput.AUTOCAST_DTYPES``); any other precision keeps fp32 (4).
LOW_PRECISION_BYTES = {"bf16": 2, "fp16": 2}
#: FSDP's reduce dtype in dlbench, whatever the precision (fp32).
REDUCE_BYTES = 4
OVERLAPS = ("none", "full")


def dtype_bytes(precision: str | None) -> int:
    """Bytes per element of parameters gathered by FSDP and activations under autocast."""
    return LOW_PRECISION_BYTES.get(precision or "", 4)


@dataclass(frozen=True)
class ModelShape:
    """What the sharded strategies need of a model (counted on a ``meta`` build).

    Attributes:
        root_params: parameters outside the repeated blocks (embeddings, head, final norm):
            FSDP's root unit; the whole model when it has no repeated stack.
        block_params: parameters of each block of the repeated stack, in forward order.
        root_compute: the root's parameters that take part in a matrix product (its share of
            the compute); None: ``root_params``.
        block_compute: the same per block; empty: ``block_params``.
        hidden: width of the residual stream (the token embedding's dimension); None: not a
            transformer (no tensor parallelism).
        seq_len: tokens per sample; None for a model that does not take tokens.
        name: the model's name.
    """

    root_params: float
    block_params: tuple[float, ...] = ()
    root_compute: float | None = None
    block_compute: tuple[float, ...] = ()
    hidden: int | None = None
    seq_len: int | None = None
    name: str = "model"

    def __post_init__(self) -> None:
        if self.root_params < 0 or any(p < 0 for p in self.block_params):
            raise ConfigError("parameter counts must be >= 0")
        if self.block_compute and len(self.block_compute) != len(self.block_params):
            raise ConfigError("block_compute needs one entry per block")

    @property
    def params(self) -> float:
        return self.root_params + sum(self.block_params)

    @property
    def layers(self) -> int:
        return len(self.block_params)

    def compute_shares(self) -> tuple[float, tuple[float, ...]]:
        """(root's share, each block's share) of the compute, summing to 1."""
        root = self.root_params if self.root_compute is None else self.root_compute
        blocks = self.block_compute or self.block_params
        total = root + sum(blocks)
        if total <= 0:
            return 1.0, (0.0,) * self.layers
        return root / total, tuple(b / total for b in blocks)

    def split(self, t: int) -> "ModelShape":
        """Each rank's part when the blocks are split over ``t`` tensor-parallel ranks (the
        root stays whole on every rank)."""
        return replace(self, block_params=tuple(p / t for p in self.block_params),
                       block_compute=tuple(c / t for c in self.block_compute))

    def tp_compute(self, compute_s: float, t: int) -> float:
        """Each rank's compute when the blocks' matrix products split over ``t`` ranks."""
        root, blocks = self.compute_shares()
        return compute_s * (root + sum(blocks) / t)


@dataclass(frozen=True)
class ShardedStep:
    """One predicted step of a sharded strategy: compute per rank, communication, step time.

    ``parts`` names each kind of collective with (seconds, bytes each rank sends per step);
    ``rounds`` counts latency terms.
    """

    compute_s: float
    step_s: float
    parts: tuple[tuple[str, float, float], ...]
    rounds: int

    @property
    def comm_s(self) -> float:
        """Every collective's time, added (what the step would pay with no overlap)."""
        return sum(s for _, s, _ in self.parts)

    @property
    def rank_bytes(self) -> float:
        """Bytes each rank sends (and receives) per step."""
        return sum(b for _, _, b in self.parts)

    @property
    def exposed_s(self) -> float:
        return self.step_s - self.compute_s


def fsdp_bytes(shape: ModelShape, n: int, param_bytes: int = 2, reduce_bytes: int = REDUCE_BYTES,
               reshard_after_forward: bool = True) -> dict[str, float]:
    """Bytes each of ``n`` ranks sends (and receives) per step, per kind of collective."""
    f = (n - 1) / n if n > 1 else 0.0
    blocks = sum(shape.block_params)
    return {"all-gather forward": f * shape.params * param_bytes,
            "all-gather backward": f * blocks * param_bytes if reshard_after_forward else 0.0,
            "reduce-scatter": f * shape.params * reduce_bytes}


def fsdp_step(shape: ModelShape, compute_s: float, n: int, link: Link, *, param_bytes: int = 2,
              reduce_bytes: int = REDUCE_BYTES, backward_fraction: float = 2 / 3,
              overlap: str = "full", reshard_after_forward: bool = True) -> ShardedStep:
    """A step of FSDP on ``n`` ranks joined by ``link``: ``compute_s`` of compute per rank, the
    collectives of the module docstring, overlapped (``full``) or added (``none``)."""
    if overlap not in OVERLAPS:
        raise ConfigError(f"--overlap must be none or full, got {overlap!r}")
    if n < 1:
        raise ConfigError("FSDP needs at least one rank")

    def ag(p: float) -> float:
        return ring_allgather(p * param_bytes, n, link).time_s

    def rs(p: float) -> float:
        return ring_reduce_scatter(p * reduce_bytes, n, link).time_s

    blocks = shape.block_params
    nb = len(blocks)
    ag_fwd = [ag(p) for p in blocks]
    ag_bwd = ag_fwd if reshard_after_forward else [0.0] * nb
    rs_blocks = [rs(p) for p in blocks]
    ag_root, rs_root = ag(shape.root_params), rs(shape.root_params)
    volume = fsdp_bytes(shape, n, param_bytes, reduce_bytes, reshard_after_forward)
    parts = (("all-gather forward", ag_root + sum(ag_fwd), volume["all-gather forward"]),
             ("all-gather backward", sum(ag_bwd), volume["all-gather backward"]),
             ("reduce-scatter", rs_root + sum(rs_blocks), volume["reduce-scatter"]))
    collectives = (1 + nb) + (nb if reshard_after_forward else 0) + (1 + nb)
    rounds = collectives * (n - 1) if n > 1 else 0
    if overlap == "none":
        return ShardedStep(compute_s, compute_s + sum(s for _, s, _ in parts), parts, rounds)

    root_share, block_shares = shape.compute_shares()
    fwd_c, bwd_c = compute_s * (1 - backward_fraction), compute_s * backward_fraction

    def at(xs: list[float], i: int) -> float:
        return xs[i] if 0 <= i < len(xs) else 0.0

    forward = ag_root + at(ag_fwd, 0) + fwd_c * root_share
    forward += sum(max(fwd_c * s, at(ag_fwd, i + 1)) for i, s in enumerate(block_shares))
    backward = max(bwd_c * root_share, at(ag_bwd, nb - 1)) + at(rs_blocks, 0) + rs_root
    backward += sum(max(bwd_c * block_shares[i], at(ag_bwd, i - 1) + at(rs_blocks, i + 1))
                    for i in reversed(range(nb)))
    return ShardedStep(compute_s, forward + backward, parts, rounds)


def tp_activation_bytes(shape: ModelShape, batch: int, act_bytes: int = 2) -> float:
    """Bytes of one activation all-reduced by tensor parallelism: batch x seq x hidden."""
    if shape.hidden is None or shape.seq_len is None or shape.layers == 0:
        raise ConfigError(f"{shape.name}: tensor parallelism needs a transformer (a repeated "
                          "stack of layers, a token embedding and a sequence length)")
    return float(batch * shape.seq_len * shape.hidden * act_bytes)


def tp_step(shape: ModelShape, compute_s: float, batch: int, t: int, link: Link, *,
            act_bytes: int = 2, grad_bytes: int = 4,
            backward_allreduces: int = TP_BACKWARD_ALLREDUCES) -> ShardedStep:
    """A step of tensor parallelism over ``t`` ranks joined by ``link``, for a batch of
    ``batch`` samples shared by the ``t`` ranks: the blocks' compute / t, the root's whole, and
    per layer 2 all-reduces in forward (``act_bytes`` an element) and ``backward_allreduces``
    in backward (``grad_bytes``)."""
    if t < 1:
        raise ConfigError("tensor parallelism needs at least one rank")
    parts, rounds = [], 0
    for name, count, size in (("tp all-reduce forward", TP_FORWARD_ALLREDUCES, act_bytes),
                              ("tp all-reduce backward", backward_allreduces, grad_bytes)):
        one = ring_allreduce(tp_activation_bytes(shape, batch, size), t, link)
        k = count * shape.layers
        parts.append((name, k * one.time_s, k * one.sent[0]))
        rounds += k * one.rounds
    compute = shape.tp_compute(compute_s, t)
    step = compute + sum(s for _, s, _ in parts)
    return ShardedStep(compute, step, tuple(parts), rounds)


def fsdp_tp_step(shape: ModelShape, compute_s: float, batch: int, t: int, d: int, tp_link: Link,
                 dp_link: Link, *, param_bytes: int = 2, act_bytes: int = 2,
                 reduce_bytes: int = REDUCE_BYTES, backward_fraction: float = 2 / 3,
                 overlap: str = "full") -> ShardedStep:
    """FSDP over ``d`` ranks (``dp_link``) of each block's 1/t and the root, TP over ``t``
    (``tp_link``)."""
    f = fsdp_step(shape.split(t), shape.tp_compute(compute_s, t), d, dp_link,
                  param_bytes=param_bytes, reduce_bytes=reduce_bytes,
                  backward_fraction=backward_fraction, overlap=overlap)
    # FSDP's mixed precision casts each block's inputs: the backward all-reduces move them too.
    tp = tp_step(shape, compute_s, batch, t, tp_link, act_bytes=act_bytes, grad_bytes=act_bytes)
    return ShardedStep(f.compute_s, f.step_s + tp.comm_s, f.parts + tp.parts,
                       f.rounds + tp.rounds)

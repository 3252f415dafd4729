"""The what-if model of the sharded strategies (fsdp, tp, fsdp+tp): volumes and step times against
hand-computed cases, the check against scaling records, and the command."""

import json

import pytest

from dlbench.config import ConfigError
from dlbench.whatif.check import check_scaling, error_summary
from dlbench.whatif.model import Cluster, Workload, predict
from dlbench.whatif.networks import custom_network
from dlbench.whatif.patterns import Link, ring_allgather, ring_allreduce, ring_reduce_scatter
from dlbench.whatif.sharded import (
    ModelShape,
    MEGATRON_BACKWARD_ALLREDUCES,
    TP_BACKWARD_ALLREDUCES,
    TP_FORWARD_ALLREDUCES,
    dtype_bytes,
    fsdp_bytes,
    fsdp_step,
    fsdp_tp_step,
    tp_activation_bytes,
    tp_step,
)

# 1 MB/s and 1 ms, as in test_whatif.
L = Link(1e6, 1e-3)


def test_ring_allgather_and_reduce_scatter_are_half_an_allreduce():
    ag = ring_allgather(1e6, 4, L)
    # n-1 = 3 steps of G/n = 250 kB: each host sends and receives 750 kB.
    assert ag.sent == (750e3,) * 4 and ag.rounds == 3
    assert ag.time_s == pytest.approx(3e-3 + 0.75)
    rs = ring_reduce_scatter(1e6, 4, L)
    assert rs.time_s == ag.time_s and rs.pattern == "reduce-scatter"
    assert 2 * ag.time_s == pytest.approx(ring_allreduce(1e6, 4, L).time_s)
    assert ring_allgather(1e6, 1, L).time_s == 0


def test_fsdp_volume_of_a_billion_parameters_on_two_gpus():
    # P = 1e9, all in blocks, bf16 gathers, fp32 reduce, 2 ranks: each rank gathers the other
    # half twice (forward, backward) at 2 bytes and reduce-scatters half at 4 bytes.
    shape = ModelShape(root_params=0, block_params=(1e8,) * 10)
    v = fsdp_bytes(shape, 2, param_bytes=2)
    assert v == {"all-gather forward": 1e9, "all-gather backward": 1e9, "reduce-scatter": 2e9}
    assert sum(v.values()) == pytest.approx(0.5 * 1e9 * (2 * 2 + 4))
    # The root keeps its parameters gathered after forward: gathered once, not twice.
    rooted = ModelShape(root_params=2e8, block_params=(1e8,) * 8)
    assert fsdp_bytes(rooted, 2)["all-gather backward"] == pytest.approx(0.5 * 8e8 * 2)
    assert fsdp_bytes(rooted, 2, reshard_after_forward=False)["all-gather backward"] == 0
    # fp32 gathers 4 bytes; 8 ranks move 7/8 of each.
    assert fsdp_bytes(shape, 8, param_bytes=4)["all-gather forward"] == pytest.approx(7 / 8 * 4e9)
    assert fsdp_bytes(shape, 1) == {"all-gather forward": 0, "all-gather backward": 0,
                                    "reduce-scatter": 0}


def test_fsdp_step_overlapped_by_hand():
    # Root and two blocks of 1e8 parameters each, every one a third of the compute. 2 ranks at
    # 1 GB/s, no latency: AG(1e8 x 2 B) = 1e8 / 1e9 = 0.1 s, RS(1e8 x 4 B) = 0.2 s.
    shape = ModelShape(root_params=1e8, block_params=(1e8, 1e8))
    link = Link(1e9, 0.0)
    s = fsdp_step(shape, 3.0, 2, link, backward_fraction=2 / 3)
    # forward 1 s (1/3 per unit), backward 2 s (2/3 per unit):
    # forward  = AG(root) + AG(b1) + max(1/3, AG(b2)) + max(1/3, 0) + 1/3            = 1.2
    # backward = max(2/3, AG(b2)) + max(2/3, AG(b1)) + max(2/3, RS(b2)) + RS(b1) + RS(root) = 2.4
    assert s.step_s == pytest.approx(3.6)
    assert s.exposed_s == pytest.approx(0.6)
    assert s.comm_s == pytest.approx(0.3 + 0.2 + 0.6)
    assert s.rank_bytes == pytest.approx(0.5 * (3e8 * 2 + 2e8 * 2 + 3e8 * 4))
    assert s.rounds == 3 + 2 + 3                      # one ring step per collective at 2 ranks
    none = fsdp_step(shape, 3.0, 2, link, overlap="none")
    assert none.step_s == pytest.approx(3.0 + 1.1)
    # Ten times slower link: communication-bound, the block compute hides almost nothing.
    slow = fsdp_step(shape, 3.0, 2, Link(1e8, 0.0))
    # forward  = 1 + 1 + max(1/3, 1) + 1/3 + 1/3 ; backward = 1 + 1 + 2 + 2 + 2
    assert slow.step_s == pytest.approx(3 + 2 / 3 + 8)
    # One GPU gathers nothing: the step is the compute.
    assert fsdp_step(shape, 3.0, 1, link).step_s == pytest.approx(3.0)


def test_fsdp_latency_per_collective():
    # 2 blocks + root on 4 ranks: 3 forward all-gathers, 2 backward, 3 reduce-scatters, each
    # 3 ring steps; with no bytes only the latencies are left.
    shape = ModelShape(root_params=0, block_params=(0, 0))
    s = fsdp_step(shape, 1.0, 4, Link(1e9, 1e-3), overlap="none")
    assert s.rounds == 8 * 3
    assert s.step_s == pytest.approx(1.0 + 24e-3)


def test_fsdp_compute_shares_leave_out_embedding_lookups():
    # An untied embedding (a lookup) is in the root's parameters, not its compute.
    shape = ModelShape(root_params=3e8, root_compute=1e8, block_params=(1e8, 2e8))
    root, blocks = shape.compute_shares()
    assert root == pytest.approx(0.25) and blocks == pytest.approx((0.25, 0.5))
    assert shape.params == 6e8 and shape.layers == 2


def test_tp_allreduces_per_layer_by_hand():
    # batch 5 x 100 tokens x hidden 1000 x 2 bytes = 1 MB per activation all-reduce.
    shape = ModelShape(root_params=1e8, block_params=(1.5e8, 1.5e8), hidden=1000, seq_len=100)
    assert tp_activation_bytes(shape, 5, 2) == 1e6
    link = Link(1e9, 1e-5)
    # Megatron-LM's fused layout, all in bf16: 2 layers x (2 forward + 2 backward).
    s = tp_step(shape, 1.0, 5, 4, link, act_bytes=2, grad_bytes=2,
                backward_allreduces=MEGATRON_BACKWARD_ALLREDUCES)
    one = 6 * 1e-5 + 1.5e6 / 1e9            # ring over 4: 2(n-1) steps, 2(n-1)/n x A per rank
    assert s.comm_s == pytest.approx(8 * one)
    assert s.rank_bytes == pytest.approx(8 * 1.5e6)
    # The blocks' compute (3/4) splits over 4 ranks; the root's (1/4) stays whole.
    assert s.compute_s == pytest.approx(0.25 + 0.75 / 4)
    assert s.step_s == pytest.approx(s.compute_s + 8 * one)
    # dlbench's layout under autocast: 2 forward in bf16, 5 backward in fp32 (2 MB) per layer.
    d = tp_step(shape, 1.0, 5, 4, link, act_bytes=2)
    fp32 = 6 * 1e-5 + 3e6 / 1e9
    assert d.comm_s == pytest.approx(2 * (2 * one + 5 * fp32))
    assert d.rank_bytes == pytest.approx(2 * (2 * 1.5e6 + 5 * 3e6))
    assert d.rounds == 2 * 7 * 6
    with pytest.raises(ConfigError, match="transformer"):
        tp_step(ModelShape(root_params=1e6), 1.0, 1, 2, link)


def test_fsdp_tp_gathers_each_blocks_tp_shard_and_the_whole_root():
    shape = ModelShape(root_params=1e8, block_params=(2e8, 2e8), hidden=1000, seq_len=100)
    dp_link, tp_link = Link(1e9, 0.0), Link(1e10, 0.0)
    s = fsdp_tp_step(shape, 1.0, 5, 2, 2, tp_link, dp_link, overlap="none")
    fs = dict((name, b) for name, _, b in s.parts)
    # 2 dp ranks: half of (root 1e8 + blocks 4e8 / 2) forward, half of the blocks' shards again
    # backward, at 2 bytes; half of all 3e8 at 4 bytes reduce-scattered.
    assert fs["all-gather forward"] == pytest.approx(0.5 * 3e8 * 2)
    assert fs["all-gather backward"] == pytest.approx(0.5 * 2e8 * 2)
    assert fs["reduce-scatter"] == pytest.approx(0.5 * 3e8 * 4)
    # 2-rank ring: A per rank; under FSDP both directions move the gather dtype.
    assert fs["tp all-reduce forward"] == pytest.approx(2 * 2 * 1e6)
    assert fs["tp all-reduce backward"] == pytest.approx(2 * 5 * 1e6)
    compute = 1.0 * (0.2 + 0.8 / 2)
    assert s.compute_s == pytest.approx(compute)
    assert s.step_s == pytest.approx(compute + s.comm_s)


def test_dtype_bytes_follow_the_fsdp_and_autocast_dtypes():
    from dlbench.workloads.fsdp import PARAM_DTYPES
    from dlbench.workloads.throughput import AUTOCAST_DTYPES
    for table in (PARAM_DTYPES, AUTOCAST_DTYPES):
        for precision, dtype in table.items():
            assert dtype_bytes(precision) == dtype.itemsize
    assert dtype_bytes("fp32") == dtype_bytes("tf32") == dtype_bytes(None) == 4


def _shape():
    return ModelShape(root_params=2e8, block_params=(1e8,) * 8, hidden=2048, seq_len=2048)


def test_predict_fsdp_across_nodes_uses_the_nodes_nics_together():
    net = custom_network("8gbit", "1ms")           # 1 GB/s per NIC
    intra = custom_network("80gbit", "0us")        # 10 GB/s
    w = Workload(compute_s=1.0, grad_bytes=4e9, batch=2, shape=_shape())
    c = Cluster(2, 4, net, intra, nics=2)
    p = predict(w, c, "fsdp", "none")
    # One ring over 8 GPUs at min(2 NICs x 1 GB/s, 10 GB/s) = 2 GB/s and 1 ms per step.
    link = Link(2e9, 1e-3)
    want = fsdp_step(_shape(), 1.0, 8, link, overlap="none")
    assert p.step_s == pytest.approx(want.step_s)
    assert p.comm.busiest_bytes == pytest.approx(want.rank_bytes)   # per node, on the network
    assert p.comm.sent == (want.rank_bytes,) * 2
    assert p.factor == pytest.approx(8 * 1.0 / p.step_s)
    full = predict(w, c, "fsdp", "full")
    assert w.compute_s < full.step_s < p.step_s and not full.hidden


def test_predict_tp_shares_one_batch():
    intra = custom_network("80gbit", "0us")
    w = Workload(compute_s=1.0, grad_bytes=4e9, batch=2, shape=_shape())
    p = predict(w, Cluster(1, 4, intra, intra), "tp", "full")
    assert p.overlap == "none" and p.tp == 4 and p.notes
    step = tp_step(_shape(), 1.0, 2, 4, Link(1e10, 0.0), act_bytes=2)
    assert p.step_s == pytest.approx(step.step_s)
    assert p.compute_s == pytest.approx(0.2 + 0.8 / 4)
    # 4 GPUs train one batch of 2: throughput 2 / step, factor = 1-GPU step / step.
    assert p.throughput == pytest.approx(2 / p.step_s)
    assert p.factor == pytest.approx(1.0 / p.step_s)
    two_d = predict(w, Cluster(2, 4, intra, intra, tp=2), "fsdp+tp", "full")
    assert two_d.tp == 2 and two_d.throughput == pytest.approx(4 * 2 / two_d.step_s)
    with pytest.raises(ConfigError, match="--tp 3"):
        Cluster(1, 4, intra, intra, tp=3)
    with pytest.raises(ConfigError, match="shape"):
        predict(Workload(compute_s=1.0, grad_bytes=1.0), Cluster(1, 2, intra, intra), "fsdp")


def _scale(strategy, gpus, step, model="tiny_llama", tp=None, **base_kw):
    from dlbench.records.scaling import ScalingConfig, ScalingRecord
    from dlbench.records.throughput import ThroughputConfig
    base = ThroughputConfig(model=model, batch_size=2, device="cpu", precision="bf16", **base_kw)
    kw = {"tp": tp} if tp else {}
    cfg = ScalingConfig(base=base, gpus=gpus, strategy=strategy, **kw)
    return ScalingRecord(config=cfg, env={}, rank_step_times_s=((step,) * 4,) * gpus,
                         rank_samples_per_step=(2,) * gpus)


def test_check_fsdp_records_beside_perfect_scaling():
    shape = ModelShape(root_params=1e8, block_params=(1e8, 1e8), hidden=64, seq_len=32)
    recs = [_scale("fsdp", 1, 3.0), _scale("fsdp", 2, 3.7), _scale("ddp", 1, 2.9)]
    rows = check_scaling(recs, Link(1e9, 0.0), {"tiny_llama": 1}, shapes={"tiny_llama": shape})
    assert len(rows) == 1
    r = rows[0]
    assert r.strategy == "fsdp" and r.compute_s == 3.0     # its own one-GPU record, not ddp's
    # The hand-computed step of test_fsdp_step_overlapped_by_hand: 3.6 s overlapped, 4.1 s not.
    assert r.predicted_full_s == pytest.approx(3.6)
    assert r.predicted_none_s == pytest.approx(4.1)
    assert r.predicted_perfect_s == 3.0
    assert r.error_perfect == pytest.approx((3.0 - 3.7) / 3.7)
    assert r.error_full == pytest.approx((3.6 - 3.7) / 3.7)
    s = error_summary(rows)
    assert s["perfect scaling"] == pytest.approx(0.7 / 3.7) and s["full"] < s["perfect scaling"]
    # Without the model's shape, or without fsdp's one-GPU record and ddp's, no row.
    assert check_scaling(recs, Link(1e9, 0.0), {"tiny_llama": 1}) == []
    alone = check_scaling(recs[1:], Link(1e9, 0.0), {"tiny_llama": 1},
                          shapes={"tiny_llama": shape})
    assert alone[0].compute_s == 2.9                    # ddp's one-GPU record stands in
    assert check_scaling(recs[1:2], Link(1e9, 0.0), {"tiny_llama": 1},
                         shapes={"tiny_llama": shape}) == []


def test_check_pairs_a_run_with_a_one_gpu_run_of_the_same_levers():
    """A checkpointed two-GPU run recomputes its activations: predicted from a plain one-GPU
    run's compute, the recomputation would read as communication. It takes the one-GPU run
    of its own checkpointing policy, and without one it is left out."""
    shape = ModelShape(root_params=1e8, block_params=(1e8, 1e8), hidden=64, seq_len=32)
    sel = {"mode": "train", "checkpointing": True, "checkpoint_policy": "selective"}
    plain1, sel2 = _scale("fsdp", 1, 3.0), _scale("fsdp", 2, 4.5, **sel)
    link, g, shapes = Link(1e9, 0.0), {"tiny_llama": 1}, {"tiny_llama": shape}
    assert check_scaling([plain1, sel2], link, g, shapes=shapes) == []
    sel1 = _scale("fsdp", 1, 3.9, **sel)
    [row] = check_scaling([plain1, sel1, sel2], link, g, shapes=shapes)
    assert row.compute_s == 3.9 and row.record_id == sel2.id
    full2 = _scale("fsdp", 2, 4.8, mode="train", checkpointing=True)
    assert check_scaling([plain1, sel1, full2], link, g, shapes=shapes) == []


def _tp_ok():
    from dlbench.records.scaling import ScalingConfig
    from dlbench.records.throughput import ThroughputConfig
    try:
        ScalingConfig(base=ThroughputConfig(model="tiny_llama", batch_size=2, device="cpu"),
                      gpus=2, strategy="tp")
    except ConfigError:
        return False
    return True


def test_check_tp_and_fsdp_tp_records():
    if not _tp_ok():
        pytest.skip("ScalingConfig does not take --strategy tp yet")
    shape = ModelShape(root_params=1e8, block_params=(1e8, 1e8), hidden=1000, seq_len=100)
    link = Link(1e9, 0.0)
    recs = [_scale("ddp", 1, 3.0), _scale("tp", 2, 2.5), _scale("fsdp+tp", 4, 3.2, tp=2),
            _scale("fsdp", 1, 3.1)]
    rows = {r.strategy: r for r in check_scaling(recs, link, {"tiny_llama": 1},
                                                  shapes={"tiny_llama": shape})}
    tp = rows["tp"]
    # batch 2 x 100 x 1000 = 200k elements; a 2-rank ring moves each once: per layer 2 in
    # bf16 forward, 5 in fp32 backward.
    want = 3.0 * (1 / 3 + 2 / 3 / 2) + 2 * (2 * 4e5 + 5 * 8e5) / 1e9
    assert tp.compute_s == 3.0 and tp.predicted_none_s == pytest.approx(want)
    assert tp.predicted_full_s is None                  # never overlapped
    assert tp.predicted_perfect_s == pytest.approx(1.5)  # linear: 2 GPUs, one batch
    both = rows["fsdp+tp"]
    assert both.compute_s == 3.1                        # fsdp's one-GPU record stands in
    step = fsdp_tp_step(shape, 3.1, 2, 2, 2, link, link, overlap="full")
    assert both.predicted_full_s == pytest.approx(step.step_s)
    assert both.predicted_perfect_s == pytest.approx(3.1 / 2)


def test_model_shape_of_tiny_llama():
    from dlbench.whatif.inputs import model_shape
    s = model_shape("tiny_llama")
    # 2 blocks; the root: embedding 256 x 64, untied head 64 x 256, final norm 64.
    assert s.layers == 2 and s.hidden == 64 and s.seq_len == 32
    assert s.root_params == 2 * 256 * 64 + 64
    assert s.root_compute == 256 * 64 + 64              # the lookup table does no matmul
    assert s.params == 106_816
    assert model_shape("tiny_llama", 16).seq_len == 16
    assert model_shape("tiny_cnn").hidden is None        # not a transformer


def test_whatif_command_predicts_fsdp_and_tp(capsys):
    from dlbench.cli import main
    from dlbench.whatif.inputs import model_shape
    assert main(["whatif", "-m", "tiny_llama", "-b", "2", "--step-ms", "10", "--nodes", "1,2",
                 "--gpus-per-node", "2", "--network", "1gbe", "--strategy", "fsdp,tp,fsdp+tp",
                 "--overlap", "none", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    fsdp = [r for r in rows if r["strategy"] == "fsdp" and r["gpus"] == 2][0]
    shape = model_shape("tiny_llama")
    from dlbench.whatif.networks import get_network
    nv = get_network("nvlink4")
    want = fsdp_step(shape, 0.01, 2, Link(nv.payload_Bps, nv.latency_s), param_bytes=2,
                     overlap="none")
    assert fsdp["step_s"] == pytest.approx(want.step_s) and fsdp["predicted"]
    tp = [r for r in rows if r["strategy"] == "tp" and r["gpus"] == 2][0]
    assert tp["tp_ranks"] == 2 and tp["factor"] == pytest.approx(0.01 / tp["step_s"])
    assert {r["strategy"] for r in rows} == {"fsdp", "tp", "fsdp+tp"}
    assert main(["whatif", "-m", "tiny_llama", "-b", "2", "--step-ms", "10", "--nodes", "1",
                 "--gpus-per-node", "2", "--strategy", "ddp,fsdp"]) == 0
    out = capsys.readouterr().out
    assert "fsdp" in out and "FSDP gathers 2 bytes" in out


def test_whatif_check_command_reports_fsdp_and_perfect_scaling(tmp_path, capsys):
    from dlbench.cli import main
    from dlbench.store import Store
    db = str(tmp_path / "fsdp.db")
    recs = [_scale("fsdp", 1, 0.004), _scale("fsdp", 2, 0.0045)]
    with Store(db) as store:
        store.start_run("r1", "test", {}, "k", "cpu")
        for r in recs:
            store.add(r.with_run("r1"), "k")
    assert main(["whatif", "--check", "--db", db, "--intra", "pcie4"]) == 0
    out = capsys.readouterr().out
    assert "fsdp" in out and "perfect scaling" in out
    assert main(["whatif", "--check", "--db", db, "--intra", "pcie4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    row = data["scaling"][0]
    assert row["strategy"] == "fsdp" and row["predicted_perfect_s"] == pytest.approx(0.004)
    assert row["predicted_full_s"] > row["predicted_perfect_s"]
    assert "perfect scaling" in data["scaling_error"]


# -- the volumes against what PyTorch issues: one process, a fake 2-rank group ------------------
@pytest.fixture
def fake_group():
    import torch.distributed as dist
    try:
        from torch.testing._internal.distributed.fake_pg import FakeStore
    except ImportError:
        pytest.skip("this torch has no fake process group")
    if dist.is_initialized():
        pytest.skip("a process group is up already")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    yield dist
    dist.destroy_process_group()


def _train_step(model, spec):
    import torch
    x, y = spec.make_batch(2, "cpu")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)
    spec.loss(out, y).backward()


def test_fsdp_bytes_match_what_fsdp2_gathers_and_reduces(fake_group, monkeypatch):
    from dlbench.models import get_model
    from dlbench.whatif.inputs import model_shape
    from dlbench.workloads.fsdp import shard
    dist = fake_group
    seen = {"all_gather_single": [], "reduce_scatter_single": []}

    def spy(name, whole):
        real = getattr(dist, name)

        def call(*args, **kw):
            t = whole(args, kw)
            seen[name].append((t.numel() * t.element_size(), t.dtype))
            return real(*args, **kw)
        monkeypatch.setattr(dist, name, call)
    spy("all_gather_single", lambda a, k: a[0] if a else k["output_tensor"])  # the whole output
    spy("reduce_scatter_single", lambda a, k: k["input"] if "input" in k else a[1])
    spec = get_model("tiny_llama")
    model = shard(spec.build(), "bf16")
    _train_step(model, spec)
    for v in seen.values():
        v.clear()
    _train_step(model, spec)            # a steady step
    shape = model_shape("tiny_llama")
    # On n ranks a rank moves (n-1)/n of each whole tensor: at 2, half.
    want = fsdp_bytes(shape, 2, param_bytes=2)
    gathers, reduces = seen["all_gather_single"], seen["reduce_scatter_single"]
    # root + 2 blocks forward, 2 blocks again backward; a reduce-scatter per unit.
    assert len(gathers) == 1 + 2 + 2 and len(reduces) == 1 + 2
    assert sum(b for b, _ in gathers) / 2 == pytest.approx(
        want["all-gather forward"] + want["all-gather backward"])
    assert sum(b for b, _ in reduces) / 2 == pytest.approx(want["reduce-scatter"])
    assert {str(d) for _, d in gathers} == {"torch.bfloat16"}
    assert {str(d) for _, d in reduces} == {"torch.float32"}


@pytest.mark.parametrize("strategy", ["tp", "fsdp+tp"])
def test_tp_allreduces_match_what_dtensor_issues(fake_group, strategy):
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    try:
        from dlbench.workloads.tp import COLWISE, ROWWISE, parallelize
    except ImportError:
        pytest.skip("no tensor parallelism in this tree yet")
    from dlbench.models import get_model
    assert (len(ROWWISE), len(COLWISE)) == (TP_FORWARD_ALLREDUCES, TP_BACKWARD_ALLREDUCES)
    seen = []

    class Spy(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if str(func) == "_c10d_functional.all_reduce.default":
                seen.append((tuple(args[0].shape), args[0].dtype))
            return func(*args, **(kwargs or {}))
    spec = get_model("tiny_llama")
    model = parallelize(spec.build(), torch.device("cpu"), 2, sharded=strategy == "fsdp+tp",
                        precision="bf16", compile_mode=None)
    _train_step(model, spec)
    with Spy():
        _train_step(model, spec)
    # tiny_llama: 2 layers, hidden 64, 32 tokens, batch 2: every all-reduce is 2 x 32 x 64.
    assert {s for s, _ in seen} == {(2, 32, 64)}
    dtypes = [str(d) for _, d in seen]
    per_layer = TP_FORWARD_ALLREDUCES + TP_BACKWARD_ALLREDUCES
    assert len(seen) == 2 * per_layer
    if strategy == "tp":   # autocast alone: the fp32 residual stream's gradients
        assert dtypes.count("torch.bfloat16") == 2 * TP_FORWARD_ALLREDUCES
        assert dtypes.count("torch.float32") == 2 * TP_BACKWARD_ALLREDUCES
    else:                  # FSDP casts each block's inputs to bf16
        assert set(dtypes) == {"torch.bfloat16"}


def test_the_network_guide_quotes_the_model_on_llama_1b():
    """docs/network.md's worked FSDP volumes are what the model computes for llama-3.2-1b."""
    from pathlib import Path

    from dlbench.whatif.inputs import model_shape
    from dlbench.whatif.sharded import fsdp_bytes

    shape = model_shape("llama-3.2-1b")
    at2, at8 = fsdp_bytes(shape, 2), fsdp_bytes(shape, 8)
    gathered = at2["all-gather forward"] + at2["all-gather backward"]
    guide = " ".join((Path(__file__).resolve().parents[1] / "docs" / "network.md")
                     .read_text().split())
    assert (f"llama-3.2-1b ({shape.params / 1e6:,.1f} M parameters, "
            f"{shape.root_params / 1e6:,.1f} M in the root: the tied embedding) in bf16 moves "
            f"{sum(at2.values()) / 1e9:.2f} GB per GPU per step at 2 GPUs "
            f"({gathered / 1e9:.2f} GB gathered, {at2['reduce-scatter'] / 1e9:.2f} GB "
            f"reduce-scattered) and {sum(at8.values()) / 1e9:.2f} GB at 8") in guide

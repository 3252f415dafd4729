"""Exposed communication of a sharded step: the interval arithmetic on hand-made kernels, the
names it counts, the profiler glue in one process, and real 2-process gloo jobs of tiny_llama
through torchrun (conftest.llama_job), with the flag that turns it off."""

import json
from dataclasses import replace

import pytest
import torch
import torch.distributed as dist

from fakes import cli
from dlbench.measure import comm_profile
from dlbench.measure.overlap import (
    COMM,
    COMPUTE,
    MEMORY,
    TraceEvent,
    clip,
    device_kind,
    difference,
    host_kind,
    intersection,
    length,
    step_comm,
    summarise,
    trace_steps,
    union,
    unmeasured_reason,
)
from dlbench.records import record_from_dict
from dlbench.records.scaling import ScalingConfig
from dlbench.records.throughput import ThroughputConfig

CPU = torch.device("cpu")


# -- interval arithmetic ---------------------------------------------------------------------------
def test_union_merges_nested_touching_and_overlapping_intervals():
    assert union([(5, 7), (0, 4), (1, 2), (3, 5), (9, 9), (10, 12)]) == [(0, 7), (10, 12)]
    assert length([(0, 4), (1, 2), (3, 6)]) == 6          # each instant once
    assert union([]) == [] and length([]) == 0


def test_intersection_difference_and_clip():
    a, b = [(0, 4), (6, 10)], [(2, 7), (9, 12)]
    assert intersection(a, b) == [(2, 4), (6, 7), (9, 10)]
    assert intersection(a, []) == []
    assert difference(a, b) == [(0, 2), (7, 9)]
    assert difference([(0, 10)], [(2, 3), (5, 6)]) == [(0, 2), (3, 5), (6, 10)]
    assert difference([(0, 10)], [(-1, 11)]) == []
    assert clip([(0, 4), (6, 10), (11, 12)], 2, 8) == [(2, 4), (6, 8)]


def test_comm_kernels_on_two_streams_count_once():
    """An all-gather on one stream and a reduce-scatter on another, the second nested in the
    first and a third overlapping its end: 0..10 of communication, not 17."""
    comm = [(0, 8), (2, 5), (6, 10)]
    s = step_comm(comm, [], 0, 20)
    assert (s.step_s, s.comm_s, s.exposed_s) == (20, 10, 10)


def test_a_comm_kernel_fully_hidden_partly_hidden_and_not_hidden():
    compute = [(0, 10), (10, 14), (20, 30)]           # two kernels back to back, then another
    hidden = step_comm([(2, 12)], compute, 0, 40)
    assert (hidden.comm_s, hidden.exposed_s, hidden.hidden_s) == (10, 0, 10)
    partly = step_comm([(12, 22)], compute, 0, 40)    # 12..14 and 20..22 under compute
    assert (partly.comm_s, partly.exposed_s) == (10, 6)
    exposed = step_comm([(31, 35)], compute, 0, 40)
    assert (exposed.comm_s, exposed.exposed_s) == (4, 4)
    # all three in one step, and a compute kernel on a second stream over part of the gap
    both = step_comm([(2, 12), (12, 22), (31, 35)], compute + [(32, 33)], 0, 40)
    assert (both.comm_s, both.exposed_s) == (24, 6 + 3)


def test_the_step_clips_what_runs_outside_it():
    s = step_comm([(-5, 3), (8, 15)], [(9, 20)], 0, 10)
    assert (s.step_s, s.comm_s, s.exposed_s) == (10, 5, 4)   # 0..3 and 8..9 exposed


# -- the names the profiler emits ------------------------------------------------------------------
@pytest.mark.parametrize("name, kind", [
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", COMM),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", COMM),
    ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", COMM),
    ("Memcpy DtoD (Device -> Device)", MEMORY),
    ("Memset (Device)", MEMORY),
    ("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NTN", COMPUTE),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float4, 4>(...)", COMPUTE),
])
def test_device_kernels_by_name(name, kind):
    assert device_kind(name) == kind


@pytest.mark.parametrize("name, kind", [
    ("gloo:all_reduce", COMM), ("gloo:all_gather", COMM), ("gloo:broadcast", COMM),
    ("c10d::allreduce_", COMM), ("c10d::_allgather_base_", COMM),
    ("c10d::_reduce_scatter_base_", COMM), ("_c10d_functional::wait_tensor", COMM),
    ("aten::mm", COMPUTE), ("aten::_foreach_add_", COMPUTE),
    # wrappers span waits as well as work: neither
    ("autograd::engine::evaluate_function: MmBackward0", None), ("FSDP::pre_forward", None),
    ("DistributedDataParallel.forward", None), ("Optimizer.step#AdamW.step", None),
])
def test_host_events_by_name(name, kind):
    assert host_kind(name) == kind


def test_a_device_trace_by_step():
    """Two steps; kernels of both streams, an annotation mirrored on the device (skipped), a
    copy (neither), and host events that a device trace ignores."""
    m = "mark"
    ev = [TraceEvent(m, 0, 100), TraceEvent(m, 100, 200),
          TraceEvent("gemm", 0, 50, on_device=True),
          TraceEvent("ncclDevKernel_AllGather", 40, 60, thread=7, on_device=True),  # 10 exposed
          TraceEvent("Optimizer.step", 0, 100, on_device=True, annotation=True),
          TraceEvent("Memcpy DtoD", 50, 60, on_device=True),
          TraceEvent("aten::mm", 0, 100),                          # host: not in a device trace
          TraceEvent("gemm", 100, 190, on_device=True),
          TraceEvent("ncclKernel_AllReduce", 150, 200, thread=7, on_device=True)]  # 10 exposed
    steps, names = trace_steps(ev, m, device_trace=True)
    assert [(s.step_s, s.comm_s, s.exposed_s) for s in steps] == [(100, 20, 10), (100, 50, 10)]
    assert names == {"ncclDevKernel_AllGather": 20, "ncclKernel_AllReduce": 50}


def test_a_host_trace_counts_gloo_against_operators():
    """Gloo's worker thread runs the all-reduce while the main thread computes for part of it;
    the copy inside c10d's own call is the collective's, not compute hiding it."""
    m = "mark"
    ev = [TraceEvent(m, 0, 100, thread=1),
          TraceEvent("aten::mm", 0, 40, thread=1),
          TraceEvent("c10d::allreduce_", 40, 45, thread=1),
          TraceEvent("aten::copy_", 41, 43, thread=1),             # inside c10d's call
          TraceEvent("gloo:all_reduce", 45, 90, thread=2, annotation=True),
          TraceEvent("aten::add", 45, 60, thread=1),                # hides 15 of it
          TraceEvent("autograd::engine::evaluate_function: X", 0, 100, thread=1)]  # neither
    [s], names = trace_steps(ev, m, device_trace=False)
    assert (s.step_s, s.comm_s, s.exposed_s) == (100, 50, 35)
    assert names == {"c10d::allreduce_": 5, "gloo:all_reduce": 45}


# -- a job's figures from raw rank profiles --------------------------------------------------------
def test_summary_is_totals_over_totals_and_says_why_a_rank_has_none():
    a = {"exposed_s": [1.0, 1.0], "comm_s": [2.0, 2.0], "step_s": [10.0, 10.0], "source": "x"}
    b = {"exposed_s": [6.0, 0.0], "comm_s": [6.0, 2.0], "step_s": [20.0, 10.0], "source": "x"}
    s = summarise([a, b])
    assert s.per_step_s == pytest.approx(2.0) and s.comm_per_step_s == pytest.approx(3.0)
    assert s.share == pytest.approx(8 / 50)             # not the mean of 0.1 and 0.2
    assert s.worst_share == pytest.approx(0.2) and (s.ranks, s.of_ranks, s.steps) == (2, 2, 2)
    off = comm_profile.not_profiled("turned off (--no-profile-comm)")
    assert summarise([off, off]) is None
    assert unmeasured_reason([off, off]) == "rank 0: turned off (--no-profile-comm)"
    half = summarise([a, {**off, "reason": "the profiler did not start: boom"}])
    assert (half.ranks, half.of_ranks) == (1, 2) and half.share == pytest.approx(0.1)
    assert unmeasured_reason([a, {**off, "reason": "boom"}]) == "rank 1: boom"
    assert unmeasured_reason([a, b]) is None and "not profiled" in unmeasured_reason(())


# -- the profiler glue, in this process ------------------------------------------------------------
@pytest.fixture
def gloo_world_of_one(tmp_path):
    """A 1-rank gloo group: its collectives run through gloo's worker thread as a job's do."""
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _step(calls):
    w = torch.randn(64, 64)

    def step():
        calls.append(1)
        g = w @ w
        dist.all_reduce(g)
        return g.sum()
    return step


def test_profile_comm_on_gloo_finds_its_collectives(gloo_world_of_one):
    calls = []
    out = comm_profile.profile_comm(_step(calls), 3, CPU)
    assert len(calls) == 1 + 3 and out["reason"] is None
    assert (out["source"], out["steps"], out["warmup_steps"]) == ("cpu operators", 3, 1)
    assert len(out["exposed_s"]) == len(out["comm_s"]) == len(out["step_s"]) == 3
    for e, c, w in zip(out["exposed_s"], out["comm_s"], out["step_s"]):
        assert 0 < e <= c <= w
    assert {"gloo:all_reduce", "c10d::allreduce_"} <= set(out["comm_names"])
    assert out["cost_s"] >= sum(out["step_s"])


def test_a_profiler_that_fails_still_runs_every_step_and_says_why(monkeypatch):
    import torch.profiler

    def broken(*a, **kw):
        raise RuntimeError("no Kineto here")
    monkeypatch.setattr(torch.profiler, "profile", broken)
    calls = []
    out = comm_profile.profile_comm(lambda: calls.append(1), 3, CPU)
    assert len(calls) == 4                   # the peers' collectives stay matched
    assert out["exposed_s"] is None and out["step_s"] is None
    assert out["reason"] == "the profiler did not start: RuntimeError: no Kineto here"


def test_a_trace_that_cannot_be_read_is_no_figure(monkeypatch):
    def unreadable(prof):
        raise KeyError("events")
    monkeypatch.setattr(comm_profile, "_events", unreadable)
    out = comm_profile.profile_comm(lambda: torch.ones(4).sum(), 2, CPU)
    assert out["exposed_s"] is None and out["reason"].startswith("the profiler's trace could not")


# -- real jobs: 2 gloo ranks of tiny_llama through torchrun ----------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("strategy, collective", [("fsdp", "gloo:all_gather"),
                                                  ("ddp", "gloo:all_reduce")])
def test_a_two_rank_job_records_each_ranks_exposed_communication(strategy, collective,
                                                                 llama_job):
    _, rec = llama_job(strategy, 2)
    assert len(rec.rank_comm_profile) == 2
    for p in rec.rank_comm_profile:
        assert p["reason"] is None and p["source"] == "cpu operators" and p["steps"] == 3
        assert len(p["exposed_s"]) == 3
        for e, c, w in zip(p["exposed_s"], p["comm_s"], p["step_s"]):
            assert 0 < e <= c <= w              # gloo's collectives: some of each step exposed
        assert collective in p["comm_names"] and p["cost_s"] > 0
    s = rec.exposed_comm()
    assert s.ranks == 2 and 0 < s.share <= s.comm_share <= 1 and s.per_step_s > 0
    back = record_from_dict(json.loads(json.dumps(rec.to_dict())))
    assert back == rec and back.exposed_comm() == s
    # the scale report and the CSV show it
    from dlbench.report import export
    from dlbench.report.tables import tables_for
    table = next(t for t in tables_for([rec], "cpu") if t.title.startswith("Exposed"))
    assert table.rows[0][4] == f"{s.per_step_s * 1e3:.3g}"
    strategy_rows = next(t for t in tables_for([rec], "cpu") if "by strategy" in t.title)
    assert strategy_rows.rows[0][-1] == f"{s.per_step_s * 1e3:.3g} ({s.share:.1%})"
    row = export.flat_row(rec)
    assert row["exposed_comm_ms"] == pytest.approx(s.per_step_s * 1e3)
    assert row["comm_profiled_ranks"] == 2 and row["comm_unmeasured"] == ""
    # an older record (no profile) reads as unmeasured, with '-' beside a measured one
    old = replace(rec, rank_comm_profile=())
    assert old.exposed_comm() is None and export.flat_row(old)["exposed_comm_ms"] is None
    both = next(t for t in tables_for([rec, old], "cpu") if "by strategy" in t.title)
    assert both.rows[1][-1] == "-"


def test_the_profile_is_not_part_of_a_configs_identity():
    b = ThroughputConfig(model="tiny_llama", batch_size=2, device="cpu")
    on, off = ScalingConfig(base=b, gpus=2), ScalingConfig(base=b, gpus=2, comm_profile_steps=0)
    assert on.comm_profile_steps == 3 and on.key() == off.key() and on.label == off.label


@pytest.mark.slow
def test_no_profile_comm_leaves_every_rank_unmeasured_with_the_reason(tmp_path):
    p = cli.run("scale", "-m", "tiny_cnn", "-b", "2", "--gpus", "2", "--device", "cpu",
                "--no-profile-comm", "--db", str(tmp_path / "s.db"), "--json", *cli.FAST)
    assert p.returncode == 0, p.stderr[-3000:]
    [d] = json.loads(p.stdout)
    rec = record_from_dict(d)
    assert rec.ok and rec.config.comm_profile_steps == 0
    assert [pr["exposed_s"] for pr in rec.rank_comm_profile] == [None, None]
    assert {pr["reason"] for pr in rec.rank_comm_profile} == {"turned off (--no-profile-comm)"}
    assert rec.exposed_comm() is None
    assert d["figures"]["exposed_comm_ms"] is None
    assert d["figures"]["comm_unmeasured"] == "rank 0: turned off (--no-profile-comm)"


def test_whatif_check_sets_the_profiled_exposed_time_beside_the_models():
    """The fsdp record of test_whatif_sharded's hand-computed step (3.0 s of compute, 3.6 s
    with overlap: 0.6 s exposed) with ranks that profiled 0.5 s exposed per step."""
    from dlbench.records.scaling import ScalingRecord
    from dlbench.report.network import check_table
    from dlbench.whatif.check import check_scaling
    from dlbench.whatif.patterns import Link
    from dlbench.whatif.sharded import ModelShape

    shape = ModelShape(root_params=1e8, block_params=(1e8, 1e8), hidden=64, seq_len=32)
    b = ThroughputConfig(model="tiny_llama", batch_size=2, device="cpu", precision="bf16")

    def rec(gpus, step, profiles=()):
        return ScalingRecord(config=ScalingConfig(base=b, gpus=gpus, strategy="fsdp"), env={},
                             rank_step_times_s=((step,) * 4,) * gpus,
                             rank_samples_per_step=(2,) * gpus, rank_comm_profile=profiles)
    prof = {"exposed_s": [0.5, 0.5], "comm_s": [0.9, 0.9], "step_s": [4.0, 4.0]}
    recs = [rec(1, 3.0), rec(2, 3.7, (prof, prof))]
    [row] = check_scaling(recs, Link(1e9, 0.0), {"tiny_llama": 1}, shapes={"tiny_llama": shape})
    assert row.predicted_full_s == pytest.approx(3.6)
    assert row.predicted_exposed_s == pytest.approx(0.6) and row.measured_exposed_s == 0.5
    table = check_table([row], "check")
    assert table.rows[0][-1] == "500.0 / 600.0"
    [plain] = check_scaling([recs[0], rec(2, 3.7)], Link(1e9, 0.0), {"tiny_llama": 1},
                            shapes={"tiny_llama": shape})
    assert plain.measured_exposed_s is None
    assert len(check_table([plain], "check").columns) == len(table.columns) - 1


class _OldKinetoEvent:
    """A Kineto event as torch 2.11 gives it: no ``activity_type`` (an H100 run's profile
    failed on its absence), a record_function range's GPU copy known only by its name."""

    def __init__(self, name, start_ns, end_ns, gpu, annotation=False):
        self._v = (name, start_ns, end_ns, gpu, annotation)

    def name(self):
        return self._v[0]

    def start_ns(self):
        return self._v[1]

    def end_ns(self):
        return self._v[2]

    def start_thread_id(self):
        return 7

    def device_type(self):
        return torch.autograd.DeviceType.CUDA if self._v[3] else torch.autograd.DeviceType.CPU

    def is_user_annotation(self):
        return self._v[4]


def test_events_of_a_torch_without_activity_type_keep_annotations_apart_from_kernels():
    mark = "dlbench::comm_profile_step"
    raw = [_OldKinetoEvent(mark, 1_000, 9_000, gpu=False, annotation=True),
           _OldKinetoEvent(mark, 1_500, 9_500, gpu=True),   # its copy on the GPU's timeline
           _OldKinetoEvent("ncclDevKernel_AllGather_RING_LL", 2_000, 4_000, gpu=True),
           _OldKinetoEvent("ampere_bf16_gemm", 3_000, 8_000, gpu=True)]

    class Prof:
        class profiler:
            class kineto_results:
                @staticmethod
                def events():
                    return raw
    events = comm_profile._events(Prof())
    assert [(e.name, e.on_device, e.annotation) for e in events] == [
        (mark, False, True), (mark, True, True),
        ("ncclDevKernel_AllGather_RING_LL", True, False), ("ampere_bf16_gemm", True, False)]
    assert events[2].start == pytest.approx(1e-6) and events[2].end == pytest.approx(3e-6)

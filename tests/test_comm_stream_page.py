"""The stream/buffers/cache collectives page's prose against its records: every figure it quotes
is recomputed here from the committed stores, nccl-tests' output and the probes' logs committed
beside them (its tables are rendered from the same stores by tools/headline.py and checked by
tests/test_readme_claims.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fakes.pages import H, assert_says, store_fixture

from dlbench.report.nccl_tests import only_run

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / H.COMM_STREAM_PAGE).read_text()
FOLDER = ROOT / "results" / H.H200_2 / "comm-stream"
MiB = 1 << 20

host_b = store_fixture(H.H200_2_STREAM_B)
host_c = store_fixture(H.H200_2_STREAM_C)
host_a = store_fixture(f"{H.H200_2}/comm-stream/host-a")
probe = store_fixture(f"{H.H200_2}/comm-stream/probe")


def says(text: str) -> None:
    assert_says(PAGE, text)


def printed(host: str, name: str):
    return only_run((FOLDER / host / name).read_text())


def ratios(store, run: str, nt, lo: int, hi: int = 1 << 30, places=(False, True),
           op: str = "all_reduce"):
    """(size, in place) -> dlbench busbw / nccl-tests' in the same placement, for the run's
    records of ``op`` from ``lo`` to ``hi`` bytes."""
    return {(r.config.size_bytes, r.config.inplace):
            r.busbw() / 1e9 / nt.row(r.config.size_bytes).busbw(r.config.inplace)
            for r in store.results(run_id=run, kind="comm")
            if r.config.op == op and lo <= r.config.size_bytes <= hi
            and r.config.inplace in places}


def span(values) -> str:
    values = list(values)
    return f"{min(values):.3f} to {max(values):.3f}"


def test_the_targets_on_host_c(host_c):
    nt = printed("host-c", "nccl-mpi-G20-1.txt")
    (first, _), (second, _), (one_set, _) = H.STREAM_C_NCCL
    lows, outside = [], {}
    for run in (first, second):
        recs = host_c.results(run_id=run, kind="comm")
        assert all(r.ok and r.config.rotate and r.config.api == "nccl"
                   and r.config.buffers == "nccl" and r.stream == "side" for r in recs)
        got = ratios(host_c, run, nt, MiB)
        lows.append(min(got.values()))
        outside[run] = {(s // MiB, ip): round(v, 3) for (s, ip), v in got.items()
                        if s >= 16 * MiB and abs(v - 1) > 0.02}
    says(f"the lowest ratio is {min(lows):.3f}")
    assert min(lows) >= 0.9
    assert outside == {first: {(256, False): 0.968, (512, False): 0.976},
                       second: {(512, False): 0.978}}
    says(f"run {first} reads 0.968 at 256 MiB and 0.976 at 512 MiB, run {second} 0.978 at "
         "512 MiB; every other cell from 16 MiB is within 2%, in place all of them")
    b = [printed("host-b", f"nccl-mpi-G20-{i}.txt").row(256 * MiB).out_busbw for i in (1, 2, 3)]
    says(f"its three `-G` runs read {min(b):.2f} to {max(b):.2f} GB/s at 256 MiB out of place; "
         f"host C's one read {nt.row(256 * MiB).out_busbw:.2f}")
    # the one-set run of the same call: the cache's lift
    assert not any(r.config.rotate for r in host_c.results(run_id=one_set, kind="comm"))
    says(f"`--no-rotate` run, {span(ratios(host_c, one_set, nt, MiB, 16 * MiB).values())}")


def test_torch_distributed_on_host_c(host_c):
    nt = printed("host-c", "nccl-mpi-G20-1.txt")
    runs = [run for run, _ in H.STREAM_C_TORCH]
    inplace = [v for run in runs for v in ratios(host_c, run, nt, MiB, places=(True,)).values()]
    says(f"in place reads {span(inplace)} of `-G` in place at every size from 1 MiB")
    out = [v for run in runs
           for v in ratios(host_c, run, nt, 16 * MiB, 256 * MiB, places=(False,)).values()]
    says(f"Its out-of-place column reads {span(out)} of nccl-tests' out of place from 16 to 256")
    recs = [r for run in runs for r in host_c.results(run_id=run, kind="comm")]
    assert all(r.call_in_place and r.config.api == "torch" and r.config.rotate for r in recs)


def test_the_copies_and_the_stream_are_recorded(host_c, probe):
    (rotated, _), _, (one_set, _) = H.STREAM_C_NCCL
    copies = {r.config.size_bytes: r.buffer_copies
              for r in host_c.results(run_id=rotated, kind="comm") if not r.config.inplace}
    assert copies[MiB] == 20 and copies[64 * MiB] == 16 and copies[1 << 30] == 1
    assert {r.buffer_copies for r in host_c.results(run_id=one_set, kind="comm")} == {1}
    # the probe host's dlbench run was made before the stream was recorded: the default stream
    assert {r.stream for r in probe.results(kind="comm")} == {"default"}


def test_the_earlier_hosts_read_above_nccl_tests_on_one_set_of_buffers(host_a, host_b):
    got = []
    for store, host, rounds in ((host_a, "host-a", (("21a28605848d", "nccl-mpi-G20-1.txt"),
                                                    ("89aed797a45b", "nccl-mpi-G20-2.txt"))),
                                (host_b, "host-b", H.STREAM_B_NCCL)):
        for run, name in rounds:
            assert not any(r.config.rotate for r in store.results(run_id=run, kind="comm"))
            got += ratios(store, run, printed(host, name), MiB, 16 * MiB).values()
    says(f"hosts A and B, before rotation existed, {span(got)}")


def _probe_us(name: str, label: str, size: int) -> list[str]:
    """The median microseconds of one probe variant at one size, in round order."""
    out = []
    for i in (1, 2):
        text = (FOLDER / "probe" / f"{name}-{i}.log").read_text()
        m = re.search(rf"^{name.upper()} r{i} {re.escape(label)} +{size} B +median +([\d.]+) us",
                      text, re.M)
        assert m, (name, label, size, i)
        out.append(m.group(1))
    return out


def test_the_probes():
    def both(name, label, size):
        a, b = _probe_us(name, label, size)
        return f"{a} and {b}"
    says(f"took {both('p5', 'torch/tg-default/own/out', MiB)} us an all_reduce replayed on the "
         f"default stream, {both('p5', 'torch/tg-side/own/out', MiB)} us replayed on a side "
         "stream")
    says(f"{both('p5', 'torch/raw-legacy/own/out', MiB)} us launched on the legacy default "
         f"stream, {both('p5', 'torch/raw-own/own/out', MiB)} us on its own stream")
    says(f"16 MiB out of place took {both('p4', 'ncclmem/raw/own/out', 16 * MiB)} us on "
         f"`ncclMemAlloc`'s buffers and {both('p4', 'torch/raw/own/out', 16 * MiB)} us on the "
         "caching allocator's (p4)")


def test_batched_beside_the_default_loop(host_b):
    nt = printed("host-b", "nccl-mpi-n20-1.txt")
    assert not nt.graph
    (torch_run, _), (nccl_run, _) = H.STREAM_B_BATCHED
    above = [v for run in (torch_run, nccl_run)
             for v in ratios(host_b, run, nt, 8 * MiB).values()]
    says(f"from 8 MiB up both APIs read {span(above)} of the default loop")
    t = ratios(host_b, torch_run, nt, MiB, MiB, places=(False,))[(MiB, False)]
    n = ratios(host_b, nccl_run, nt, MiB, MiB, places=(False,))[(MiB, False)]
    says(f"at 1 MiB torch.distributed reads {t:.3f} and NCCL's own API {n:.3f} out of place")


@pytest.mark.parametrize("host", ["host-a", "host-b", "host-c"])
def test_the_environment(host, request):
    store = request.getfixturevalue(host.replace("-", "_"))
    recs = store.results(kind="comm")
    uuids = set(re.findall(r"GPU-[0-9a-f-]+", (FOLDER / host / "gpus.txt").read_text()))
    assert len(uuids) == 2
    for r in recs:
        assert r.nccl_version == "2.28.9" and r.nccl_env.get("NCCL_NVLS_ENABLE") == "0"
        assert r.env["cpu_logical_cores"] == 32
        assert {g["uuid"] for g in r.env["gpus"]} <= uuids
        assert all("H200" in g["name"] for g in r.env["gpus"])
    says("NCCL 2.28.9 as torch loads it; `NCCL_NVLS_ENABLE=0` on every host")
    says("32 cores each")


def test_the_gpu_tests_passed_on_host_a():
    log = (FOLDER / "host-a" / "pytest-gpu.log").read_text()
    assert re.search(r"^9 passed, \d+ deselected", log, re.M)
    says("(`host-a/pytest-gpu.log`: 9 passed")


def test_the_scaling_guide_quotes_the_page(host_c):
    """docs/scaling.md's account of the stream, the buffers and the cache, against the same
    records and logs."""
    guide = " ".join((ROOT / "docs" / "scaling.md").read_text().split())
    slower = [float(d) - float(s) for d, s in zip(_probe_us("p5", "torch/tg-default/own/out", MiB),
                                                  _probe_us("p5", "torch/tg-side/own/out", MiB))]
    assert f"ran each 1 MiB all_reduce {min(slower):.2f} to {max(slower):.2f} us slower" in guide
    nt = printed("host-c", "nccl-mpi-G20-1.txt")
    (first, _), (second, _), (one_set, _) = H.STREAM_C_NCCL
    lifted = max(ratios(host_c, one_set, nt, MiB, 16 * MiB).values())
    assert f"up to {lifted:.3f}x nccl-tests' `-G` from 1 to 16 MiB" in guide
    rotated = [v for run in (first, second) for v in ratios(host_c, run, nt, MiB).values()]
    assert f"read {span(rotated)} of `-G` at every size from 1 MiB" in guide


def test_the_readme_quotes_the_page(host_c):
    readme = " ".join((ROOT / "README.md").read_text().split())
    nt = printed("host-c", "nccl-mpi-G20-1.txt")
    (first, _), (second, _), _ = H.STREAM_C_NCCL
    rotated = [v for run in (first, second) for v in ratios(host_c, run, nt, MiB).values()]
    assert f"(`--api nccl --buffers nccl`) read {span(rotated)} of its `-G` from 1 MiB" in readme


host_d = store_fixture(H.H200_2_STREAM_D)


def d_ratios(store, run: str, name: str, op: str = "all_reduce", lo: int = MiB,
             places=(False, True)) -> dict[tuple[int, bool], float]:
    """Host D's ratios of one collective of a run beside one nccl-tests file, from ``lo``."""
    nt = printed("host-d", name)
    assert nt.op == op
    return ratios(store, run, nt, lo, places=places, op=op)


def test_host_d_like_for_like(host_d):
    got = {run: d_ratios(host_d, run, name) for run, name in H.STREAM_D_NCCL}
    for run in got:
        assert all(r.ok and r.config.rotate and r.config.api == "nccl" and r.config.buffers
                   == "nccl" and r.call_in_place == r.config.inplace
                   for r in host_d.results(run_id=run, kind="comm"))
    every = [v for cells in got.values() for v in cells.values()]
    says(f"from 1 MiB every cell reads {span(every)}, so 0.9x is met")
    assert min(every) >= 0.9
    outside = {(run, s // MiB, ip): round(v, 3) for run, cells in got.items()
               for (s, ip), v in cells.items() if s >= 16 * MiB and abs(v - 1) > 0.02}
    run2 = H.STREAM_D_NCCL[1][0]
    run1 = H.STREAM_D_NCCL[0][0]
    assert outside == {(run1, 16, False): 0.980, (run2, 16, False): 0.978,
                       (run2, 512, False): 1.021}
    says("within 2% from 16 MiB in every cell but out of place at 16 MiB in both rounds (0.980 "
         "and 0.978, each a little more than 2% below) and at 512 MiB in round 2 (1.021, above)")
    b = [printed("host-d", f"nccl-mpi-G20-{i}.txt").row(256 * MiB).out_busbw for i in (1, 2, 3)]
    says(f"nccl-tests' own three runs read {min(b):.2f} to {max(b):.2f} GB/s at 256 MiB out of "
         "place")


def test_host_d_torch_bf16_and_the_other_collectives(host_d):
    torch_in = [v for run, name in H.STREAM_D_TORCH
                for v in d_ratios(host_d, run, name, places=(True,)).values()]
    says(f"in place {span(torch_in)} from 1 MiB")
    torch_out = [v for run, name in H.STREAM_D_TORCH
                 for v in d_ratios(host_d, run, name, places=(False,)).values()]
    says(f"reads {span(torch_out)} of nccl-tests' out-of-place call")
    assert all(r.call_in_place for run, _ in H.STREAM_D_TORCH
               for r in host_d.results(run_id=run, kind="comm"))
    (run, name), = H.STREAM_D_BF16
    assert {r.config.dtype for r in host_d.results(run_id=run, kind="comm")} == {"bfloat16"}
    assert printed("host-d", name).rows[-1].dtype == "bfloat16"
    says(f"`-d bfloat16 -G 20`): {span(d_ratios(host_d, run, name).values())} from 1 MiB")
    spans = {}
    for name in H.STREAM_D_OPS_FILES:
        op = printed("host-d", name).op
        spans[op] = span(d_ratios(host_d, H.STREAM_D_OPS_RUN, name, op).values())
    says(f"all_gather {spans['all_gather']}, reduce_scatter {spans['reduce_scatter']}, "
         f"broadcast {spans['broadcast']}, all_to_all out of place {spans['all_to_all']}")
    # all_to_all has no in-place record: its span is of out-of-place cells only
    assert not d_ratios(host_d, H.STREAM_D_OPS_RUN, "nccl-mpi-G20-alltoall.txt", "all_to_all",
                        places=(True,))


def test_host_d_eager(host_d):
    _, nccl_eager, _, per_iter = H.STREAM_D_EAGER_NCCL
    got = d_ratios(host_d, nccl_eager, per_iter)
    says(f"through NCCL's API {got[(MiB, False)]:.3f} / {got[(MiB, True)]:.3f} at 1 MiB and "
         f"{span([v for (s, _), v in got.items() if s >= 2 * MiB])} from 2 MiB")
    _, torch_eager, _, per_iter_t = H.STREAM_D_EAGER_TORCH
    t = d_ratios(host_d, torch_eager, per_iter_t)
    says(f"through torch {t[(MiB, False)]:.3f} / {t[(MiB, True)]:.3f} at 1 MiB, and at 32 MiB "
         f"out of place {t[(32 * MiB, False)]:.3f}")
    odd = next(r for r in host_d.results(run_id=torch_eager, kind="comm")
               if r.config.size_bytes == 32 * MiB and not r.config.inplace)
    assert any(f == "cv 260%" for f in H._comm_flags(odd))
    nt = printed("host-d", per_iter)
    p99 = {(r.config.size_bytes, r.config.inplace):
           r.p99_s * 1e6 / nt.row(r.config.size_bytes).p99_us(r.config.inplace)
           for r in host_d.results(run_id=nccl_eager, kind="comm") if r.config.size_bytes >= MiB}
    says(f"Eager's p99 is {min(p99.values()):.2f} to {max(p99.values()):.2f} times `-I`'s i_p99 "
         "from 1 MiB")
    says(f"at 32 and 64 MiB ({p99[(32 * MiB, False)]:.2f}, {p99[(64 * MiB, False)]:.2f} out "
         "of place)")
    log = (FOLDER / "host-d" / "pytest-gpu.log").read_text()
    assert re.search(r"\b9 passed\b", log) and "failed" not in log
    says("`host-d/pytest-gpu.log`, 9 passed")


def test_host_d_environment(host_d):
    gpus = (FOLDER / "host-d" / "gpus.txt").read_text()
    uuids = re.findall(r"GPU-[0-9a-f-]+", gpus)
    assert len(uuids) == 4 and gpus.count("NVIDIA H200") >= 4
    assert gpus.count("NV18") == 12  # every pair of the four, both ways
    for r in host_d.results(kind="comm"):
        assert r.nccl_version == "2.28.9" and r.nccl_env.get("NCCL_NVLS_ENABLE") == "0"
        assert r.env["cpu_logical_cores"] == 64
        assert [g["uuid"] for g in r.env["gpus"]] == uuids[:2]  # GPUs 0 and 1
    says("on GPUs 0 and 1 of a host of four H200s (every pair NV18; `host-d/gpus.txt`)")
    says("host D: GPUs 0 and 1 of four H200s (`host-d/gpus.txt`), 64 cores")
    assert {printed("host-d", f.name).version
            for f in (FOLDER / "host-d").glob("nccl-mpi-*.txt")} == {"2.19.6"}


def test_host_d_built_nccl_tests_during_the_first_three_runs():
    log = (FOLDER / "host-d" / "comm.log").read_text().splitlines()
    built = next(i for i, line in enumerate(log) if line.startswith("build done"))
    before = [line for line in log[:built] if line.startswith("== ")]
    assert len(before) == 3 and all("dlbench comm" in line for line in before)
    says("nccl-tests was built during the first three dlbench runs")

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


def ratios(store, run: str, nt, lo: int, hi: int = 1 << 30, places=(False, True)):
    """(size, in place) -> dlbench busbw / nccl-tests' in the same placement."""
    return {(r.config.size_bytes, r.config.inplace):
            r.busbw() / 1e9 / nt.row(r.config.size_bytes).busbw(r.config.inplace)
            for r in store.results(run_id=run, kind="comm")
            if lo <= r.config.size_bytes <= hi and r.config.inplace in places}


def span(values) -> str:
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

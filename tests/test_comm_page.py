"""The two-H200 collectives page's prose against its records: every figure it quotes is
recomputed here from the committed store and the nccl-tests output committed beside it (its two
tables are checked by tests/test_readme_claims.py, which renders them from the same store and
files)."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from fakes.pages import H, assert_says, store_fixture, sigterm_run

from dlbench.report.nccl_tests import only_run

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / H.COMM_PAGE).read_text()
FOLDER = ROOT / "results" / H.H200_2_COMM
MiB = 1 << 20
RUNS = (H.COMM_GRAPH_RUN, H.COMM_GRAPH20_RUN, H.COMM_EAGER_RUN)


def says(text: str) -> None:
    assert_says(PAGE, text)


store = store_fixture(H.H200_2_COMM)


@pytest.fixture(scope="module")
def cells(store):
    """run -> (size, in place) -> record."""
    return {run: {(r.config.size_bytes, r.config.inplace): r
                  for r in store.results(run_id=run, kind="comm")} for run in RUNS}


@pytest.fixture(scope="module")
def nt():
    return {name: only_run((FOLDER / f"nccl-{name}.txt").read_text()) for name in ("G", "default")}


def register_file() -> dict[tuple[str, int], tuple[float, float]]:
    """(setting, size) -> (out-of-place busbw, in-place busbw) of nccl-G-register.txt."""
    out = {}
    for line in (FOLDER / "nccl-G-register.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            setting, size, o, i = line.split()
            out[(setting, int(size))] = (float(o), float(i))
    return out


def gbs(r) -> float:
    return r.busbw() / 1e9


def ratio(r, run) -> float:
    """dlbench / nccl-tests busbw, in the record's own placement."""
    return gbs(r) / run.row(r.config.size_bytes).busbw(r.config.inplace)


def span(values) -> str:
    return f"{min(values):.3f} to {max(values):.3f}"


def test_the_runs_are_what_the_page_says(store, cells):
    runs = {r.run_id: r for r in store.runs()}
    assert set(runs) == set(RUNS) | {H.COMM_SIGTERM_RUN}
    assert {r.device for r in runs.values()} == {"2x NVIDIA H200"}
    g, e, g20 = (cells[k] for k in (H.COMM_GRAPH_RUN, H.COMM_EAGER_RUN, H.COMM_GRAPH20_RUN))
    for recs, timing, k, lo, hi in ((g, "graph", 10, 8, 1 << 30), (e, "eager", 1, 8, 1 << 30),
                                    (g20, "graph", 20, MiB, 128 * MiB)):
        sizes = sorted({s for s, _ in recs})
        assert (sizes[0], sizes[-1], len(recs)) == (lo, hi, 2 * len(sizes))
        assert all(r.ok and r.config.op == "all_reduce" and r.config.ranks == 2
                   and r.config.backend == "nccl" and r.config.dtype == "float32"
                   and (r.config.timing, r.config.iters_per_sample) == (timing, k)
                   for r in recs.values())
    # the page's commands are the stored ones, less their --db
    block = PAGE.split("```sh", 1)[1].split("```", 1)[0].replace("\\\n    ", "")
    for run in runs.values():
        command = re.sub(r" --db \S+", "", run.command)
        assert command in block, command
    says("**These are H200s, not H100s.**")


def test_the_same_two_cards_in_every_run(store, cells, tmp_path):
    uuids = {tuple(g["uuid"] for g in r.env["gpus"]) for recs in cells.values()
             for r in recs.values()}
    assert len(uuids) == 1 and len(next(iter(uuids))) == 2
    db = tmp_path / "s.db"
    with gzip.open(FOLDER / "dlbench.db.gz", "rb") as src, open(db, "wb") as dst:
        shutil.copyfileobj(src, dst)
    with closing(sqlite3.connect(db)) as con:  # a run's environment: no Store API reads it
        env = json.loads(con.execute("SELECT env_json FROM runs WHERE run_id=?",
                                     (H.COMM_SIGTERM_RUN,)).fetchone()[0])
    assert (tuple(g["uuid"] for g in env["gpus"]),) == tuple(uuids)
    says("the same two cards (by UUID) in every run here")


def test_the_environment(cells, nt):
    r = cells[H.COMM_GRAPH_RUN][(8, False)]
    env = r.env
    assert [g["name"] for g in env["gpus"]] == ["NVIDIA H200"] * 2
    gib = {g["memory_total_bytes"] / 2**30 for g in env["gpus"]}
    watts = {g["power_limit_w"] for g in env["gpus"]}
    assert len(gib) == 1 and len(watts) == 1
    says(f"| GPUs | two NVIDIA H200 ({gib.pop():.1f} GiB each as NVML reports it, power limit "
         f"{watts.pop():.0f} W) of one host, NV18 between them")
    assert re.search(r"GPU0\s+X\s+NV18", env["topology"])
    says(f"| driver | {env['driver']} |")
    says(f"| CUDA runtime | {env['cuda_runtime']} |")
    says(f"| torch | {env['packages']['torch']} |")
    versions = {x.nccl_version for recs in cells.values() for x in recs.values()}
    assert versions == {env["nccl"]} == {"2.28.9"}
    says(f"| NCCL | {env['nccl']}, torch's wheel (`NCCL_VERSION={env['env_vars']['NCCL_VERSION']}` "
         "in the image's environment names another")
    assert all(x.nccl_env.get("NCCL_NVLS_ENABLE") == "0" for recs in cells.values()
               for x in recs.values())
    says("| NCCL environment | `NCCL_NVLS_ENABLE=0`, set by the machine")
    for run in nt.values():
        assert run.nccl_headers == run.nccl_library == "22809" and run.gpus == 2
    says(f"| nccl-tests | {nt['G'].version}, built on the device against torch's `libnccl.so.2` "
         f"(`nccl-headers={nt['G'].nccl_headers} nccl-library={nt['G'].nccl_library}`")
    assert "make rc 0" in (FOLDER / "make.log").read_text()
    assert env["cpu_model"].startswith("Intel(R) Xeon(R)")
    says(f"| host | {env['cpu_logical_cores']} logical CPU cores (Intel Xeon); Python "
         f"{env['python']}; Linux {'.'.join(env['kernel'].split('.')[:2])} |")


def test_the_commands_are_the_logged_ones(nt):
    log = (FOLDER / "comm.log").read_text()
    assert "python3 -m pytest tests/test_comm.py -q -m gpu -p no:cacheprovider" in log
    assert re.search(r"^2 passed", log, re.M)
    says("the GPU tests of the comm path (2 passed)")
    assert "all_reduce_perf -b 8 -e 1G -f 2 -g 2 -G 20\n" in (FOLDER / "nccl-G.txt").read_text()
    assert "all_reduce_perf -b 8 -e 1G -f 2 -g 2\n" in (FOLDER / "nccl-default.txt").read_text()
    assert (nt["G"].graph, nt["G"].iters, nt["default"].graph) == (20, 20, 0)
    header = (FOLDER / "nccl-G-register.txt").read_text()
    for command in ("NCCL_GRAPH_REGISTER=0 all_reduce_perf -b 1M -e 128M -f 2 -g 2 -G 20",
                    "all_reduce_perf -b 1M -e 128M -f 2 -g 2 -G 20",
                    "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING,INIT,REG all_reduce_perf -b 32M "
                    "-e 32M -g 2 -G 2 -n 2 -w 1"):
        assert f"#   {command}" in header
        assert command in PAGE


def test_the_one_mib_target(cells, nt):
    g = cells[H.COMM_GRAPH_RUN]
    says(f"At 1 MiB dlbench's graph mode reads {ratio(g[(MiB, False)], nt['G']):.3f} of `-G` out "
         f"of place and {ratio(g[(MiB, True)], nt['G']):.3f} in place, and "
         f"{ratio(g[(MiB, False)], nt['default']):.3f} of the default loop out of place; at 32 "
         f"MiB it reads {ratio(g[(32 * MiB, False)], nt['G']):.3f} of `-G` out of place.")
    below = {(size, place, name) for (size, place), r in g.items() if size >= MiB
             for name, run in nt.items() if ratio(r, run) < 0.9}
    assert below == {(MiB, False, "G"), (MiB, True, "G"), (MiB, False, "default"),
                     (32 * MiB, False, "G")}
    says("At every other size from 1 MiB it is at 0.9x or above against both.")
    says("**0.9x from 1 MiB: not met.**")


def test_the_two_percent_target(cells, nt):
    g = cells[H.COMM_GRAPH_RUN]
    big = {k: r for k, r in g.items() if k[0] >= 16 * MiB}
    d = {place: [ratio(r, nt["default"]) for (s, p), r in big.items() if p == place]
         for place in (False, True)}
    assert all(abs(x - 1) <= 0.02 for xs in d.values() for x in xs)
    says(f"**Within 2% from 16 MiB: met against nccl-tests' default loop** (graph mode "
         f"{span(d[False])} out of place, {span(d[True])} in place), **not against `-G`**")
    gg = {place: {s: ratio(r, nt["G"]) for (s, p), r in big.items() if p == place}
          for place in (False, True)}
    says(f"out of place {span(gg[False].values())} (below 0.98 from 16 to 128 MiB), in place "
         f"{span(gg[True].values())} (below 0.98 at 16 and 32 MiB)")
    assert sorted(s for s, x in gg[False].items() if x < 0.98) == [16 * MiB, 32 * MiB, 64 * MiB,
                                                                    128 * MiB]
    assert sorted(s for s, x in gg[True].items() if x < 0.98) == [16 * MiB, 32 * MiB]


def test_eager_beside_the_default_loop(cells, nt):
    e = cells[H.COMM_EAGER_RUN]
    says(f"{ratio(e[(MiB, False)], nt['default']):.3f} of the default loop at 1 MiB out of place")
    out = [ratio(r, nt["default"]) for (s, p), r in e.items() if s >= 16 * MiB and not p]
    inp = [ratio(r, nt["default"]) for (s, p), r in e.items() if s >= 16 * MiB and p]
    assert all(abs(x - 1) <= 0.02 for x in out) and not all(abs(x - 1) <= 0.02 for x in inp)
    worst = e[(16 * MiB, True)]
    assert ratio(worst, nt["default"]) == min(inp)
    cv = H._comm_flags(worst)[0]
    says(f"From 16 MiB it is within 2% out of place ({span(out)}) but not in place "
         f"({span(inp)}: its 16 MiB in-place window spread by {cv.removeprefix('cv ')})")
    late = [ratio(r, nt["default"]) for (s, _), r in e.items() if s >= 32 * MiB]
    assert all(abs(x - 1) <= 0.03 for x in late)
    says(f"**Eager mode and nccl-tests' default loop agree within 3% from 32 MiB** "
         f"({span(late)})")
    says("nccl-tests' `-I`, its per-iteration counterpart, was not run.")


def test_small_messages(cells, nt):
    g, e = cells[H.COMM_GRAPH_RUN], cells[H.COMM_EAGER_RUN]
    small = sorted(s for s, p in g if s <= 4096 and not p)
    gt = [g[(s, False)].time_s * 1e6 for s in small]
    et = [e[(s, False)].time_s * 1e6 for s in small]
    p99 = max(e[(s, False)].p99_s / e[(s, False)].time_s for s in small)
    says(f"From 8 B to 4 KiB, graph mode takes {min(gt):.1f} to {max(gt):.1f} µs per all_reduce, "
         f"eager mode {min(et):.1f} to {max(et):.1f} µs, with p99s up to {p99:.1f} times the "
         "mean.")
    G = [nt["G"].row(s).out_time_us for s in small]
    D = [nt["default"].row(s).out_time_us for s in small]
    says(f"nccl-tests' `-G` takes {min(G):.2f} to {max(G):.2f} µs over the same sizes and its "
         f"default loop {min(D):.2f} to {max(D):.2f} µs")
    under = [g[(s, False)].time_s * 1e6 / nt["default"].row(s).out_time_us
             for s, p in g if s < MiB and not p]
    says(f"below 1 MiB dlbench's graph mode takes {min(under):.2f} to {max(under):.2f} of the "
         "default loop's time")
    more = [a - b for a, b in zip(gt, G)]
    says(f"and {min(more):.1f} to {max(more):.1f} µs more than `-G`.")


def test_what_nccl_chose_and_the_checks(cells):
    for recs in cells.values():
        for (size, _), r in recs.items():
            assert (r.algorithm, r.protocol) == ("RING", "LL" if size <= MiB else "SIMPLE")
            assert r.wrong == 0 and r.busbw_comparable is True
    says("RING with the LL protocol up to 1 MiB, RING/SIMPLE from 2 MiB, in all three runs, out "
         "of place and in place")
    says("#wrong is 0 at every size, out of place and in place, in all three runs.")


def test_registration(cells):
    reg = register_file()
    assert len(reg) == 16 and {s for _, s in reg} == {MiB << i for i in range(8)}
    d32, r32 = reg[("default", 32 * MiB)], reg[("register=0", 32 * MiB)]
    says(f"`-G`'s out-of-place busbw at 32 MiB falls from {d32[0]:.2f} to {r32[0]:.2f} GB/s, and "
         f"in place it barely moves ({d32[1]:.2f} to {r32[1]:.2f})")
    g20 = cells[H.COMM_GRAPH20_RUN]
    sizes = [n * MiB for n in (16, 32, 64, 128)]
    unreg = {s: gbs(g20[(s, False)]) / reg[("register=0", s)][0] for s in sizes}
    says(f"the graph x20 run of the same call reads {unreg[16 * MiB]:.3f} at 16 MiB, "
         f"{unreg[32 * MiB]:.3f} at 32 MiB, {unreg[64 * MiB]:.3f} at 64 MiB and "
         f"{unreg[128 * MiB]:.3f} at 128 MiB out of place")
    reg_on = {s: gbs(g20[(s, False)]) / reg[("default", s)][0] for s in unreg}
    assert all(abs(unreg[s] - 1) <= 0.03 < 1 - reg_on[s] for s in (16 * MiB, 64 * MiB,
                                                                   128 * MiB))
    share = (1 - unreg[32 * MiB]) / (1 - reg_on[32 * MiB])
    assert 0.35 <= share <= 0.65
    says("registration accounts for most of the gap at 16, 64 and 128 MiB (within 3% of the "
         "unregistered `-G` there) and about half of it at 32 MiB")
    header = (FOLDER / "nccl-G-register.txt").read_text()
    assert '"IPC register buffer"' in header and "16 or 24 channels" in header
    says("`IPC register buffer` lines, RING/SIMPLE on 16 or 24 channels")


def test_one_mib(cells):
    reg = register_file()
    x20, x10 = cells[H.COMM_GRAPH20_RUN][(MiB, False)], cells[H.COMM_GRAPH_RUN][(MiB, False)]
    assert x20.algorithm == "RING" and x20.protocol == "LL"
    # "neither registration nor more iterations a replay close the gap"
    assert abs(reg[("register=0", MiB)][0] / reg[("default", MiB)][0] - 1) < 0.01
    assert gbs(x20) < gbs(x10) < 0.9 * reg[("register=0", MiB)][0]
    says(f"the graph x20 run of the second call read {gbs(x20):.2f} GB/s out of place, against "
         f"{gbs(x10):.2f} for the first call's x10 and {reg[('register=0', MiB)][0]:.2f} for the "
         "unregistered `-G` of its own call")


def test_sigterm(store):
    run, text = sigterm_run(store, H.COMM_SIGTERM_RUN, FOLDER, says)
    assert "2 NCCL ranks on the GPUs, each 4,678 MiB" in text
    assert "dlbench exit code: 130, 1.66 s after the signal" in text
    assert "0 GPU processes, 0 python processes left" in text
    says("each holding 4,678 MiB of its GPU, and a SIGTERM to the dlbench process 8 s after both "
         "were on the GPUs. dlbench exited with code 130, 1.66 s after the signal, leaving 0 GPU "
         "processes and 0 python processes: nothing left behind, as the issue asks. These figures "
         "come from the device call's printed output")


def test_the_tables_are_the_pages():
    mine = {h.name for h in H.HEADLINES if h.path == H.COMM_PAGE}
    assert mine == {"2x-h200-comm", "2x-h200-comm-nccl-tests"}
    assert set(H.blocks(PAGE)) == mine


def test_the_scaling_guide_links_the_page():
    # "neither fully met": test_the_one_mib_target and test_the_two_percent_target find the
    # sizes that miss each
    guide = " ".join((ROOT / "docs" / "scaling.md").read_text().split())
    assert ("against the targets (0.9x nccl-tests from 1 MiB, within 2% from 16 MiB: "
            "neither fully met)") in guide
    assert "(results/2026-11-2x-h200-comm.md)" in guide

"""Reading nccl-tests' printed tables back (dlbench.report.nccl_tests), on known text."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlbench.report.nccl_tests import only_run, parse, parse_row

HEAD = ("# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809\n"
        "# Collective test starting: all_reduce_perf\n"
        "# nThread 1 nGpus 2 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 1 iters: 20 "
        "agg iters: 1 validation: 1 graph: {graph} unalign: 0\n"
        "#\n"
        "#  size count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong\n"
        "#   (B) (elements)                (us) (GB/s) (GB/s)          (us) (GB/s) (GB/s)\n")
# two rows as all_reduce_perf prints them (its padding narrowed), then its footer
ROWS = """\
      8       2  float  sum  -1   5.80   0.00   0.00  0   5.74   0.00   0.00  0
1048576  262144  float  sum  -1  14.91  70.34  70.34  0  13.81  75.95  75.95  0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 90.9924
"""


def test_a_run_its_settings_and_rows():
    text = "== 06:06:51 [60 s] all_reduce_perf -b 8 -e 1G -f 2 -g 2 -G 20\n" + \
        HEAD.format(graph=20) + ROWS
    run = only_run(text)
    assert (run.version, run.nccl_headers, run.nccl_library) == ("2.19.6", "22809", "22809")
    assert (run.gpus, run.iters, run.graph) == (2, 20, 20)  # not warmup's or agg's iters
    assert (run.test, run.op) == ("all_reduce_perf", "all_reduce")
    assert run.sizes == (8, 1048576)
    r = run.row(1048576)
    assert (r.count, r.dtype, r.redop) == (262144, "float", "sum")
    assert (r.out_time_us, r.out_algbw, r.out_busbw, r.out_wrong) == (14.91, 70.34, 70.34, 0)
    assert (r.in_time_us, r.in_busbw, r.in_wrong) == (13.81, 75.95, 0)
    assert (r.busbw(False), r.busbw(True), r.time_us(True)) == (70.34, 75.95, 13.81)
    with pytest.raises(LookupError, match="no row for 16 B"):
        run.row(16)


def test_several_runs_in_one_file_and_unchecked_results():
    unchecked = ROWS.replace("  0   5.74", "  N/A   5.74")
    runs = parse(HEAD.format(graph=20) + ROWS + "\nmake: done\n" + HEAD.format(graph=0)
                 + unchecked)
    assert [r.graph for r in runs] == [20, 0]
    assert runs[1].row(8).out_wrong is None and runs[1].row(8).in_wrong == 0
    with pytest.raises(ValueError, match="expected one nccl-tests run, found 2"):
        only_run(HEAD.format(graph=0) + ROWS + HEAD.format(graph=0) + ROWS)


def test_rows_without_a_header_and_other_lines():
    with pytest.raises(ValueError, match="before any '# nccl-tests version' line"):
        parse(ROWS)
    assert parse("") == []
    assert parse_row("make rc 0") is None
    assert parse_row("1 2 3 4 5 6 7 8 9 10 11 12") is None          # 12 fields
    assert parse_row("8 2 float sum -1 x 0 0 0 5 0 0 0") is None     # not a number


# -I 1: four more columns per placement (i_min i_max i_p99 i_cv%); lines of the four-H100
# campaign's nccl-I.txt, as printed
PER_ITERATION = """\
# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 2 minBytes 8 maxBytes 1073741824 step: 2(factor) warmup iters: 1 iters: 20 \
agg iters: 1 validation: 1 graph: 0 unalign: 0
# Per-Iteration Report: CUDA event timing; i_* uses max over process rows
           8             2     float     sum      -1    22.03    0.00    0.00       0    16.86    \
34.56    34.56    17.28    21.10    0.00    0.00       0    17.76    30.50    30.50    14.47
  1073741824     268435456     float     sum      -1  3297.18  325.65  325.65       0  3228.70  \
3345.50  3345.50     0.94  3315.84  323.82  323.82       0  3283.49  3366.82  3366.82     0.63
# Out of bounds values : 0 OK
"""


def test_per_iteration_columns():
    run = only_run(PER_ITERATION)
    assert (run.graph, run.iters, run.per_iteration) == (0, 20, True)
    r = run.row(1 << 30)
    assert (r.out_time_us, r.out_busbw, r.out_wrong) == (3297.18, 325.65, 0)
    assert (r.in_time_us, r.in_busbw, r.in_wrong) == (3315.84, 323.82, 0)
    assert (r.out_i_min_us, r.out_i_max_us, r.out_i_p99_us, r.out_i_cv_pct) == \
        (3228.70, 3345.50, 3345.50, 0.94)
    assert (r.in_i_min_us, r.in_i_max_us, r.in_i_p99_us, r.in_i_cv_pct) == \
        (3283.49, 3366.82, 3366.82, 0.63)
    assert (r.p99_us(False), r.p99_us(True)) == (3345.50, 3366.82)
    assert (run.row(8).out_i_cv_pct, run.row(8).in_i_p99_us) == (17.28, 30.50)
    # a run without -I has none
    plain = only_run(HEAD.format(graph=20) + ROWS)
    assert not plain.per_iteration and plain.row(8).p99_us(False) is None
    assert parse_row(" ".join(["8", "2", "float", "sum", "-1"] + ["1"] * 15 + ["x"])) is None


def test_the_committed_per_iteration_file():
    text = (Path(__file__).resolve().parents[1] / "results" / "pt2.11-cu130-4x-h100" / "comm"
            / "nccl-I.txt").read_text()
    run = only_run(text)
    assert run.per_iteration and run.sizes == tuple(8 << i for i in range(28))
    for line in PER_ITERATION.splitlines():
        row = parse_row(line)
        if row is not None:
            assert run.row(row.size_bytes) == row


def test_the_collective_by_dlbench_name():
    """alltoall_perf is dlbench's all_to_all; output without the starting line names none."""
    run = only_run(HEAD.format(graph=20).replace("all_reduce_perf", "alltoall_perf") + ROWS)
    assert (run.test, run.op) == ("alltoall_perf", "all_to_all")
    bare = only_run("\n".join(line for line in (HEAD.format(graph=0) + ROWS).splitlines()
                              if "Collective test" not in line))
    assert (bare.test, bare.op) == (None, None)


def test_like_against_like():
    """-G beside graph timing only, the same collective and element type as printed."""
    graph = only_run(HEAD.format(graph=20) + ROWS)
    loop = only_run(HEAD.format(graph=0) + ROWS)
    assert graph.like("all_reduce", "float32", "graph")
    assert not graph.like("all_reduce", "float32", "eager")
    assert loop.like("all_reduce", "float32", "eager") and loop.like("all_reduce", "float32",
                                                                      "batched")
    assert not loop.like("all_reduce", "float32", "graph")
    assert not graph.like("all_gather", "float32", "graph")
    assert not graph.like("all_reduce", "bfloat16", "graph")
    half = only_run(HEAD.format(graph=20) + ROWS.replace("float", "half"))
    assert half.like("all_reduce", "float16", "graph")

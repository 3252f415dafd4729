"""Reading nccl-tests' printed tables back (dlbench.report.nccl_tests), on known text."""

from __future__ import annotations

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

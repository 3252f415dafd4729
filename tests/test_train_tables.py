"""The time-to-train table's verdict column says whose checker judged the logs: MLPerf's own
checker ran where mlperf-logging was installed; without it only dlbench's rules checker did, and
the column must not pass that off as MLPerf's verdict."""

from fakes.pages import stored_runs

from dlbench.report.train_tables import ttt_table

H100 = "pt2.11-cu130-h100-80gb-hbm3/time-to-accuracy-recipe"
H100_4_TTA = "pt2.11-cu130-4x-h100/tta"


def _verdicts(folder, runs, tmp_path):
    recs = stored_runs(folder, runs, "train", tmp_path)[0]
    table = ttt_table(recs)
    col = table.columns.index("MLPerf logs")
    return recs, [row[col] for row in table.rows]


def test_logs_checked_by_mlperfs_checker_are_counted_plainly(tmp_path):
    recs, cells = _verdicts(H100, ("d5d91fd8982b",), tmp_path)
    assert all("mlperf_logging" in r.compliance["checkers"] for r in recs)
    assert cells and all(c.endswith("/5") for c in cells)


def test_logs_checked_by_dlbench_alone_say_so(tmp_path):
    recs, cells = _verdicts(H100_4_TTA, ("bcc993f3fca7", "b9c9186032cf"), tmp_path)
    assert all(r.compliance["checkers"] == ["dlbench"] for r in recs)
    assert cells == ["5/5 (dlbench's checker only)"] * 3

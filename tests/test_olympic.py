"""measure.olympic: the olympic mean's bookkeeping on made-up times (MLPerf's own summarizer
is checked against it in tests/test_train_scoring.py)."""

import pytest

from dlbench.measure.olympic import MAX_FAILURES, MIN_RUNS, olympic_mean


@pytest.mark.parametrize("times", [
    [3.0, 1.0, 2.0],
    [7.0, 5.0, 9.0, 6.0, 8.0, 4.0],
    [7.0, None, 9.0, 6.0, 8.0],
])
def test_every_run_is_either_kept_or_dropped(times):
    s = olympic_mean(times)
    assert len(s.kept) + len(s.dropped) == s.runs == len(times)
    assert sorted(t for t in s.kept + s.dropped if t is not None) == \
        sorted(t for t in times if t is not None)
    assert s.mean_s == pytest.approx(sum(s.kept) / len(s.kept))


def test_more_failures_may_be_allowed_than_mlperfs_one():
    times = [10.0, None, 11.0, None, 9.0, 12.0]
    assert not olympic_mean(times).valid and MAX_FAILURES == 1
    s = olympic_mean(times, max_failures=2)
    # the two failures fill the slowest place; only the fastest (9) is dropped besides them
    assert s.valid and s.kept == (10.0, 11.0, 12.0) and s.dropped == (9.0, None, None)


def test_the_fewest_runs_leave_one_to_keep():
    assert MIN_RUNS == 3
    assert olympic_mean([4.0, 2.0, 9.0]).kept == (4.0,)
    assert olympic_mean([1.0, None]).reason == "an olympic mean needs at least 3 runs, got 2"


def test_negative_times_are_refused():
    with pytest.raises(ValueError, match="finite and >= 0"):
        olympic_mean([1.0, -2.0, 3.0])


def test_training_scores_with_the_one_olympic_mean():
    from dlbench.training import scoring
    assert scoring.olympic_mean is olympic_mean

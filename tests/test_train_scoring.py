"""MLPerf's olympic mean and failure rules on made-up runs."""

import pytest

from dlbench.measure.olympic import olympic_mean


def test_five_runs_drop_the_fastest_and_the_slowest():
    s = olympic_mean([10.0, 12.0, 11.0, 30.0, 9.0])
    assert s.valid and s.mean_s == pytest.approx(11.0)
    assert s.kept == (10.0, 11.0, 12.0) and sorted(s.dropped) == [9.0, 30.0]
    assert s.failures == 0 and s.runs == 5


def test_one_failure_is_the_slowest_run():
    s = olympic_mean([10.0, 12.0, 11.0, None, 9.0])
    # 9 (fastest) dropped; the failure takes the slowest place, so 12 is kept
    assert s.valid and s.kept == (10.0, 11.0, 12.0) and s.mean_s == pytest.approx(11.0)
    assert s.failures == 1 and s.dropped == (9.0, None)
    # a failure never makes the score better than dropping the real slowest would
    assert olympic_mean([10.0, 12.0, 11.0, 40.0, 9.0]).mean_s <= s.mean_s


def test_two_failures_make_the_result_invalid():
    s = olympic_mean([10.0, None, 11.0, None, 9.0])
    assert not s.valid and s.mean_s is None and s.failures == 2
    assert "invalid" in s.reason and "2 runs failed" in s.reason


def test_too_few_runs_have_no_olympic_mean():
    s = olympic_mean([10.0, 11.0])
    assert not s.valid and "at least 3 runs" in s.reason
    assert olympic_mean([10.0, 11.0, 12.0]).mean_s == pytest.approx(11.0)
    assert olympic_mean([10.0, None, 12.0]).mean_s == pytest.approx(12.0)


def test_bad_times_are_refused():
    with pytest.raises(ValueError):
        olympic_mean([1.0, float("nan"), 2.0])


@pytest.mark.parametrize("times", [
    [10.0, 12.0, 11.0, 30.0, 9.0],
    [10.0, 12.0, 11.0, None, 9.0],
    [5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0],
    [5.0, None, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0],
])
def test_agrees_with_mlperfs_result_summarizer(times):
    summarizer = pytest.importorskip("mlperf_logging.result_summarizer.result_summarizer")
    ok = [t for t in times if t is not None]
    theirs = summarizer._compute_olympic_average(list(ok), len(times) - len(ok), 1)
    assert olympic_mean(times).mean_s == pytest.approx(theirs)


def test_seeds_converged_per_setup():
    from dlbench.records.train import TrainConfig, TrainRecord
    from dlbench.training.scoring import convergence

    def rec(batch, gpus, seed, t):
        cfg = TrainConfig(dataset="fashion-mnist", model="cnn10", batch_size=batch, gpus=gpus,
                          target=0.9, seed=seed)
        if t is None:
            return TrainRecord(config=cfg, env={}, status="error", error_type="not_converged",
                               epoch_times_s=(1.0,) * 15)
        return TrainRecord(config=cfg, env={}, time_to_train_s=t, epochs_to_converge=int(t),
                           epoch_times_s=(1.0,) * int(t))
    recs = [rec(128, 1, s, t) for s, t in enumerate([3.0, 4.0, None, 5.0, 3.0])] + \
           [rec(512, 4, s, t) for s, t in enumerate([9.0, None, None, 8.0, 7.0])]
    one, four = convergence(recs)
    assert (one.gpus, one.batch_size, one.global_batch) == (1, 128, 128)
    assert one.converged == 4 and one.runs == 5 and one.epochs == (3, 4, None, 5, 3)
    assert one.score.valid and one.score.mean_s == pytest.approx(4.0)     # 3, 4, 5 kept
    assert four.global_batch == 2048 and four.converged == 3 and not four.score.valid

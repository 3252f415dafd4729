"""records.lever_trials: the keep rule of a lever search and its replay over stored records, on
made-up throughput records (the search that runs them is tested in tests/test_tuning.py)."""

from dataclasses import replace

import pytest

from dlbench.records.lever_trials import (
    COMPILE_LEVER,
    FIELD_LEVER,
    MARGIN,
    decide,
    describe_change,
    replay,
    throughput_of,
    winner,
)
from dlbench.records.throughput import ThroughputConfig, ThroughputRecord


def cfg(**kw):
    return ThroughputConfig(**{"model": "resnet50", "batch_size": 100, "precision": "bf16", **kw})


def rec(config, step=None):
    if step is None:
        return ThroughputRecord(config=config, env={}, status="error", error_type="oom",
                                error="CUDA out of memory")
    return ThroughputRecord(config=config, env={}, step_times_s=(step,) * 10,
                            samples_per_step=config.batch_size, unit="images",
                            stop_reason="converged")


def test_every_field_a_change_names_belongs_to_a_lever_of_tuned_mode():
    from dlbench.tuning.levers import BY_NAME
    assert set(FIELD_LEVER.values()) | set(COMPILE_LEVER.values()) <= set(BY_NAME)
    everything = cfg(pad_vocab=True, channels_last=True, optimizer_impl="fused",
                     attention="flash", compile="default", compile_loss=True, cuda_graph=True,
                     precision="fp16", batch_size=200)
    # describe_change words every field the replay reads a lever from, one part each
    assert len(describe_change(cfg(), everything).split(", ")) == len(FIELD_LEVER)


def test_a_change_back_is_worded_as_the_plain_setting():
    tuned = cfg(channels_last=True, compile="default", cuda_graph=True)
    assert describe_change(tuned, cfg()) == "NCHW, eager, no CUDA graph"
    assert describe_change(tuned, tuned) == "no change"


def test_a_gain_inside_the_margin_is_not_kept():
    base = rec(cfg(), 0.1)
    small = rec(cfg(channels_last=True), 0.1 / (1 + MARGIN / 2))
    trial = decide(small, base, base, "channels_last")
    assert not trial.kept and trial.why == "+0.5%, within 1%"
    assert decide(small, base, base, "channels_last", margin=MARGIN / 4).kept


def test_a_failed_candidate_is_not_kept_and_says_why():
    base = rec(cfg(), 0.1)
    trial = decide(rec(cfg(batch_size=200)), base, base, "batch-x2")
    assert (trial.kept, trial.why, trial.over_previous) == (False, "failed: oom", None)
    assert throughput_of(trial.record) is None and throughput_of(None) is None


def test_a_loss_is_measured_against_the_best_so_far_and_the_baseline():
    a, b = cfg(), cfg(channels_last=True)
    trials = replay([rec(a, 0.1), rec(b, 0.05), rec(replace(b, compile="default"), 0.08)])
    last = trials[2]
    assert last.lever == "compile" and not last.kept and last.why == "-37.5%"
    assert (last.over_previous, last.over_baseline) == pytest.approx((0.625, 1.25))
    assert winner(trials).config == b


def test_a_rerun_of_the_same_config_replays_as_a_repeat():
    trials = replay([rec(cfg(), 0.1), rec(cfg(), 0.1)])
    assert trials[1].lever == "repeat" and trials[1].change == "no change"
    assert not trials[1].kept


def test_nothing_stored_replays_to_nothing():
    assert replay([]) == [] and winner([]) is None


def test_the_search_replays_with_the_one_rule():
    from dlbench.tuning import search
    assert (search.replay, search.winner, search.MARGIN) == (replay, winner, MARGIN)

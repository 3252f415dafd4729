"""Which measured ceiling an MFU is against: the result's own card's (by its GPU's UUID) before
another card of its model (by its GPU's name), sustained before burst, and said where it is not
the own card's sustained one."""

import json

import pytest

from dlbench.measure import mfu as mfumod
from dlbench.records.peak import PeakConfig, PeakRecord
from dlbench.records.throughput import ThroughputConfig, ThroughputRecord

H100 = "NVIDIA H100 80GB HBM3"
CARD_A = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
CARD_B = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
CARD_C = "GPU-cccccccc-0000-0000-0000-000000000000"


def env(*uuids, name=H100):
    return {"accelerator": "cuda", "gpu_count": len(uuids),
            "gpus": [{"name": name, **({"uuid": u} if u else {})} for u in uuids]}


def result(e, device="auto", model="resnet50"):
    """A bf16 result of 1000 TFLOP/s (10 samples x 1e12 FLOP every 10 ms)."""
    cfg = ThroughputConfig(model=model, batch_size=10, precision="bf16", device=device)
    return ThroughputRecord(config=cfg, env=e, step_times_s=(0.01,) * 10, samples_per_step=10,
                            flops_per_sample=int(1e12), stop_reason="converged")


def peak(e, tflops, run, method="burst", device="cuda:0", precision="bf16"):
    cfg = PeakConfig("matmul", precision=precision, shape=(8, 8, 8), device=device,
                     method=method, warmup_s=30.0 if method == "sustained" else 0.0)
    return PeakRecord(config=cfg, env=e, times_s=(1.0, 1.0, 1.0), work=tflops * 1e12, run_id=run)


def test_the_cards_own_sustained_ceiling_wins_over_its_burst_one_and_other_cards():
    r = result(env(CARD_A, CARD_B))                    # ran on cuda:0, card A
    peaks = [peak(env(CARD_A), 820, "p1"),            # own card, burst
             peak(env(CARD_A), 795, "p2", "sustained"),
             peak(env(CARD_C), 780, "p3", "sustained"),  # another card, later
             peak(env(CARD_A), 830, "p4")]            # own card, burst, latest
    c = mfumod.pick_ceiling(r, peaks)
    assert (c.tflops, c.method, c.run_id, c.card, c.same_card) == (795, "sustained", "p2",
                                                                   CARD_A, True)
    m = mfumod.mfu(r, peak_records=peaks)
    assert m.measured == pytest.approx(1000 / 795) and m.ceiling == c and c.note is None
    assert not [n for n in m.notes if "measured peak:" in n]


def test_a_result_on_the_second_card_takes_that_cards_ceiling():
    r = result(env(CARD_A, CARD_B), device="cuda:1")
    peaks = [peak(env(CARD_A, CARD_B), 800, "p1", "sustained"),
             peak(env(CARD_A, CARD_B), 790, "p2", "sustained", device="cuda:1")]
    c = mfumod.pick_ceiling(r, peaks)
    assert (c.run_id, c.card, c.same_card) == ("p2", CARD_B, True)


def test_another_cards_ceiling_when_that_is_all_there_is_and_it_says_whose():
    r = result(env(CARD_A))
    peaks = [peak(env(CARD_C), 780, "p3", "sustained"),
             peak(env(CARD_B), 820, "p1"),
             peak(env(CARD_A), 50, "p9", precision="fp32")]  # own card, but not bf16
    c = mfumod.pick_ceiling(r, peaks)
    assert (c.tflops, c.method, c.card, c.same_card) == (780, "sustained", CARD_C, False)
    assert c.note == "measured peak: another card's (GPU-cccccccc); run p3"
    m = mfumod.mfu(r, peak_records=peaks)
    assert m.measured == pytest.approx(1000 / 780) and c.note in m.notes
    burst = mfumod.pick_ceiling(r, peaks[1:])
    assert burst.note == ("measured peak: burst (no warm-up, short windows), another card's "
                          "(GPU-bbbbbbbb); run p1")


def test_the_cards_own_burst_ceiling_is_said_to_be_burst():
    r = result(env(CARD_A))
    c = mfumod.pick_ceiling(r, [peak(env(CARD_A), 820, "p1")])
    assert c.same_card and c.note == "measured peak: burst (no warm-up, short windows); run p1"


def test_records_without_uuids_match_by_the_gpus_name_and_say_so():
    r = result(env(None))
    c = mfumod.pick_ceiling(r, [peak(env(None), 800, "p1", "sustained")])
    assert c.same_card is None and c.note == f"measured peak: of an unrecorded card ({H100}); run p1"
    # a GPU of another model, or the CPU of the same host, is never the roof
    other = [peak(env(CARD_C, name="NVIDIA H200"), 900, "p2", "sustained"),
             peak(env(CARD_A), 2, "p3", "sustained", device="cpu")]
    assert mfumod.pick_ceiling(result(env(CARD_A)), other) is None
    m = mfumod.mfu(result(env(CARD_A)), peak_records=other)
    assert m.measured is None and "run 'dlbench peak'" in m.measured_reason


def test_measured_peaks_prefers_a_sustained_run_over_a_later_burst_one():
    e = env(CARD_A)
    got = mfumod.measured_peaks([peak(e, 795, "s1", "sustained"), peak(e, 830, "b1"),
                                 peak(e, 50, "b1", precision="fp32")])
    # bf16 from the sustained run; fp32, which it did not measure, from the latest burst run
    assert got == {H100: {"bf16": 795.0, "fp32": 50.0}}


def test_the_mfu_table_and_roofline_json_name_the_ceiling_they_used(tmp_path, capsys):
    from dlbench.cli import main
    from dlbench.measure.flops import count_flops
    from dlbench.models import get_model
    from dlbench.report.tables import mfu_table
    from dlbench.store import Store
    flops = count_flops(get_model("tiny_cnn"), "eval")
    cfg = ThroughputConfig(model="tiny_cnn", batch_size=8, mode="eval", precision="bf16")
    tput = ThroughputRecord(config=cfg, env=env(CARD_A), step_times_s=(0.001,) * 5,
                            samples_per_step=8, flops_per_sample=flops, stop_reason="converged",
                            run_id="t1")
    other = peak(env(CARD_C), 780, "p3", "sustained")
    table = mfu_table([tput], peak_records=[other])
    note = table.rows[0][table.columns.index("note (why no MFU; whose ceiling)")]
    assert "another card's (GPU-cccccccc); run p3" in note
    assert table.rows[0][table.columns.index("measured peak")] == "780.0"
    db = tmp_path / "r.db"
    with Store(db) as store:
        for run, rec in (("p3", other), ("t1", tput)):
            store.start_run(run, "test", rec.env, "k", "H100")
            store.add(rec, "k")
    assert main(["roofline", "--db", str(db), "--no-plot", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)[0]["results"]
    assert row["measured_peak_tflops"] == pytest.approx(780.0)
    assert (row["measured_peak_method"], row["measured_peak_run"], row["measured_peak_card"],
            row["measured_peak_same_card"]) == ("sustained", "p3", CARD_C, False)

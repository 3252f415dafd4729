"""The what-if model: alpha-beta arithmetic against hand-computed cases, and its command."""

import json
import math
import re

import pytest

from dlbench.config import ConfigError
from dlbench.records.net import NetConfig, NetRecord
from dlbench.reference.networks import NETWORKS
from dlbench.whatif import check
from dlbench.whatif.model import Cluster, Workload, hiding, predict
from dlbench.whatif.networks import (
    custom_network,
    get_network,
    parse_bandwidth,
    parse_latency,
)
from dlbench.whatif.patterns import (
    Link,
    _binomial_sends,
    alpha_beta,
    hierarchical_allreduce,
    ps_collectives,
    push_pull,
    ring_allreduce,
    tree_allreduce,
)

# 1 MB/s and 1 ms: every time below is easy to work out by hand.
L = Link(1e6, 1e-3)


def test_alpha_beta_is_latency_plus_bytes_over_bandwidth():
    assert alpha_beta(2e6, L) == pytest.approx(1e-3 + 2.0)
    assert alpha_beta(2e6, L, rounds=6) == pytest.approx(6e-3 + 2.0)
    assert alpha_beta(0, L, rounds=0) == 0


def test_ring_allreduce_moves_two_n_minus_one_over_n():
    c = ring_allreduce(1e6, 4, L)
    # 2(n-1) = 6 steps of G/n = 250 kB: each host sends and receives 1.5 MB.
    assert c.sent == (1.5e6,) * 4 and c.received == (1.5e6,) * 4 and c.rounds == 6
    assert c.time_s == pytest.approx(6 * 1e-3 + 1.5)
    two = ring_allreduce(1e6, 2, L)
    assert two.sent == (1e6, 1e6) and two.time_s == pytest.approx(2e-3 + 1.0)
    assert ring_allreduce(1e6, 1, L).time_s == 0


def test_tree_allreduce_trades_bandwidth_for_latency():
    t = tree_allreduce(1e6, 8, L)
    assert t.rounds == 6 and t.sent == (2e6,) * 8          # 2 log2(8) steps, 2G per host
    assert t.time_s == pytest.approx(6e-3 + 2.0)
    # With a large latency the tree wins; with a small one the ring (2(n-1)/n < 2) does.
    slow = Link(1e9, 1e-2)
    assert tree_allreduce(1e6, 64, slow).time_s < ring_allreduce(1e6, 64, slow).time_s
    fast = Link(1e6, 1e-6)
    assert tree_allreduce(1e6, 4, fast).time_s > ring_allreduce(1e6, 4, fast).time_s


def test_gloo_binomial_broadcast_span():
    from dlbench.whatif.patterns import _binomial_span
    # 2 ranks: one copy. 4: the root's two copies share its link (2), then rank 1 forwards (3).
    # 3: the root's two copies, nobody forwards. 8: 3 + 2 + 1.
    assert [_binomial_span(n) for n in (1, 2, 3, 4, 8)] == [0, 1, 2, 3, 6]
    c = ps_collectives([400e3, 0, 0, 0], L, "gloo")
    # shard 0 only: reduce-scatter 3 steps of 100 kB, gather 3 x 100 kB into the root,
    # broadcast 3 x 400 kB of span; latencies 3 + 1 + 2.
    assert c.time_s == pytest.approx(6e-3 + 0.3 + 0.3 + 1.2)


def test_gloo_binomial_broadcast_sends():
    assert _binomial_sends(2, 0) == [1, 0]
    assert _binomial_sends(4, 0) == [2, 1, 0, 0]
    assert _binomial_sends(5, 0) == [3, 1, 0, 0, 0]
    assert _binomial_sends(4, 1) == [0, 2, 1, 0]            # rotated to the root
    assert sum(_binomial_sends(7, 3)) == 6                   # n-1 copies in all


def test_ps_over_gloo_two_hosts_by_hand():
    # tiny_mlp's two shards: the first layer's weight (owned by rank 0) and the rest (rank 1).
    g0, g1 = 196608.0, 2856.0
    c = ps_collectives([g0, g1], L, "gloo")
    # shard 0: ring reduce-scatter g0/2 each; gather: rank 1 sends g0/2; broadcast: rank 0 g0.
    # shard 1: reduce-scatter g1/2 each; gather: rank 0 sends g1/2; broadcast: rank 1 sends g1.
    assert c.sent[0] == pytest.approx(g0 / 2 + g0 + g1 / 2 + g1 / 2)
    assert c.sent[1] == pytest.approx(g0 / 2 + g0 / 2 + g1 / 2 + g1)
    assert c.sent == c.received[::-1]
    # Per shard: reduce-scatter 1 step of g/2, gather g/2, broadcast 1 round of g: 3 latencies.
    assert c.time_s == pytest.approx(6e-3 + 2 * (g0 + g1) / 1e6)
    assert c.rounds == 6


def test_ps_over_nccl_chains():
    c = ps_collectives([250e3] * 4, L, "nccl")
    # Each shard: reduce chain (3 senders) and broadcast chain (3 senders) of g: 6g per shard,
    # spread evenly: 1.5 MB per host; time 2 x ((n-1) alpha + g / beta) per shard.
    assert c.sent == pytest.approx((1.5e6,) * 4) and c.received == pytest.approx((1.5e6,) * 4)
    assert c.time_s == pytest.approx(4 * 2 * (3e-3 + 0.25))


def test_push_pull_ps_cluster_shape_by_hand():
    # 10 equal variables of 1 byte, 2 per host on 5 hosts, 4 workers per host (20 in all):
    # a host receives 16 remote pushes of its 2 bytes and its 4 workers pull 8 remote bytes:
    # 32 B in, 32 B out in each phase, 64 B each way per step.
    c = push_pull([1.0] * 10, [i // 2 for i in range(10)], [4] * 5, L)
    assert c.sent == (64.0,) * 5 and c.received == (64.0,) * 5
    assert c.time_s == pytest.approx(2e-3 + 2 * 32 / 1e6)
    # One big variable makes its host the busiest (the 2017 cluster's hot server).
    hot = push_pull([9.0, 1.0], [0, 1], [1, 1], L)
    assert hot.busiest == 0 and hot.busiest_bytes == pytest.approx(1 * 9 + 1 * 1)


def test_hierarchical_allreduce_by_hand():
    intra, inter = Link(1e7, 1e-3), L
    c = hierarchical_allreduce(1e6, 2, 4, intra, inter)
    # reduce-scatter and all-gather in the node: 3 x (1 ms + 250 kB / 10 MB/s) each = 78 ms;
    # across: a 2-host ring of 250 kB on a quarter of the NIC (4 GPUs share it): 2 ms + 1 s.
    assert c.time_s == pytest.approx(2 * 3 * (1e-3 + 0.025) + 2e-3 + 1.0)
    assert c.sent == (1e6, 1e6)                      # per node on the network: G
    one = hierarchical_allreduce(1e6, 1, 4, intra, inter)
    assert one.time_s == pytest.approx(ring_allreduce(1e6, 4, intra).time_s)


def _cluster(nodes=2, gpus=1, lat="1ms", bw="8mbit"):
    net = custom_network(bw, lat)
    return Cluster(nodes, gpus, net, net)


def test_overlap_none_adds_and_full_hides_behind_backward():
    w = Workload(compute_s=0.3, grad_bytes=50e3, batch=10)
    c = _cluster()   # 1 MB/s: ring of 50 kB over 2 hosts = 2 ms + 50 ms
    comm = 2e-3 + 0.05
    assert predict(w, c, "ddp", "none").step_s == pytest.approx(0.3 + comm)
    full = predict(w, c, "ddp", "full")
    assert full.step_s == pytest.approx(0.3) and full.hidden       # 52 ms < 200 ms backward
    big = Workload(compute_s=0.3, grad_bytes=300e3, batch=10)       # comm 302 ms > backward
    p = predict(big, c, "ddp", "full")
    assert p.step_s == pytest.approx(0.1 + 2e-3 + 0.3) and not p.hidden
    assert p.factor == pytest.approx(2 * 0.3 / p.step_s)
    assert p.efficiency == pytest.approx(0.3 / p.step_s)
    assert p.throughput == pytest.approx(2 * 10 / p.step_s)
    # dlbench's ps exchanges after the backward pass: never overlapped.
    assert predict(w, c, "ps", "full").overlap == "none"


def test_hiding_point_bandwidth_by_hand():
    w = Workload(compute_s=3.0, grad_bytes=1e9, batch=1)
    c = _cluster(lat="1ms", bw="8gbit")
    h = hiding(w, c, "ddp", "full")
    # budget = backward = 2 s; comm = 2 ms + 1e9 / B  ->  B = 1e9 / (2 - 0.002).
    assert h.budget_s == pytest.approx(2.0)
    assert h.needed_Bps == pytest.approx(1e9 / (2 - 2e-3), rel=1e-6)
    assert h.max_nodes is not None and h.max_nodes >= 1
    lat_bound = hiding(w, _cluster(lat="2s"), "ddp", "full")
    assert lat_bound.needed_Bps is None                   # latency alone exceeds the budget


def test_networks_cite_every_figure_and_parse():
    for n in NETWORKS:
        assert n.source and n.latency_source and 0 < n.efficiency <= 1
    assert get_network("nvlink4").bandwidth_Bps == 450e9     # 900 GB/s both ways
    assert get_network("1gbe").bandwidth_Bps == 125e6
    assert get_network("ndr").name == "ib-ndr"
    assert get_network("pcie4").bandwidth_Bps == pytest.approx(31.5e9, rel=1e-3)
    assert parse_bandwidth("10gbit") == 1.25e9 and parse_bandwidth("25GB/s") == 25e9
    assert parse_latency("5us") == pytest.approx(5e-6)
    with pytest.raises(ConfigError, match="known"):
        get_network("carrier-pigeon")


def test_ps_cluster_busiest_server_by_hand():
    assert sum(n for _, n in check.CIFAR10_VARIABLES) == 1_068_299
    cost = check.ps_cluster_cost(get_network("1gbe"))
    # local3/weights (884,736) lands on task 5 with conv2/biases (64) on task 4: server 2.
    local = 4 * (884_736 + 64)
    total = 4 * 1_068_299
    assert cost.busiest == 2
    assert cost.busiest_bytes == pytest.approx(16 * local + 4 * (total - local))
    # The implied compute time reproduces the 2.5 Gbit/s it was solved from.
    ib = get_network("ib-fdr")
    c = check.ps_cluster_implied_compute(ib)
    row = check.ps_cluster_rows([ib], [c])[0]
    assert row.busiest_bps == pytest.approx(2.5e9)


def _net_record(strategy="ddp", rate=16e6, step=0.1, compute=0.002, shard=()):
    from dlbench.records.throughput import ThroughputConfig
    base = ThroughputConfig(model="tiny_mlp", batch_size=8, device="cpu",
                            telemetry_interval_s=None)
    cfg = NetConfig(base=base, hosts=2, strategy=strategy, link="x" if rate else "unshaped",
                    rate_bps=rate, steps=4)
    return NetRecord(config=cfg, env={}, rank_step_times_s=((step,) * 4,) * 2,
                     rank_compute_times_s=((compute,) * 3,) * 2,
                     rank_tx_bytes=(4 * 214e3, 4 * 214e3), rank_rx_bytes=(4 * 214e3, 4 * 214e3),
                     rank_samples_per_step=(8, 8), losses=(1.0,) * 4, step_end_s=(0.1,) * 4,
                     grad_bytes=200_000, shard_bytes=shard,
                     probe={"rtt_s": 2e-4, "goodput_bps": 4e9})


def test_check_net_predicts_from_the_link_rate():
    r = _net_record()
    rows = check.check_net([r])
    assert len(rows) == 1
    # payload rate = 16 Mbit/s x 1448 / (1514 + 33); ring at 2 hosts moves G each way.
    bw = 16e6 / 8 * check.EMULATED_EFFICIENCY
    want = 0.002 + 2 * 1e-4 + 200_000 / bw
    assert rows[0].predicted_none_s == pytest.approx(want)
    assert rows[0].predicted_bytes == pytest.approx(200_000 / check.EMULATED_EFFICIENCY)
    assert rows[0].error_none == pytest.approx((want - 0.1) / 0.1)


def test_check_net_fits_latency_on_the_unshaped_run():
    unshaped = _net_record(rate=None, step=0.006)
    shaped = _net_record()
    rows = {r.link: r for r in check.check_net([unshaped, shaped])}
    # unshaped: 6 ms = 2 ms compute + 200 kB at 500 MB/s (0.4 ms) + 2 rounds x latency.
    a = (0.006 - 0.002 - 200_000 / 5e8) / 2
    assert rows["unshaped"].fitted_latency_s == pytest.approx(a)
    assert rows["unshaped"].predicted_fit_s is None         # the fit is not a check of itself
    bw = 16e6 / 8 * check.EMULATED_EFFICIENCY
    assert rows["x"].predicted_fit_s == pytest.approx(0.002 + 2 * a + 200_000 / bw)


def test_net_record_round_trips_and_figures():
    from dlbench.records import record_from_dict
    r = _net_record()
    back = record_from_dict(json.loads(json.dumps(r.to_dict())))
    assert back == r and back.kind == "net"
    assert back.headline() == pytest.approx(16 / 0.1)        # all hosts' samples / slowest
    assert back.tx_per_step() == (214e3, 214e3)
    assert back.busiest_bps()[0] == pytest.approx(4 * 214e3 * 8 / 0.4)
    with pytest.raises(ConfigError, match="^hosts must be"):
        NetConfig(base=r.config.base, hosts=1, strategy="ddp", link="x")


def test_whatif_command_predicts_and_labels(capsys):
    from dlbench.cli import main
    rc = main(["whatif", "-m", "tiny_mlp", "-b", "8", "--step-ms", "2", "--nodes", "1,2",
               "--gpus-per-node", "1", "--bandwidth", "16mbit", "--latency", "100us",
               "--strategy", "ddp,ps", "--overlap", "none", "--json"])
    assert rc == 0
    rows = json.loads(capsys.readouterr().out)
    assert all(r["predicted"] for r in rows)
    two = [r for r in rows if r["gpus"] == 2 and r["strategy"] == "ddp"][0]
    g = 4 * 49_866                               # tiny_mlp's parameters, fp32
    assert two["comm_s"] == pytest.approx(2e-4 + g / 2e6)
    assert two["step_s"] == pytest.approx(2e-3 + two["comm_s"])
    assert math.isclose(two["factor"], 2 * 2e-3 / two["step_s"])


def test_whatif_command_tables(capsys):
    from dlbench.cli import main
    assert main(["whatif", "-m", "tiny_mlp", "-b", "8", "--step-ms", "2", "--nodes", "1,2",
                 "--gpus-per-node", "2", "--network", "1gbe"]) == 0
    out = capsys.readouterr().out
    assert "PREDICTED step time" in out and "PREDICTED training throughput" in out
    assert "hides behind" in out
    assert main(["whatif", "--ps-cluster"]) == 0
    ps = capsys.readouterr().out
    assert "over 5x" in ps and "the 2017 parameter-server cluster" in ps
    # The published studies are named by what they are, never by the project's article numbers.
    assert not re.search(r"seed ?00\d", (out + ps).lower())
    assert main(["whatif", "--seed004"]) == 0            # the old flag, hidden, still works
    assert capsys.readouterr().out == ps
    assert main(["whatif", "--networks"]) == 0
    assert "ib-ndr" in capsys.readouterr().out


def _store_with_gpu_records(path):
    """What GPU runs leave in a store: a one-GPU training record, dlbench comm
    all-reduce rows, and dlbench scale at 1 and 2 GPUs (figures made up, times exact)."""
    from dlbench.records.collective import CommConfig, CommRecord
    from dlbench.records.scaling import ScalingConfig, ScalingRecord
    from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
    from dlbench.store import Store
    base = ThroughputConfig(model="tiny_mlp", batch_size=8, device="cpu")
    recs = [ThroughputRecord(config=base, env={}, step_times_s=(0.004,) * 5, samples_per_step=8)]
    # 8 B in 20 us (latency per ring step: 20 us / 2(n-1) = 10 us), 1 MB at busbw 100 MB/s.
    for size, t in ((8, 20e-6), (1 << 20, (1 << 20) / 100e6)):
        recs.append(CommRecord(config=CommConfig(op="all_reduce", size_bytes=size, ranks=2,
                                                 backend="nccl"), env={},
                               rank_times_s=((t,) * 3,) * 2, count=size // 4, wrong=0))
    for gpus, step in ((1, 0.004), (2, 0.0065)):
        cfg = ScalingConfig(base=base, gpus=gpus, strategy="ddp")
        recs.append(ScalingRecord(config=cfg, env={}, rank_step_times_s=((step,) * 4,) * gpus,
                                  rank_samples_per_step=(8,) * gpus))
    with Store(path) as store:
        store.start_run("r1", "test", {}, "k", "cpu")
        for r in recs:
            store.add(r.with_run("r1"), "k")


def test_whatif_takes_measured_step_and_busbw_from_records(tmp_path, capsys):
    from dlbench.cli import main
    db = str(tmp_path / "gpu.db")
    _store_with_gpu_records(db)
    assert main(["whatif", "-m", "tiny_mlp", "--db", db, "--busbw-from", db, "--nodes", "1",
                 "--gpus-per-node", "2", "--overlap", "none", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    g = 4 * 49_866
    # compute: the newest one-GPU record (the 1-GPU scaling run, 4 ms); link: busbw 100 MB/s,
    # 10 us per ring step: a 2-GPU ring moves G in 2 steps.
    assert row["compute_s"] == pytest.approx(0.004)
    assert row["comm_s"] == pytest.approx(2 * 10e-6 + g / 100e6)
    assert row["compute_source"].startswith("scaling ")


def test_whatif_check_against_scaling_records(tmp_path, capsys):
    from dlbench.cli import main
    db = str(tmp_path / "gpu.db")
    _store_with_gpu_records(db)
    assert main(["whatif", "--check", "--db", db, "--busbw-from", db]) == 0
    out = capsys.readouterr().out
    assert "dlbench scale" in out and "mean absolute error" in out
    from dlbench.store import Store
    from dlbench.whatif.check import check_scaling
    from dlbench.whatif.patterns import Link
    with Store(db) as store:
        rows = check_scaling(store.results(), Link(100e6, 10e-6), {"tiny_mlp": 4 * 49_866})
    assert len(rows) == 1
    want = 0.004 + 2 * 10e-6 + 4 * 49_866 / 100e6
    assert rows[0].predicted_none_s == pytest.approx(want)
    assert rows[0].error_none == pytest.approx((want - 0.0065) / 0.0065)


def test_whatif_check_takes_each_profiles_own_link_and_the_shared_one_gpu_record():
    from dlbench.records.scaling import ScalingConfig, ScalingRecord
    from dlbench.records.throughput import ThroughputConfig
    from dlbench.whatif.check import check_scaling
    from dlbench.whatif.patterns import Link
    base = ThroughputConfig(model="tiny_mlp", batch_size=8, device="cpu")

    def scale(gpus, step, profile="default"):
        cfg = ScalingConfig(base=base, gpus=gpus, strategy="ddp", interconnect=profile)
        return ScalingRecord(config=cfg, env={}, rank_step_times_s=((step,) * 4,) * gpus,
                             rank_samples_per_step=(8,) * gpus)
    recs = [scale(1, 0.004), scale(2, 0.0065), scale(2, 0.0200, "no-p2p+no-shm"),
            scale(2, 0.0100, "no-p2p")]
    links = {("default", 2): Link(100e6, 10e-6), ("no-p2p+no-shm", 2): Link(10e6, 10e-6)}
    rows = check_scaling(recs, lambda p, n: links.get((p, n)), {"tiny_mlp": 4 * 49_866})
    # no-p2p was never measured by comm: left out rather than predicted with another link.
    assert [r.link for r in rows] == ["default", "no-p2p+no-shm"]
    slow = rows[1]
    assert slow.compute_s == pytest.approx(0.004)   # the one-GPU record, whatever the profile
    assert slow.predicted_none_s == pytest.approx(0.004 + 2 * 10e-6 + 4 * 49_866 / 10e6)


def test_whatif_help_names_the_ps_cluster_and_hides_the_old_flag(capsys):
    from dlbench.cli import main
    with pytest.raises(SystemExit):
        main(["whatif", "--help"])
    out = capsys.readouterr().out
    assert "--ps-cluster" in out and "--seed004" not in out and "seed 00" not in out


def test_scenarios_ps_cluster_matches_the_check_module():
    from dlbench.whatif import check, scenarios
    c = scenarios.ps_cluster()
    implied = round(check.ps_cluster_implied_compute(get_network("ib-fdr")), 4)
    assert c.implied_compute_s == implied
    assert {r.network for r in c.rows} == {"1gbe", "10gbe", "ib-fdr"}
    assert c.slowdown_1gbe > 1 and c.observed_hours_1gbe == pytest.approx(23)


def _row(measured, perfect, none, full=None):
    return check.CheckRow(label="m", link="default", strategy="ddp", ranks=2,
                          measured_s=measured, compute_s=perfect, predicted_none_s=none,
                          predicted_full_s=full, predicted_perfect_s=perfect)


def test_skill_only_where_the_model_beats_perfect_scaling():
    rows = [_row(1.10, 1.00, 1.08, full=1.00), _row(2.00, 1.90, 2.02, full=1.90)]
    none, full = check.skill_summary(rows)
    assert (none.prediction, none.rows, none.closer, none.same) == ("none", 2, 2, 0)
    assert none.model == pytest.approx((0.02 / 1.10 + 0.02 / 2.00) / 2)
    assert none.baseline == pytest.approx((0.10 / 1.10 + 0.10 / 2.00) / 2)
    assert none.skill == pytest.approx(1 - none.model / none.baseline)
    assert "skill" in none.line() and "no skill" not in none.line()
    # overlap that hides everything predicts the one-GPU step: the baseline, no skill
    assert full.same == 2 and full.skill is None
    assert "no skill, its prediction is the one-GPU step in every row" in full.line()
    worse = check.skill_summary([_row(1.0, 0.99, 1.2)])[0]
    assert worse.skill is None and "the baseline does as well or better" in worse.line()


def _store_copy(folder: str, tmp_path):
    import gzip
    import shutil
    from pathlib import Path
    db = tmp_path / f"{folder}.db"
    src = Path(__file__).resolve().parents[1] / "results" / folder / "dlbench.db.gz"
    with gzip.open(src, "rb") as f, open(db, "wb") as g:
        shutil.copyfileobj(f, g)
    return str(db)


def test_the_docs_state_the_baseline_beside_the_models_error(tmp_path):
    """The README, network guide and campaign pages quote the 4x- and 8x-H200 check: every
    figure recomputed from the committed stores, the baseline's beside the model's."""
    from pathlib import Path
    from dlbench.whatif import scenarios
    from fakes.pages import prose
    root = Path(__file__).resolve().parents[1]
    db = _store_copy("pt2.11-cu130-4x-h200", tmp_path)
    rows = scenarios.check_against(db, busbw_from=db).scaling
    net = " ".join((root / "docs" / "network.md").read_text().split())
    page = prose((root / "docs" / "results" / "2026-11-4x-h200.md").read_text())
    for profile in ("default", "no-p2p", "no-p2p+no-shm"):
        part = [r for r in rows if r.link == profile]
        s = check.error_summary(part)
        cells = (f"| {len(part)} | {s['perfect scaling']:.1%} | {s['none']:.1%} | "
                 f"{s['full']:.1%} |")
        assert cells in net and cells in page, (profile, cells)
    nvlink = [r for r in rows if r.link == "default"]
    none, full = check.skill_summary(nvlink)
    assert full.same == full.rows and none.skill is not None        # the claims made
    assert f"({none.model:.1%} against {none.baseline:.1%}, closer in {none.closer} of " \
           f"{none.rows} rows)" in net
    readme = " ".join((root / "README.md").read_text().split())
    assert (f"On the NVLink profile ({len(nvlink)} runs) `dlbench whatif` predicts the "
            f"multi-GPU steps with {none.model:.1%} mean absolute error (no overlap), where "
            f"perfect scaling (the 1-GPU step) is off by {none.baseline:.1%}; its overlap "
            f"prediction is the 1-GPU step in every row there, so its {full.model:.1%} is no "
            f"skill.") in readme
    db8 = _store_copy("pt2.11-cu130-8x-h200", tmp_path)
    s8 = check.error_summary(scenarios.check_against(db8, busbw_from=db8).scaling)
    assert (f"predicted within {s8['none']:.1%} (no overlap) mean absolute error against "
            f"perfect scaling's {s8['perfect scaling']:.1%}") in net
    for folder in ("pt2.11-cu130-4x-h200", "pt2.11-cu130-8x-h200", "pt2.11-cu130-2x-h200",
                   "pt2.14-cpu"):
        assert "vs baseline, " in (root / "results" / folder / "whatif-check.txt").read_text()


def test_a_language_models_predicted_throughput_counts_tokens(capsys):
    # The table's title says tokens/s: a sample of tiny_llama is a sequence of 32 tokens, so
    # 4 sequences a 2 ms step on one GPU are 64,000 tokens/s (it once printed the sequences).
    from dlbench.cli import main
    assert main(["whatif", "-m", "tiny_llama", "-b", "4", "--step-ms", "2", "--nodes", "1",
                 "--gpus-per-node", "2", "--strategy", "ddp"]) == 0
    out = capsys.readouterr().out
    assert "PREDICTED training throughput, tokens/s" in out
    assert "64,000" in out and "| 2,000 " not in out and "│ 2,000 " not in out
    assert main(["whatif", "-m", "tiny_llama", "-b", "4", "--step-ms", "2", "--nodes", "1",
                 "--gpus-per-node", "2", "--strategy", "ddp", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["units_per_sample"] for r in rows} == {32}

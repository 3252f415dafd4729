"""docs/network.md against its sources: the model's rules and constants recomputed from
dlbench.whatif and dlbench.netemu, the measured figures from the committed CPU store (the
emulated-link runs) and the committed what-if checks (results/*/whatif-check.txt)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from fakes.pages import H, assert_says, store_fixture

from dlbench.measure.units import fmt_bps
from dlbench.reference.networks import ETH_TCP_EFFICIENCY, IB_EFFICIENCY, NETWORKS
from dlbench.report.table import fmt_ms, fmt_pct
from dlbench.whatif import check, patterns, scenarios
from dlbench.whatif.networks import get_network

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "network.md").read_text()
NET_RUNS = dict(zip((2, 4), H.CPU_NET_RUNS))  # hosts -> run
SHAPED = ("100mbit", "10mbit")


def says(text: str) -> None:
    assert_says(PAGE, text)


store = store_fixture(H.CPU)


@pytest.fixture(scope="module")
def net(store):
    recs = [r for run in NET_RUNS.values() for r in store.results(run_id=run, kind="net")]
    assert len(recs) == 16 and all(r.ok for r in recs)
    return {(r.config.hosts, r.config.link, r.config.strategy): r for r in recs}


@pytest.fixture(scope="module")
def rows(net):
    return check.check_net(list(net.values()))


def test_the_opening():
    # the article's figures, as the model module holds them
    says("on 5 servers x 4 GPUs over 1 GbE, 10 GbE and InfiniBand, and found 1 GbE over "
         f"{check.PS_CLUSTER_1GBE_OVER_IB:.0f}x slower than InfiniBand, with the busiest server "
         f"carrying about {check.PS_CLUSTER_BUSIEST_BPS / 1e9} Gbit/s")


def test_dlbench_net_rules():
    from dlbench.netemu import shaping, topology
    says(f"Addresses come from **{topology.SUBNET}**")
    assert shaping.BURST_S == 1e-3 and shaping.MIN_BURST_BYTES == 2 * shaping.MTU_FRAME_BYTES
    assert shaping.QUEUE_S == 0.1
    says("The bucket is 1 ms of traffic (at least two frames) and the queue 100 ms")
    says(f"TCP payload moves at {shaping.TCP_PAYLOAD_BYTES}/{shaping.MTU_FRAME_BYTES} of the rate")
    says(f"Every ip/tc command has a {topology.CMD_TIMEOUT_S:.0f} s limit")


def test_the_alpha_beta_model_rules():
    names = {n.name for n in NETWORKS}
    for name in ("1gbe", "10gbe", "25gbe", "100gbe", "400gbe", "ib-fdr", "ib-edr", "ib-hdr",
                 "ib-ndr", "nvlink2", "nvlink3", "nvlink4", "nvlink5", "pcie3", "pcie4", "pcie5"):
        assert name in names
    says("1/10/25/100/400 GbE, InfiniBand FDR/EDR/HDR/NDR, NVLink 2-5, PCIe 3-5")
    says(f"{ETH_TCP_EFFICIENCY:.3f} for TCP over Ethernet at MTU 1500 with delayed ACKs, "
         f"{IB_EFFICIENCY:.3f} for IB RDMA at 4 KiB MTU")
    # ring all-reduce: each host sends 2(n-1)/n x G; tree: 2G
    link = patterns.Link(1e9, 0.0)
    for n in (2, 4, 8):
        assert max(patterns.ring_allreduce(1e6, n, link).sent) == pytest.approx(2 * (n - 1) / n * 1e6)
    says("Ring all-reduce: 2(n-1) steps of G/n (each host sends 2(n-1)/n x G)")
    says("with backward assumed 2/3 of the compute (`--backward-fraction`)")


def test_sharded_strategies():
    from dlbench.whatif.inputs import model_shape
    from dlbench.whatif.sharded import dtype_bytes, fsdp_bytes
    assert (dtype_bytes("bf16"), dtype_bytes("fp16"), dtype_bytes("fp32")) == (2, 2, 4)
    says("Gathers move the parameter dtype (2 bytes in bf16/fp16, 4 in fp32)")
    shape = model_shape("llama-3.2-1b")
    at2, at8 = fsdp_bytes(shape, 2), fsdp_bytes(shape, 8)
    p, root = shape.params, shape.root_params
    rule = lambda n: (n - 1) / n * ((2 * p - root) * 2 + 4 * p)   # noqa: E731 (the page's rule)
    assert sum(at2.values()) == pytest.approx(rule(2)) and sum(at8.values()) == pytest.approx(rule(8))
    gathered = at2["all-gather forward"] + at2["all-gather backward"]
    says(f"llama-3.2-1b ({p / 1e6:,.1f} M parameters, {root / 1e6:,.1f} M in the root: the tied "
         f"embedding) in bf16 moves {sum(at2.values()) / 1e9:.2f} GB per GPU per step at 2 GPUs "
         f"({gathered / 1e9:.2f} GB gathered, {at2['reduce-scatter'] / 1e9:.2f} GB "
         f"reduce-scattered) and {sum(at8.values()) / 1e9:.2f} GB at 8")
    # the two-H200 check's figures
    text = (ROOT / "results" / "pt2.11-cu130-2x-h200" / "whatif-check.txt").read_text()
    tp = re.search(r"tp \(\d+ rows\): mean absolute error perfect scaling: ([\d.]+%), "
                   r"none: ([\d.]+%)", text)
    fsdp = re.search(r"fsdp \(\d+ rows\): mean absolute error perfect scaling: ([\d.]+%), "
                     r"none: [\d.]+%, full: ([\d.]+%)", text)
    says(f"the model is off by {tp[2]} for `tp` where perfect scaling is off by {tp[1]}, and by "
         f"{fsdp[2]} for `fsdp` where perfect scaling is off by {fsdp[1]}")


def test_reading_nets_output(net, rows):
    r = net[(4, "unshaped", "ddp")]
    says(f"`tiny_mlp` ({r.param_count:,} parameters: {r.grad_bytes:,} bytes of fp32 gradients), "
         f"batch {r.config.base.batch_size} per host")
    assert r.env["cpu_logical_cores"] == 2
    for link in ("unshaped", "10mbit"):
        for strategy in ("ddp", "ps"):
            x = net[(4, link, strategy)]
            s, h, busy, probe = x.summary(), x.busiest_host(), x.busiest_bps(), x.probe
            out, in_ = fmt_bps(busy[0]).split(), fmt_bps(busy[1]).split()
            assert out[1] == in_[1]
            says(f"| {link} | {strategy} | {fmt_ms(s.mean_s)} (±{fmt_pct(s.rel_halfwidth)}) | "
                 f"{fmt_ms(x.compute_s)} | {' / '.join(f'{b / 1e3:,.1f}' for b in x.tx_per_step())}"
                 f" | h{h}: {out[0]} / {in_[0]} {out[1]} | {fmt_bps(probe['goodput_bps'])}, "
                 f"{probe['rtt_s'] * 1e6:.0f} us | {', '.join(H._net_flags(x))} |")
    # the bytes: the ring's share, the headers at 10-100 Mbit/s
    ring = {n: 2 * (n - 1) / n * r.grad_bytes for n in (2, 4)}
    assert 2 * 3 / 4 == 1.5 and f"{r.tx_per_step()[0] / 1e3:.0f}" == "304"
    says("1.5 G at 4 hosts (304 kB)")
    headers = [b / ring[n] - 1 for (n, link, s), x in net.items() if s == "ddp" and link in SHAPED
               for b in x.tx_per_step()]
    says(f"({min(headers) * 100:.0f}–{max(headers) * 100:.0f}% at 10–100 Mbit/s)")
    shard = net[(4, "unshaped", "ps")].shard_bytes
    uneven = {f"{max(x.tx_per_step()) / min(x.tx_per_step()):.1f}"
              for (n, _, s), x in net.items() if (n, s) == (4, "ps")}
    assert uneven == {"2.6"}
    says(f"the first layer ({shard[0] / sum(shard):.1%} of the parameters) sends 2.6x what the "
         "lightest host sends")
    ratio = {n: net[(n, "10mbit", "ps")].step_s / net[(n, "10mbit", "ddp")].step_s for n in (2, 4)}
    assert f"{ratio[2]:.1f}" == "2.0"
    says(f"{ratio[4]:.1f}x DDP's step at 4 hosts and 10 Mbit/s (twice at 2 hosts)")
    assert all(len({tuple(x.losses) for (h, _, _), x in net.items() if h == n}) == 1
               for n in (2, 4))


def test_how_accurate_the_model_is(net, rows):
    def mae(sel, attr="error_none"):
        v = [abs(getattr(x, attr)) for x in rows if sel(x)]
        return sum(v) / len(v)
    errors = check.error_summary(rows)
    says(f"| bytes sent by the busiest host | {errors['bytes']:.1%} (every row within "
         f"{max(abs(x.bytes_error) for x in rows):.1%}) |")
    wire = lambda x: x.link in SHAPED   # noqa: E731
    shaped = lambda x: x.link != "unshaped"   # noqa: E731
    says(f"| step time, probe latency, where the wire dominates (10–100 Mbit/s) | "
         f"{mae(wire):.1%} |")
    says(f"| step time, probe latency, all shaped links | {mae(shaped):.0%} |")
    says(f"| step time, probe latency, every row (unshaped included) | {errors['none']:.0%} |")
    says(f"| step time, latency fitted on the unshaped run, 10–100 Mbit/s / all shaped links | "
         f"{mae(wire, 'error_fit'):.1%} / {errors['fitted latency']:.0%} |")
    w = [x for x in rows if wire(x)]
    share = [(x.predicted_none_s - x.compute_s) / x.predicted_none_s for x in w]
    says(f"transfer is {min(share) * 100:.0f}–{max(share) * 100:.1f}% of the predicted step")
    within = sum(abs(x.error_none) < 0.10 for x in w)
    low = sum(x.error_none < 0 for x in w)
    says(f"within 10% on {within} of the {len(w)} rows, and low on {low} of the {len(w)}")
    fitted = [x.fitted_latency_s * 1e3 for x in rows]
    says(f"at {min(fitted):.2f}–{max(fitted):.1f} ms per collective step (the fitted latencies)")
    rtt = max(x.probe["rtt_s"] for x in net.values() if x.config.link == "unshaped")
    assert min(fitted) / 1e3 / rtt > 9      # "an order of magnitude above the probe's ping-pong"
    soft = [x.error_none * 100 for x in rows if x.link in ("unshaped", "1gbit")]
    says(f"misses that ({max(soft):.0f}% to {min(soft):.0f}%)")
    gig = [x.error_fit * 100 for x in rows if x.link == "1gbit"]
    says(f"brings 1 Gbit/s to {min(gig):+.0f}% to {max(gig):+.0f}%, but does not help at "
         f"10–100 Mbit/s ({mae(wire, 'error_fit'):.1%} against {mae(wire):.1%})")
    assert mae(wire, "error_fit") > mae(wire)


def test_gloos_broadcast(net, monkeypatch):
    assert patterns._binomial_span(4) == 3
    says("3 g/beta for 4 ranks, not the 2 of sequential rounds")
    x = net[(4, "10mbit", "ps")]
    gloo = check.check_net([x])[0].predicted_none_s
    monkeypatch.setattr(patterns, "_binomial_span", lambda n: math.ceil(math.log2(n)))
    seq = check.check_net([x])[0].predicted_none_s
    says(f"modelled as sequential rounds it would be {(1 - seq / x.step_s) * 100:.1f}% low at "
         "4 hosts and 10 Mbit/s")
    assert seq < gloo


def test_the_ps_cluster():
    c = scenarios.ps_cluster()
    total = sum(n for _, n in check.CIFAR10_VARIABLES)
    big = dict(check.CIFAR10_VARIABLES)["local3/weights"]
    says(f"the TensorFlow CIFAR-10 tutorial model ({total:,} fp32 variables: "
         f"{4 * total / 1e6:.2f} MB)")
    says(f"(`local3/weights`, {big:,} elements, {big / total:.0%} of the model)")
    cost = check.ps_cluster_cost(get_network("1gbe"))
    fifth = 4 * total / 5
    says(f"**{cost.busiest_bytes / 1e6:.1f} MB each way per step**, against "
         f"{(16 * fifth + 4 * (4 * total - fifth)) / 1e6:.1f} MB if every server held a fifth")
    says(f"the model implies {c.implied_compute_s * 1e3:.0f} ms of compute per step")
    by = {(r.network, r.compute_s): r for r in c.rows}
    for name, label in (("1gbe", "1 GbE"), ("10gbe", "10 GbE"), ("ib-fdr", "InfiniBand FDR")):
        r = by[(name, c.implied_compute_s)]
        rate = fmt_bps(r.busiest_bps).replace("2.5 Gbit/s", "2.5 Gbit/s (the input)")
        says(f"| {label} | {r.step_s * 1e3:,.0f} | {rate} | {r.step_s * 1e5 / 3600:.1f} |")
    says(f"predicted {c.slowdown_1gbe:.1f}x")
    ratio = [by[("1gbe", t)].step_s / by[("ib-fdr", t)].step_s for t in (0.05, 0.1)]
    says(f"the prediction is {ratio[1]:.0f}-{ratio[0]:.0f}x")
    slow, fast = by[("1gbe", 0.05)].comm_s, by[("ib-fdr", 0.05)].comm_s
    says(f"below about {(slow - 5 * fast) / 4 * 1e3:.0f} ms".replace("226", "230"))
    says(f"{c.observed_hours_1gbe:.0f} h per 100,000 iterations on 1 GbE**: predicted "
         f"{c.hours_1gbe:.0f} h ({c.hours_1gbe / c.observed_hours_1gbe - 1:+.0%})")
    says(f"({by[('10gbe', 0.05)].comm_s * 1e3:.0f} ms per step on 10 GbE against "
         f"{fast * 1e3:.0f} ms on FDR)")


def test_with_gpu_measurements(tmp_path):
    import gzip
    import shutil
    db = tmp_path / "h200.db"
    with gzip.open(ROOT / "results" / "pt2.11-cu130-4x-h200" / "dlbench.db.gz", "rb") as f, \
            open(db, "wb") as g:
        shutil.copyfileobj(f, g)
    link_for, _ = scenarios.scaling_links("nvlink4", str(db))
    bw = {p: link_for(p, 2).bandwidth_Bps / 1e9 for p in ("default", "no-p2p", "no-p2p+no-shm")}
    says(f"| default (NVLink; {bw['default']:.0f} GB/s) |")
    says(f"| no-p2p (host shared memory; {bw['no-p2p']:.1f} GB/s) |")
    says(f"| no-p2p+no-shm (sockets; {bw['no-p2p+no-shm']:.1f} GB/s) |")
    text = (ROOT / "results" / "pt2.11-cu130-4x-h200" / "whatif-check.txt").read_text()
    row = re.search(r"no-p2p\+no-shm │ ddp +│ +2 │ vgg16 b512 .*? │ +([+-][\d.]+)% +│ +[\d.]+ │ "
                    r"([+-][\d.]+)%", text)
    from dlbench.whatif.inputs import model_gradients
    grad, _ = model_gradients("vgg16")
    says(f"overestimates VGG-16's socket step by {float(row[1]):.0f}%, the full-overlap model "
         f"underestimates it by {-float(row[2]):.0f}% (not all of the {grad / 4 / 1e6:.0f} M")

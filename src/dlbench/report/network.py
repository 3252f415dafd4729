"""Tables of ``dlbench net`` (measured) and ``dlbench whatif`` (predicted). Pure: rows of text.

Measured and predicted figures never share a table without saying which is which: every what-if
table's title starts with "PREDICTED", and the one measured input it rests on is named in a note.
"""

from __future__ import annotations

from typing import Sequence

from dlbench.measure.units import fmt_bps
from dlbench.reference.networks import NETWORKS
from dlbench.report.table import Table, fmt_ms, fmt_num, fmt_pct


def _kb(x: float | None) -> str:
    return "-" if x is None else f"{x / 1e3:,.1f}"


def _rate(bps: float | None) -> str:
    if bps is None:
        return "-"
    return fmt_bps(bps)


def _err(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


# -- dlbench net (measured) ---------------------------------------------------------------------
def net_table(records: Sequence, title: str = "Training over emulated links (measured)") -> Table:
    """Per link and strategy: step time, throughput, compute alone, bytes per step per host, the
    busiest host's traffic, the link probe."""
    rows = []
    for r in records:
        if getattr(r, "kind", "") != "net":
            continue
        c = r.config
        if not r.ok:
            first = (r.error or "").splitlines()[0][:70] if r.error else ""
            rows.append((c.link, c.strategy, str(c.hosts), c.model, "-", "-", "-", "-", "-",
                         "-", "-", f"{r.error_type}: {first}"))
            continue
        s = r.summary()
        tx, rx = r.tx_per_step(), r.rx_per_step()
        h = r.busiest_host()
        busy = r.busiest_bps()
        probe = r.probe or {}
        rows.append((
            c.link, c.strategy, str(c.hosts), c.model,
            f"{fmt_ms(s.mean_s)} ±{fmt_pct(s.rel_halfwidth)}", fmt_num(s.throughput),
            fmt_ms(r.compute_s), " / ".join(_kb(x) for x in tx), " / ".join(_kb(x) for x in rx),
            f"h{h}: {_rate(busy[0])} out, {_rate(busy[1])} in" if busy else "-",
            f"{_rate(probe.get('goodput_bps'))}, rtt {probe.get('rtt_s', 0) * 1e6:.0f} us"
            if probe else "-", ""))
    return Table(title, ("link", "strategy", "hosts", "model", "step ms", "samples/s",
                         "compute ms", "sent kB/step per host", "received kB/step per host",
                         "busiest host", "probe (goodput, rtt)", "error"), tuple(rows),
                 ("bytes = the host's interface counters over the measured window (Ethernet "
                  "frames: payload + TCP/IP/Ethernet headers) / steps; compute = the same steps "
                  "without communication, every host at once; samples/s = all hosts' samples "
                  "over the slowest host's window",))


def loss_table(records: Sequence, points: int = 5) -> Table:
    """Loss against iteration and against wall time, rank 0's: the two views of the 2017
    parameter-server CIFAR-10 study over 1/10 GbE and InfiniBand."""
    rows = []
    for r in records:
        if getattr(r, "kind", "") != "net" or not r.ok or not r.losses:
            continue
        n = len(r.losses)
        idx = sorted({min(n - 1, round(i * (n - 1) / (points - 1))) for i in range(points)})
        cells = [f"it {i + 1}: {r.losses[i]:.4f} @ {r.step_end_s[i]:.2f} s" for i in idx]
        rows.append((r.config.link, r.config.strategy, *cells))
    width = max((len(x) for x in rows), default=2)
    rows = [x + ("",) * (width - len(x)) for x in rows]
    cols = ("link", "strategy") + tuple(f"point {i + 1}" for i in range(width - 2))
    return Table("Loss against iteration and wall time (rank 0; wall time since the window "
                 "began)", cols, tuple(rows),
                 ("same seed and data everywhere: the per-iteration curves match across links "
                  "and strategies, the per-time curves do not (as the 2017 parameter-server "
                  "CIFAR-10 study over 1/10 GbE and InfiniBand observed)",))


# -- dlbench whatif (predicted) -----------------------------------------------------------------
def prediction_table(preds: Sequence, title: str = "PREDICTED step time by the alpha-beta "
                     "model") -> Table:
    rows = []
    for p in preds:
        w, c = p.workload, p.cluster
        rows.append((w.name, p.strategy, c.label, str(c.gpus), fmt_ms(p.compute_s),
                     fmt_ms(p.comm.time_s), fmt_ms(p.exposed_s), fmt_ms(p.step_s),
                     fmt_num(p.throughput), f"{p.factor:.2f}", f"{p.efficiency:.1%}",
                     _rate(p.busiest_bps) if c.nodes > 1 else "-",
                     "yes" if p.hidden else "no"))
    notes = ["every figure here is a prediction except 'compute ms', the measured (or given) "
             "one-GPU step time it starts from",
             "exposed = communication the step pays for; hidden = communication entirely behind "
             "the backward pass (overlap full)"]
    return Table(title, ("model", "strategy", "cluster", "GPUs", "compute ms", "comm ms",
                         "exposed ms", "step ms", "samples/s", "factor", "efficiency",
                         "busiest port", "hidden"), tuple(rows), tuple(notes))


def predicted_scaling_table(preds: Sequence, unit: str = "images") -> Table:
    """Predicted throughput at each GPU count of a cluster the user does not have, with the
    factor over one GPU in parentheses (the layout of the 2020 tf_cnn_benchmarks study on 4x
    Quadro RTX 8000). The 1 GPU column is the measured input. The figures count ``unit``: each
    prediction's samples/s times what a sample counts (a language model's tokens)."""
    counts = sorted({p.cluster.gpus for p in preds} | {1})
    def key_of(p) -> tuple:
        net = p.cluster.network.name if any(q.cluster.nodes > 1 for q in preds) \
            else p.cluster.intra.name
        return (p.workload.name, p.strategy, net, p.workload.batch)
    keys = list(dict.fromkeys(key_of(p) for p in preds))
    rows = []
    for key in keys:
        name, strat, net, batch = key
        mine = [p for p in preds if key_of(p) == key]
        w = mine[0].workload
        k = w.units_per_sample
        line = [name, strat, net, str(batch)]
        by_n = {p.cluster.gpus: p for p in mine}
        for n in counts:
            if n == 1:
                line.append(f"{fmt_num(k * w.batch / w.compute_s)} (measured)"
                            if w.source != "given" else fmt_num(k * w.batch / w.compute_s))
                continue
            p = by_n.get(n)
            line.append("-" if p is None else f"{fmt_num(k * p.throughput)} ({p.factor:.2f})")
        rows.append(tuple(line))
    return Table(f"PREDICTED training throughput, {unit}/s (factor over 1 GPU in parentheses)",
                 ("model", "strategy", "network", "batch/GPU")
                 + tuple("1 GPU" if n == 1 else f"{n} GPUs" for n in counts), tuple(rows),
                 ("the 1 GPU column is the input (a dlbench record, or given); the others are "
                  "the alpha-beta model's predictions, not measurements",))


def hiding_lines(items: Sequence) -> list[str]:
    """Plain sentences: where communication stops hiding behind compute."""
    out = []
    for w, c, h in items:
        where = c.network.name if c.nodes > 1 else c.intra.name
        what = ("hides behind the backward pass" if h.overlap == "full"
                else "costs at most 10% of a step (no overlap: it never hides)")
        if h.needed_Bps is None:
            need = (f"for no bandwidth: its latency terms alone ({h.latency_s * 1e3:.3g} ms) "
                    f"exceed that budget ({h.budget_s * 1e3:.3g} ms)")
        else:
            need = f"if each port carries at least {fmt_bps(h.needed_Bps * 8)} of payload"
        if h.max_nodes is None:
            scale = "not even at 1 node"
        else:
            scale = (f"up to {h.max_nodes} node{'s' if h.max_nodes > 1 else ''} of "
                     f"{c.gpus_per_node} GPU(s)"
                     + (" (the largest count tried)" if h.max_nodes >= 4096 else ""))
        out.append(f"{w.name} {h.strategy} on {c.label}: communication {what} {need}; on "
                   f"{where} it does so {scale}.")
    return out


def check_table(rows: Sequence, title: str) -> Table:
    # profiled exposed communication: a column where some row has it (older tables as before)
    exposed = any(getattr(r, "measured_exposed_s", None) is not None for r in rows)
    out = []
    for r in rows:
        fit = "-" if r.predicted_fit_s is None else (
            f"{fmt_ms(r.predicted_fit_s)} ({_err(r.error_fit)}, "
            f"{r.fitted_latency_s * 1e3:.2f} ms/msg)")
        base = "-" if r.predicted_perfect_s is None else (
            f"{fmt_ms(r.predicted_perfect_s)} ({_err(r.error_perfect)})")
        out.append((r.link, r.strategy, str(r.ranks), r.label, fmt_ms(r.compute_s),
                    fmt_ms(r.measured_s), base, fmt_ms(r.predicted_none_s), _err(r.error_none),
                    fmt_ms(r.predicted_full_s), _err(r.error_full), fit,
                    _kb(r.measured_bytes), _kb(r.predicted_bytes), _err(r.bytes_error))
                   + ((f"{fmt_ms(r.measured_exposed_s)} / {fmt_ms(r.predicted_exposed_s)}",)
                      if exposed else ()))
    return Table(title, ("link", "strategy", "ranks", "config", "compute ms", "measured ms",
                         "perfect scaling ms (error)", "predicted ms (no overlap)", "error", "predicted ms (overlap)",
                         "error", "predicted ms, latency fitted unshaped (error, latency)",
                         "busiest kB/step measured", "predicted", "error")
                 + (("exposed comm ms, profiled / predicted",) if exposed else ()),
                 tuple(out),
                 ("perfect scaling = the baseline: the one-GPU step (/ the GPUs sharing a "
                  "batch under TP), no communication; the model has skill only where its "
                  "error is below the baseline's",
                  "error = (predicted - measured) / measured; predicted from the link's rate, "
                  "the compute time measured without communication, the gradient bytes, and "
                  "the probe's latency; bytes = the busiest host, one direction, on the wire",
                  "latency fitted unshaped: the per-message latency that makes the model match "
                  "the same strategy's unshaped run (software cost per collective step), used "
                  "for the shaped links") + ((
                  "exposed comm: per step, the collectives' time no compute overlapped, from "
                  "the steps the run's ranks profiled after the window, beside the model's "
                  "(its step less its compute)",) if exposed else ()))


def networks_table() -> Table:
    rows = tuple((n.name, n.kind, f"{n.gbit:,.1f}", f"{n.bandwidth_Bps / 1e9:,.2f}",
                  f"{n.efficiency:.3f}", f"{n.latency_s * 1e6:g}", n.source, n.latency_source)
                 for n in NETWORKS)
    return Table("Named links (per direction)", ("name", "kind", "Gbit/s", "GB/s", "payload "
                 "share", "latency us", "bandwidth source", "latency source"), rows)


def ps_cluster_table(rows: Sequence) -> Table:
    """The 2017 parameter-server cluster (TensorFlow 0.12, CIFAR-10, 5 servers of 4 TITAN X over
    1 GbE, 10 GbE and InfiniBand FDR), predicted per network, beside what was observed there."""
    out = tuple((r.network, fmt_ms(r.compute_s), fmt_ms(r.comm_s), fmt_ms(r.step_s),
                 f"{r.busiest_bytes / 1e6:.1f}", _rate(r.busiest_bps),
                 f"{r.step_s * 100_000 / 3600:.1f}") for r in rows)
    return Table("PREDICTED the 2017 parameter-server cluster: 5 servers x 4 workers, 10 "
                 "parameter-server tasks, TensorFlow's CIFAR-10 model (1,068,299 fp32 variables)",
                 ("network", "compute ms (assumed)", "comm ms", "step ms",
                  "busiest server MB/step each way", "busiest server rate", "h per 100k its"),
                 out, ("observed on that cluster (2017): 23 h per 100,000 iterations on "
                       "1 GbE, over 5x the InfiniBand time; about 2.5 Gbit/s at the busiest "
                       "server",))

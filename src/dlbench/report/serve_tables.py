"""Tables of serving load points (record kind ``serve``): pure functions, no I/O.

``serve_table``: one row per load point, as serving benchmarks report a run: requests and
output tokens per second, TTFT, TPOT and ITL at the median and the 99th percentile, goodput
under the point's SLO, the flags. ``percentile_table``: every latency's mean, median and p99 with
their 95% intervals. ``energy_table``: GPU energy per output token where this host's GPUs were
sampled. ``overhead_table``: against dlbench's stub (``--stub``), what the client itself adds.
"""

from __future__ import annotations

from typing import Any, Sequence

from dlbench.report.table import Table, fmt_num


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else fmt_num(seconds * 1e3, 3)


def _head(r: Any) -> tuple[str, ...]:
    c = r.config
    repeat = (f" (repeat {r.repeat_index + 1}/{r.repeat_count})"
              if getattr(r, "repeat_group", None) is not None else "")
    return (c.model, c.api, c.load_label + repeat, c.tokens_label)


def _short_error(r: Any) -> str:
    first = (r.error or "").splitlines()[0] if r.error else ""
    return f"{r.error_type}: {first[:90]}"


def serve_flags(r: Any) -> list[str]:
    """Why a load point's figures deserve care: failed requests (with the commonest reason),
    the client falling behind its schedule, outputs shorter than asked, token counts that are
    not the server's, prompts reused, a GPU that throttled."""
    out = []
    if r.failed():
        why, n = r.failure_reasons()[0]
        out.append(f"{r.failed()} of {r.requests} failed ({n}: {why[:70]})")
    if r.client_behind():
        lag = (r.client or {}).get("p99_s")
        out.append(f"client behind ({r.late()} of {r.requests} sent > "
                   f"{r.config.late_threshold_s * 1e3:g} ms late"
                   + (f"; loop lag p99 {lag * 1e3:.1f} ms" if lag is not None else "") + ")")
    short = r.short_outputs()
    if short:
        out.append(f"short outputs ({short} of {r.completed()} < {r.config.output_len} tokens)")
    tc = r.token_count or {}
    if tc.get("output") == "events":
        out.append("output tokens counted as events (no usage, no tokenizer)")
    if any("reused a prompt" in n for n in (r.server or {}).get("notes", [])):
        out.append("prompts reused")
    throttled = ((r.telemetry or {}).get("summary") or {}).get("throttled")
    if throttled:
        out.append(f"throttled ({', '.join(throttled)})")
    return out


COLUMNS = ("model", "api", "load", "prompt+output", "done", "req/s", "out tok/s",
           "TTFT ms p50", "TTFT p99", "TPOT ms p50", "TPOT p99", "ITL ms p50", "ITL p99",
           "e2e s p50", "goodput req/s (in SLO)", "SLO at p99", "note")


def serve_row(r: Any) -> tuple[str, ...]:
    """One load point's row of :func:`serve_table` (a failure: its error in the note)."""
    if not r.ok:
        return _head(r) + ("0",) + ("-",) * (len(COLUMNS) - 6) + (_short_error(r),)
    ttft, tpot, itl, e2e = r.ttft(), r.tpot(), r.itl(), r.e2e()
    frac = r.good_fraction()
    at_p99 = r.slo_at_p99()
    return _head(r) + (
        f"{r.completed()}/{r.requests}",
        fmt_num(r.request_throughput(), 3),
        fmt_num(r.output_tokens_per_s()),
        _ms(ttft and ttft.p50_s), _ms(ttft and ttft.p99_s),
        _ms(tpot and tpot.p50_s), _ms(tpot and tpot.p99_s),
        _ms(itl and itl.p50_s), _ms(itl and itl.p99_s),
        "-" if e2e is None else fmt_num(e2e.p50_s, 3),
        f"{fmt_num(r.goodput(), 3)} ({frac[0]:.0%})" if frac else "-",
        "-" if at_p99 is None else ("yes" if at_p99 else "no"),
        "; ".join(serve_flags(r)),
    )


def serve_table(records: Sequence[Any], title: str = "Serving") -> Table:
    """One row per ``serve`` record, failures included."""
    recs = [r for r in records if r.kind == "serve"]
    slos = sorted({r.config.slo.label for r in recs})
    notes = (
        "load: cN = N requests kept in flight; R req/s = requests arriving at random, R per "
        "second on average (gamma gaps; 'burst' gives their shape); done = completed of the "
        "measured requests; req/s and out tok/s = completed requests and their output tokens "
        "over the window (the first request's due time to the last one's end)",
        "TTFT = sent to the first streamed token; TPOT = a request's time after its first "
        "token over its tokens after the first; ITL = every gap between streamed events with "
        "text; e2e = sent to the last token; p50/p99 over the completed requests (ITL: over "
        "every gap); their intervals are in the percentile table",
        "goodput = completed requests per second within the SLO (failures never count), the "
        "share of measured requests within it in brackets; SLO at p99 = p99 TTFT and p99 TPOT "
        "within their limits and no request failed, as MLPerf's Server scenario judges a run",
        f"SLO: {'; '.join(slos) if slos else '-'}",
    )
    return Table(title, COLUMNS, tuple(serve_row(r) for r in recs), notes)


def _interval(lo: float | None, hi: float | None) -> str:
    return f"{_ms(lo) if lo is not None else '0'}-{_ms(hi) if hi is not None else 'inf'}"


def percentile_table(records: Sequence[Any],
                     title: str = "Serving: latency percentiles with 95% intervals") -> Table:
    """For every ok load point, TTFT, TPOT, ITL and e2e: samples, mean, median and p99, each
    with its 95% interval (an end the samples cannot bound: 0 or inf), p90 and maximum."""
    rows = []
    for r in records:
        if r.kind != "serve" or not r.ok:
            continue
        for name, d in (("TTFT", r.ttft()), ("TPOT", r.tpot()), ("ITL", r.itl()),
                        ("e2e", r.e2e())):
            if d is None:
                continue
            rows.append(_head(r) + (
                name, str(d.n), _ms(d.mean_s), _interval(d.mean_low_s, d.mean_high_s),
                _ms(d.p50_s), _interval(d.p50_low_s, d.p50_high_s), _ms(d.p90_s),
                _ms(d.p99_s), _interval(d.p99_low_s, d.p99_high_s), _ms(d.max_s)))
    notes = ("mean's interval allows for correlated consecutive samples (effective sample "
             "size, or batch means); the percentiles' are distribution-free (order statistics: "
             "the samples below the true percentile are binomial); 'inf': too few samples to "
             "bound it from above (a p99 needs 368 or more for a 95% bound), '0': from below",)
    return Table(title, ("model", "api", "load", "prompt+output", "figure", "n", "mean ms",
                         "mean 95%", "p50 ms", "p50 95%", "p90 ms", "p99 ms", "p99 95%",
                         "max ms"), tuple(rows), notes)


def energy_table(records: Sequence[Any],
                 title: str = "Serving: GPU energy per output token") -> Table:
    """Load points whose window has GPU energy (the host's GPUs, summed)."""
    rows = []
    for r in records:
        if r.kind != "serve" or not r.ok or r.energy_per_output_token_j() is None:
            continue
        gpus = len(((r.telemetry or {}).get("summary") or {}).get("gpus") or [])
        rows.append(_head(r) + (fmt_num(r.output_tokens_per_s()),
                                fmt_num(r.energy_per_output_token_j(), 3),
                                fmt_num(r.net_energy_per_output_token_j(), 3),
                                fmt_num(r.mean_power_w()), str(gpus)))
    notes = ("J/out tok = the energy of this host's GPUs over the window (NVML's energy counter, "
             "else integrated power) over the window's output tokens; net: above the idle power "
             "measured before the warm-up; every GPU of the host is summed, the server's or not",)
    return Table(title, ("model", "api", "load", "prompt+output", "out tok/s", "J/out tok",
                         "net J/out tok", "mean W", "GPUs"), tuple(rows), notes)


def overhead_table(records: Sequence[Any],
                   title: str = "Serving: the client's own overhead (against dlbench's stub)"
                   ) -> Table:
    """Load points measured against dlbench's stub (``--stub``): the stub's TTFT and ITL are
    known, so what is measured above them is the client's (and the loopback's) own time."""
    rows = []
    for r in records:
        stub = (r.server or {}).get("stub")
        if r.kind != "serve" or not r.ok or not stub:
            continue
        ttft, itl = r.ttft(), r.itl()
        t0, i0 = stub.get("ttft_ms", 0.0) / 1e3, stub.get("itl_ms", 0.0) / 1e3
        lag = (r.client or {}).get("p99_s")
        rows.append(_head(r) + (
            f"{stub.get('ttft_ms', 0):g} / {stub.get('itl_ms', 0):g}",
            _ms(ttft.p50_s - t0), _ms(ttft.p99_s - t0),
            _ms(itl.p50_s - i0) if itl else "-", _ms(itl.p99_s - i0) if itl else "-",
            _ms(lag), f"{r.late()}/{r.requests}", fmt_num(r.output_tokens_per_s())))
    notes = ("overhead = measured minus the stub's delay: the client (request build, aiohttp, "
             "SSE parsing, the event loop) and the loopback together, an upper bound on what "
             "dlbench adds to a real server's figures at that load; the stub runs in a process "
             "of its own on this host",)
    return Table(title, ("model", "api", "load", "prompt+output", "stub TTFT/ITL ms",
                         "TTFT over ms p50", "p99", "ITL over ms p50", "p99",
                         "loop lag p99 ms", "late", "out tok/s"), tuple(rows), notes)


def serve_tables(records: Sequence[Any], device: str | None = None) -> list[Table]:
    """The tables of the ``serve`` records among ``records`` (none where there are none)."""
    recs = [r for r in records if r.kind == "serve"]
    if not recs:
        return []
    on = f" from {device}" if device else ""
    out = [serve_table(recs, f"Serving{on}: throughput, latency, goodput")]
    if any(r.ok for r in recs):
        out.append(percentile_table(recs))
    if any(r.ok and r.energy_per_output_token_j() is not None for r in recs):
        out.append(energy_table(recs))
    if any(r.ok and (r.server or {}).get("stub") for r in recs):
        out.append(overhead_table(recs))
    return out

"""Tables of generation benchmarks (record kind ``generate``): pure functions, no I/O.

``generate_table``: one row per record, as serving benchmarks (vLLM's ``benchmark_serving``,
TensorRT-LLM's ``trtllm-bench``) report a run: output tokens/s with its interval, time to first
token and time per output token as percentiles, the flags. ``efficiency_table``: what the
hardware did for the same rows (prefill TFLOP/s and MFU, decode GB/s against the memory roof,
energy per token, memory); two tables, not one, so that each fits a terminal's width.
``paths_table``: each path against ``eager`` (what ``model.generate()`` gives a user) for the
same model, batch, lengths and precision, with the setup it costs and the tokens it takes to
earn that back.
"""

from __future__ import annotations

from typing import Any, Sequence

from dlbench.records.generate import PATHS
from dlbench.records.payback import payback, setup_s
from dlbench.report.generate_figures import bandwidth_roof, generate_flags, prefill_mfu
from dlbench.report.kernel_tables import kernel_tables
from dlbench.report.table import GIB, Table, fmt_num, fmt_pct


def _ms(seconds: float | None) -> str:
    # three figures, not fmt_ms's one decimal: a small model's TPOT is a fraction of a ms
    return "-" if seconds is None else fmt_num(seconds * 1e3, 3)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _gib(n: int | None) -> str:
    return "-" if not n else fmt_num(n / GIB, 3)


def _short_error(r: Any) -> str:
    first = (r.error or "").splitlines()[0] if r.error else ""
    return f"{r.error_type}: {first[:70]}"


def _head(r: Any) -> tuple[str, ...]:
    c = r.config
    return (c.model, str(c.batch_size), c.tokens_label, c.precision_label, c.path_label)


def _peaks(records: Sequence[Any], peak_records: Sequence[Any] | None) -> list[Any]:
    return list(peak_records) if peak_records is not None else [
        r for r in records if r.kind == "peak"]


SPEED_COLUMNS = ("model", "batch", "prompt+output", "prec", "path", "output tok/s", "±95%",
                 "total tok/s", "TTFT ms mean", "TTFT p99", "TPOT ms mean", "TPOT p50", "TPOT p90",
                 "TPOT p99", "requests", "1st s", "note")
EFFICIENCY_COLUMNS = ("model", "batch", "prompt+output", "prec", "path", "prefill TFLOP/s",
                      "prefill MFU", "MFU measured", "decode GB/s", "% memory roof",
                      "memory roof GB/s", "J/out tok", "net J/out tok", "peak GiB", "KV GiB")


def speed_row(r: Any) -> tuple[str, ...]:
    """One record's row of :func:`generate_table` (a failure: its error in the note)."""
    s = r.summary()
    if s is None:
        return _head(r) + ("-",) * (len(SPEED_COLUMNS) - 6) + (_short_error(r),)
    ttft, tpot = r.ttft(), r.tpot()
    return _head(r) + (
        f"{fmt_num(s.throughput)} tok/s",
        fmt_pct(s.rel_halfwidth),
        fmt_num(r.total_tokens_per_s()),
        _ms(ttft.mean_s) if ttft else "-",
        _ms(ttft.p99_s) if ttft else "-",
        *((_ms(tpot.mean_s), _ms(tpot.median_s), _ms(tpot.p90_s), _ms(tpot.p99_s)) if tpot
          else ("-",) * 4),
        str(s.steps),
        f"{r.first_step_s:.2f}" if r.first_step_s is not None else "-",
        "; ".join(generate_flags(r)),
    )


def generate_table(records: Sequence[Any], title: str = "Generation") -> Table:
    """Speed and latency: one row per ``generate`` record of ``records``, failures included,
    with the record's flags (:func:`dlbench.report.generate_figures.generate_flags`)."""
    rows = tuple(speed_row(r) for r in records if r.kind == "generate")
    notes = (
        "output tok/s = output tokens of the measured requests over their time (prefill "
        "included), ±95% its interval; total tok/s counts prompt tokens too; TTFT = time to "
        "first token (a request's prefill), mean and p99 over the requests; TPOT = time per "
        "output token, a decode step's time (a batch decodes in lockstep: each sequence gets a "
        "token a step), mean and percentiles over every measured step; 1st s = the first "
        "request (compilation, CUDA graph capture), kept out of the figures",)
    return Table(title, SPEED_COLUMNS, rows, notes)


def efficiency_row(r: Any, peak_records: Sequence[Any] = ()) -> tuple[str, ...]:
    """One ok record's row of :func:`efficiency_table`."""
    m = prefill_mfu(r, peak_records)
    roof = bandwidth_roof(r, peak_records)
    mem = r.memory or {}
    return _head(r) + (
        fmt_num(m.tflops, 3),
        _pct(m.datasheet),
        _pct(m.measured),
        fmt_num(r.decode_gbs()),
        _pct(r.roofline_fraction(roof.gbs if roof else None)),
        f"{fmt_num(roof.gbs)} {roof.source}" if roof else "-",
        fmt_num(r.energy_per_output_token_j(), 3),
        fmt_num(r.net_energy_per_output_token_j(), 3),
        _gib(mem.get("allocated_peak_bytes")),
        _gib(mem.get("kv_cache_bytes")),
    )


def efficiency_table(records: Sequence[Any], peak_records: Sequence[Any] | None = None,
                     title: str = "Generation: compute, memory bandwidth, energy") -> Table:
    """What the hardware did, one row per ok ``generate`` record (failures are rows of
    :func:`generate_table`): prefill TFLOP/s and MFU, decode GB/s against the memory roof,
    energy per output token, memory.

    ``peak_records``: the ``dlbench peak`` records whose matmul ceilings and copy bandwidth
    give the measured MFU and memory roof (the latest peak run of each device); None takes
    the peak records among ``records``. Without one, the roof is the datasheet's.
    """
    peaks = _peaks(records, peak_records)
    recs = [r for r in records if r.kind == "generate" and r.summary() is not None]
    rows = tuple(efficiency_row(r, peaks) for r in recs)
    roofs = {f"{x.label}: {fmt_num(x.gbs)} GB/s" for x in
             (bandwidth_roof(r, peaks) for r in recs) if x is not None}
    notes = (
        "prefill TFLOP/s = counted matmul FLOPs of the prefill over the mean TTFT; prefill MFU "
        "against the datasheet dense peak of the precision (fp8: the fp8 peak, though attention "
        "and the LM head run in bf16; fp8-wo, weight-only fp8: the bf16 peak, its matmuls' "
        "type); MFU measured against the matmul "
        "ceiling of the latest 'dlbench peak' run of the card (else of the device) ('-': none, "
        "or a CPU, which has no datasheet peak)",
        "decode GB/s = bytes a decode step must read (every weight once, the KV cache it "
        "attends to) over the mean TPOT; % memory roof against the memory roof column: "
        "'measured' = the copy bandwidth of the latest 'dlbench peak' run of the card (else of "
        "the device), 'datasheet' = the GPU's spec row",
        "J/out tok = GPU energy over the measured requests over their output tokens; net: above "
        "the idle power measured before the model was built; peak GiB = allocated peak (GPU); "
        "KV GiB = the KV cache as allocated",
    ) + ((f"memory roofs: {'; '.join(sorted(roofs))}",) if roofs else ())
    return Table(title, EFFICIENCY_COLUMNS, rows, notes)


# -- paths against eager -------------------------------------------------------------------------
def _latest(recs: Sequence[Any]) -> Any:
    """The latest ok record, else the latest (a rerun replaces an earlier figure)."""
    ok = [r for r in recs if r.ok]
    return (ok or list(recs))[-1]


def path_pairs(records: Sequence[Any]) -> list[tuple[Any, Any]]:
    """(eager record, other path's record) for each setup (:meth:`GenerateConfig.pair_key`:
    model, batch, lengths, precision and fp8 recipe) measured eager and another way; setups in
    order of first appearance, paths in :data:`~dlbench.records.generate.PATHS` order."""
    by: dict[str, dict[str, list[Any]]] = {}
    for r in records:
        if r.kind == "generate":
            by.setdefault(r.config.pair_key(), {}).setdefault(r.config.path_label,
                                                              []).append(r)
    out = []
    for paths in by.values():
        if "eager" not in paths:
            continue
        eager = _latest(paths["eager"])
        out += [(eager, _latest(paths[p])) for p in sorted(paths, key=_path_order)
                if p != "eager"]
    return out


def _path_order(label: str) -> tuple[int, str]:
    """A path label's place: :data:`PATHS` order, a path's levers after it."""
    path = label.split("+")[0]
    return (PATHS.index(path) if path in PATHS else len(PATHS), label)


def _rate(r: Any) -> str:
    t = r.output_tokens_per_s()
    return fmt_num(t) if t is not None else (r.error_type or "error")


def payback_cell(eager: Any, other: Any) -> str:
    """Output tokens (requests, seconds of the faster path) until its extra setup is earned back.
    :func:`dlbench.records.payback.payback` works on generate records as they are: samples are
    output tokens, a step is a request."""
    p = payback(eager, other)
    if p is None:
        return "-"
    if p.never:
        return "never"
    if p.samples == 0:
        return "at once"
    return f"{p.samples:,.0f} tokens ({p.steps:,.0f} requests, {p.seconds:.1f} s)"


def paths_table(records: Sequence[Any],
                title: str = "Generation paths against eager (model.generate())") -> Table:
    """Each path's output tok/s against eager's for the same setup, the factor, TPOT, the setup
    each costs (build + first request: compilation, graph capture) and its pay-back."""
    rows = []
    for eager, other in path_pairs(records):
        c = other.config
        te, to = eager.output_tokens_per_s(), other.output_tokens_per_s()
        pe, po = eager.tpot(), other.tpot()
        rows.append((
            c.model, str(c.batch_size), c.tokens_label, c.precision_label, c.path_label,
            _rate(eager),
            _rate(other), f"{to / te:.2f}x" if te and to else "-",
            f"{_ms(pe.mean_s) if pe else '-'} / {_ms(po.mean_s) if po else '-'}",
            f"{setup_s(eager):.1f} / {setup_s(other):.1f}",
            f"{setup_s(other) - setup_s(eager):+.1f}",
            payback_cell(eager, other),
        ))
    notes = ("factor = the path's output tok/s over eager's (eager: model.generate() with "
             "transformers' defaults); setup = model build + first request (compilation, CUDA "
             "graph capture, autotuning), kept out of the figures",
             "pays back after: output tokens the path must generate before the time it saves "
             "per token has earned back its extra setup (requests and seconds of that path); "
             "'never': it is not faster; 'at once': its setup is not longer")
    return Table(title, ("model", "batch", "prompt+output", "prec", "path", "eager tok/s",
                         "path tok/s", "factor", "TPOT ms eager / path",
                         "setup s eager / path", "extra setup s", "pays back after"),
                 tuple(rows), notes)


def generate_tables(records: Sequence[Any], peak_records: Sequence[Any] | None = None,
                    device: str | None = None) -> list[Table]:
    """The tables of the ``generate`` records among ``records`` (empty when there are none):
    :func:`generate_table` and :func:`efficiency_table`, :func:`paths_table` where a setup ran
    eager and another path, and ``--profile``'s kernel tables where a record was profiled.
    ``peak_records`` as for :func:`efficiency_table`; ``device`` goes into the titles."""
    recs = [r for r in records if r.kind == "generate"]
    if not recs:
        return []
    on = f" on {device}" if device else ""
    out = [generate_table(recs, f"Generation{on}: speed and latency"),
           efficiency_table(recs, _peaks(records, peak_records),
                            f"Generation{on}: compute, memory bandwidth, energy")]
    if path_pairs(recs):
        out.append(paths_table(recs))
    if any(getattr(r, "profile", None) for r in recs):  # --profile: a step is a request
        out += kernel_tables(recs)
    return out

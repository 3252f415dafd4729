"""Tuned mode's tables: tuned against plain per model, and the lever-by-lever search."""

from __future__ import annotations

from typing import Sequence

from dlbench.records.lever_trials import Trial, describe_change, replay, throughput_of
from dlbench.records.payback import payback, setup_s
from dlbench.records.throughput import ThroughputRecord
from dlbench.report.table import Table, fmt_num

UNITS = {"images": "img/s", "sequences": "seq/s", "tokens": "tok/s"}


def _rate(r: ThroughputRecord | None) -> str:
    t = throughput_of(r)
    if t is None:
        return "-" if r is None else f"{r.error_type}"
    return f"{fmt_num(t * r.units_per_sample)} {UNITS.get(r.unit, '/s')}"


def _payback_cell(plain: ThroughputRecord, tuned: ThroughputRecord) -> str:
    p = payback(plain, tuned)
    if p is None:
        return "-"
    if p.never:
        return "never"
    if p.samples == 0:
        return "at once"
    return f"{p.steps:,.0f} steps ({p.seconds:.0f} s)"


def tuned_pairs(records: Sequence[ThroughputRecord]) -> list[tuple[ThroughputRecord | None,
                                                                   ThroughputRecord]]:
    """Each plain config's latest tuned record, with the plain record it names (the latest one
    of that key). One row per plain config: a rerun after a recipe changed replaces the older
    pick, which stays in the throughput table."""
    by_key = {r.config.key(): r for r in records if not r.config.tuned}
    latest = {r.config.tuned_from: r for r in records if r.config.tuned}  # later ones win
    return [(by_key.get(k), r) for k, r in latest.items()]


def tuned_table(records: Sequence[ThroughputRecord]) -> Table:
    """Tuned against plain eager, with the factor, the pick, the setup cost and its payback."""
    rows = []
    for plain, tuned in tuned_pairs(records):
        c = tuned.config
        tp, tt = throughput_of(plain), throughput_of(tuned)
        factor = "-"
        pick = "tuned" if tt is not None else "plain"
        if tp and tt:
            factor = f"{tt / tp:.2f}x"
            if tt < tp:  # tuned mode never reports a figure slower than the plain config's
                pick = "plain (tuned lost)"
        rows.append((
            c.model, f"{c.mode}" + (f"/{c.method}" if c.method != "standard" else ""),
            plain.config.precision if plain else "-", _rate(plain), _rate(tuned), factor, pick,
            f"{setup_s(plain):.0f} / {setup_s(tuned):.0f}" if plain else "-",
            _payback_cell(plain, tuned) if plain else "-",
            describe_change(plain.config, c) if plain else c.label,
        ))
    return Table("Tuned mode: the fastest configuration dlbench knows, beside plain eager",
                 ("model", "mode", "plain prec", "plain eager", "tuned", "factor", "pick",
                  "setup s plain / tuned", "tuned pays back after", "tuned = plain +"),
                 tuple(rows),
                 ("setup = model build + first step (compilation, cuDNN autotuning, CUDA graph "
                  "capture); payback = steps of the tuned config until its extra setup time is "
                  "earned back",
                  "pick: where the tuned config measured slower, tuned mode's figure is the "
                  "plain one (the recipe loses for that model)"))


def lever_table(trials: Sequence[Trial], model: str) -> Table:
    rows = []
    for t in trials:
        r = t.record
        rows.append((
            t.lever, t.change, _rate(r) if r is not None else "-",
            f"{t.over_previous:.3f}" if t.over_previous else "-",
            f"{t.over_baseline:.3f}" if t.over_baseline else "-",
            f"{setup_s(r):.1f}" if r is not None else "-",
            ("kept " if t.kept else "") + t.why if t.lever != "baseline" else "",
        ))
    return Table(f"Levers for {model}, one at a time (greedy: each tried on the best so far)",
                 ("lever", "change", "throughput", "x previous best", "x plain", "setup s",
                  "decision"), tuple(rows),
                 ("a lever is kept only if it gains more than 1% over the best config before it",))


def lever_tables(records: Sequence, runs: Sequence) -> list[Table]:
    """The lever table of every stored ``dlbench tune`` search (runs of suite ``tune``)."""
    tune_runs = {r.run_id for r in runs if getattr(r, "suite", None) == "tune"}
    searches: dict[tuple, list] = {}
    for r in records:
        if r.run_id in tune_runs and r.kind == "throughput":
            searches.setdefault((r.run_id, r.config.model, r.config.mode), []).append(r)
    return [lever_table(replay(recs), model) for (_, model, _), recs in searches.items()]

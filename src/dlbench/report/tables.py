"""Tables built from records: pure functions that return rows of text, no I/O.

The same :class:`Table` is rendered to the terminal (rich), to Markdown, or to HTML later; the
seed-style views reproduce the articles' layouts (seed 000: img/s with a factor in parentheses;
seed 002: ms per batch, eval and train per model).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from dlbench.results import ThroughputRecord

GIB = 1024 ** 3


@dataclass(frozen=True)
class Table:
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    notes: tuple[str, ...] = field(default=())

    def to_markdown(self) -> str:
        lines = [f"**{self.title}**", "", "| " + " | ".join(self.columns) + " |",
                 "|" + "|".join("---" for _ in self.columns) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in self.rows]
        lines += [""] + [f"- {n}" for n in self.notes] if self.notes else []
        return "\n".join(lines)


def fmt_num(x: float | None, digits: int = 4) -> str:
    """``digits`` significant figures, no scientific notation for everyday magnitudes."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if x == 0:
        return "0"
    if math.isinf(x):
        return "inf"
    mag = math.floor(math.log10(abs(x)))
    decimals = max(0, digits - 1 - mag)
    return f"{x:,.{decimals}f}"


def fmt_pct(x: float) -> str:
    """A relative width as a percentage, with enough digits that a tight interval is not "0.0%"."""
    if not math.isfinite(x):
        return "inf"
    return f"{x:.2%}" if x < 0.1 else f"{x:.1%}"


def fmt_ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f}"


def _layout(r: ThroughputRecord) -> str:
    return "NHWC" if r.config.channels_last else ("NCHW" if _is_image(r) else "-")


def _is_image(r: ThroughputRecord) -> bool:
    return r.unit == "images"


def _compile(r: ThroughputRecord) -> str:
    return r.config.compile or "eager"


def _short_error(r: ThroughputRecord) -> str:
    first = (r.error or "").splitlines()[0] if r.error else ""
    return f"{r.error_type}: {first[:70]}"


def flags(r: ThroughputRecord) -> list[str]:
    """Why a figure deserves care: a window that never reached its interval target, high spread."""
    s = r.summary()
    if s is None:
        return []
    out = []
    if not r.converged():
        out.append(f"noisy ({r.stop_reason})")
    elif s.noisy:
        out.append(f"cv {s.cv:.0%}")
    return out


def throughput_table(records: Sequence[ThroughputRecord], title: str = "Throughput") -> Table:
    """One row per result, successes and failures alike."""
    cols = ("model", "mode", "batch", "prec", "layout", "compile", "throughput", "±95%",
            "ms/step p50 (p5-p95)", "steps", "TFLOP/s", "1st s", "GiB", "note")
    rows = []
    for r in records:
        c = r.config
        s = r.summary()
        head = (c.model, c.mode + ("/" + c.method if c.method != "standard" else ""),
                str(c.batch_size), c.precision, _layout(r), _compile(r))
        if s is None:
            rows.append(head + ("-",) * 7 + (_short_error(r),))
            continue
        per_s = s.throughput * r.units_per_sample
        unit = {"images": "img/s", "sequences": "seq/s", "tokens": "tok/s"}.get(r.unit, "/s")
        mem = r.memory.get("allocated_peak_bytes")
        rows.append(head + (
            f"{fmt_num(per_s)} {unit}",
            fmt_pct(s.rel_halfwidth),
            f"{fmt_ms(s.median_s)} ({fmt_ms(s.p5_s)}-{fmt_ms(s.p95_s)})",
            str(s.steps),
            fmt_num(r.achieved_tflops(), 3),
            f"{r.first_step_s:.2f}" if r.first_step_s is not None else "-",
            f"{mem / GIB:.1f}" if mem else "-",
            "; ".join(flags(r)),
        ))
    notes = ("throughput = samples over the measured window's time; ±95% is the batch-means "
             "interval; TFLOP/s counts model FLOPs (optimizer excluded)",)
    return Table(title, cols, tuple(rows), notes)


def _pivot(records: Iterable[ThroughputRecord], row: Callable[[ThroughputRecord], str],
           col: Callable[[ThroughputRecord], str]) -> tuple[list[str], list[str],
                                                            dict[tuple[str, str], ThroughputRecord]]:
    rows, cols, cells = [], [], {}
    for r in records:
        rk, ck = row(r), col(r)
        if rk not in rows:
            rows.append(rk)
        if ck not in cols:
            cols.append(ck)
        cells[(rk, ck)] = r  # a later record of the same cell wins (e.g. a --resume rerun)
    return rows, cols, cells


def seed000_table(records: Sequence[ThroughputRecord]) -> Table:
    """Seed 000's layout for one GPU: img/s per model, compiled with its factor over eager."""
    recs = [r for r in records if r.config.mode == "train"]
    rows, _, cells = _pivot(recs, lambda r: r.config.model,
                            lambda r: f"{r.config.precision} {_compile(r)}")
    precisions = [p for p in ("fp16", "bf16", "fp32", "tf32")
                  if any(r.config.precision == p for r in recs)]
    compiled = sorted({_compile(r) for r in recs} - {"eager"})
    cols = ["model"]
    for p in precisions:
        cols += [f"{p} batch", f"{p} eager"] + [f"{p} {c} (x eager)" for c in compiled]
    out = []
    for m in rows:
        line = [m]
        for p in precisions:
            eager = cells.get((m, f"{p} eager"))
            any_rec = eager or next((cells.get((m, f"{p} {c}")) for c in compiled
                                     if (m, f"{p} {c}") in cells), None)
            line.append(str(any_rec.config.batch_size) if any_rec else "-")
            line.append(_img_s(eager))
            for c in compiled:
                rec = cells.get((m, f"{p} {c}"))
                text = _img_s(rec)
                if rec and eager and rec.summary() and eager.summary():
                    text += f" ({rec.summary().throughput / eager.summary().throughput:.2f})"
                line.append(text)
        out.append(tuple(line))
    return Table("Training throughput, images/s, 1 GPU (seed 000 layout; factor over eager in "
                 "parentheses)", tuple(cols), tuple(out))


def seed002_table(records: Sequence[ThroughputRecord], device: str) -> Table:
    """Seed 002's layout: ms per batch (mean step time), eval and train, one row per precision."""
    rows, _, cells = _pivot(records, lambda r: r.config.precision,
                            lambda r: f"{r.config.model} {r.config.mode}")
    models = list(dict.fromkeys(r.config.model for r in records))
    cols = ["device", "setup"] + [f"{m} {mode}" for m in models for mode in ("eval", "train")]
    out = []
    for prec in rows:
        line = [device, prec.upper()]
        for m in models:
            for mode in ("eval", "train"):
                rec = cells.get((prec, f"{m} {mode}"))
                s = rec.summary() if rec else None
                line.append(fmt_ms(s.mean_s) if s else (rec.error_type if rec else "-"))
        out.append(tuple(line))
    return Table("ms per batch, batch 16 (seed 002 layout: eval = forward, train = forward + "
                 "sum().backward())", tuple(cols), tuple(out))


def _img_s(r: ThroughputRecord | None) -> str:
    if r is None:
        return "-"
    s = r.summary()
    return fmt_num(s.throughput) if s else (r.error_type or "error")

"""The table base: a :class:`Table` (title, columns, rows of text, notes) and the cell formats
every table module shares. It imports none of them: each table module (``tables``,
``kernel_tables``, ``network``, ``train_tables``, ``tuned_tables``) builds on this one, and
whoever needs all of them (:func:`dlbench.report.tables.tables_for`) imports them.

The same :class:`Table` is rendered to the terminal (rich), to Markdown, or to HTML.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

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

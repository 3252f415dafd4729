"""What every chart of the report shares: the :class:`Chart` it returns, matplotlib set up for
inline SVG, the footer naming the command behind the data, and the SVG clean-up.

Builders (one module per subject beside this one) take ``(records, commands)``: every record the
report holds, of any kind, and each run's command line by run id. They return a list of charts,
empty when their data is absent, and write no files.
"""

from __future__ import annotations

import io
import re
import textwrap
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence, TypeVar

from dlbench.report.plots import load_pyplot

UNIT_LABEL = {"images": "img/s", "sequences": "seq/s", "tokens": "tok/s"}

#: A chart builder: ``(records, commands by run id) -> charts``.
Builder = Callable[[Sequence[Any], Mapping[str, str]], list["Chart"]]

#: The most results a chart draws one by one (a bar, a labelled point each): a report of a
#: large store (thousands of results) draws the newest ones, its title says how many of how
#: many, and the tables list every result. 100,000 bars took minutes and gigabytes to draw,
#: on a chart no one can read.
MAX_DRAWN = 100

T = TypeVar("T")


def newest(items: Sequence[T], what: str = "results") -> tuple[list[T], str]:
    """The last :data:`MAX_DRAWN` of ``items`` (in the store's order, the newest last), and
    what a title adds when some were left out (else "")."""
    if len(items) <= MAX_DRAWN:
        return list(items), ""
    return (list(items[-MAX_DRAWN:]), f" (the newest {MAX_DRAWN} of {len(items):,} {what}; "
                                      "the tables list every one)")


@dataclass(frozen=True)
class Chart:
    """One chart: its title (also the figure's caption), the SVG, and the commands whose results
    it draws. ``svg`` keeps matplotlib's ids; the page prefixes them when it places the chart."""

    title: str
    svg: str
    commands: tuple[str, ...]


def unit_label(unit: str) -> str:
    return UNIT_LABEL.get(unit, f"{unit}/s")


def wrap(title: str, fig: Any, fontsize: float = 9) -> str:
    """``title`` broken into lines that fit the figure's width (matplotlib does not wrap)."""
    chars = int(fig.get_figwidth() * 72 * 0.8 / (fontsize * 0.55))  # axes ~80% of the width
    return textwrap.fill(title, max(40, chars))


def pyplot():
    """pyplot (Agg) set up for charts embedded in a page."""
    plt = load_pyplot()
    plt.rcParams["svg.fonttype"] = "path"    # glyphs as paths: no font needed to view it
    plt.rcParams["svg.hashsalt"] = "dlbench"  # stable ids, so the same data gives the same file
    plt.rcParams["text.parse_math"] = False  # a '$' in a label or command is text
    return plt


def to_svg(fig: Any) -> str:
    """The figure as an inline <svg> element: no XML prolog, no DOCTYPE, no metadata."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    return re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)


def prefix_ids(svg: str, prefix: str) -> str:
    """Every id of ``svg`` (and every reference to it) prefixed, so that several charts in one
    page do not collide: matplotlib names glyphs and clip paths by content, so two charts that
    draw the same letter define the same id."""
    ids = set(re.findall(r'\bid="([^"]+)"', svg))
    if not ids:
        return svg
    alt = "|".join(re.escape(i) for i in sorted(ids, key=len, reverse=True))
    svg = re.sub(rf'\bid="({alt})"', lambda m: f'id="{prefix}{m.group(1)}"', svg)
    return re.sub(rf'#({alt})(?=["\)])', lambda m: f"#{prefix}{m.group(1)}", svg)


def commands_of(records: Sequence[Any], commands: Mapping[str, str]) -> list[str]:
    """The command lines of the runs that produced ``records``, each once, in order."""
    return list(dict.fromkeys(commands[r.run_id] for r in records
                              if r.run_id in commands and commands[r.run_id]))


def footer(fig: Any, cmds: Sequence[str]) -> None:
    """The commands behind the data, in small print at the figure's foot (the caption repeats
    them in full: a long sweep's command line is cut here)."""
    text = "data: " + ("; ".join(cmds) if cmds else "command not recorded")
    fig.text(0.01, 0.01, text[:180] + ("..." if len(text) > 180 else ""), fontsize=6,
             color="#555", ha="left", va="bottom")


def finish(plt: Any, fig: Any, title: str, cmds: Sequence[str]) -> Chart:
    """Lay the figure out with room for the footer, turn it into a :class:`Chart`, close it."""
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    footer(fig, cmds)
    chart = Chart(title, to_svg(fig), tuple(cmds))
    plt.close(fig)
    return chart


def per_s(r: Any) -> tuple[float, float, float]:
    """Units per second of a step-timed record and its interval's ends (an unbounded upper end
    is drawn at the figure)."""
    s = r.summary()
    k = r.units_per_sample
    high = s.throughput_high if s.throughput_high != float("inf") else s.throughput
    return s.throughput * k, s.throughput_low * k, high * k


def yerr(vals: Sequence[tuple[float, float, float]]) -> list[list[float]]:
    """matplotlib's asymmetric error bars from ``(value, low, high)`` triples. A zero-width
    interval can put an end a rounding error past the value; matplotlib refuses a negative bar."""
    return [[max(0.0, v[0] - v[1]) for v in vals], [max(0.0, v[2] - v[0]) for v in vals]]

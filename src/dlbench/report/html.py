"""The report: one self-contained HTML file (inline CSS, charts as inline SVG), or Markdown tables.

matplotlib draws the charts: it is already the plotting library of ``dlbench roofline``, it writes
SVG with no JavaScript and no external resources, and it runs headless (Agg). Text in the SVG is
drawn as paths, so the file looks the same without the fonts.

Every piece of text that comes from the user or the store (tags, model names, commands, paths)
goes through :func:`html.escape`; builders here return strings and write no files.
"""

from __future__ import annotations

import html
import io
import re
from dataclasses import dataclass
from typing import Any, Sequence

from dlbench import env as envmod
from dlbench.report import tables
from dlbench.report.tables import Table

UNIT_LABEL = {"images": "img/s", "sequences": "seq/s", "tokens": "tok/s"}

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2em auto;
max-width:1200px;padding:0 1em;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:1em 0;font-size:.85em}
caption{text-align:left;font-weight:600;padding:.3em 0}
th,td{border:1px solid #ddd;padding:.25em .5em;vertical-align:top}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr:nth-child(even) td{background:#fafafa}
p.note{font-size:.8em;color:#555;margin:.2em 0}
figure{margin:1.5em 0}figure svg{max-width:100%;height:auto}
figcaption{font-size:.8em;color:#444}code{background:#f4f4f4;padding:0 .2em}
.scroll{overflow-x:auto}
"""

_NUMERIC = re.compile(r"^[-+]?[\d,]*\.?\d+(e[-+]?\d+)?%?( [a-z/]+)?( \(.*\))?$", re.I)


def esc(x: Any) -> str:
    """Escape any value for HTML text or a quoted attribute."""
    return html.escape("" if x is None else str(x), quote=True)


def table_html(t: Table) -> str:
    """A :class:`Table` as an HTML table with its title as caption and its notes below."""
    head = "".join(f"<th>{esc(c)}</th>" for c in t.columns)
    body = []
    for row in t.rows:
        cells = "".join(f'<td class="num">{esc(v)}</td>' if _NUMERIC.match(str(v)) else
                        f"<td>{esc(v)}</td>" for v in row)
        body.append(f"<tr>{cells}</tr>")
    notes = "".join(f'<p class="note">{esc(n)}</p>' for n in t.notes)
    return (f'<div class="scroll"><table><caption>{esc(t.title)}</caption><thead><tr>{head}'
            f'</tr></thead><tbody>{"".join(body)}</tbody></table>{notes}</div>')


@dataclass(frozen=True)
class RunMeta:
    """What the report needs of a run (from the store's ``runs`` table)."""

    run_id: str
    command: str
    tag: str | None = None
    suite: str | None = None
    device: str | None = None
    started_at: str | None = None
    status: str | None = None


# -- tables ---------------------------------------------------------------------------------------

def environment_tables(records: Sequence[Any]) -> list[Table]:
    """One table per distinct environment identity among the records."""
    seen: dict[str, tuple[dict, list[str]]] = {}
    for r in records:
        env = getattr(r, "env", None) or {}
        ident = envmod.identity(env)
        key = repr(sorted(ident.items(), key=lambda kv: kv[0]))
        if key not in seen:
            seen[key] = (env, [])
        if r.run_id and r.run_id not in seen[key][1]:
            seen[key][1].append(r.run_id)
    out = []
    for env, runs in seen.values():
        ident = envmod.identity(env)
        rows = [("device", envmod.device_label(env))]
        rows += [(k, envmod._show(v)) for k, v in ident.items()]
        rows += [("host", str(env.get("hostname") or "unknown")), ("runs", ", ".join(runs) or "-")]
        out.append(Table(f"Environment: {envmod.device_label(env)}", ("field", "value"),
                         tuple(rows)))
    return out


def run_table(runs: Sequence[RunMeta]) -> Table:
    rows = tuple((r.run_id, r.started_at or "-", r.status or "-", r.suite or "-", r.tag or "-",
                  r.device or "-", r.command) for r in runs)
    return Table("Runs", ("run", "started", "status", "suite", "tag", "device", "command"), rows)


# -- charts ---------------------------------------------------------------------------------------

def _pyplot():
    from dlbench.report.plots import _pyplot as load
    plt = load()
    plt.rcParams["svg.fonttype"] = "path"    # glyphs as paths: no font needed to view it
    plt.rcParams["svg.hashsalt"] = "dlbench"  # stable ids, so the same data gives the same file
    plt.rcParams["text.parse_math"] = False  # a '$' in a label or command is text
    return plt


def _svg(fig: Any, n: int) -> str:
    """The figure as an inline <svg> element: no XML prolog, no DOCTYPE, no metadata, and every
    id prefixed with the chart number so several charts in one page do not collide."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)
    prefix = f"c{n}-"
    ids = set(re.findall(r'\bid="([^"]+)"', text))
    if ids:
        alt = "|".join(re.escape(i) for i in sorted(ids, key=len, reverse=True))
        text = re.sub(rf'\bid="({alt})"', lambda m: f'id="{prefix}{m.group(1)}"', text)
        text = re.sub(rf'#({alt})(?=["\)])', lambda m: f"#{prefix}{m.group(1)}", text)
    return text


def _commands_of(records: Sequence[Any], runs: dict[str, RunMeta]) -> list[str]:
    return list(dict.fromkeys(runs[r.run_id].command for r in records
                              if r.run_id in runs and runs[r.run_id].command))


@dataclass(frozen=True)
class Chart:
    title: str
    svg: str
    commands: tuple[str, ...]


def _per_s(r: Any) -> tuple[float, float, float]:
    """Units per second and the interval's ends (a missing upper end drawn at the figure)."""
    s = r.summary()
    k = r.units_per_sample
    high = s.throughput_high if s.throughput_high != float("inf") else s.throughput
    return s.throughput * k, s.throughput_low * k, high * k


def _footer(fig: Any, commands: Sequence[str]) -> None:
    text = "data: " + ("; ".join(commands) if commands else "command not recorded")
    fig.text(0.01, 0.01, text[:180] + ("..." if len(text) > 180 else ""), fontsize=6,
             color="#555", ha="left", va="bottom")


def throughput_charts(records: Sequence[Any], runs: dict[str, RunMeta],
                      start: int = 0) -> list[Chart]:
    """Bar charts of throughput per result (one chart per unit), the 95% interval as error
    bars. Only ok throughput results are drawn; none gives no chart."""
    ok = [r for r in records if r.kind == "throughput" and r.summary() is not None]
    by_unit: dict[str, list] = {}
    for r in ok:
        by_unit.setdefault(r.unit, []).append(r)
    out = []
    for i, (unit, recs) in enumerate(by_unit.items()):
        plt = _pyplot()
        label = UNIT_LABEL.get(unit, f"{unit}/s")
        vals = [_per_s(r) for r in recs]
        fig, ax = plt.subplots(figsize=(max(6.0, 0.55 * len(recs) + 2), 4.8), dpi=100)
        xs = range(len(recs))
        ax.bar(xs, [v[0] for v in vals], color="tab:blue",
               yerr=[[v[0] - v[1] for v in vals], [v[2] - v[0] for v in vals]],
               capsize=3, ecolor="black")
        ax.set_xticks(list(xs), [r.config.label for r in recs], rotation=35, ha="right",
                      fontsize=7)
        ax.set_ylabel(f"throughput ({label})")
        ax.set_xlabel("configuration (model, batch, precision, mode)")
        title = f"Throughput per configuration, {label} (error bars: 95% interval)"
        ax.set_title(title, fontsize=10)
        ax.grid(True, axis="y", lw=0.3, alpha=0.6)
        cmds = _commands_of(recs, runs)
        fig.tight_layout(rect=(0, 0.04, 1, 1))
        _footer(fig, cmds)
        out.append(Chart(title, _svg(fig, start + i), tuple(cmds)))
        plt.close(fig)
    return out


def batch_charts(records: Sequence[Any], runs: dict[str, RunMeta], start: int = 0) -> list[Chart]:
    """Throughput against batch size, one line per setup that has two or more batch sizes."""
    ok = [r for r in records if r.kind == "throughput" and r.summary() is not None]
    groups: dict[tuple, list] = {}
    for r in ok:
        groups.setdefault(tables.setup_of(r), []).append(r)
    sweeps = {k: v for k, v in groups.items() if len({r.config.batch_size for r in v}) > 1}
    by_unit: dict[str, dict[tuple, list]] = {}
    for k, v in sweeps.items():
        by_unit.setdefault(v[0].unit, {})[k] = v
    out = []
    for i, (unit, lines) in enumerate(by_unit.items()):
        plt = _pyplot()
        label = UNIT_LABEL.get(unit, f"{unit}/s")
        fig, ax = plt.subplots(figsize=(7, 4.8), dpi=100)
        used = []
        for k, recs in lines.items():
            latest = {r.config.batch_size: r for r in recs}  # a rerun of a batch wins
            bs = sorted(latest)
            vals = [_per_s(latest[b]) for b in bs]
            ax.errorbar(bs, [v[0] for v in vals],
                        yerr=[[v[0] - v[1] for v in vals], [v[2] - v[0] for v in vals]],
                        marker="o", capsize=3, label=" ".join(str(x) for x in k[:4] if x))
            used += recs
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size (samples per step, per device)")
        ax.set_ylabel(f"throughput ({label})")
        title = f"Throughput against batch size, {label}"
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", lw=0.3, alpha=0.6)
        ax.legend(fontsize=7)
        cmds = _commands_of(used, runs)
        fig.tight_layout(rect=(0, 0.04, 1, 1))
        _footer(fig, cmds)
        out.append(Chart(title, _svg(fig, start + i), tuple(cmds)))
        plt.close(fig)
    return out


def _figure(c: Chart) -> str:
    cmds = "; ".join(f"<code>{esc(x)}</code>" for x in c.commands) or "command not recorded"
    return (f"<figure>{c.svg}<figcaption>{esc(c.title)}. Data from: {cmds}</figcaption>"
            f"</figure>")


# -- documents ------------------------------------------------------------------------------------

def _device(records: Sequence[Any]) -> str:
    labels = list(dict.fromkeys(envmod.device_label(getattr(r, "env", None) or {})
                                for r in records))
    return " / ".join(labels) or "?"


def render_html(records: Sequence[Any], runs: Sequence[RunMeta], title: str = "dlbench report",
                source: str | None = None, generated_at: str | None = None) -> str:
    """The whole report as one HTML document (no external resources, no scripts)."""
    run_map = {r.run_id: r for r in runs}
    device = _device(records)
    parts = [f"<h1>{esc(title)}</h1>"]
    sub = [f"{len(records)} result(s) from {len(runs)} run(s)"]
    if source:
        sub.append(f"store: <code>{esc(source)}</code>")
    if generated_at:
        sub.append(f"written {esc(generated_at)}")
    parts.append(f'<p class="note">{" · ".join(sub)}</p>')
    parts.append("<h2>Environment</h2>")
    parts += [table_html(t) for t in environment_tables(records)] or ["<p>no results</p>"]
    if runs:
        parts.append(table_html(run_table(runs)))
    tbls = tables.tables_for(records, device)
    if tbls:
        parts.append("<h2>Tables</h2>")
        parts += [table_html(t) for t in tbls]
    charts = throughput_charts(records, run_map)
    charts += batch_charts(records, run_map, start=len(charts))
    if charts:
        parts.append("<h2>Charts</h2>")
        parts += [_figure(c) for c in charts]
    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title><style>{_CSS}</style></head>\n<body>\n{body}\n"
            f"</body></html>\n")


def render_markdown(records: Sequence[Any], runs: Sequence[RunMeta],
                    title: str = "dlbench report") -> str:
    """The report's tables as Markdown (for a README or an issue); no charts."""
    device = _device(records)
    tbls = environment_tables(records) + ([run_table(runs)] if runs else [])
    tbls += tables.tables_for(records, device)
    return f"# {title}\n\n" + "\n\n".join(_md_table(t) for t in tbls) + "\n"


def _md_table(t: Table) -> str:
    # A '|' in a cell (a command line) would split the Markdown cell.
    def cell(x: str) -> str:
        return str(x).replace("|", "\\|").replace("<", "&lt;").replace("\n", " ")
    return Table(cell(t.title), tuple(cell(c) for c in t.columns),
                 tuple(tuple(cell(v) for v in r) for r in t.rows), t.notes).to_markdown()

"""Strings from a store are shown, never obeyed: terminal tables escape control characters (an
ESC in a tag cannot clear the screen) and never read rich markup from data; CSV cells that a
spreadsheet would evaluate are neutralised; Markdown reports hold no live link, image or HTML
from a tag, a model name, a host name, a command or the title.

Records are built here with hostile strings in every field that reaches an output.
"""

from __future__ import annotations

import csv
import io
import re

import pytest
from markdown_it import MarkdownIt
from rich.console import Console

from dlbench.store import RunInfo
from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
from dlbench.report import export, terminal
from dlbench.report import html as report_html
from dlbench.report import tables
from dlbench.report.table import Table, md_escape, printable
from dlbench.store import Store
from dlbench.env import env_key

CLEAR = "\x1b[2J"
MARKUP = "[red]x[/red]"
LINK_MARKUP = "[link=http://x]click[/link]"
FORMULA = '=HYPERLINK("http://x")'
IMAGE = "![img](http://x)"
LINK = "[a](http://x)"
AUTOLINK = "<http://x>"
SCRIPT = "<script>alert(1)</script>"
# every hostile string at once, the way a tag, a model or a host name could hold it
HOSTILE = f"{CLEAR}{MARKUP} {LINK_MARKUP} {IMAGE} {LINK} {AUTOLINK} {SCRIPT} a|b `c`\x9b\x7f"

ENV = {"accelerator": "cpu", "cpu_model": f"CPU {CLEAR}{MARKUP}", "cpu_logical_cores": 2,
       "packages": {"torch": "2.9.0"}, "hostname": f"host{CLEAR}{IMAGE}{SCRIPT}"}


def _steps(n: int = 60, mean_s: float = 0.1) -> tuple[float, ...]:
    return tuple(mean_s * (1 + 0.01 * ((i * 7) % 5 - 2)) for i in range(n))


def _record(model: str = f"m{CLEAR}{MARKUP}{IMAGE}{SCRIPT}", **kw) -> ThroughputRecord:
    return ThroughputRecord(config=ThroughputConfig(model=model, batch_size=8, device="cpu"),
                            env=ENV, step_times_s=_steps(), samples_per_step=8, unit="images",
                            run_id="run-hostile", **kw)


def _failed(error: str, model: str = "resnet50") -> ThroughputRecord:
    return ThroughputRecord(config=ThroughputConfig(model=model, batch_size=8, device="cpu"),
                            env=ENV, status="error", error_type="exception", error=error,
                            run_id="run-hostile")


def _console() -> Console:
    return Console(file=io.StringIO(), width=400, color_system=None)


def _no_raw_controls(out: str) -> None:
    bad = [c for c in out if c not in "\n\t" and (ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f)]
    assert not bad, f"raw control characters reach the terminal: {bad!r} in {out!r}"


# -- the helpers -------------------------------------------------------------------------------
def test_printable_shows_control_characters_and_keeps_normal_text():
    assert printable(CLEAR) == "\\x1b[2J"
    assert printable("a\x9bb\x7fc\x00d\re") == "a\\x9bb\\x7fc\\x00d\\x0de"
    assert printable("two\nlines\tand a tab") == "two\nlines\tand a tab"
    assert printable("\u202eevil") == "\\u202eevil"  # a bidi override reorders what follows
    for normal in ("resnet50 b32 fp32", "llama-3.1-8b", "C:\\runs", "vit_b_16 (2 threads)",
                   "Ünïcødé 模型 ✓", "[bracketed]"):
        assert printable(normal) == normal


def test_md_escape_keeps_normal_text():
    for normal in ("resnet50 b32 fp32", "Throughput on CPU: Test CPU (2 threads)", "1,234.5",
                   "x 1 GPU; flags", "MFU (datasheet)", "vit_b_16", "wow!"):
        assert md_escape(normal) == normal


# -- the terminal ------------------------------------------------------------------------------
def test_terminal_table_escapes_control_characters():
    con = _console()
    terminal.print_table(Table(f"title {CLEAR}", (f"col{CLEAR}", "n"),
                               ((HOSTILE, "1"), (f"row\x1b]0;pwned\x07", "2")),
                               (f"note {CLEAR}",)), con)
    out = con.file.getvalue()
    _no_raw_controls(out)
    assert "\\x1b[2J" in out and "\\x9b" in out and "\\x7f" in out
    assert "row\\x1b]0;pwned\\x07" in out
    assert "title \\x1b[2J" in out and "col\\x1b[2J" in out and "note \\x1b[2J" in out


def test_terminal_tables_of_hostile_records():
    recs = [_record(), _failed(f"boom {CLEAR} {MARKUP}")]
    con = _console()
    for t in tables.tables_for(recs, f"CPU {CLEAR}"):
        terminal.print_table(t, con)
    for t in report_html.environment_tables(recs):  # the host name
        terminal.print_table(t, con)
    out = con.file.getvalue()
    _no_raw_controls(out)
    assert "\\x1b[2J" in out
    assert MARKUP in out  # shown as written, not read as markup


def test_terminal_table_never_reads_markup_from_data():
    con = Console(file=io.StringIO(), width=400, color_system="truecolor", force_terminal=True)
    terminal.print_table(Table(MARKUP, (LINK_MARKUP, "n"), ((MARKUP, "1"), (LINK_MARKUP, "2")),
                               (MARKUP,)), con)
    out = con.file.getvalue()
    assert MARKUP in out and LINK_MARKUP in out
    assert "\x1b]8;" not in out  # no OSC 8 hyperlink made from a cell
    assert "\x1b[31m" not in out  # nothing turned red by a cell


def test_terminal_lines_warnings_and_errors_escape_data(capsys):
    terminal.line(f"problem {CLEAR} {MARKUP}")
    terminal.warn(f"tag {CLEAR} {MARKUP}")
    terminal.error(f"error {CLEAR} {LINK_MARKUP}\nsecond line")
    cap = capsys.readouterr()
    for out in (cap.out, cap.err):
        _no_raw_controls(out)
    assert f"problem \\x1b[2J {MARKUP}" in cap.out
    assert f"tag \\x1b[2J {MARKUP}" in cap.err
    assert f"error \\x1b[2J {LINK_MARKUP}\nsecond line" in cap.err


@pytest.mark.parametrize("label, error, shown", [
    (f"model{CLEAR}{MARKUP}", f"at {CLEAR}[/x]", (f"model\\x1b[2J{MARKUP}", "at \\x1b[2J[/x]")),
    # a closing tag with no opening one, as a source path in a message can look: rich would
    # raise on it as markup
    ("model [/x] b8", "at [/__w/pytorch/x.cpp:1]", ("model [/x] b8", "[/__w/pytorch/x.cpp:1]")),
])
def test_progress_lines_escape_data(label, error, shown):
    from types import SimpleNamespace

    cfg = SimpleNamespace(label=label)
    rec = SimpleNamespace(config=cfg, error_type="RuntimeError", error=error, unit="x",
                          summary=lambda: None)
    con = _console()
    p = terminal.RichProgress(con)
    p.begin(2)
    p.start(cfg)
    p.done(rec)
    p.skipped(cfg)
    p.end()
    out = con.file.getvalue()
    _no_raw_controls(out)
    assert all(text in out for text in shown), (shown, out)


def test_results_ls_escapes_tags_commands_and_models(tmp_path, capsys):
    from dlbench.cli import main
    db = tmp_path / "hostile.db"
    with Store(db) as s:
        s.start_run("run-hostile", f"dlbench throughput -m x {CLEAR}", ENV, env_key(ENV),
                    f"dev{CLEAR}", tag=f"t{CLEAR}{MARKUP}")
        s.add(_record(), env_key(ENV))
        s.finish_run("run-hostile", "done")
    assert main(["results", "ls", "--db", str(db)]) == 0
    assert main(["results", "ls", "--results", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    _no_raw_controls(out)
    assert "\\x1b[2J" in out and MARKUP in out


# -- CSV ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [FORMULA, "@SUM(A1)", "+cmd|' /C calc'!A0", "-2+3",
                                 "\t=1+1", "\r=1+1"])
def test_csv_string_cells_never_start_a_formula(bad):
    rec = _record(model=bad, final_loss=-0.5)
    rows = list(csv.DictReader(io.StringIO(export.to_csv([rec]))))
    assert rows[0]["model"] == "'" + bad
    assert rows[0]["final_loss"] == "-0.5"  # a number stays a number


def test_csv_of_hostile_records():
    recs = [_record(model=FORMULA, final_loss=-0.25),
            _failed(f"=cmd|' /C calc'!A0 {CLEAR}"),
            _record(model="resnet50", final_loss=-1.0)]
    recs[2] = ThroughputRecord(config=recs[2].config, env=dict(ENV, hostname="@evil"),
                               step_times_s=_steps(), samples_per_step=8, unit="images",
                               run_id="run-hostile", final_loss=-1.0)
    rows = list(csv.DictReader(io.StringIO(export.to_csv(recs))))
    for row in rows:
        for name, v in row.items():
            if v[:1] in ("=", "+", "@", "\t", "\r") or (v[:1] == "-" and not _number(v)):
                pytest.fail(f"column {name}: {v!r} is a live formula")
    assert rows[0]["model"] == "'" + FORMULA and rows[0]["final_loss"] == "-0.25"
    assert rows[1]["error"].startswith("'=cmd")
    assert rows[2]["host"] == "'@evil" and rows[2]["final_loss"] == "-1.0"
    assert rows[2]["model"] == "resnet50"  # an ordinary string as it was


def _number(v: str) -> bool:
    try:
        float(v)
        return True
    except ValueError:
        return False


def test_csv_docstring_says_so():
    assert "'" in export.to_csv.__doc__ and "formula" in export.to_csv.__doc__


# -- Markdown ----------------------------------------------------------------------------------
_MD = MarkdownIt("commonmark").enable("table")


def _live(md: str) -> list[str]:
    """The links, images and HTML a Markdown renderer would make of ``md``."""
    found = []

    def walk(tokens):
        for t in tokens:
            if t.type in ("link_open", "image", "html_inline", "html_block"):
                found.append(f"{t.type}: {t.content or t.attrs}")
            if t.children:
                walk(t.children)
    walk(_MD.parse(md))
    return found


def _table_widths(md: str) -> set[int]:
    """Cell counts of the rows of each Markdown table: a '|' in data would add a cell."""
    html = _MD.render(md)
    widths = set()
    for table in re.findall(r"<table>.*?</table>", html, re.S):
        header = len(re.findall(r"<th[ >]", table.split("</thead>")[0]))
        for row in re.findall(r"<tr>(.*?)</tr>", table.split("</thead>")[1], re.S):
            widths.add(len(re.findall(r"<td[ >]", row)) - header)
    return widths


def test_table_markdown_escapes_data():
    t = Table(f"title {IMAGE} {SCRIPT}", ("a", LINK), ((HOSTILE, AUTOLINK), ("x|y", "`z`")),
              (f"note {LINK} {SCRIPT}",))
    md = t.to_markdown()
    assert _live(md) == []
    assert _table_widths(md) == {0}
    assert CLEAR not in md and "\\x1b[2J" in _MD.render(md)  # shown, as written


def test_markdown_report_of_hostile_strings():
    recs = [_record(), _failed(f"boom {IMAGE} {SCRIPT}")]
    runs = [RunInfo(run_id="run-hostile", command=f"dlbench throughput {LINK} | x",
                                tag=HOSTILE, device=f"dev {AUTOLINK}")]
    md = report_html.render_markdown(recs, runs, title=f"{IMAGE} {SCRIPT} {LINK}")
    assert _live(md) == []
    assert _table_widths(md) == {0}
    first = md.splitlines()[0]
    assert first.startswith("# ") and "img" in first  # the title, shown as text
    assert CLEAR not in md and "\x9b" not in md
    # an ordinary report reads as before
    plain = report_html.render_markdown([_record(model="resnet50")], [], title="nightly")
    assert plain.startswith("# nightly\n") and "| resnet50" in plain


def test_html_report_escapes_hostile_strings():
    # (no control character in the model name: the charts draw it, and fonts have no ESC glyph)
    recs = [_record(model=f"m{MARKUP}{IMAGE}{SCRIPT}"), _failed(f"boom {SCRIPT}")]
    runs = [RunInfo(run_id="run-hostile", command=f"dlbench {SCRIPT}",
                                tag=HOSTILE, device=SCRIPT)]
    text = report_html.render_html(recs, runs, title=f"{SCRIPT}{IMAGE}", source=SCRIPT)
    assert not re.search(r"<script\b", text, re.I)
    assert "&lt;script&gt;" in text
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", text, re.I)


def test_results_show_prints_a_stored_command_and_error_as_written(tmp_path, capsys):
    """`results show RUN` prints the run's stored command, and a failed record's error, through
    markup: both are data, shown as written, their control characters as escapes."""
    from dataclasses import replace

    from dlbench.cli import main
    db = tmp_path / "hostile.db"
    rec = replace(_record(), run_id="run-h", error_type="exception",
                  error=f"boom [bold]{CLEAR}", step_times_s=())
    with Store(db) as s:
        s.start_run("run-h", f"dlbench throughput [red]x[/red] {CLEAR}", ENV, env_key(ENV),
                    "CPU", tag="t")
        s.add(rec, env_key(ENV))
        s.finish_run("run-h", "done")
    main(["results", "show", "run-h", "--db", str(db)])
    out = capsys.readouterr().out
    _no_raw_controls(out)
    assert "\\x1b[2J" in out and "[red]x[/red]" in out
    main(["results", "show", rec.id, "--db", str(db)])
    out = capsys.readouterr().out
    _no_raw_controls(out)
    assert "boom [bold]\\x1b[2J" in out

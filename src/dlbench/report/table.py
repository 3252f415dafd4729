"""The table base: a :class:`Table` (title, columns, rows of text, notes) and the cell formats
every table module shares. It imports none of them: each table module (``tables``,
``kernel_tables``, ``network``, ``train_tables``, ``tuned_tables``) builds on this one, and
whoever needs all of them (:func:`dlbench.report.tables.tables_for`) imports them.

The same :class:`Table` is rendered to the terminal (rich), to Markdown, or to HTML. Its text
comes from stores (tags, model and host names, commands, error messages) and is shown, never
obeyed: :func:`printable` makes control characters visible (the terminal's
:func:`dlbench.report.terminal.safe_text` applies it to every title, cell and note), and
:func:`md_escape` keeps a Markdown renderer from making links, images or HTML of it
(:meth:`Table.to_markdown` applies it to every title, cell and note). HTML escapes its own
(:func:`dlbench.report.html.esc`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

GIB = 1024 ** 3

# C0 controls but tab and newline, DEL, C1 controls (ESC and CSI among them), the Unicode line
# and paragraph separators, and the bidirectional overrides and isolates, which reorder what a
# terminal shows after them.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _visible(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text: str) -> str:
    """``text`` with every control character shown as its escape (ESC as the four characters
    ``\\x1b``, a bidi override as ``\\u202e``), so that text from a store cannot clear a
    screen, move the cursor, retitle a window or hide what follows. Newline and tab stay: a cell
    or a message may hold them. Text without control characters is returned unchanged."""
    return _CONTROL.sub(_visible, str(text))


# Markdown that could make a link, an image, an autolink, HTML or a code span of text, or end a
# table's cell; and the backslash, so that one in the text cannot undo the escape after it.
_MD_SPECIAL = re.compile(r"[\\`\[\]|]|!(?=\[)")
_MD_ENTITY = {"<": "&lt;", ">": "&gt;"}


def md_escape(text: str) -> str:
    """``text`` for a Markdown title, table cell or list item, shown as written: a backslash, a
    backtick, ``[``, ``]``, ``|`` and an ``!`` before ``[`` backslash-escaped (no link, image or
    code span; the cell stays one cell), ``<`` and ``>`` as entities (no HTML, no autolink), line
    breaks as spaces (a table row is one line) and other control characters as
    :func:`printable` shows them. Parentheses stay: without a bracket they make no link."""
    text = str(text).replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
    text = _MD_SPECIAL.sub(lambda m: "\\" + m.group(), printable(text))
    return re.sub("[<>]", lambda m: _MD_ENTITY[m.group()], text)


@dataclass(frozen=True)
class Table:
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    notes: tuple[str, ...] = field(default=())

    def to_markdown(self) -> str:
        """The table in GitHub's Markdown, every piece of text through :func:`md_escape`."""
        e = md_escape
        lines = [f"**{e(self.title)}**", "", "| " + " | ".join(map(e, self.columns)) + " |",
                 "|" + "|".join("---" for _ in self.columns) + "|"]
        lines += ["| " + " | ".join(map(e, r)) + " |" for r in self.rows]
        lines += [""] + [f"- {e(n)}" for n in self.notes] if self.notes else []
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

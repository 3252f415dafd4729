"""Server-sent events from a byte stream, as the WHATWG HTML standard defines them
(https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation):
lines end in LF, CRLF or CR; a blank line ends an event; ``data:`` lines are joined with LF;
lines starting with ``:`` are comments (keep-alive pings); other fields (``event:``, ``id:``,
``retry:``) are kept but carry no data. Pure: bytes in, events out, whatever the chunking.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Event:
    data: str
    event: str | None = None


class MalformedStream(ValueError):
    """Bytes that are not an event stream (not UTF-8)."""


class SseParser:
    """Feed it the chunks of a response as they arrive; it returns the events each completes."""

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[str] = []
        self._event: str | None = None

    def feed(self, chunk: bytes) -> list[Event]:
        self._buf += chunk
        out: list[Event] = []
        while True:
            cut = _line_end(self._buf)
            if cut is None:
                return out
            end, nxt = cut
            line, self._buf = self._buf[:end], self._buf[nxt:]
            ev = self._line(line)
            if ev is not None:
                out.append(ev)

    def close(self) -> list[Event]:
        """The end of the stream: a last line without its line end, and an event whose blank
        line never came (many servers end their stream right after the last ``data:`` line)."""
        out = []
        if self._buf:
            ev = self._line(self._buf.rstrip(b"\r"))
            self._buf = b""
            if ev is not None:
                out.append(ev)
        ev = self._dispatch()
        if ev is not None:
            out.append(ev)
        return out

    def _line(self, raw: bytes) -> Event | None:
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedStream(f"not UTF-8: {raw[:40]!r} ({exc.reason})") from None
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        return None

    def _dispatch(self) -> Event | None:
        if not self._data:
            self._event = None
            return None
        ev = Event("\n".join(self._data), self._event)
        self._data, self._event = [], None
        return ev


def _line_end(buf: bytes) -> tuple[int, int] | None:
    """Where the first line of ``buf`` ends and the next begins, or None for no whole line.
    A CR at the very end may be the first half of CRLF: it waits for the next byte."""
    lf, cr = buf.find(b"\n"), buf.find(b"\r")
    if cr == -1 or (lf != -1 and lf < cr):
        return None if lf == -1 else (lf, lf + 1)
    if cr + 1 < len(buf):
        return cr, cr + 2 if buf[cr + 1:cr + 2] == b"\n" else cr + 1
    return None

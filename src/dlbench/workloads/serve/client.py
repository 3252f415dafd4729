"""One streamed request, timed: aiohttp on asyncio.

The clock is ``time.perf_counter`` (the host clock every CPU-side figure of dlbench is read
on). A request's time starts just before it is handed to the connection; an event's time is
when the bytes that hold it came off the socket, before they are parsed, so parsing is not
counted in the gap that follows. Several events in one read share that time: they arrived
together, and a user's screen would show them together.

Every way a request can fail ends as a one-line reason in its result, never an exception: the
endpoint cannot be reached, it answers an HTTP error, it stalls (no byte for
``stall_timeout_s``), it runs past ``request_timeout_s``, it closes the stream before the last
event (no ``finish_reason`` and no ``[DONE]``), it sends an event that is not JSON, or it
reports an error inside the stream.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from dlbench.workloads.serve import protocol
from dlbench.workloads.serve.sse import MalformedStream, SseParser

try:
    import aiohttp
except ImportError:  # the serve extra: the command says what to install (require_aiohttp)
    aiohttp = None  # type: ignore[assignment]

#: The first bytes of an error answer kept for its reason (and for the fixed-length probe).
ERROR_BODY_BYTES = 4096
#: A connection is refused or set up within this long, or the endpoint is unreachable.
CONNECT_TIMEOUT_S = 30.0


def require_aiohttp() -> Any:
    """aiohttp, or an ImportError that says what to install."""
    if aiohttp is None:
        raise ImportError("dlbench serve needs aiohttp: pip install 'dlbench[serve]' "
                          "(or pip install aiohttp)")
    return aiohttp


@dataclass
class Result:
    """One request as the client saw it (perf_counter times)."""

    start: float
    done: float = 0.0
    ttft: float | None = None
    itl: list[float] = field(default_factory=list)
    last: float | None = None              # the last event with text
    events: int = 0                        # events that carried text
    prompt_tokens: int | None = None       # the server's usage
    completion_tokens: int | None = None
    finish_reason: str | None = None
    finished: bool = False                 # a finish_reason or [DONE] arrived
    text: list[str] | None = None          # the generated text, where it is needed for a count
    error: str | None = None
    status: int | None = None              # the HTTP status of an error answer
    body: str | None = None                # its first bytes
    unreachable: bool = False              # no connection could be made

    @property
    def ok(self) -> bool:
        return self.error is None and self.ttft is not None

    @property
    def e2e(self) -> float | None:
        return None if self.last is None else self.last - self.start


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def session(stall_timeout_s: float) -> Any:
    """A client session for one load point: no cap on connections (aiohttp's default of 100
    would queue requests inside the client, unseen, above that concurrency), keep-alive, a
    socket read that waits at most ``stall_timeout_s``; ``OPENAI_API_KEY``, where set, as the
    bearer token (it is never stored)."""
    http = require_aiohttp()
    conn = http.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=60,
                             ttl_dns_cache=300)
    timeout = http.ClientTimeout(total=None, sock_connect=min(CONNECT_TIMEOUT_S, stall_timeout_s),
                                 sock_read=stall_timeout_s)
    key = os.environ.get("OPENAI_API_KEY")
    headers = {"Authorization": f"Bearer {key}"} if key else None
    return http.ClientSession(connector=conn, timeout=timeout, headers=headers)


def _take(r: Result, reading: protocol.Reading, now: float) -> None:
    if reading.text:
        if r.ttft is None:
            r.ttft = now - r.start
        else:
            r.itl.append(now - r.last)
        r.last = now
        r.events += 1
        if r.text is not None:
            r.text.append(reading.text)
    if reading.prompt_tokens is not None:
        r.prompt_tokens = reading.prompt_tokens
    if reading.completion_tokens is not None:
        r.completion_tokens = reading.completion_tokens
    if reading.finish_reason:
        r.finish_reason = reading.finish_reason
        r.finished = True
    if reading.done:
        r.finished = True


async def stream(sess: Any, url: str, payload: dict[str, Any], *, request_timeout_s: float,
                 stall_timeout_s: float, keep_text: bool = False,
                 clock: Callable[[], float] = time.perf_counter) -> Result:
    """Send ``payload`` to ``url`` and read its stream to the end: a :class:`Result`, whatever
    happens (only cancellation, a Ctrl-C, goes through)."""
    http = require_aiohttp()
    r = Result(start=clock(), text=[] if keep_text else None)
    kind = ""
    try:
        async with asyncio.timeout(request_timeout_s):
            async with sess.post(url, json=payload) as resp:
                if resp.status != 200:
                    raw = await resp.content.read(ERROR_BODY_BYTES)
                    r.status, r.body = resp.status, raw.decode("utf-8", "replace")
                    r.error = (f"HTTP {resp.status}"
                               + (f": {one_line(r.body)[:160]}" if r.body.strip() else
                                  f" {resp.reason or ''}".rstrip()))
                    return _done(r, clock)
                kind = resp.headers.get("Content-Type", "")
                parser = SseParser()
                async for chunk in resp.content.iter_any():
                    now = clock()  # when the bytes arrived: before any parsing
                    for ev in parser.feed(chunk):
                        _take(r, protocol.read_event(ev.data), now)
                now = clock()
                for ev in parser.close():
                    _take(r, protocol.read_event(ev.data), now)
        if not r.finished and not r.events and "text/event-stream" not in kind:
            r.error = (f"the server answered without streaming (Content-Type {kind or 'none'}):"
                       " does it take stream=true?")
        elif not r.finished:
            r.error = (f"stream closed early after {r.events} token event(s) (no finish_reason "
                       "or [DONE])")
        elif r.ttft is None:
            r.error = "the stream ended without a token"
    except (protocol.MalformedEvent, protocol.StreamError, MalformedStream) as exc:
        r.error = one_line(str(exc))
    except http.ClientConnectorError as exc:
        r.unreachable = True
        why = getattr(exc.os_error, "strerror", None) or str(exc.os_error) or type(exc).__name__
        r.error = f"cannot connect to {exc.host}:{exc.port}: {one_line(why)}"
    except http.ConnectionTimeoutError:
        r.unreachable = True
        r.error = f"cannot connect to {url}: no answer in {CONNECT_TIMEOUT_S:g} s"
    except http.ServerTimeoutError:
        r.error = (f"stalled: no data for {stall_timeout_s:g} s (stall_timeout_s) after "
                   f"{r.events} token event(s)")
    except TimeoutError:
        r.error = f"timed out after {request_timeout_s:g} s (request_timeout_s)"
    except http.ClientPayloadError:
        r.error = (f"stream closed early after {r.events} token event(s): the connection was "
                   "cut mid-stream")
    except http.ServerDisconnectedError:
        r.error = ("the server closed the connection " +
                   (f"after {r.events} token event(s)" if r.events else "before answering"))
    except http.ClientError as exc:
        r.error = f"{type(exc).__name__}: {one_line(str(exc))[:160]}"
    except OSError as exc:
        r.error = f"{type(exc).__name__}: {one_line(exc.strerror or str(exc))[:160]}"
    return _done(r, clock)


def _done(r: Result, clock: Callable[[], float]) -> Result:
    r.done = clock()
    return r

"""dlbench's stub server: an OpenAI-compatible streaming endpoint in pure asyncio that answers at
once (or after the delays it is given), to measure what the client itself adds to TTFT and ITL,
and, in the tests, to commit every fault a real server can.

It speaks HTTP/1.1 with keep-alive and chunked server-sent events: ``GET /health``, ``GET
/v1/models``, ``POST /v1/completions`` and ``POST /v1/chat/completions`` (a chat stream opens
with a role-only event, as vLLM's does: it carries no token and must not count as one). A
request gets ``max_tokens`` tokens (the word " tok"), ``tokens_per_event`` to an event, the
first after ``ttft_ms``, the next events ``itl_ms`` apart, then a finish event, a usage event
and ``[DONE]``.

Faults (``fault``, on every ``fault_every``-th completion request counted from the first):
``http500`` (an HTTP error), ``stall`` (one token, then silence), ``close`` (two tokens, then the
connection is cut), ``malformed`` (an event that is not JSON), ``error-event`` (an error inside
the stream), ``no-finish`` (the stream ends cleanly with no finish reason, usage or
``[DONE]``), ``no-usage`` (no usage event), ``no-stream`` (one JSON answer, as a server that
ignores ``stream``). ``strict`` refuses fields it does not know with a
422, as ``transformers serve`` does (it takes ``generation_config``, not ``ignore_eos`` or
``min_tokens``); ``eos_after`` ends an output early, as an end-of-sequence token would, unless
the request asks for a minimum length.

Run it: ``python -m dlbench.workloads.serve.stub --port 8000 [--ttft-ms X --itl-ms Y]``; in a
test: ``with StubServer(StubSpec(...)) as port: ...`` (a real socket, its own thread).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import threading
from dataclasses import asdict, dataclass
from typing import Any

FAULTS = ("http500", "stall", "close", "malformed", "error-event", "no-finish", "no-usage",
          "no-stream")

#: What ``strict`` accepts (``transformers serve``'s completion fields, less the rare ones).
STRICT_FIELDS = frozenset({"model", "prompt", "messages", "stream", "max_tokens",
                           "stream_options", "generation_config", "temperature", "top_p", "seed",
                           "stop"})


@dataclass(frozen=True)
class StubSpec:
    ttft_ms: float = 0.0
    itl_ms: float = 0.0
    tokens_per_event: int = 1
    fault: str | None = None
    fault_every: int = 1
    strict: bool = False
    eos_after: int | None = None
    model: str = "stub"

    def __post_init__(self) -> None:
        if self.fault is not None and self.fault not in FAULTS:
            raise ValueError(f"fault must be one of {', '.join(FAULTS)}, got {self.fault!r}")
        if self.fault_every < 1 or self.tokens_per_event < 1:
            raise ValueError("fault_every and tokens_per_event must be >= 1")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(obj: Any) -> bytes:
    text = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))
    return _chunk(f"data: {text}\n\n".encode())


def _response(status: str, obj: Any) -> bytes:
    body = json.dumps(obj).encode()
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


STREAM_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache"
               b"\r\nTransfer-Encoding: chunked\r\n\r\n")


class Stub:
    """The server's logic, on whatever event loop serves it."""

    def __init__(self, spec: StubSpec) -> None:
        self.spec = spec
        self.completions = 0  # completion requests received (the fault counter)
        self.active = 0       # streams open now, and the most at once (what a test checks)
        self.max_active = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        line = await reader.readline()
        if not line:
            return False
        method, path, _ = (line.decode("latin-1").split(" ", 2) + ["", ""])[:3]
        headers = {}
        while True:
            h = await reader.readline()
            if h in (b"\r\n", b"\n", b""):
                break
            k, _, v = h.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        body = await reader.readexactly(int(headers.get("content-length") or 0))
        path = path.split("?")[0]
        if method == "GET" and path == "/health":
            writer.write(_response("200 OK", {"status": "ok"}))
        elif method == "GET" and path == "/v1/models":
            writer.write(_response("200 OK", {"object": "list", "data": [
                {"id": self.spec.model, "object": "model", "owned_by": "dlbench-stub"}]}))
        elif method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            return await self._complete(writer, body, chat=path.endswith("chat/completions"))
        else:
            writer.write(_response("404 Not Found", {"error": {"message": f"no {path}"}}))
        await writer.drain()
        return headers.get("connection", "").lower() != "close"

    async def _complete(self, writer: asyncio.StreamWriter, raw: bytes, chat: bool) -> bool:
        s = self.spec
        try:
            req = json.loads(raw)
        except ValueError:
            writer.write(_response("400 Bad Request", {"error": {"message": "body is not JSON"}}))
            await writer.drain()
            return True
        if s.strict and set(req) - STRICT_FIELDS:
            writer.write(_response("422 Unprocessable Entity", {
                "detail": f"Unexpected fields in the request: {set(req) - STRICT_FIELDS}"}))
            await writer.drain()
            return True
        self.completions += 1
        fault = s.fault if s.fault and self.completions % s.fault_every == 0 else None
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            return await self._stream(writer, req, chat, fault)
        finally:
            self.active -= 1

    async def _stream(self, writer: asyncio.StreamWriter, req: dict[str, Any], chat: bool,
                      fault: str | None) -> bool:
        s = self.spec
        if fault == "http500":
            writer.write(_response("500 Internal Server Error",
                                   {"error": {"message": "stub: internal error"}}))
            await writer.drain()
            return True
        n, finish = self._length(req)
        prompt = req.get("prompt") if not chat else " ".join(
            str(m.get("content", "")) for m in req.get("messages") or [])
        usage = {"prompt_tokens": len(str(prompt or "").split()), "completion_tokens": n,
                 "total_tokens": len(str(prompt or "").split()) + n}
        if fault == "no-stream":
            writer.write(_response("200 OK", {**self._obj(chat, " tok" * n, finish=finish),
                                              "usage": usage}))
            await writer.drain()
            return True
        writer.write(STREAM_HEAD)
        if chat:
            writer.write(_event(self._obj(chat, None, role=True)))
        await writer.drain()
        if s.ttft_ms:
            await asyncio.sleep(s.ttft_ms / 1e3)
        sent = 0
        while sent < n:
            k = min(s.tokens_per_event, n - sent)
            writer.write(_event(self._obj(chat, " tok" * k)))
            sent += k
            await writer.drain()
            if fault == "stall":
                await asyncio.sleep(3600)
            if fault == "close" and sent >= 2:
                writer.transport.abort()
                return False
            if fault == "malformed":
                writer.write(_chunk(b"data: {not json\n\n"))
                break
            if fault == "error-event":
                writer.write(_event({"error": {"message": "stub: out of memory", "code": 500}}))
                break
            if sent < n and s.itl_ms:
                await asyncio.sleep(s.itl_ms / 1e3)
        if fault not in ("no-finish", "malformed", "error-event"):
            writer.write(_event(self._obj(chat, "", finish=finish)))
            if fault != "no-usage":
                writer.write(_event({"object": "chat.completion.chunk" if chat else
                                     "text_completion", "choices": [], "usage": usage}))
            writer.write(_event("[DONE]"))
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True

    def _length(self, req: dict[str, Any]) -> tuple[int, str]:
        """Tokens to send and the finish reason: ``max_tokens``, or fewer where ``eos_after``
        ends it early and the request asked for no minimum that far."""
        n = int(req.get("max_tokens") or req.get("max_completion_tokens") or 16)
        least = int(req.get("min_tokens") or 0)
        if req.get("ignore_eos"):
            least = n
        if req.get("generation_config"):
            least = max(least, int(json.loads(req["generation_config"]).get("min_new_tokens") or 0))
        if self.spec.eos_after is not None and self.spec.eos_after < n:
            n2 = max(least, self.spec.eos_after)
            if n2 < n:
                return n2, "stop"
        return n, "length"

    def _obj(self, chat: bool, text: str | None, finish: str | None = None,
             role: bool = False) -> dict[str, Any]:
        if chat:
            delta: dict[str, Any] = {"role": "assistant"} if role else (
                {"content": text} if text else {})
            return {"object": "chat.completion.chunk", "model": self.spec.model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return {"object": "text_completion", "model": self.spec.model,
                "choices": [{"index": 0, "text": text or "", "finish_reason": finish}]}


class StubServer:
    """The stub on a real socket of this host, served by a thread of its own (for tests and the
    Python API): ``with StubServer(spec) as port:``."""

    def __init__(self, spec: StubSpec | None = None, host: str = "127.0.0.1",
                 port: int = 0) -> None:
        self.spec = spec or StubSpec()
        self.host, self.port = host, port
        self.stub = Stub(self.spec)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> int:
        self._thread = threading.Thread(target=self._run, name="dlbench-stub", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the stub server did not start within 10 s")
        return self.port

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self.stub.handle, self.host, self.port)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stop.wait()
        server.close()  # not wait_closed(): a stalled stream's connection never closes itself;
        # asyncio.run cancels its handler on the way out

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> int:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dlbench.workloads.serve.stub",
                                 description="dlbench's stub OpenAI-compatible streaming server")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--ttft-ms", type=float, default=0.0)
    ap.add_argument("--itl-ms", type=float, default=0.0)
    ap.add_argument("--tokens-per-event", type=int, default=1)
    ap.add_argument("--fault", choices=FAULTS)
    ap.add_argument("--fault-every", type=int, default=1)
    ap.add_argument("--strict", action="store_true")
    ap.add_argument("--eos-after", type=int)
    ap.add_argument("--model", default="stub")
    a = ap.parse_args(argv)
    spec = StubSpec(a.ttft_ms, a.itl_ms, a.tokens_per_event, a.fault, a.fault_every, a.strict,
                    a.eos_after, a.model)

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        server = await asyncio.start_server(Stub(spec).handle, a.host, a.port)
        await stop.wait()
        server.close()
    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())

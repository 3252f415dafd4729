"""One load point: warm-up, then the measured window of requests, fixed concurrency or arrivals
at a rate, timed on the host clock; its record.

- **Concurrency N**: N workers, each sending its next request the moment its last one ended,
  until ``num_requests`` were sent (or ``duration_s`` passed). A request is due when its worker
  became free; it is late when the client was slow to send it.
- **Rate R**: requests due at the times :func:`dlbench.measure.serving.arrivals` draws (gamma
  gaps of mean 1/R), each sent at its time whatever the others are doing (an open loop, as
  users arrive). A request is late when the client sent it after its time.

A load point where more than 1% of requests were sent late by more than ``late_threshold_s``,
or whose event loop lagged that much at the 99th percentile, is flagged in the record
(:meth:`dlbench.records.serve.ServeRecord.client_behind`): the figure is the client's, not the
server's.

The window starts when the first measured request is due and ends when the last one ends;
throughput is what completed over it. Where this host has GPUs, they are sampled (NVML) with an
idle baseline before the warm-up, and the window's energy is divided by its output tokens.
"""

from __future__ import annotations

import asyncio
import itertools
import platform
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Coroutine, Sequence

from dlbench import telemetry
from dlbench.measure import serving as sv
from dlbench.measure.stats import percentile
from dlbench.records.base import ErrorType
from dlbench.records.serve import ServeConfig, ServeRecord
from dlbench.workloads.serve import client, prompts, protocol

#: A concurrency point run for a duration cycles through this many prompts at least (its count
#: of requests is not known beforehand).
DURATION_POOL = 512
#: The event loop's lag is sampled this often while measuring.
LAG_PERIOD_S = 0.005
#: Tokens the fixed-length probe asks for.
PROBE_TOKENS = 2


@dataclass
class Target:
    """The server a sweep's points go to, and what was learned of it on the way: shared by
    every point, so the fixed-length probe runs once."""

    endpoint: str
    model: str
    mode: str | None = None           # the fixed-length mode the server took
    notes: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)  # /v1/models, how it was started, stub


def run_async(coro: Coroutine) -> Any:
    """``asyncio.run(coro)``, also from code that already runs an event loop (a notebook): then
    in a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller's thread
            box["error"] = exc
    t = threading.Thread(target=target, name="dlbench-serve")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _gpus(env: dict[str, Any]) -> list[dict[str, Any]] | None:
    gpus = [{"index": g.get("index", i), "uuid": g.get("uuid")}
            for i, g in enumerate(env.get("gpus") or [])]
    return gpus or None


def measure(cfg: ServeConfig, env: dict[str, Any], target: Target, tokenizer: Any = None,
            clock: Callable[[], float] = time.perf_counter) -> ServeRecord:
    """Measure one load point against ``target``: its record, a failure record when nothing
    completed (the endpoint cannot be reached, every request failed)."""
    sampler = (telemetry.NullSampler() if cfg.telemetry_interval_s is None else
               telemetry.Sampler(cfg.telemetry_interval_s, gpus=_gpus(env), host=True))
    with sampler:
        sampler.idle(telemetry.IDLE_BASELINE_S)  # a no-op without GPUs
        point = run_async(_point(cfg, target, tokenizer, clock, sampler))
        raw = sampler.stop()
    return _record(cfg, env, target, point, tokenizer, raw)


@dataclass
class _Point:
    results: list[client.Result | None] = field(default_factory=list)
    sched: list[float] = field(default_factory=list)      # perf_counter times
    t0: float = 0.0
    t_end: float = 0.0
    warmup: dict[str, Any] = field(default_factory=dict)
    lag: list[float] = field(default_factory=list)
    prompts: list[prompts.Prompt] = field(default_factory=list)
    reused: int = 0
    failure: str | None = None   # the endpoint could not be used at all


def _prompt_count(cfg: ServeConfig, schedule: Sequence[float] | None) -> int:
    if schedule is not None:
        return len(schedule)
    if cfg.num_requests is not None:
        return cfg.num_requests
    return max(DURATION_POOL, 32 * (cfg.concurrency or 1))


async def _point(cfg: ServeConfig, target: Target, tokenizer: Any,
                 clock: Callable[[], float], sampler: Any) -> _Point:
    p = _Point()
    schedule = None
    if cfg.rate is not None:
        schedule = sv.arrivals(cfg.rate, cfg.burstiness, count=cfg.num_requests,
                               duration_s=cfg.duration_s, seed=cfg.seed)
    # one for the fixed-length probe, the warm-up's, the window's: no prompt is sent twice,
    # nor again by a later point or run (a server's prefix cache would answer it)
    made = prompts.synthetic(1 + cfg.warmup_requests + _prompt_count(cfg, schedule),
                             cfg.prompt_len, f"{cfg.seed}-{secrets.token_hex(8)}", tokenizer)
    w = 1 + cfg.warmup_requests
    probe, warm, p.prompts = made[0], made[1:w], made[w:]
    url = protocol.api_url(target.endpoint, cfg.api)
    keep_text = tokenizer is not None  # counted here only where the server sends no usage
    async with client.session(cfg.stall_timeout_s) as sess:

        async def send(prompt: prompts.Prompt, mode: str | None = None,
                       tokens: int | None = None) -> client.Result:
            b = protocol.body(cfg.api, target.model, prompt.text, tokens or cfg.output_len,
                              mode or target.mode or "none", cfg.extra_body)
            return await client.stream(sess, url, b, request_timeout_s=cfg.request_timeout_s,
                                       stall_timeout_s=cfg.stall_timeout_s,
                                       keep_text=keep_text, clock=clock)

        if target.mode is None:
            p.failure = await _negotiate(cfg, target, send, probe)
            if p.failure:
                return p
        p.warmup = await _warmup(cfg, send, warm, clock)
        if p.warmup.get("unreachable"):
            p.failure = p.warmup["errors"][0]
            return p
        stop = asyncio.Event()
        lag = asyncio.create_task(_lag(p.lag, stop, clock))
        try:
            if schedule is not None:
                await _open_loop(p, schedule, send, clock, sampler)
            else:
                await _closed_loop(cfg, p, send, clock, sampler)
        finally:
            stop.set()
            await lag
    return p


async def _negotiate(cfg: ServeConfig, target: Target, send: Any,
                     prompt: prompts.Prompt) -> str | None:
    """Which fixed-length fields the server takes (``--fixed-length auto``): a short request
    with each mode of :data:`protocol.AUTO_ORDER` until one is not refused for its fields.
    Returns the reason the endpoint cannot be used at all (it cannot be reached), else None."""
    if cfg.fixed_length != "auto":
        target.mode = cfg.fixed_length
        return None
    for mode in protocol.AUTO_ORDER:
        r = await send(prompt, mode, PROBE_TOKENS)
        # the first request a server answers may load its model: seconds, said apart
        target.info["probe_s"] = round(r.done - r.start, 6)
        if r.unreachable:
            return r.error
        if r.error and protocol.refuses_mode(r.status or 0, r.body or "", mode):
            target.notes.append(f"the server refused {mode} ({r.error[:120]})")
            continue
        target.mode = mode
        break
    else:
        target.mode = "none"
    if target.mode == "none":
        target.notes.append("the server takes no fixed-length fields: outputs may end early "
                            "at an end-of-sequence token (see 'short outputs')")
    return None


async def _warmup(cfg: ServeConfig, send: Any, warm: Sequence[prompts.Prompt],
                  clock: Callable[[], float]) -> dict[str, Any]:
    """The warm-up requests, up to the point's concurrency at a time (one at a time for a rate
    point), not measured: compilation, caches, the first request that loads a model."""
    t = clock()
    width = max(1, min(len(warm), cfg.concurrency or 1))
    results: list[client.Result] = []
    for i in range(0, len(warm), width):
        results += await asyncio.gather(*(send(w) for w in warm[i:i + width]))
        if results and all(r.unreachable for r in results):
            break
    errors = [r.error for r in results if not r.ok]
    return {"requests": len(warm), "ok": sum(r.ok for r in results),
            "wall_s": round(clock() - t, 6), "errors": errors[:5],
            "unreachable": bool(results) and all(r.unreachable for r in results)}


async def _lag(out: list[float], stop: asyncio.Event, clock: Callable[[], float]) -> None:
    """How late the event loop wakes a task that asked to sleep LAG_PERIOD_S: the time every
    request's send and every event's read wait behind other work."""
    while not stop.is_set():
        t = clock()
        await asyncio.sleep(LAG_PERIOD_S)
        out.append(max(0.0, clock() - t - LAG_PERIOD_S))


async def _closed_loop(cfg: ServeConfig, p: _Point, send: Any, clock: Callable[[], float],
                       sampler: Any) -> None:
    n = cfg.num_requests
    p.t0 = clock()
    sampler.mark("window_start", p.t0)
    deadline = None if cfg.duration_s is None else p.t0 + cfg.duration_s
    counter = itertools.count()

    async def worker() -> None:
        free = p.t0
        while True:
            if deadline is not None and clock() >= deadline:
                return
            i = next(counter)
            if n is not None and i >= n:
                return
            if i >= len(p.prompts):
                p.reused += 1
            p.results.append(None)
            p.sched.append(free)
            slot = len(p.results) - 1
            p.results[slot] = r = await send(p.prompts[i % len(p.prompts)])
            free = r.done

    await asyncio.gather(*(worker() for _ in range(cfg.concurrency)))
    p.t_end = max((r.done for r in p.results if r is not None), default=clock())
    sampler.mark("window_end", p.t_end)


async def _open_loop(p: _Point, schedule: Sequence[float], send: Any,
                     clock: Callable[[], float], sampler: Any) -> None:
    p.t0 = clock()
    sampler.mark("window_start", p.t0)
    p.results = [None] * len(schedule)
    p.sched = [p.t0 + a for a in schedule]

    async def one(i: int) -> None:
        p.results[i] = await send(p.prompts[i])

    tasks = []
    for i, due in enumerate(p.sched):
        wait = due - clock()
        if wait > 0:
            await asyncio.sleep(wait)
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)
    p.t_end = max((r.done for r in p.results if r is not None), default=clock())
    sampler.mark("window_end", p.t_end)


# -- the record -----------------------------------------------------------------------------------
def _lag_summary(lag: Sequence[float]) -> dict[str, Any]:
    if not lag:
        return {"ticks": 0}
    return {"ticks": len(lag), "p50_s": round(percentile(lag, 50), 7),
            "p99_s": round(percentile(lag, 99), 7), "max_s": round(max(lag), 7)}


def _client_info(p: _Point) -> dict[str, Any]:
    http = client.aiohttp
    return {**_lag_summary(p.lag), "python": platform.python_version(),
            "aiohttp": getattr(http, "__version__", None), "lag_period_s": LAG_PERIOD_S}


def _output_count(r: client.Result, tokenizer: Any) -> tuple[int | None, str]:
    if r.completion_tokens is not None:
        return r.completion_tokens, "usage"
    if r.text is not None and tokenizer is not None:
        return prompts.count_tokens(tokenizer, "".join(r.text)), "tokenizer"
    return r.events, "events"


def _record(cfg: ServeConfig, env: dict[str, Any], target: Target, p: _Point, tokenizer: Any,
            raw: dict[str, Any] | None) -> ServeRecord:
    server = {**target.info, "endpoint": target.endpoint, "fixed_length": target.mode,
              "notes": list(target.notes)}
    if p.reused:
        server["notes"].append(f"{p.reused} request(s) reused a prompt (a duration point ran "
                               f"past its {len(p.prompts)} prompts): a prefix cache may have "
                               "served them")
    common = dict(config=cfg, env=env, server=server, client=_client_info(p),
                  warmup={k: v for k, v in p.warmup.items() if k != "unreachable"} or None)
    if p.failure:
        return ServeRecord(status="error", error_type=ErrorType.EXCEPTION,
                           error=f"the endpoint cannot be used: {p.failure}", **common)
    results = [r for r in p.results if r is not None]
    t0 = p.t0
    ok = [r for r in results if r.ok]
    outs, sources = [], set()
    for r in results:
        n, source = _output_count(r, tokenizer) if r.ok else (None, None)
        outs.append(n)
        if source:
            sources.add(source)
    counted = [q.tokens for q in p.prompts if q.tokens is not None]
    token_count = {
        "prompt": "tokenizer" if tokenizer is not None else "words",
        "output": ("events" if "events" in sources else "tokenizer" if "tokenizer" in sources
                   else "usage"),
        "prompt_counted": (sum(counted) / len(counted)) if counted else None,
    }
    prompt_tokens = []
    for i, r in enumerate(results):
        mine = p.prompts[i % len(p.prompts)].tokens if p.prompts else None
        prompt_tokens.append(r.prompt_tokens if r.prompt_tokens is not None else mine)
    telem = telemetry.finish(raw, sum(outs[i] or 0 for i, r in enumerate(results) if r.ok)) \
        if raw is not None else None
    rec = dict(
        sched_s=[s - t0 for s in p.sched], start_s=[r.start - t0 for r in results],
        done_s=[r.done - t0 for r in results],
        ttft_s=[r.ttft if r.ok else None for r in results],
        itl_s=[r.itl if r.ok else () for r in results],
        e2e_s=[r.e2e if r.ok else None for r in results],
        prompt_tokens=tuple(prompt_tokens), output_tokens=tuple(outs),
        errors=tuple(r.error if r.error is not None else
                     (None if r.ok else "no token received") for r in results),
        window_s=p.t_end - t0, token_count=token_count, telemetry=telem, **common)
    if not ok:
        reasons: dict[str, int] = {}
        for r in results:
            why = r.error or "no token received"
            reasons[why] = reasons.get(why, 0) + 1
        top = max(reasons, key=reasons.get) if reasons else "no request was sent"
        rec.update(status="error", error_type=ErrorType.EXCEPTION,
                   error=f"all {len(results)} requests failed: {top}" +
                   (f" (and {len(reasons) - 1} other reason(s))" if len(reasons) > 1 else ""))
    return ServeRecord.rounded(**rec)


__all__ = ["Target", "measure", "run_async"]

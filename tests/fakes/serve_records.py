"""``serve`` records with known numbers, for the tests of their views (tables, charts, CSV,
compare): real :class:`ServeRecord` objects whose per-request samples are chosen so that every
figure is a round number.

The default record (concurrency 4, 8 requests of 16 prompt and 5 output tokens):

- a request: TTFT 100 ms, then 4 gaps of 10 ms: e2e 140 ms, TPOT 40 ms / 4 = 10 ms;
- two waves of 4, sent at 0 and 0.14 s, done at 0.14 and 0.28 s: window 0.28 s;
- 8 / 0.28 = 28.571 req/s; 40 output tokens / 0.28 = 142.857 tok/s; (40 + 128) / 0.28 = 600
  total tok/s; every request within the default SLO (TTFT 2 s, TPOT 100 ms): goodput 28.571.
"""

from __future__ import annotations

from typing import Any

from fakes.generate_records import H100, gpu_telemetry

from dlbench.records.base import ErrorType
from dlbench.records.serve import ServeConfig, ServeRecord


def serve_record(concurrency: int | None = 4, rate: float | None = None, *, requests: int = 8,
                 ttft_s: float = 0.1, itl_s: float = 0.01, output_len: int = 5,
                 prompt_len: int = 16, failed: int = 0, late_s: float = 0.0,
                 spread: float = 0.0, env: dict | None = None, run_id: str = "run-serve",
                 telemetry: Any = None, server: dict | None = None, model: str = "made-up-lm",
                 **cfg: Any) -> ServeRecord:
    """A finished load point: every request ``ttft_s`` then ``output_len - 1`` gaps of
    ``itl_s`` (with ``spread``: alternately that much slower and faster); concurrency points in
    waves of ``concurrency``, rate points evenly ``1 / rate`` apart (sent ``late_s`` late); the
    last ``failed`` requests failed (HTTP 500)."""
    c = ServeConfig(model=model, concurrency=concurrency, rate=rate, prompt_len=prompt_len,
                    output_len=output_len, num_requests=cfg.pop("num_requests", requests),
                    telemetry_interval_s=None, **cfg)
    sched, start, done, ttft, itl, e2e, errors = [], [], [], [], [], [], []
    for i in range(requests):
        k = 1 + spread * (-1) ** i
        t, gaps = ttft_s * k, (itl_s * k,) * (output_len - 1)
        e = t + sum(gaps)
        if rate is not None:
            s = i / rate
        else:
            s = (i // concurrency) * (ttft_s + itl_s * (output_len - 1))
        sched.append(s)
        start.append(s + late_s)
        bad = i >= requests - failed
        ttft.append(None if bad else t)
        itl.append(() if bad else gaps)
        e2e.append(None if bad else e)
        done.append(start[-1] + (0.001 if bad else e))
        errors.append("HTTP 500: stub: internal error" if bad else None)
    ok = [i for i in range(requests) if errors[i] is None]
    return ServeRecord.rounded(
        config=c, env=H100 if env is None else env, run_id=run_id,
        sched_s=sched, start_s=start, done_s=done, ttft_s=ttft, itl_s=itl, e2e_s=e2e,
        prompt_tokens=tuple(prompt_len if i in ok else None for i in range(requests)),
        output_tokens=tuple(output_len if i in ok else None for i in range(requests)),
        errors=tuple(errors), window_s=max(done),
        token_count={"prompt": "tokenizer", "output": "usage", "prompt_counted": prompt_len},
        warmup={"requests": 2, "ok": 2, "wall_s": 0.3, "errors": []},
        client={"ticks": 50, "p50_s": 0.0001, "p99_s": 0.0005, "max_s": 0.001,
                "python": "3.11", "aiohttp": "3.14.5", "lag_period_s": 0.005},
        server=server if server is not None else {
            "endpoint": "http://127.0.0.1:8000", "fixed_length": "ignore-eos", "notes": []},
        telemetry=telemetry)


def telemetry_record(**kw: Any) -> ServeRecord:
    """The default record with a GPU's telemetry: 400 W over a 1 s window of its 40 output
    tokens (10 J a token; idle 100 W: 7.5 J net)."""
    return serve_record(telemetry=gpu_telemetry(samples=40), **kw)


def failed_serve(env: dict | None = None, run_id: str = "run-serve") -> ServeRecord:
    """A load point whose endpoint could not be reached."""
    return ServeRecord(config=ServeConfig(model="made-up-lm", concurrency=2,
                                          telemetry_interval_s=None),
                       env=H100 if env is None else env, run_id=run_id, status="error",
                       error_type=ErrorType.EXCEPTION,
                       error="the endpoint cannot be used: cannot connect to 127.0.0.1:9: "
                             "Connection refused",
                       server={"endpoint": "http://127.0.0.1:9", "fixed_length": None,
                               "notes": []})


def every_column_records(env: dict | None = None, run_id: str = "run-serve") -> list[ServeRecord]:
    """Records that fill every serve CSV column between them: a concurrency point with GPU
    telemetry and failed requests, a 400-request rate point (enough for a p99's upper bound)
    with an e2e limit, a duration point from a launched server, and an unreachable endpoint."""
    return [
        serve_record(telemetry=gpu_telemetry(samples=30), failed=2, env=env, run_id=run_id),
        serve_record(None, 20.0, requests=400, spread=0.1, slo_e2e_s=30.0, env=env,
                     run_id=run_id),
        serve_record(None, 5.0, requests=10, num_requests=None, duration_s=2.0, env=env,
                     run_id=run_id, server={"endpoint": "http://127.0.0.1:8000",
                                            "launch": "vllm serve m --port 8000",
                                            "fixed_length": "ignore-eos", "notes": []}),
        failed_serve(env=env, run_id=run_id),
    ]

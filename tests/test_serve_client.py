"""The load generator against dlbench's stub server on a real socket (its own thread): what is
timed, the loads (concurrency, rates, durations), the warm-up apart, how tokens are counted,
the fixed-length probe, and every fault a server can commit: each a counted failed request with
a one-line reason, never an exception or a hang."""

from __future__ import annotations

import socket

import pytest

pytest.importorskip("aiohttp")

from fakes.serve_records import serve_record  # noqa: E402

from dlbench.records.serve import ServeConfig  # noqa: E402
from dlbench.workloads.serve import prompts  # noqa: E402
from dlbench.workloads.serve.load import Target, measure  # noqa: E402
from dlbench.workloads.serve.model_dir import word_tokenizer  # noqa: E402
from dlbench.workloads.serve.stub import StubServer, StubSpec  # noqa: E402


def _config(port: int, **kw) -> ServeConfig:
    kw.setdefault("concurrency", None if "rate" in kw else 2)
    base = dict(model="stub", endpoint=f"http://127.0.0.1:{port}", telemetry_interval_s=None,
                prompt_len=8, output_len=6, num_requests=8, warmup_requests=0,
                fixed_length="ignore-eos")
    base.update(kw)
    return ServeConfig(**base)


def point(spec: StubSpec | None = None, tokenizer=None, **kw):
    """The record of one load point against a stub of ``spec``, and the stub."""
    server = StubServer(spec or StubSpec())
    with server as port:
        cfg = _config(port, **kw)
        return measure(cfg, {}, Target(cfg.endpoint, "stub"), tokenizer), server.stub


def test_a_streamed_request_is_timed_token_by_token():
    rec, stub = point(StubSpec(ttft_ms=30, itl_ms=10))
    assert rec.ok and rec.completed() == 8 and rec.failed() == 0
    assert rec.output_tokens == (6,) * 8 and rec.prompt_tokens == (8,) * 8  # the usage event
    assert all(len(g) == 5 for g in rec.itl_s)                       # 6 tokens, 5 gaps
    ttft, tpot, itl = rec.ttft(), rec.tpot(), rec.itl()
    # at least the stub's delays; above them by what a busy test machine adds
    assert 0.030 <= ttft.p50_s < 0.030 + 0.25
    assert 0.010 <= itl.p50_s < 0.010 + 0.1 and 0.010 <= tpot.p50_s < 0.010 + 0.1
    for i in range(8):  # e2e = TTFT + the gaps, exactly: one clock, one start
        assert rec.e2e_s[i] == pytest.approx(rec.ttft_s[i] + sum(rec.itl_s[i]), abs=1e-6)
        assert rec.start_s[i] >= rec.sched_s[i]
    assert rec.window_s >= max(rec.done_s) - 1e-6
    assert rec.output_tokens_per_s() == pytest.approx(48 / rec.window_s, rel=1e-3)
    assert rec.good() == 8 and rec.goodput() == pytest.approx(rec.request_throughput())
    assert stub.max_active == 2 and not rec.client_behind()


def test_a_chat_streams_role_event_is_not_the_first_token():
    """vLLM's chat stream opens with a role-only event: counting it would make TTFT the time
    to the server's first byte, not to the first token."""
    rec, _ = point(StubSpec(ttft_ms=40), api="chat")
    assert rec.ok and rec.ttft().p50_s >= 0.040 and rec.output_tokens == (6,) * 8


@pytest.mark.parametrize("n", [1, 3, 8])
def test_concurrency_keeps_exactly_n_requests_in_flight(n):
    rec, stub = point(StubSpec(ttft_ms=20, itl_ms=5), concurrency=n, num_requests=2 * n)
    assert rec.completed() == 2 * n and stub.max_active == n


def test_warmup_requests_are_sent_apart_and_not_measured():
    rec, stub = point(warmup_requests=3, fixed_length="auto")
    assert rec.requests == 8 and rec.warmup["requests"] == 3 and rec.warmup["ok"] == 3
    assert stub.completions == 1 + 3 + 8  # the fixed-length probe, the warm-up, the window


def test_a_rate_point_sends_each_request_at_its_time():
    rec, _ = point(rate=50.0, burstiness=float("inf"), num_requests=10, late_threshold_s=0.25)
    assert rec.sched_s == pytest.approx([i / 50 for i in range(10)], abs=1e-6)
    lateness = rec.lateness()
    assert min(lateness) >= 0 and max(lateness) < 0.25 and rec.late() == 0
    assert rec.offered_rate() == pytest.approx(50.0)


def test_a_duration_point_stops_sending_when_it_is_over():
    rec, _ = point(StubSpec(ttft_ms=10, itl_ms=10), num_requests=None, duration_s=0.3)
    assert rec.requests >= 4 and all(s < 0.3 for s in rec.start_s)
    assert not any("reused" in n for n in rec.server["notes"])


FAULTS = [
    ("http500", "HTTP 500: {\"error\": {\"message\": \"stub: internal error\"}}"),
    ("close", "stream closed early after 2 token event(s): the connection was cut mid-stream"),
    ("malformed", "malformed event, not JSON: '{not json'"),
    ("error-event", "server error in the stream: stub: out of memory"),
    ("no-finish", "stream closed early after 6 token event(s) (no finish_reason or [DONE])"),
    ("stall", "stalled: no data for 0.5 s (stall_timeout_s) after 1 token event(s)"),
    ("no-stream", "the server answered without streaming (Content-Type application/json): does "
                  "it take stream=true?"),
]


@pytest.mark.parametrize("fault,reason", FAULTS, ids=[f for f, _ in FAULTS])
def test_every_fault_is_a_counted_failure_with_a_one_line_reason(fault, reason):
    rec, _ = point(StubSpec(fault=fault, fault_every=2), stall_timeout_s=0.5)
    assert rec.ok  # half the requests completed: the point stands, its failures counted
    assert rec.failed() == 4 and rec.completed() == 4
    assert rec.failure_reasons() == [(reason, 4)]
    assert all("\n" not in e for e in rec.errors if e)
    assert rec.good() == 4 and rec.good_fraction()[0] == 0.5


def test_a_request_past_its_timeout_fails():
    rec, _ = point(StubSpec(itl_ms=200), request_timeout_s=0.3, num_requests=2)
    assert not rec.ok and rec.failure_reasons() == [
        ("timed out after 0.3 s (request_timeout_s)", 2)]
    assert rec.error == "all 2 requests failed: timed out after 0.3 s (request_timeout_s)"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once it is closed


def test_an_unreachable_endpoint_fails_the_point_at_once_with_its_reason():
    port = _closed_port()
    cfg = _config(port, fixed_length="auto")
    rec = measure(cfg, {}, Target(cfg.endpoint, "stub"))
    assert not rec.ok and rec.error.startswith(
        f"the endpoint cannot be used: cannot connect to 127.0.0.1:{port}")
    assert "\n" not in rec.error and rec.requests == 0
    # with no probe and no warm-up, every measured request fails the same way, counted
    cfg = _config(port)
    rec = measure(cfg, {}, Target(cfg.endpoint, "stub"))
    assert not rec.ok and rec.failed() == 8
    assert rec.error.startswith(f"all 8 requests failed: cannot connect to 127.0.0.1:{port}")


def test_the_probe_finds_the_fixed_length_fields_a_strict_server_takes():
    """A server that refuses ignore_eos and min_tokens (transformers serve) gets
    generation_config, and its outputs are as long as asked though it would stop early."""
    rec, _ = point(StubSpec(strict=True, eos_after=3), fixed_length="auto")
    assert rec.server["fixed_length"] == "generation-config"
    assert "refused ignore-eos" in rec.server["notes"][0]
    assert rec.output_tokens == (6,) * 8 and rec.short_outputs() == 0


def test_without_fixed_length_fields_short_outputs_are_counted():
    rec, _ = point(StubSpec(eos_after=3), fixed_length="none")
    assert rec.output_tokens == (3,) * 8 and rec.short_outputs() == 8


def test_output_tokens_come_from_usage_else_a_tokenizer_else_events():
    # events 5 ms apart: with none between them, a client that reads two events at once (a
    # loaded machine) sees gaps of 0 in one request, and the TPOT check compares microseconds
    rec, _ = point(StubSpec(tokens_per_event=2, itl_ms=5))
    assert rec.output_tokens == (6,) * 8 and rec.token_count["output"] == "usage"
    assert all(len(g) == 2 for g in rec.itl_s)  # 3 events of 2 tokens: 2 gaps
    assert rec.tpot().p50_s == pytest.approx(sum(rec.itl_s[0]) / 5, rel=0.5)
    rec, _ = point(StubSpec(tokens_per_event=2, fault="no-usage"))
    assert rec.output_tokens == (3,) * 8 and rec.token_count["output"] == "events"
    tok = word_tokenizer(64)
    rec, _ = point(StubSpec(fault="no-usage"), tokenizer=tok)  # " tok" x 6: 6 unknown words
    assert rec.output_tokens == (6,) * 8 and rec.token_count["output"] == "tokenizer"


def test_prompts_have_their_token_length():
    tok = word_tokenizer(64)
    made = prompts.synthetic(5, 12, seed=1, tokenizer=tok)
    assert [p.tokens for p in made] == [12] * 5 and len({p.text for p in made}) == 5
    assert all(len(tok.encode(p.text, add_special_tokens=False)) == 12 for p in made)
    words = prompts.synthetic(3, 7, seed=1)
    assert [len(p.text.split()) for p in words] == [7] * 3 and words[0].tokens is None
    assert prompts.synthetic(3, 7, seed=1) == words != prompts.synthetic(3, 7, seed=2)
    rec, _ = point(tokenizer=tok)
    assert rec.token_count["prompt"] == "tokenizer" and rec.token_count["prompt_counted"] == 8


def test_a_client_that_falls_behind_is_flagged():
    assert not serve_record(None, 10.0).client_behind()
    late = serve_record(None, 10.0, late_s=0.05)
    assert late.late() == 8 and late.client_behind()


def test_a_gpu_on_this_host_is_sampled_and_its_energy_divided_by_the_output_tokens(monkeypatch):
    """A fake NVML (tests/fakes/fake_nvml.py): a card at a steady 300 W whose energy counter
    runs with the clock; the window's energy over its output tokens is 300 W x window / tokens,
    and the idle baseline, taken before the warm-up, reads the same 300 W (net: about 0)."""
    import sys
    import time

    from fakes.fake_nvml import FakeGpu, make_fake_pynvml

    gpu = FakeGpu(power_usage_mw=300_000,
                  energy_mj=lambda: int(300_000 * time.perf_counter()))
    monkeypatch.setitem(sys.modules, "pynvml", make_fake_pynvml([gpu]))
    env = {"accelerator": "cuda", "gpus": [{"index": 0, "uuid": gpu.uuid}]}
    with StubServer(StubSpec(ttft_ms=5, itl_ms=5)) as port:
        cfg = _config(port, telemetry_interval_s=0.02, num_requests=16, output_len=10)
        rec = measure(cfg, env, Target(cfg.endpoint, "stub"))
    assert rec.ok and rec.output_token_total() == 160
    summary = rec.telemetry["summary"]
    assert [g["uuid"] for g in summary["gpus"]] == [gpu.uuid]
    assert summary["window_s"] == pytest.approx(rec.window_s, rel=0.05)
    assert rec.energy_per_output_token_j() == pytest.approx(300 * summary["window_s"] / 160,
                                                            rel=0.05)
    assert rec.mean_power_w() == pytest.approx(300, rel=0.05)
    assert abs(rec.net_energy_per_output_token_j()) < 0.05 * rec.energy_per_output_token_j()

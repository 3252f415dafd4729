"""The serving campaign page's prose against its records: every figure the prose quotes is
recomputed here from the committed store, with the flags of the records it comes from (the
page's tables are checked by tests/test_readme_claims.py, which renders them from the same
store)."""

from __future__ import annotations

import re
import statistics
from pathlib import Path

import pytest
from fakes.pages import H, assert_says, stored_runs

from dlbench.measure import serving as sv

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / H.SERVE_PAGE).read_text()
FOLDER = ROOT / "results" / H.H100_SERVE
UNBOUNDED = "p99 unbounded above"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    recs, _ = stored_runs(H.H100_SERVE, (H.SERVE_RUN,), "serve", tmp_path_factory.mktemp("sw"))
    return {r.config.load_label: r for r in recs}


@pytest.fixture(scope="module")
def stub(tmp_path_factory):
    recs, _ = stored_runs(H.H100_SERVE, (H.SERVE_STUB_RUN,), "serve",
                          tmp_path_factory.mktemp("stub"))
    return {r.config.load_label: r for r in recs}


def says(text: str) -> None:
    assert_says(PAGE, text)


def ms(seconds: float) -> str:
    """A figure in ms as the page's tables print it (three significant figures)."""
    return H._ms(seconds)


def tpot(r, i: int) -> float:
    return sv.request_tpot(r.e2e_s[i], r.ttft_s[i], r.output_tokens[i])


def in_flight(r, t: float) -> int:
    """Requests sent and not yet finished (their last token) ``t`` seconds into the window."""
    return sum(1 for i in r._ok() if r.start_s[i] <= t < r.start_s[i] + r.e2e_s[i])


def mean_in_flight(r) -> float:
    """Requests in flight on average over the window: their e2e times summed over it."""
    return sum(r.e2e_s[i] for i in r._ok()) / r.window_s


def gpu(r) -> dict:
    [g] = r.telemetry["summary"]["gpus"]
    return g


def rate_points(sweep) -> list:
    return sorted((r for r in sweep.values() if r.config.rate is not None),
                  key=lambda r: r.config.rate)


def conc_points(recs) -> list:
    return [r for r in recs.values() if r.config.concurrency is not None]


# -- what was run, where ------------------------------------------------------------------------
def test_the_runs_are_what_the_page_says(sweep, stub):
    assert sorted(r.config.rate for r in rate_points(sweep)) == [1, 2, 4, 8, 16]
    assert [r.config.concurrency for r in conc_points(sweep)] == [1, 16, 64]
    assert [r.config.concurrency for r in conc_points(stub)] == [1, 16, 64, 256]
    for r in sweep.values():
        c = r.config
        assert (c.prompt_len, c.output_len, c.duration_s, c.warmup_requests, c.api) == \
            (128, 128, 20.0, 2, "completions")
        assert c.slo.label == "TTFT <= 2000 ms, TPOT <= 100 ms"
        assert r.server["launch"] in " ".join(PAGE.replace("\\\n", " ").split())
        assert r.server["fixed_length"] == "generation-config"
        assert any("refused ignore-eos (HTTP 422" in n for n in r.server["notes"])
        assert r.token_count == {"prompt": "tokenizer", "output": "usage", "prompt_counted": 128.0}
        assert set(r.output_tokens) == {128} and r.failed() == 0
    for r in stub.values():
        assert r.config.duration_s == 15.0 and r.server["stub"] == {"ttft_ms": 20.0, "itl_ms": 5.0}
    says("each request asks for 128 tokens. The server refused vLLM's `ignore_eos` and "
         "`min_tokens` (HTTP 422), so dlbench sent them as `generation_config`")
    says("every request of every point returned all 128 tokens")
    says("Each load point sent 2 warm-up requests, then requests for 20 s (15 s against the stub)")
    says("a first token after 20 ms, then one every 5 ms")


def test_the_environment_is_the_records(sweep, stub):
    envs = [r.env for r in list(sweep.values()) + list(stub.values())]
    assert len({e["gpus"][0]["uuid"] for e in envs}) == 1
    e = envs[0]
    assert e["gpu_count"] == 1 and e["cpu_logical_cores"] == 16
    g = e["gpus"][0]
    assert g["name"] == "NVIDIA H100 80GB HBM3" and g["power_limit_w"] == 700.0
    says(f"{g['uuid'][:12]}, alone on its host")
    says(f"| driver | {e['driver']} |")
    says(f"| CUDA runtime | {e['cuda_runtime']} |")
    says(f"| torch | {e['packages']['torch']} (transformers {e['packages']['transformers']}) |")
    says(f"{e['cpu_logical_cores']} CPU cores, shared by the server and the client; Python "
         f"{e['python']}; Linux {'.'.join(e['kernel'].split('.')[:2])}")
    [aiohttp] = {r.client["aiohttp"] for r in sweep.values()}
    says(f"(aiohttp {aiohttp}, as its records say)")


def test_the_serving_pins_are_constraints(sweep):
    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    for name in ("fastapi", "starlette", "uvicorn", "openai", "pydantic", "pydantic_core",
                 "accelerate"):
        says(f"{name} {pins[name]}")


# -- the flags the prose says once ---------------------------------------------------------------
def test_every_sweep_figure_carries_the_flags_the_page_says(sweep):
    for label, r in sweep.items():
        flags = H.serve_record_flags(r)
        assert r.completed() < 368 and UNBOUNDED in flags and flags[-1] == "one process"
        if label == "c64":
            assert flags == [f"client behind ({r.late()} of {r.requests} sent > 10 ms late; "
                             f"loop lag p99 {r.client['p99_s'] * 1e3:.1f} ms)",
                             "throttled (power)", UNBOUNDED, "one process"]
        else:
            assert flags == [UNBOUNDED, "one process"]
    says("every p99 TTFT and TPOT of the sweep rests on fewer than 368 requests")
    says("c64's figures also carry `client behind` and `throttled (power)`")


# -- the sweep ----------------------------------------------------------------------------------
def test_where_goodput_breaks(sweep):
    rates = rate_points(sweep)
    first = next(r for r in rates if r.good_fraction()[0] < 1)
    assert first.config.rate == 8 and first.tpot().p50_s > first.config.slo_tpot_s
    assert all(r.good() == r.requests for r in sweep.values()
               if r.config.concurrency is not None or r.config.rate < 8)
    four = sweep["4 req/s"]
    says(f"Goodput breaks between {four.config.rate:g} and {first.config.rate:g} req/s, on TPOT")
    says(f"(4 req/s: {four.good()} of {four.requests}, TPOT p99 {ms(four.tpot().p99_s)} ms)")
    says(f"At 8 req/s the median request's TPOT was {ms(first.tpot().p50_s)} ms, past the "
         f"{first.config.slo_tpot_s * 1e3:g} ms limit, and {first.good()} of {first.requests} "
         f"requests ({first.good_fraction()[0]:.0%}) were within it: goodput "
         f"{H.fmt_num(first.goodput(), 3)} req/s of the {H.fmt_num(first.request_throughput(), 3)}"
         " completed")
    top = sweep["16 req/s"]
    assert top.good() == 0
    says(f"At 16 req/s none of {top.requests} was")
    worst = max(sweep.values(), key=lambda r: r.ttft().p99_s)
    assert worst is top and worst.ttft().p99_s < worst.config.slo_ttft_s / 3
    says(f"(its p99 {ms(worst.ttft().p99_s)} ms at the most, at 16 req/s)")


def test_four_per_second_was_not_steady(sweep):
    def growth(label: str) -> str:
        return ", ".join(str(in_flight(sweep[label], t)) for t in (5, 10, 15))
    a, b, c = (in_flight(sweep["4 req/s"], t) for t in (5, 10, 15))
    assert a < b < c
    says(f"at 4 req/s ({a} at 5 s into the window, {b} at 10 s, {c} at 15 s)")
    says(f"as at 8 req/s ({growth('8 req/s')}) and 16 req/s ({growth('16 req/s')})")
    two = [in_flight(sweep["2 req/s"], t) for t in (5, 10, 15)]
    assert two[2] <= two[1]
    says(f"while at 2 req/s they levelled off ({growth('2 req/s')})")
    says(f"realised {H.fmt_num(sweep['2 req/s'].offered_rate(), 3)} req/s")


def test_random_arrivals_against_lockstep(sweep):
    eight, c64 = sweep["8 req/s"], sweep["c64"]
    two, c16 = sweep["2 req/s"], sweep["c16"]
    for slow, fast in ((eight, c64), (two, c16)):
        assert round(slow.tpot().p50_s / fast.tpot().p50_s) == 3     # "about three times"
        assert mean_in_flight(slow) <= mean_in_flight(fast)
    says(f"8 req/s, with {mean_in_flight(eight):.1f} requests in flight on average, the median "
         f"TPOT was {ms(eight.tpot().p50_s)} ms; at c64, with {mean_in_flight(c64):.1f} in flight, "
         f"{ms(c64.tpot().p50_s)} ms (flagged `client behind` and `throttled (power)`)")
    says(f"At 2 req/s, {mean_in_flight(two):.1f} in flight, {ms(two.tpot().p50_s)} ms; at c16, "
         f"{ms(c16.tpot().p50_s)} ms")
    util = sorted(gpu(r)["mean_util_gpu_pct"] for r in sweep.values())
    says(f"NVML saw the GPU busy {util[0]:.0f}% to {util[-1]:.0f}% of each window")


def test_the_first_round_of_a_concurrency_point(sweep):
    firsts, laters = [], []
    for label in ("c16", "c64"):
        r = sweep[label]
        first = [tpot(r, i) for i in r._ok() if r.sched_s[i] == 0.0]
        later = [tpot(r, i) for i in r._ok() if r.sched_s[i] > 0.0]
        assert len(first) == r.config.concurrency and min(first) > max(later)
        # the point's TPOT p99 lies in its first round
        assert min(first) <= r.tpot().p99_s <= max(first)
        firsts.append(statistics.median(first))
        laters.append(statistics.median(later))
    says(f"took a median TPOT of {firsts[0] * 1e3:.1f} ms at c16 (16 requests) and "
         f"{firsts[1] * 1e3:.1f} ms at c64 (64), the later rounds' {laters[0] * 1e3:.1f} and "
         f"{laters[1] * 1e3:.1f} ms")
    says(f"The TPOT p99 of those points ({ms(sweep['c16'].tpot().p99_s)} and "
         f"{ms(sweep['c64'].tpot().p99_s)} ms) is that first round")


def test_throughput_and_the_window(sweep):
    best = max(sweep.values(), key=lambda r: r.output_tokens_per_s())
    assert best is sweep["c64"] and best.good() == best.requests
    says(f"The most output tokens per second came from c64, "
         f"{H.fmt_num(best.output_tokens_per_s())} (every request within the SLO), and "
         f"{H.fmt_num(sweep['16 req/s'].output_tokens_per_s())} at 16 req/s")
    c1 = sweep["c1"]
    says(f"one stream alone (c1) got {H.fmt_num(c1.output_tokens_per_s())} tok/s, a TPOT p50 of "
         f"{ms(c1.tpot().p50_s)} ms")
    rates = rate_points(sweep)
    assert all(r.request_throughput() < r.offered_rate() for r in rates)
    says(f"as its window holds the drain: {rates[0].window_s:.1f} s at 1 req/s to "
         f"{rates[-1].window_s:.1f} s at 16 req/s for 20 s of arrivals")


def test_energy_per_output_token(sweep):
    c1, c64 = sweep["c1"], sweep["c64"]
    for r in (c1, c64):
        assert r.net_energy_per_output_token_j() < r.energy_per_output_token_j() / 2
    says(f"from {H.fmt_num(c1.energy_per_output_token_j(), 3)} J at c1 to "
         f"{H.fmt_num(c64.energy_per_output_token_j(), 3)} J at c64, most of it the card's idle "
         f"power: net of idle, {H.fmt_num(c1.net_energy_per_output_token_j(), 3)} and "
         f"{H.fmt_num(c64.net_energy_per_output_token_j(), 3)} J")


# -- why c64 is flagged -------------------------------------------------------------------------
def test_why_c64_is_client_behind(sweep, stub):
    ranges, gaps = [], []
    for r in (stub["c64"], sweep["c64"]):
        assert r.client_behind()
        late = [i for i, x in enumerate(r.lateness()) if x > r.config.late_threshold_s]
        # every late request was due at the window's start: the closed loop's opening burst
        assert all(r.sched_s[i] == 0.0 for i in late)
        assert r.late() / r.requests > 0.01 and r.client["p99_s"] < r.config.late_threshold_s
        ranges.append((min(r.lateness()[i] for i in late), max(r.lateness()[i] for i in late)))
        first = sorted(r.start_s[i] for i in range(r.requests) if r.sched_s[i] == 0.0)
        assert len(first) == 64
        gaps.append((first[-1] - first[0]) / (len(first) - 1))
    s, t = stub["c64"], sweep["c64"]
    assert s.late() == t.late()
    says(f"exactly {s.late()} requests were, {s.late()} of {s.requests:,} and {t.late()} of "
         f"{t.requests}")
    says(f"about {gaps[0] * 1e3:.2f} ms (stub) and {gaps[1] * 1e3:.2f} ms (server) a request, so "
         f"the last {s.late()} of those 64 left {ranges[0][0] * 1e3:.1f} to "
         f"{ranges[0][1] * 1e3:.1f} ms and {ranges[1][0] * 1e3:.1f} to {ranges[1][1] * 1e3:.1f} ms "
         "after they were due")
    after = max(x for recs in (sweep, stub) for r in conc_points(recs)
                for x, due in zip(r.lateness(), r.sched_s) if due > 0.0)
    says(f"no request of any concurrency point was sent more than {after * 1e3:.2f} ms late")
    says(f"(p99 {s.client['p99_s'] * 1e3:.2f} and {t.client['p99_s'] * 1e3:.2f} ms)")
    says(f"a {ranges[1][1] * 1e3:.0f} ms ramp at the start")
    assert t.window_s > 20.0
    says(f"the window is at most {ranges[1][1] * 1e3:.0f} ms longer for it, of {t.window_s:.1f} s")
    big = stub["c256"]
    late = [i for i, x in enumerate(big.lateness()) if x > big.config.late_threshold_s]
    assert all(big.sched_s[i] == 0.0 for i in late)
    assert big.client["p99_s"] > big.config.late_threshold_s
    says(f"At c256 the same burst left {big.late()} of the first 256 late, and there the loop "
         f"itself lagged too (p99 {big.client['p99_s'] * 1e3:.1f} ms)")
    rate_late = [(r, r.late()) for r in rate_points(sweep) if r.late()]
    [(r, n)] = rate_late
    assert not r.client_behind()
    says(f"(one of {r.requests} at {r.config.load_label}, {max(r.lateness()) * 1e3:.1f} ms late)")


def test_why_c64_is_throttled(sweep):
    g = gpu(sweep["c64"])
    th = g["throttle"]
    assert th["reasons"] == ["sw_power_cap"] and th["flags"] == ["power"]
    hits = round(th["fractions"]["power"] * th["samples"])
    says(f"NVML reported a software power cap in {hits} of the window's {th['samples']} samples, "
         f"while the card drew at most {g['max_power_w']:.0f} W of its {g['power_limit_w']:.0f} W "
         f"limit and its SM clock averaged {g['mean_sm_clock_mhz']:,.0f} MHz, its maximum")
    assert round(g["mean_sm_clock_mhz"]) == sweep["c64"].env["gpus"][0]["max_sm_clock_mhz"]
    assert [r.config.load_label for r in sweep.values()
            if "throttled (power)" in H.serve_record_flags(r)] == ["c64"]


# -- the client's overhead ----------------------------------------------------------------------
def over(r, name: str, q: int) -> float:
    d = r.ttft() if name == "ttft" else r.itl()
    delay = r.server["stub"][f"{name}_ms"] / 1e3
    return (d.p50_s if q == 50 else d.p99_s) - delay


def test_the_client_overhead(stub):
    c1, c16, c64, c256 = (stub[f"c{n}"] for n in (1, 16, 64, 256))
    assert [H.serve_record_flags(r)[0] for r in (c1, c16)] == [UNBOUNDED, UNBOUNDED]
    assert all(H.serve_record_flags(r)[0].startswith("client behind") for r in (c64, c256))
    assert all(H.serve_record_flags(r)[-1] == "one process" for r in stub.values())
    says(f"The client added {ms(over(c1, 'ttft', 50))}, {ms(over(c16, 'ttft', 50))} and "
         f"{ms(over(c64, 'ttft', 50))} ms to the median TTFT at c1, c16 and c64 (flagged "
         f"`p99 unbounded above` at c1 and c16, `client behind` at c64), and "
         f"{ms(over(c256, 'ttft', 50))} ms at c256 (`client behind`)")
    says("to the median inter-token gap " + ", ".join(ms(over(r, "itl", 50))
                                                       for r in (c1, c16, c64)) +
         f" and {ms(over(c256, 'itl', 50))} ms, up to 256 streams and "
         f"{H.fmt_num(c256.output_tokens_per_s())} tokens per second")
    says(f"the ITL p99 over the stub was {ms(over(c1, 'itl', 99))} ms at c1, "
         f"{ms(over(c64, 'itl', 99))} ms at c64 and {ms(over(c256, 'itl', 99))} ms at c256, the "
         f"loop lag's p99 {ms(c1.client['p99_s'])}, {ms(c64.client['p99_s'])} and "
         f"{ms(c256.client['p99_s'])} ms")


def test_the_overhead_beside_the_sweep(stub, sweep):
    shares, server = [], []
    for n in (1, 16, 64):
        s, t = stub[f"c{n}"], sweep[f"c{n}"]
        shares.append(f"{over(s, 'itl', 50) / t.itl().p50_s:.1%}")
        server.append(ms(t.itl().p50_s))
    says(f"the client's median ITL overhead is {shares[0]}, {shares[1]} and {shares[2]} of the "
         f"server's median ITL at the same concurrency ({server[0]}, {server[1]} and "
         f"{server[2]} ms)")
    best = max(r.output_tokens_per_s() for r in sweep.values())
    says(f"streamed {stub['c64'].output_tokens_per_s() / best:.1f} times the most output tokens "
         f"per second the server gave ({H.fmt_num(best)})")
    lag = max(r.client["p99_s"] for r in sweep.values())
    assert lag < sweep["c1"].config.late_threshold_s
    says(f"the client's loop lag in the sweep stayed at {lag * 1e3:.2f} ms or less at p99")


# -- the charts, the links ----------------------------------------------------------------------
def test_the_charts_are_committed_and_named_by_their_command():
    for img in re.findall(r"\]\((img/[\w.-]+\.png)\)", PAGE):
        assert (ROOT / "docs" / "results" / img).is_file(), img
    assert "img/h100-serve-latency.png" in PAGE and "img/h100-serve-goodput.png" in PAGE
    says(f"python3 benchmarks/serve_charts.py serve.db {H.SERVE_RUN} docs/results/img/h100-serve")
    assert (ROOT / "benchmarks" / "serve_charts.py").is_file()


def test_the_folder_holds_what_the_page_links():
    for name in re.findall(r"results/pt2\.11-cu130-h100-80gb-hbm3/serve/([\w.-]+)\)", PAGE):
        assert (FOLDER / name).is_file(), name


def test_the_serving_guide_quotes_the_h100_overhead(stub):
    doc = " ".join((ROOT / "docs" / "serving.md").read_text().split())
    assert "(results/2026-11-h100-serve.md)" in doc
    worst = max(over(r, "itl", 50) for r in stub.values())
    behind = [r.config.load_label for r in stub.values() if r.client_behind()]
    assert behind == ["c64", "c256"]
    assert (f"the client added at most {ms(worst)} ms to a median inter-token gap up to 256 "
            f"streams, and the points flagged client behind ({behind[0]}, {behind[1]})") in doc

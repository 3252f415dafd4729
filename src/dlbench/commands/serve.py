"""``dlbench serve``: flags -> load points -> (a server started) -> sweep -> tables."""

from __future__ import annotations

import argparse
import json
import sys
import time

from rich.markup import escape

from dlbench import env as envmod
from dlbench.commands.common import (
    COUNT,
    EPILOG,
    EXIT_FAILED_RESULTS,
    EXIT_INTERRUPTED,
    EXIT_OK,
    POSITIVE,
    POSITIVE_REAL,
    SECONDS,
    SECONDS_OR_ZERO,
    SEED,
    add_command,
    add_output_flags,
    add_store_flags,
    check_store,
    csv_list,
    flatten,
    integer,
    one_of,
    real,
    show_tables,
)
from dlbench.config import ConfigError
from dlbench.measure.serving import Slo, parse_slo
from dlbench.records.serve import APIS, FIXED_LENGTH
from dlbench.report import export, terminal
from dlbench.report.table import fmt_num

ORDER = 16

DEFAULT_ENDPOINT = "http://127.0.0.1:8000"

DESCRIPTION = """\
How a served model behaves under load: dlbench sends streamed requests to any OpenAI-compatible
endpoint (vLLM, SGLang, TGI, trtllm-serve, llama.cpp's server, transformers serve) and times
every token as it arrives. Each load point is a fixed number of requests kept in flight
(--concurrency) or requests arriving at random times at a rate (--rate: Poisson arrivals, or
burstier/more regular with --burstiness, the gamma shape vLLM's bench serve uses). Prompts are
synthetic, --prompt-len tokens (exact with the model's tokenizer where this machine has it,
else about a word a token, and the server's usage fields say how many it counted), and every
request asks for --output-len tokens, no fewer where the server takes it (--fixed-length).

Per request: TTFT (sent -> first token), every inter-token gap (ITL), TPOT (time after the
first token over the tokens after it), end to end, tokens in and out, and its error. Per load
point: requests and output tokens per second, goodput (requests per second within --slo;
default MLPerf's Llama-3.1-8B Server limits, TTFT <= 2 s, TPOT <= 100 ms), medians and p99
with 95% intervals, and, where this host has GPUs, their energy per output token.

--launch "CMD" starts the server as you would (its own process group; output to a log), waits
until it answers /health or /v1/models, measures, and stops it, also on Ctrl-C or an error.
--stub measures against dlbench's own instant stub server: what the client itself adds to
TTFT and ITL. A point where the client fell behind its schedule is flagged. Failures (an
unreachable endpoint, HTTP errors, stalls, streams cut short, malformed events) are counted
per request with a one-line reason; the sweep goes on."""

EXAMPLES = """\
examples:
  dlbench serve --endpoint http://127.0.0.1:8000 -m my-model --concurrency 1,4,16,64
  dlbench serve -m my-model --rate 1,2,4,8 --burstiness 0.5 --duration 60
  dlbench serve --launch "vllm serve meta-llama/Llama-3.1-8B-Instruct --port 8000" \\
      --rate 2,4,8,16 --prompt-len 1024 --output-len 128 \\
      --tokenizer meta-llama/Llama-3.1-8B-Instruct
  dlbench serve --launch "transformers serve ./model-dir --port 8000 --continuous-batching" \\
      -m ./model-dir --concurrency 1,8,32
  dlbench serve --stub --concurrency 1,16,64      # the client's own overhead
See docs/serving.md for vLLM, SGLang and transformers serve.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "serve", help="a served model under load: TTFT, TPOT, ITL, goodput",
                    description=DESCRIPTION, epilog=EXAMPLES + "\n" + EPILOG +
                    "\nA load point with failed requests also ends with exit code 3.",
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    where = p.add_argument_group("the server")
    where.add_argument("--endpoint", default=DEFAULT_ENDPOINT, metavar="URL",
                       help=f"the server's base URL (default {DEFAULT_ENDPOINT}; a trailing /v1 "
                            "is fine)")
    where.add_argument("--launch", metavar="CMD",
                       help="start this server command first (a shell command line, listening "
                            "on --endpoint's port), wait until it answers, stop it at the end")
    where.add_argument("--launch-timeout", type=SECONDS, default=600.0, metavar="S",
                       help="seconds the launched server gets to answer (default 600)")
    where.add_argument("--launch-log", metavar="PATH",
                       help="keep the launched server's output in PATH (default: a temporary "
                            "file, removed at the end; its last lines are quoted on an error)")
    where.add_argument("--stub", action="store_true",
                       help="measure against dlbench's own stub server (instant unless "
                            "--stub-ttft-ms/--stub-itl-ms): the client's own overhead")
    where.add_argument("--stub-ttft-ms", type=SECONDS_OR_ZERO, default=0.0, metavar="MS",
                       help="the stub's time to first token (default 0)")
    where.add_argument("--stub-itl-ms", type=SECONDS_OR_ZERO, default=0.0, metavar="MS",
                       help="the stub's gap between tokens (default 0)")
    what = p.add_argument_group("the requests")
    what.add_argument("-m", "--model",
                      help="the model name sent in each request (default: the first the "
                           "server lists at /v1/models)")
    what.add_argument("--api", type=csv_list(one_of(APIS, None, "api")), action="append",
                      help=f"{', '.join(APIS)}: /v1/completions or /v1/chat/completions "
                           "(default completions; a list measures each)")
    what.add_argument("--prompt-len", action="append", type=csv_list(integer(1)),
                      help="prompt tokens per request (default 128)")
    what.add_argument("--output-len", action="append", type=csv_list(integer(2)),
                      help="output tokens per request (default 128)")
    what.add_argument("--tokenizer", metavar="NAME_OR_DIR",
                      help="the tokenizer that counts prompt tokens, on this machine (default: "
                           "the model's, where it is a local directory or cached; nothing is "
                           "downloaded)")
    what.add_argument("--fixed-length", default="auto", type=one_of(FIXED_LENGTH, None,
                                                                     "fixed-length"),
                      help="how no fewer than --output-len tokens are asked for: ignore-eos "
                           "(ignore_eos + min_tokens: vLLM, SGLang), generation-config "
                           "(transformers serve), none (max_tokens only), auto (default: the "
                           "first the server accepts, in that order)")
    what.add_argument("--extra-body", metavar="JSON",
                      help="fields added to every request, e.g. '{\"temperature\": 0}'")
    load = p.add_argument_group("the load")
    load.add_argument("--concurrency", action="append", type=csv_list(integer(1)),
                      help="requests kept in flight, one load point each (e.g. 1,4,16)")
    load.add_argument("--rate", action="append", type=csv_list(POSITIVE_REAL),
                      help="requests per second arriving at random, one load point each "
                           "(e.g. 1,2,4); with --concurrency, both sweeps run (default: "
                           "--concurrency 1)")
    load.add_argument("--burstiness", type=real(0, low_open=True), default=1.0,
                      help="shape of the gamma gaps between arrivals: 1 Poisson (default), "
                           "below 1 burstier, above 1 more regular")
    load.add_argument("--num-requests", type=POSITIVE, metavar="N",
                      help="measured requests per point (default: 10 x concurrency, or 30 s "
                           "of arrivals; at least 50)")
    load.add_argument("--duration", type=SECONDS, metavar="S",
                      help="send requests for S seconds per point instead of --num-requests")
    load.add_argument("--warmup", type=COUNT, default=2,
                      help="requests before each point's window, not measured (default 2)")
    load.add_argument("--seed", type=SEED, default=0,
                      help="seed of the arrival times (prompts are fresh for every point and "
                           "run: no prefix cache can answer them)")
    load.add_argument("--repeat", type=POSITIVE, default=1, metavar="N",
                      help="measure each point N times in a row (a repeat group: 'compare' "
                           "judges serve results across their repeats)")
    judge = p.add_argument_group("limits and telemetry")
    judge.add_argument("--slo", type=_slo, default=Slo(), metavar="LIMITS",
                       help="the limits goodput counts against: ttft=2000ms,tpot=100ms "
                            "(default, MLPerf's Llama-3.1-8B Server), e2e=30s, or none")
    judge.add_argument("--request-timeout", type=SECONDS, default=600.0, metavar="S",
                       help="a request still running after S seconds fails (default 600)")
    judge.add_argument("--stall-timeout", type=SECONDS, default=120.0, metavar="S",
                       help="a stream silent for S seconds fails (default 120)")
    judge.add_argument("--late-threshold", type=SECONDS, default=0.010, metavar="S",
                       help="a request sent more than S seconds after it was due is late; a "
                            "point with more than 1%% late is flagged (default 0.01)")
    judge.add_argument("--telemetry-interval", type=SECONDS_OR_ZERO, default=0.1,
                       help="seconds between GPU power samples where this host has GPUs "
                            "(0: off; default 0.1)")
    add_store_flags(p)
    p.add_argument("--tag", help="label this run, to find and compare it later")
    p.add_argument("--resume", action="store_true",
                   help="skip load points this environment already measured in --db")
    add_output_flags(p, "print this run's records as JSON on stdout (raw per-request samples)",
                     "no progress lines; tables without titles and notes")
    p.set_defaults(handler=cmd_serve)


def _slo(text: str) -> Slo:
    try:
        return parse_slo(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _extra_body(text: str | None) -> dict | None:
    if not text:
        return None
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"--extra-body must be a JSON object: {exc}") from None
    if not isinstance(body, dict):
        raise ConfigError("--extra-body must be a JSON object, e.g. '{\"temperature\": 0}'")
    return body


def cmd_serve(args: argparse.Namespace) -> int:
    if args.num_requests is not None and args.duration is not None:
        raise ConfigError("give --num-requests or --duration, not both")
    if args.stub and args.launch:
        raise ConfigError("--stub starts dlbench's stub server; --launch starts yours: one")
    if (args.stub_ttft_ms or args.stub_itl_ms) and not args.stub:
        raise ConfigError("--stub-ttft-ms and --stub-itl-ms set dlbench's stub server: add --stub")
    try:
        from dlbench.jobs import serve_runs as jobs  # heavy: aiohttp (the serve extra)
        from dlbench.workloads.serve.client import require_aiohttp  # heavy: aiohttp
        require_aiohttp()
    except ImportError as exc:
        raise ConfigError(str(exc)) from None
    configs = jobs.plan(
        model=args.model or ("stub" if args.stub else ""), apis=flatten(args.api, ["completions"]),
        concurrencies=flatten(args.concurrency, []), rates=flatten(args.rate, []),
        prompt_lens=flatten(args.prompt_len, [128]), output_lens=flatten(args.output_len, [128]),
        num_requests=args.num_requests, duration_s=args.duration, burstiness=args.burstiness,
        slo=args.slo, warmup_requests=args.warmup, seed=args.seed,
        fixed_length=args.fixed_length, extra_body=_extra_body(args.extra_body),
        request_timeout_s=args.request_timeout, stall_timeout_s=args.stall_timeout,
        late_threshold_s=args.late_threshold,
        telemetry_interval_s=args.telemetry_interval or None, endpoint=args.endpoint)
    check_store(args.db)
    tok = jobs.named_tokenizer(args.tokenizer) if args.tokenizer else None
    env = envmod.capture_environment()
    label = envmod.device_label(env)
    if not args.quiet:
        server = ("dlbench's stub" if args.stub else
                  f"{escape(args.launch)} (launched)" if args.launch else escape(args.endpoint))
        terminal.stderr.print(
            f"[bold]dlbench serve[/bold] {len(configs)} load point(s)"
            + (f", each {args.repeat} times" if args.repeat > 1 else "")
            + f" against {server}; client on {escape(label)}; results -> {escape(args.db)}")
    stub = jobs.Stub(args.stub_ttft_ms, args.stub_itl_ms) if args.stub else None
    t0 = time.perf_counter()
    outcome, served = jobs.run_serve(
        configs, args.db, args.command_line, env, launch=args.launch, stub=stub,
        launch_timeout_s=args.launch_timeout, launch_log=args.launch_log,
        tokenizer=args.tokenizer, tokenizer_obj=tok, tag=args.tag, resume=args.resume,
        repeat=args.repeat,
        progress=None if args.quiet else ServeProgress(),
        on_ready=None if args.quiet else _ready)
    if args.json:
        sys.stdout.write(export.to_json(outcome.records) + "\n")
    else:
        show_tables(outcome.records, "serve", label, args.quiet)
    if outcome.message:
        terminal.error(outcome.message)
    terminal.stderr.print(
        f"wall time {time.perf_counter() - t0:.1f} s; {len(outcome.records)} load point(s) "
        f"stored in {escape(args.db)} (run {outcome.run_id}); prompts counted with "
        f"{escape(served.tokenizer)}"
        + (f", {outcome.skipped} skipped by --resume" if outcome.skipped else ""))
    if outcome.status == "interrupted":
        return EXIT_INTERRUPTED
    failed = any(not r.ok or r.failed() for r in outcome.records)
    return EXIT_FAILED_RESULTS if failed else EXIT_OK


def _ready(endpoint: str, model: str, info: dict) -> None:
    ready = info.get("ready_s")
    terminal.stderr.print(
        f"server at {escape(endpoint)}" + (f" answered after {ready:.1f} s" if ready else "")
        + f"; model {escape(model)}", highlight=False)


class ServeProgress(terminal.RichProgress):
    """The sweep's bar, and a line per load point in the figures of serving."""

    def done(self, record) -> None:
        label = record.config.label
        if getattr(record, "repeat_group", None) is not None:
            label += f" (repeat {record.repeat_index + 1} of {record.repeat_count})"
        if not record.ok:
            first = (record.error or "").splitlines()[0][:200] if record.error else ""
            text = "[red]✗[/red] " + escape(f"{label}: {first}")
        else:
            ttft, tpot = record.ttft(), record.tpot()
            frac = record.good_fraction()
            failed = (f", [red]{record.failed()} of {record.requests} failed[/red]"
                      if record.failed() else "")
            behind = ", [yellow]client behind[/yellow]" if record.client_behind() else ""
            text = (f"[green]✓[/green] {escape(label)}: {fmt_num(record.output_tokens_per_s())} "
                    f"out tok/s, {fmt_num(record.request_throughput(), 3)} req/s, TTFT p50 "
                    f"{ttft.p50_s * 1e3:.1f} ms p99 {ttft.p99_s * 1e3:.1f} ms"
                    + (f", TPOT p50 {tpot.p50_s * 1e3:.2f} ms" if tpot else "")
                    + (f", goodput {fmt_num(record.goodput(), 3)} req/s ({frac[0]:.0%})"
                       if frac else "") + failed + behind)
        self._progress.console.print(text, highlight=False)
        self._progress.advance(self._task)

"""The ``serve`` kind: one load point against an OpenAI-compatible streaming endpoint.

A load point is a fixed number of requests in flight (``--concurrency N``) or requests arriving
at random times at a given rate (``--rate R``, gamma-distributed gaps of shape
``--burstiness``), each a synthetic prompt of ``prompt_len`` tokens asking for ``output_len``
tokens, streamed (server-sent events). The record keeps, for every measured request, when it
was due and when it was sent, its time to first token, every gap between streamed tokens, its
end-to-end time, its token counts and its error (None when it completed), so every figure is
computed from raw samples (:mod:`dlbench.measure.serving` defines them). Warm-up requests are
counted apart. Times are in seconds, offsets from the window's start (the first measured
request's due time).
"""

from __future__ import annotations

import collections
import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, ClassVar

from dlbench.config import ConfigError, choice
from dlbench.measure import serving as sv
from dlbench.records.base import Record, asdict, known_fields

#: The OpenAI-compatible APIs (``--api``): ``/v1/completions`` and ``/v1/chat/completions``.
APIS = ("completions", "chat")
#: How a fixed output length is asked for (``--fixed-length``): ``ignore-eos`` sends vLLM's and
#: SGLang's ``ignore_eos`` and ``min_tokens``; ``generation-config`` sends ``transformers
#: serve``'s ``generation_config`` (max and min new tokens); ``none`` sends ``max_tokens`` alone
#: (outputs may end early at an end-of-sequence token); ``auto`` tries them in that order and
#: keeps the first the server accepts.
FIXED_LENGTH = ("auto", "ignore-eos", "generation-config", "none")
#: A load point where more than this fraction of requests were sent late is flagged.
LATE_FRACTION = 0.01


@dataclass(frozen=True)
class ServeConfig:
    """One load point.

    Attributes:
        model: the model name sent in every request (``--model``; by default the first of the
            server's ``/v1/models``).
        api: ``completions`` or ``chat`` (``--api``).
        concurrency: requests kept in flight (``--concurrency``); None for a rate point.
        rate: requests per second arriving at random (``--rate``); None for a concurrency point.
        burstiness: shape of the gamma distribution of the gaps between arrivals
            (``--burstiness``; 1: Poisson; below 1 burstier, above 1 more regular).
        prompt_len: prompt tokens of each request (``--prompt-len``): exact with the model's
            tokenizer, else approximate (one word a token) and read back from the server's usage.
        output_len: tokens asked for (``--output-len``; ``max_tokens``, and a minimum where
            ``fixed_length`` allows it).
        num_requests: measured requests (``--num-requests``); None with ``duration_s``.
        duration_s: send requests for this many seconds (``--duration``); None with
            ``num_requests``.
        warmup_requests: requests sent before the window, not measured (``--warmup``).
        seed: seed of the arrival times (the prompts are drawn afresh for every point and run,
            so that no server's prefix cache can answer one with another's).
        fixed_length: how a fixed output length is asked for (:data:`FIXED_LENGTH`).
        extra_body: fields added to every request (``--extra-body``; e.g. a temperature).
        slo_ttft_s, slo_tpot_s, slo_e2e_s: the limits goodput counts against (``--slo``);
            None: no limit. Not part of the identity: they change a figure, not the measurement.
        request_timeout_s: a request still running after this is failed (``--request-timeout``).
        stall_timeout_s: a stream silent for this long is failed (``--stall-timeout``).
        late_threshold_s: a request sent later than its due time by more than this is late
            (``--late-threshold``); a point with more than 1% late requests is flagged.
        telemetry_interval_s: seconds between GPU telemetry samples where this host has GPUs;
            None switches it off.
        endpoint: the server's base URL (``--endpoint``); not part of the identity, so that two
            servers of the same model can be compared.
        tokenizer: the tokenizer the prompts were counted with (``--tokenizer``); None: none.
    """

    model: str
    api: str = "completions"
    concurrency: int | None = None
    rate: float | None = None
    burstiness: float = 1.0
    prompt_len: int = 128
    output_len: int = 128
    num_requests: int | None = 100
    duration_s: float | None = None
    warmup_requests: int = 2
    seed: int = 0
    fixed_length: str = "auto"
    extra_body: dict[str, Any] | None = None
    slo_ttft_s: float | None = sv.MLPERF_LLAMA31_8B_SERVER["ttft"]
    slo_tpot_s: float | None = sv.MLPERF_LLAMA31_8B_SERVER["tpot"]
    slo_e2e_s: float | None = None
    request_timeout_s: float = 600.0
    stall_timeout_s: float = 120.0
    late_threshold_s: float = 0.010
    telemetry_interval_s: float | None = 0.1
    endpoint: str = "http://127.0.0.1:8000"
    tokenizer: str | None = None

    framework: ClassVar[str] = "serve"
    mode: ClassVar[str] = "serve"

    def __post_init__(self) -> None:
        choice("api", self.api, APIS)
        choice("fixed_length", self.fixed_length, FIXED_LENGTH)
        if (self.concurrency is None) == (self.rate is None):
            raise ConfigError("a load point is concurrency=N or rate=R, one of them")
        if self.concurrency is not None and self.concurrency < 1:
            raise ConfigError(f"concurrency must be >= 1, got {self.concurrency}", "concurrency")
        if self.rate is not None and not (self.rate > 0 and math.isfinite(self.rate)):
            raise ConfigError(f"rate must be a finite number > 0 requests/s, got {self.rate} "
                              "(all requests at once: concurrency=N, num_requests=N)", "rate")
        if not self.burstiness > 0:
            raise ConfigError(f"burstiness must be > 0, got {self.burstiness}", "burstiness")
        if self.prompt_len < 1:
            raise ConfigError(f"prompt_len must be >= 1 token, got {self.prompt_len}",
                              "prompt_len")
        if self.output_len < 2:
            raise ConfigError(f"output_len must be >= 2 tokens (TPOT needs a second one), "
                              f"got {self.output_len}", "output_len")
        if (self.num_requests is None) == (self.duration_s is None):
            raise ConfigError("a load point runs num_requests=N or duration_s=S, one of them")
        if self.num_requests is not None and self.num_requests < 1:
            raise ConfigError(f"num_requests must be >= 1, got {self.num_requests}",
                              "num_requests")
        if self.duration_s is not None and not self.duration_s > 0:
            raise ConfigError(f"duration_s must be > 0 s, got {self.duration_s}", "duration_s")
        if self.warmup_requests < 0:
            raise ConfigError(f"warmup_requests must be >= 0 requests, got "
                              f"{self.warmup_requests}", "warmup_requests")
        for name in ("request_timeout_s", "stall_timeout_s", "late_threshold_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0 s, got {getattr(self, name)}", name)
        if self.telemetry_interval_s is not None and not self.telemetry_interval_s > 0:
            raise ConfigError(f"telemetry_interval_s must be > 0 s (None switches telemetry "
                              f"off); got {self.telemetry_interval_s}", "telemetry_interval_s")

    #: What may differ between two records of the same load point.
    _NOT_IDENTITY = ("warmup_requests", "slo_ttft_s", "slo_tpot_s", "slo_e2e_s",
                     "request_timeout_s", "stall_timeout_s", "late_threshold_s",
                     "telemetry_interval_s", "endpoint", "tokenizer")

    def _identity(self) -> dict[str, Any]:
        ident = {k: v for k, v in self.to_dict().items() if k not in self._NOT_IDENTITY}
        if not self.extra_body:
            ident.pop("extra_body")
        return ident

    def key(self) -> str:
        return hashlib.sha256(b"serve" + json.dumps(self._identity(), sort_keys=True).encode()
                              ).hexdigest()[:16]

    def setup_key(self) -> str:
        """The identity without the load: the points of one sweep (its curve)."""
        ident = {k: v for k, v in self._identity().items()
                 if k not in ("concurrency", "rate", "num_requests", "duration_s")}
        return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ServeConfig":
        known = known_fields(cls)
        return cls(**{k: v for k, v in d.items() if k in known})

    @property
    def slo(self) -> sv.Slo:
        return sv.Slo(self.slo_ttft_s, self.slo_tpot_s, self.slo_e2e_s)

    @property
    def load_label(self) -> str:
        """``c16`` or ``4 req/s`` (``, burst 0.5`` where the gaps are not Poisson)."""
        if self.concurrency is not None:
            return f"c{self.concurrency}"
        burst = f" burst {self.burstiness:g}" if self.burstiness != 1.0 else ""
        return f"{self.rate:g} req/s{burst}"

    @property
    def tokens_label(self) -> str:
        return f"{self.prompt_len}+{self.output_len}"

    @property
    def label(self) -> str:
        """``llama-3.2-1b completions c16 128+128``."""
        return f"{self.model} {self.api} {self.load_label} {self.tokens_label}"


def _r(x: float | None) -> float | None:
    """Times kept to 0.1 microsecond: finer than any clock a figure rests on, and half the JSON."""
    return None if x is None else round(x, 7)


@dataclass(frozen=True, kw_only=True)
class ServeRecord(Record):
    """One load point (or its failure). Every tuple of per-request samples holds one entry per
    measured request, in the order requests were due."""

    config_type: ClassVar[type] = ServeConfig
    kind: ClassVar[str] = "serve"

    sched_s: tuple[float, ...] = ()                 # when each request was due
    start_s: tuple[float, ...] = ()                 # when it was sent
    done_s: tuple[float, ...] = ()                  # when it ended (last byte, or its failure)
    ttft_s: tuple[float | None, ...] = ()           # sent -> first event with text
    itl_s: tuple[tuple[float, ...], ...] = ()       # gaps between events with text
    e2e_s: tuple[float | None, ...] = ()            # sent -> last event with text
    prompt_tokens: tuple[int | None, ...] = ()      # the server's usage, else as counted here
    output_tokens: tuple[int | None, ...] = ()      # usage, else counted (see token_count)
    errors: tuple[str | None, ...] = ()             # one line per failed request, else None
    window_s: float | None = None                   # window start -> the last request's end
    # how tokens were counted: {"prompt": "tokenizer"|"words", "output": "usage"|"tokenizer"|
    # "events", "prompt_counted": mean prompt tokens as counted here}
    token_count: dict[str, Any] | None = None
    warmup: dict[str, Any] | None = None            # {"requests", "ok", "wall_s", "errors"}
    # the client: event-loop lag while measuring {"ticks", "p50_s", "p99_s", "max_s"},
    # its library versions
    client: dict[str, Any] | None = None
    # the server: endpoint, how it was started, /v1/models, the fixed-length fields it took,
    # the stub's delays when it is dlbench's own stub, notes
    server: dict[str, Any] | None = None
    telemetry: dict[str, Any] | None = None

    @classmethod
    def _decode(cls, name: str, value: Any) -> Any:
        if name in ("token_count", "warmup", "client", "server", "telemetry"):
            return value
        return super()._decode(name, value)

    @classmethod
    def rounded(cls, **kw: Any) -> "ServeRecord":
        """A record with its times kept to 0.1 microsecond."""
        for name in ("sched_s", "start_s", "done_s", "ttft_s", "e2e_s"):
            if name in kw:
                kw[name] = tuple(_r(x) for x in kw[name])
        if "itl_s" in kw:
            kw["itl_s"] = tuple(tuple(_r(x) for x in gaps) for gaps in kw["itl_s"])
        if kw.get("window_s") is not None:
            kw["window_s"] = _r(kw["window_s"])
        return cls(**kw)

    # -- the requests -------------------------------------------------------------------------
    @property
    def requests(self) -> int:
        return len(self.errors)

    def _ok(self) -> list[int]:
        return [i for i, e in enumerate(self.errors) if e is None and self.ttft_s[i] is not None]

    def completed(self) -> int:
        return len(self._ok())

    def failed(self) -> int:
        return self.requests - self.completed()

    def failure_reasons(self) -> list[tuple[str, int]]:
        """Each distinct failure reason with its count, most frequent first."""
        return collections.Counter(e for e in self.errors if e is not None).most_common()

    def request_tpots(self) -> list[float]:
        """Each completed request's TPOT (requests of two or more output tokens)."""
        out = []
        for i in self._ok():
            t = sv.request_tpot(self.e2e_s[i], self.ttft_s[i], self.output_tokens[i])
            if t is not None:
                out.append(t)
        return out

    def itl_samples(self) -> list[float]:
        return [g for i in self._ok() for g in self.itl_s[i]]

    def ttft_samples(self) -> list[float]:
        return [self.ttft_s[i] for i in self._ok()]

    def e2e_samples(self) -> list[float]:
        return [self.e2e_s[i] for i in self._ok()]

    # -- distributions ------------------------------------------------------------------------
    def ttft(self) -> sv.Distribution | None:
        return sv.distribution(self.ttft_samples())

    def tpot(self) -> sv.Distribution | None:
        return sv.distribution(self.request_tpots())

    def itl(self) -> sv.Distribution | None:
        return sv.distribution(self.itl_samples())

    def e2e(self) -> sv.Distribution | None:
        return sv.distribution(self.e2e_samples())

    # -- throughput ---------------------------------------------------------------------------
    def output_token_total(self) -> int:
        return sum(self.output_tokens[i] or 0 for i in self._ok())

    def prompt_token_total(self) -> int:
        return sum(self.prompt_tokens[i] or 0 for i in self._ok())

    def _per_s(self, x: float) -> float | None:
        return x / self.window_s if self.window_s and self.completed() else None

    def request_throughput(self) -> float | None:
        """Completed requests over the window."""
        return self._per_s(self.completed())

    def output_tokens_per_s(self) -> float | None:
        """Output tokens of the completed requests over the window."""
        return self._per_s(self.output_token_total())

    def total_tokens_per_s(self) -> float | None:
        """Prompt and output tokens of the completed requests over the window."""
        return self._per_s(self.output_token_total() + self.prompt_token_total())

    def offered_rate(self) -> float | None:
        """Requests per second the schedule asked for (a rate point's realised arrival rate)."""
        if len(self.sched_s) < 2 or self.sched_s[-1] <= self.sched_s[0]:
            return None
        return (len(self.sched_s) - 1) / (self.sched_s[-1] - self.sched_s[0])

    def headline(self) -> float | None:
        """Output tokens per second, the figure the store indexes."""
        return self.output_tokens_per_s() if self.ok else None

    # -- service-level objectives -------------------------------------------------------------
    def good(self) -> int:
        """Completed requests that met every limit of the config's SLO."""
        slo = self.config.slo
        n = 0
        for i in self._ok():
            tpot = sv.request_tpot(self.e2e_s[i], self.ttft_s[i], self.output_tokens[i])
            n += slo.meets(self.ttft_s[i], tpot, self.e2e_s[i])
        return n

    def goodput(self) -> float | None:
        """Requests per second that completed within the SLO."""
        return self._per_s(self.good()) if self.window_s else None

    def good_fraction(self) -> tuple[float, float, float] | None:
        """The fraction of measured requests (failures included) within the SLO, with its
        Wilson interval."""
        if not self.requests:
            return None
        k = self.good()
        lo, hi = sv.wilson(k, self.requests)
        return k / self.requests, lo, hi

    def slo_at_p99(self) -> bool | None:
        """Whether the p99 TTFT and p99 TPOT are within their limits, as MLPerf's Server
        scenario judges a run (a figure without a limit is not judged); None without figures."""
        slo = self.config.slo
        ttft, tpot = self.ttft(), self.tpot()
        if ttft is None:
            return None
        ok = slo.ttft_s is None or ttft.p99_s <= slo.ttft_s
        if slo.tpot_s is not None and tpot is not None:
            ok = ok and tpot.p99_s <= slo.tpot_s
        return ok and self.failed() == 0

    # -- the client ---------------------------------------------------------------------------
    def lateness(self) -> list[float]:
        """How late each request was sent after it was due (seconds)."""
        return [b - a for a, b in zip(self.sched_s, self.start_s)]

    def late(self) -> int:
        return sv.late_count(self.sched_s, self.start_s, self.config.late_threshold_s)

    def client_behind(self) -> bool:
        """The client fell behind its schedule: more than 1% of the requests were sent later
        than ``late_threshold_s`` after they were due, or its event loop lagged that much at
        the 99th percentile."""
        lag = (self.client or {}).get("p99_s")
        return (self.requests > 0 and self.late() / self.requests > LATE_FRACTION) or \
            (lag is not None and lag > self.config.late_threshold_s)

    def short_outputs(self) -> int:
        """Completed requests that returned fewer tokens than asked for (an end-of-sequence
        token the server was not told to ignore)."""
        return sum(1 for i in self._ok()
                   if self.output_tokens[i] is not None
                   and self.output_tokens[i] < self.config.output_len)

    # -- energy -------------------------------------------------------------------------------
    def _energy(self) -> dict[str, Any]:
        return ((self.telemetry or {}).get("summary") or {}).get("total") or {}

    def energy_per_output_token_j(self) -> float | None:
        """GPU energy over the window over its output tokens (the host's GPUs, summed)."""
        return self._energy().get("j_per_sample")

    def net_energy_per_output_token_j(self) -> float | None:
        return self._energy().get("net_j_per_sample")

    def mean_power_w(self) -> float | None:
        return self._energy().get("mean_power_w")

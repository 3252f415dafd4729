"""Comparing two sets of results of any kind: pure functions, no I/O.

Records are matched by kind and config key (same model, batch, precision, GPUs, op, size, ...).
Each pair is judged on the kind's figure, in the direction where larger is better:

=========== ==================== ========================================== =================
kind        figure               test where raw samples exist               else
=========== ==================== ========================================== =================
throughput  samples/s            Welch's t on the step times (a repeat      the intervals
                                 group: on its process figures)
scaling     samples/s            Welch's t on the slowest rank's step times the intervals
net         samples/s            Welch's t on the slowest rank's step times the intervals
comm        bus bandwidth        Welch's t on the iteration times (mean
                                 over ranks per iteration)
peak        median rate          Welch's t on the iteration times
train       1 / time to train    Welch's t on the seeds' times to train     one run a side:
                                 (two or more converged seeds a side)       no test
train       samples/s, epochs 2+ Welch's t on the epoch times, seeds pooled
maxbatch    largest batch        none: the search brackets the boundary     the brackets
generate    output tokens/s      Welch's t on the requests' times
generate    1 / TPOT mean        Welch's t on the decode steps' times
serve       output tokens/s      Welch's t on the requests' end-to-end times
serve       1 / TTFT mean        Welch's t on the requests' TTFTs
serve       1 / TPOT mean        Welch's t on the requests' TPOTs
=========== ==================== ========================================== =================

- **ratio** = figure B / figure A (for time to train and TPOT, time A / time B): below 1 is
  worse.
- **its interval**: from the two sides' relative half-widths, combined on the log scale:
  ``ratio * exp(+-sqrt(ln(1+rA)^2 + ln(1+rB)^2))``; unbounded when a side has none. When the two
  figures come from different physical cards of one GPU model, the card-to-card spread measured
  across cards (:mod:`dlbench.report.cards`) is added in quadrature: within-process samples
  cannot see how much one card differs from another.
- **significance**: Welch's t-test (unequal variances, Welch-Satterthwaite df), two-sided; across
  cards, the pair is significant only if its widened interval also excludes 1. Without raw
  samples: significant when the interval excludes 1 (maxbatch: when the brackets are disjoint).
- A **regression** is significant and worse than ``1 - threshold``.

Which test may judge a pair depends on how many fresh processes stand behind each side (the
step-timed kinds: throughput, generate, scaling, net, comm, peak). Welch's t on two windows'
raw step times takes every step for an independent sample (they are autocorrelated) and sees no
run-to-run variance: two processes of identical code differ by more than their within-window
intervals (warm-up, clocks, allocator, placement, autotuning), and that test once called
identical code a 0.834x regression at p ~ 1e-19. So:

- **across processes**: both sides a ``--repeat`` group of two or more ok processes: Welch's t
  on the process figures (their spread is the run-to-run variance).
- **run-to-run spread**: one side or both measured in one process: the interval is widened, in
  quadrature, by the run-to-run spread: ``t * sd * sqrt(k)`` for ``k`` one-process sides, ``sd``
  the relative standard deviation of one process's figure across fresh processes. It is the
  stored spread of the device and kind (``dlbench/reference/run_spread.json``, derived from the
  committed stores' repeat groups by ``benchmarks/run_spread.py``) or, where one side is a
  group, that group's own. The pair is significant only when the widened interval excludes 1
  (and, both sides one process, Welch's p < alpha).
- **inconclusive**: one process a side and no spread known for the device and kind, or a
  one-process side whose own window is wider (interval above 1%) than those the stored spread
  was derived from, so the spread does not describe it: no test;
  the verdict says so and asks for ``--repeat 3`` on both sides. Never a regression.

Training (its seeds are its runs) and the largest batch (a bracket, not a timed figure) keep
their tests.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any, Callable, Mapping, Sequence

from dlbench import env as envmod
from dlbench.measure.stats import across_processes, interval, mean, stdev, t_cdf, t_quantile
from dlbench.records.base import repeat_groups
from dlbench.report import cards
from dlbench.report.table import Table, fmt_num

DEFAULT_THRESHOLD = 0.05
DEFAULT_ALPHA = 0.05


@dataclass(frozen=True)
class Welch:
    """Welch's t-test of two samples: statistic, Welch-Satterthwaite df, two-sided p-value."""

    t: float
    df: float
    p: float


def welch_t(a: Sequence[float], b: Sequence[float]) -> Welch:
    """Welch's unequal-variance t-test of mean(a) against mean(b), two-sided.

    ``t = (mean_a - mean_b) / sqrt(va/na + vb/nb)`` with sample variances; ``df`` from the
    Welch-Satterthwaite equation. When both samples have zero variance the test is degenerate:
    p = 1 for equal means, 0 otherwise (t = +-inf).
    """
    na, nb = len(a), len(b)
    if na < 2 or nb < 2:
        raise ValueError(f"Welch's t needs at least two values per sample, got {na} and {nb}")
    ma, mb = mean(a), mean(b)
    va = math.fsum((x - ma) ** 2 for x in a) / (na - 1)
    vb = math.fsum((x - mb) ** 2 for x in b) / (nb - 1)
    sa, sb = va / na, vb / nb
    se2 = sa + sb
    if se2 == 0.0:
        if ma == mb:
            return Welch(0.0, float(na + nb - 2), 1.0)
        return Welch(math.copysign(math.inf, ma - mb), float(na + nb - 2), 0.0)
    t = (ma - mb) / math.sqrt(se2)
    df = se2 ** 2 / ((sa ** 2 / (na - 1) if sa else 0.0) + (sb ** 2 / (nb - 1) if sb else 0.0))
    p = 2.0 * t_cdf(-abs(t), df)
    return Welch(t, df, min(1.0, max(0.0, p)))


def ratio_interval(ratio: float, rel_a: float, rel_b: float,
                   rel_cards: float = 0.0, rel_runs: float = 0.0) -> tuple[float, float]:
    """Interval of a ratio from the two sides' relative half-widths (log scale, in quadrature),
    plus ``rel_cards``, the relative spread between two cards, where they differ, and
    ``rel_runs``, the run-to-run half-width of sides measured in one process."""
    if not (math.isfinite(rel_a) and math.isfinite(rel_b)):
        return 0.0, math.inf
    w = math.sqrt(math.log1p(rel_a) ** 2 + math.log1p(rel_b) ** 2 + math.log1p(rel_cards) ** 2
                  + math.log1p(rel_runs) ** 2)
    return ratio * math.exp(-w), ratio * math.exp(w)


# -- what each kind offers a comparison ---------------------------------------------------------
@dataclass(frozen=True)
class Side:
    """One side of a pair: its figure, relative half-width, and raw samples (times, where smaller
    is better; None where there are none), with what the figure is."""

    figure: float
    rel_halfwidth: float
    samples: tuple[float, ...] | None
    unit: str
    ids: tuple[str, ...]
    records: tuple[Any, ...]
    low: float | None = None     # maxbatch: the bracket [best batch, first OOM batch)
    high: float | None = None
    processes: int = 1           # fresh processes behind the figure (a --repeat group's ok ones)


def _step_side(r: Any) -> Side | None:
    s = r.summary()
    if s is None or len(r.step_times_s if r.kind != "net" else _slowest(r)) < 2:
        return None
    times = tuple(r.step_times_s) if r.kind != "net" else _slowest(r)
    return Side(s.throughput, s.rel_halfwidth, times, "samples/s", (r.id,), (r,))


#: The unit of a generate record's second figure: 1 / mean time per output token, so that, as
#: everywhere here, larger is better; shown as the TPOT itself (ms).
TPOT = "1/TPOT"
#: The match-key suffix of a generate config's TPOT figure.
TPOT_KEY = ":tpot"


def _generate_side(r: Any) -> Side | None:
    """Output tokens per second, tested on the requests' end-to-end times."""
    side = _step_side(r)
    return None if side is None else replace(side, unit="output tok/s")


def _tpot_side(r: Any) -> Side | None:
    """1 / mean TPOT, tested on every measured decode step's time."""
    times = tuple(r.decode_times()) if r.ok else ()
    if len(times) < 2:
        return None
    return Side(1.0 / mean(times), _rel_halfwidth(times), times, TPOT, (r.id,), (r,))


#: The unit of a serve record's TTFT figure (1 / mean TTFT: larger is better), and its key suffix.
TTFT = "1/TTFT"
TTFT_KEY = ":ttft"


def _serve_side(r: Any) -> Side | None:
    """A load point's output tokens per second, tested on its requests' end-to-end times."""
    times = tuple(r.e2e_samples()) if r.ok else ()
    if len(times) < 2 or not r.output_tokens_per_s():
        return None
    return Side(r.output_tokens_per_s(), _rel_halfwidth(times), times, "output tok/s", (r.id,),
                (r,))


def _serve_latency_side(r: Any, unit: str) -> Side | None:
    """1 / mean TTFT or TPOT of a load point, tested on its requests' values."""
    times = tuple(r.ttft_samples() if unit == TTFT else r.request_tpots()) if r.ok else ()
    if len(times) < 2 or not mean(times) > 0:
        return None
    return Side(1.0 / mean(times), _rel_halfwidth(times), times, unit, (r.id,), (r,))


def _slowest(r: Any) -> tuple[float, ...]:
    return tuple(max(r.rank_step_times_s, key=math.fsum)) if r.rank_step_times_s else ()


def _comm_side(r: Any) -> Side | None:
    b = r.busbw()
    if b is None or not r.ok or not r.rank_times_s:
        return None
    per_iter = tuple(mean(col) for col in zip(*r.rank_times_s))
    if len(per_iter) < 2:
        return None
    rel = _rel_halfwidth(per_iter)
    return Side(b / 1e9, rel, per_iter, "GB/s busbw", (r.id,), (r,))


def _peak_side(r: Any) -> Side | None:
    m = r.median()
    if m is None or len(r.times_s) < 2:
        return None
    return Side(m, _rel_halfwidth(r.times_s), tuple(r.times_s), r.unit, (r.id,), (r,))


def _rel_halfwidth(times: Sequence[float], confidence: float = 0.95) -> float:
    """The interval of the mean time over the mean (the same interval as a step window's, which
    allows for correlated iterations)."""
    m = mean(times)
    return interval(times, confidence).halfwidth / m if m > 0 else math.inf


def _group_side(recs: Sequence[Any],
                one: Callable[[Any], Side | None] | None = None) -> Side | None:
    """The processes of one repeat group (``--repeat N``): the mean of the process figures, its
    interval across processes, and the process figures as the samples (Welch's t on them: the
    run-to-run variance one process cannot show). ``one`` makes a process's side (default: its
    kind's headline figure)."""
    one = one or _ONE[recs[-1].kind]
    per = [s for s in (one(r) for r in recs if r.ok) if s is not None]
    if len(per) < 2:
        return one(recs[-1]) if recs[-1].ok else None
    figures = tuple(s.figure for s in per)
    m, h = across_processes(figures)
    return Side(m, h / m, figures, per[0].unit, tuple(s.ids[0] for s in per),
                tuple(s.records[0] for s in per), processes=len(per))


def _maxbatch_side(r: Any) -> Side | None:
    if not r.ok or r.best_batch is None:
        return None
    high = float(r.first_oom_batch) if r.first_oom_batch else math.inf
    return Side(float(r.best_batch), math.nan, None, "batch", (r.id,), (r,),
                low=float(r.best_batch), high=high)


def _train_side(recs: Sequence[Any]) -> Side | None:
    """The seeds of one training setup: time to train of each converged run (smaller is better;
    the figure is its inverse, runs per hour... kept as 1/mean time so larger is better)."""
    times = tuple(r.time_to_train_s for r in recs if r.ok and r.time_to_train_s)
    if not times:
        return None
    rel = _rel_halfwidth(times) if len(times) >= 2 else math.inf
    return Side(1.0 / mean(times), rel, times if len(times) >= 2 else None, "1/time to train",
                tuple(r.id for r in recs), tuple(recs))


#: kind -> how a record (or, for train, a setup's seeds) becomes a side.
_ONE: dict[str, Callable[[Any], Side | None]] = {
    "throughput": _step_side, "scaling": _step_side, "net": _step_side, "comm": _comm_side,
    "peak": _peak_side, "maxbatch": _maxbatch_side, "generate": _generate_side,
    "serve": _serve_side}


def _match_key(r: Any) -> str:
    # Training: every seed of a setup is one side (the seeds are the samples).
    return r.config.setup_key() if r.kind == "train" else r.config.key()


def sides(records: Sequence[Any]) -> dict[tuple[str, str], Side]:
    """(kind, match key) -> side; a later record of the same key wins (a rerun), except for
    training, whose records of one setup are its seeds, and the processes of one repeat group
    (``--repeat``), which are one side together."""
    groups: dict[tuple[str, str], list[Any]] = {}
    for r in records:
        if r.kind == "train" or r.kind in _ONE:
            k = (r.kind, _match_key(r))
            prev = groups.get(k)
            if r.kind == "train" or (prev and getattr(r, "repeat_group", None) and
                                     getattr(prev[-1], "repeat_group", None) == r.repeat_group):
                groups.setdefault(k, []).append(r)  # seeds, or processes of one repeat group
            else:
                groups[k] = [r]
    out = {}
    for k, recs in groups.items():
        if k[0] == "train":
            # Two figures: time to train (the seeds' times, which convergence makes vary
            # widely) and the speed of training (the epochs' times, which a slower step shows
            # at once, pooled over the seeds).
            for key, side in ((k, _train_side(recs)), ((k[0], k[1] + EPOCH), _epoch_side(recs))):
                if side is not None:
                    out[key] = side
            continue
        side = _group_side(recs) if len(recs) > 1 else _ONE[k[0]](recs[0])
        if side is not None:
            out[k] = side
        if k[0] == "generate":  # its second figure: the time per output token
            tpot = _group_side(recs, _tpot_side) if len(recs) > 1 else _tpot_side(recs[0])
            if tpot is not None:
                out[(k[0], k[1] + TPOT_KEY)] = tpot
        if k[0] == "serve":  # its latencies, beside its throughput
            for suffix, unit in ((TTFT_KEY, TTFT), (TPOT_KEY, TPOT)):
                one = functools.partial(_serve_latency_side, unit=unit)
                lat = _group_side(recs, one) if len(recs) > 1 else one(recs[0])
                if lat is not None:
                    out[(k[0], k[1] + suffix)] = lat
    return out


#: The match-key suffix of a training setup's epoch-speed figure.
EPOCH = ":epoch"


def _epoch_side(recs: Sequence[Any]) -> Side | None:
    """Training speed of a setup's runs: samples per second over epochs 2 onward (the first holds
    start-up), the epochs of every seed pooled; a failed run's epochs count (its speed is real)."""
    runs = [r for r in recs if len(r.epoch_times_s) >= 2 and r.samples_per_epoch]
    times = tuple(t for r in runs for t in r.epoch_times_s[1:])
    if len(times) < 2:
        return None
    per_epoch = runs[0].samples_per_epoch
    return Side(per_epoch / mean(times), _rel_halfwidth(times), times, "samples/s (epochs 2+)",
                tuple(r.id for r in runs), tuple(runs))


# -- run-to-run spread: what one process a side cannot show --------------------------------------
#: What judged a pair (``Pair.basis``): both sides several processes; one process on a side,
#: against a run-to-run spread; one process a side with none known (no verdict).
ACROSS_PROCESSES = "across processes"
RUN_TO_RUN = "run-to-run spread"
INCONCLUSIVE = "inconclusive"
#: Kinds judged by how many processes stand behind each side (training's seeds are its runs; a
#: largest-batch search brackets a boundary and has no timed figure).
BY_PROCESSES = ("throughput", "generate", "scaling", "net", "comm", "peak", "serve")
#: Kinds whose commands take ``--repeat`` (the advice for an inconclusive pair names it).
REPEATABLE = ("throughput", "generate", "serve", "scaling")


@functools.cache
def run_spreads() -> dict[str, Any]:
    """The shipped spreads (``dlbench/reference/run_spread.json``, written by
    ``benchmarks/run_spread.py`` from the committed stores' repeat groups)."""
    text = resources.files("dlbench.reference").joinpath("run_spread.json").read_text()
    return json.loads(text)


def device_model(r: Any) -> str | None:
    """What a record's figure ran on, as the run-to-run spreads are keyed: the GPU model, or
    the CPU model for a run on the CPU (a GPU host's CPU too)."""
    env = getattr(r, "env", None) or {}
    c = r.config
    device = getattr(c, "device", None) or getattr(getattr(c, "base", None), "device", None)
    gpus = env.get("gpus") or []
    if env.get("accelerator") == "cuda" and device != "cpu" and gpus:
        return gpus[0].get("name")
    return env.get("cpu_model")


@dataclass(frozen=True)
class RunSpread:
    """How much one process's figure varies across fresh processes of identical code."""

    rel_sd: float      # relative standard deviation of one process's figure
    df: float          # its degrees of freedom
    source: str        # where it comes from, as the table's note says it
    stored: bool = True  # the shipped spread of a device and kind, not a group side's own

    def halfwidth(self, one_process_sides: int, confidence: float = 0.95) -> float:
        """The relative half-width it adds to a ratio with that many one-process sides: each
        such side's figure may sit ``sd`` off its config's mean, independently."""
        t = t_quantile(0.5 + confidence / 2.0, self.df)
        return t * self.rel_sd * math.sqrt(one_process_sides)


def stored_spread(kind: str, device: str | None,
                  table: Mapping[str, Any] | None = None) -> RunSpread | None:
    """The run-to-run spread measured for this kind on this device model (``table``: the
    shipped :func:`run_spreads` unless given); None where none was measured."""
    entry = ((table if table is not None else run_spreads()).get(kind) or {}).get(device or "")
    if not entry:
        return None
    return RunSpread(entry["rel_sd"], entry["df"],
                     f"the stored run-to-run spread of {kind} on {device} (sd {entry['rel_sd']:.2%}"
                     f" of one process's figure, {len(entry['configs'])} config(s))")


def _group_spread(s: Side, name: str) -> RunSpread:
    sd = stdev(s.samples) / mean(s.samples)
    return RunSpread(sd, s.processes - 1, f"the run-to-run spread of {name}'s {s.processes} "
                                          f"processes (sd {sd:.2%})", stored=False)


#: The widest within-process interval of the windows a stored spread is derived from
#: (:func:`derive_run_spreads`): it describes windows like those and no others.
SPREAD_WINDOW_MAX_REL_HALFWIDTH = 0.01


def _judge_by(a: Side, b: Side, kind: str,
              table: Mapping[str, Any] | None) -> tuple[str, RunSpread | None]:
    """Across processes where both sides have several; else against a run-to-run spread: the
    stored one of this device and kind, else a group side's own; else inconclusive.

    The stored spread is not used for a one-process side whose own window is wider than those
    it was derived from: a noisy window (a step bound by Python's launches, a busy host) varies
    from process to process far more than the steady ones did (on an H100, launch-bound
    windows of ±2-69% gave figures up to 32% apart where the stored spread says 0.13%)."""
    if a.processes >= 2 and b.processes >= 2:
        return ACROSS_PROCESSES, None
    da, db = device_model(a.records[-1]), device_model(b.records[-1])
    steady = all(s.processes >= 2 or s.rel_halfwidth <= SPREAD_WINDOW_MAX_REL_HALFWIDTH
                 for s in (a, b))
    spread = stored_spread(kind, da, table) if da == db and steady else None
    if spread is None:
        group = a if a.processes >= 2 else b if b.processes >= 2 else None
        if group is not None:
            spread = _group_spread(group, "A" if group is a else "B")
    return (RUN_TO_RUN, spread) if spread is not None else (INCONCLUSIVE, None)


def derive_run_spreads(records: Sequence[Any],
                       max_rel_halfwidth: float = SPREAD_WINDOW_MAX_REL_HALFWIDTH
                       ) -> dict[str, Any]:
    """Run-to-run spread per kind and device model, from the repeat groups among ``records``.

    A group's spread is the relative standard deviation of its processes' figures; only
    processes whose own interval is at most ``max_rel_halfwidth`` count (so the spread is the
    runs', not a noisy window's), and a group needs two of them. The groups of one config pool
    their variances (weighted by degrees of freedom); a device's figure is its widest config's.

    Returns ``{kind: {device: {"rel_sd", "df", "configs": [...]}}}``, every config naming the
    records of each group it came from (the shipped ``run_spread.json``)."""
    pooled: dict[tuple[str, str, str], list[tuple[list[Any], float]]] = {}
    for group in repeat_groups(records):
        r0 = group[0]
        if r0.repeat_group is None or r0.kind not in REPEATABLE or device_model(r0) is None:
            continue
        ok = [(r, s) for r, s in ((r, _ONE[r.kind](r) if r.ok else None) for r in group)
              if s is not None and s.rel_halfwidth <= max_rel_halfwidth]
        if len(ok) < 2:
            continue
        figures = [s.figure for _, s in ok]
        pooled.setdefault((r0.kind, device_model(r0), r0.config.key()), []).append(
            ([r for r, _ in ok], stdev(figures) / mean(figures)))
    out: dict[str, Any] = {}
    for (kind, device, _key), groups in sorted(pooled.items()):
        df = sum(len(g) - 1 for g, _ in groups)
        sd = math.sqrt(math.fsum((len(g) - 1) * v ** 2 for g, v in groups) / df)
        entry = {"config": groups[0][0][0].config.label, "rel_sd": sd, "df": df,
                 "groups": [{"records": sorted(r.id for r in g), "rel_sd": v}
                            for g, v in groups]}
        d = out.setdefault(kind, {}).setdefault(device, {"rel_sd": 0.0, "df": 0, "configs": []})
        d["configs"].append(entry)
        if sd > d["rel_sd"]:
            d["rel_sd"], d["df"] = sd, df
    return out


@dataclass(frozen=True)
class Pair:
    """One config measured on both sides. ``a_per_s``/``b_per_s`` are the figures (samples/s
    for the step-timed kinds; see ``unit``); ``ratio`` = B over A, below 1 is worse."""

    key: str
    label: str
    a_id: str
    b_id: str
    a_per_s: float
    b_per_s: float
    ratio: float
    ratio_low: float
    ratio_high: float
    t: float
    df: float
    p: float
    significant: bool
    regression: bool
    improvement: bool
    env_differences: tuple[str, ...]
    kind: str = "throughput"
    unit: str = "samples/s"
    test: str = "welch"          # welch | interval | bracket | none
    cards: str | None = None      # set when A and B ran on different cards of one GPU model
    # What judged it: ACROSS_PROCESSES, RUN_TO_RUN or INCONCLUSIVE (the kinds of BY_PROCESSES);
    # "seeds" for training, "brackets" for the largest batch.
    basis: str | None = None
    processes: tuple[int, int] = (1, 1)   # fresh processes behind A's and B's figure
    run_spread: RunSpread | None = None   # the spread the interval was widened by (RUN_TO_RUN)
    rel_runs: float = 0.0                 # the relative half-width it added
    device: str | None = None             # A's device model (GPU, else CPU), as spreads are keyed

    @property
    def inconclusive(self) -> bool:
        return self.basis == INCONCLUSIVE


@dataclass(frozen=True)
class Comparison:
    pairs: tuple[Pair, ...]
    only_a: tuple[str, ...]           # labels of configs with an ok result on A only
    only_b: tuple[str, ...]
    env_differences: tuple[str, ...]  # union over the pairs, in order of first appearance
    threshold: float
    alpha: float

    @property
    def regressions(self) -> tuple[Pair, ...]:
        return tuple(p for p in self.pairs if p.regression)

    @property
    def inconclusive(self) -> tuple[Pair, ...]:
        return tuple(p for p in self.pairs if p.inconclusive)


def _card_spread(a: Side, b: Side, kind: str) -> tuple[float, str | None]:
    """The relative spread to allow when A and B ran on different cards of one model, and the
    note that says so (with the spread, or that none was measured)."""
    ra, rb = a.records[-1], b.records[-1]
    if not cards.different_cards(ra, rb):
        return 0.0, None
    model = cards.card_model(ra)
    spread = cards.spread_for(model, "throughput")
    if spread is None:
        return 0.0, (f"different {model} cards; no card-to-card spread measured for it: the "
                     "interval holds the within-process spread only")
    h = spread["rel_halfwidth"]
    # Two cards can differ by the whole range across cards: twice its half-width.
    return 2 * h, (f"different {model} cards: interval widened by the card-to-card spread "
                   f"(+-{h:.2%} across {len(spread['configs'])} configs measured on several cards)")


def compare_pair(a: Any, b: Any, threshold: float = DEFAULT_THRESHOLD,
                 alpha: float = DEFAULT_ALPHA, kind: str | None = None,
                 spreads: Mapping[str, Any] | None = None) -> Pair:
    """Compare the two sides of one config (records, or :class:`Side` objects). ``spreads``
    replaces the shipped run-to-run spreads (:func:`run_spreads`' layout)."""
    sa = a if isinstance(a, Side) else sides([a])[next(iter(sides([a])))]
    sb = b if isinstance(b, Side) else sides([b])[next(iter(sides([b])))]
    ra, rb = sa.records[-1], sb.records[-1]
    kind = kind or ra.kind
    ratio = sb.figure / sa.figure
    extra, card_note = _card_spread(sa, sb, kind)
    basis, spread, rel_runs = None, None, 0.0
    t = df = p = math.nan
    if kind == "maxbatch":
        low, high = sb.low / sa.high, (sb.high / sa.low if math.isfinite(sb.high) else math.inf)
        disjoint = sb.high <= sa.low or sb.low >= sa.high
        basis, test, significant = "brackets", "bracket", disjoint
    else:
        if kind in BY_PROCESSES:
            basis, spread = _judge_by(sa, sb, kind, spreads)
            if spread is not None:
                rel_runs = spread.halfwidth((sa.processes < 2) + (sb.processes < 2))
        else:
            basis = "seeds"
        low, high = ratio_interval(ratio, sa.rel_halfwidth, sb.rel_halfwidth, extra, rel_runs)
        # Welch's t needs samples of one nature: process figures on both sides, or raw times
        # on both (one process against a group has neither).
        alike = sa.samples and sb.samples and (sa.processes > 1) == (sb.processes > 1)
        if basis == INCONCLUSIVE:
            test, significant = "none", False
        elif alike:
            w = welch_t(sa.samples, sb.samples)
            test, t, df, p = "welch", w.t, w.df, w.p
            widened = card_note or basis == RUN_TO_RUN
            significant = w.p < alpha and (not widened or not low <= 1.0 <= high)
        else:
            test = "interval" if math.isfinite(high) else "none"
            significant = math.isfinite(high) and not low <= 1.0 <= high
    return Pair(key=ra.config.key() if kind != "train" else ra.config.setup_key(),
                label=(ra.config.label + _LABEL_SUFFIX.get(sa.unit, "") if kind != "train"
                       else _setup_label(ra) + (" epoch speed" if "2+" in sa.unit else "")),
                a_id=",".join(sa.ids), b_id=",".join(sb.ids), a_per_s=sa.figure,
                b_per_s=sb.figure, ratio=ratio, ratio_low=low, ratio_high=high, t=t, df=df, p=p,
                significant=significant, regression=significant and ratio < 1.0 - threshold,
                improvement=significant and ratio > 1.0 + threshold,
                env_differences=tuple(envmod.differences(ra.env or {}, rb.env or {})),
                kind=kind, unit=sa.unit, test=test, cards=card_note, basis=basis,
                processes=(_processes(sa, kind), _processes(sb, kind)), run_spread=spread,
                rel_runs=rel_runs, device=device_model(ra))


def _processes(s: Side, kind: str) -> int:
    return len(s.ids) if kind == "train" else s.processes  # a training side: its seeds' runs


def _setup_label(r: Any) -> str:
    return " ".join(p for p in r.config.label.split() if not p.startswith("seed="))


def compare(a_records: Sequence[Any], b_records: Sequence[Any],
            threshold: float = DEFAULT_THRESHOLD, alpha: float = DEFAULT_ALPHA,
            spreads: Mapping[str, Any] | None = None) -> Comparison:
    """Match the ok records of A and B by kind and config key and compare each pair
    (``spreads``: see :func:`compare_pair`)."""
    if threshold < 0:
        raise ValueError(f"threshold must be >= 0, got {threshold}")
    ra, rb = sides(a_records), sides(b_records)
    pairs = tuple(compare_pair(ra[k], rb[k], threshold, alpha, kind=k[0], spreads=spreads)
                  for k in ra if k in rb)
    # one line per setup: a second figure of a config is not a config of its own
    ra = {k: v for k, v in ra.items() if not k[1].endswith((EPOCH, TPOT_KEY, TTFT_KEY))}
    rb = {k: v for k, v in rb.items() if not k[1].endswith((EPOCH, TPOT_KEY, TTFT_KEY))}
    diffs = tuple(dict.fromkeys(d for p in pairs for d in p.env_differences))

    def label(s: Side) -> str:
        r = s.records[-1]
        return _setup_label(r) if r.kind == "train" else r.config.label
    return Comparison(pairs=pairs,
                      only_a=tuple(label(s) for k, s in ra.items() if k not in rb),
                      only_b=tuple(label(s) for k, s in rb.items() if k not in ra),
                      env_differences=diffs, threshold=threshold, alpha=alpha)


def _verdict(p: Pair) -> str:
    if p.inconclusive:
        return "inconclusive (one process per side)"
    if p.regression:
        return "REGRESSION"
    if p.improvement:
        return "better"
    if p.significant:
        return "within threshold"
    return "no change"


def judged_by(p: Pair) -> str:
    """Which test judged the pair, in a few words (the table's column)."""
    na, nb = p.processes
    if p.basis == ACROSS_PROCESSES:
        return f"across processes ({na} | {nb})"
    if p.basis == RUN_TO_RUN:
        sides = "one process a side" if na == nb == 1 else f"processes {na} | {nb}"
        return f"{sides} + run-to-run +-{p.rel_runs:.2%}"
    if p.basis == INCONCLUSIVE:
        return "one process a side, no run-to-run spread known"
    if p.basis == "seeds":
        return f"seeds ({na} | {nb})"
    return p.basis or "-"


def _p(p: Pair) -> str:
    if p.inconclusive:
        return "-"
    return f"{p.p:.2g}" if p.test == "welch" else p.test


def _fig(p: Pair, x: float) -> str:
    if p.unit == "1/time to train":
        return f"{1 / x:.1f} s"
    if p.unit in (TPOT, TTFT):
        return f"{fmt_num(1e3 / x, 4)} ms"
    return fmt_num(x)


#: What the figure column says for the figures shown as their inverse.
_SHOWN_AS = {"1/time to train": "time to train", TPOT: "TPOT mean", TTFT: "TTFT mean"}
#: What a pair's label says of a second figure of one config.
_LABEL_SUFFIX = {TPOT: " TPOT", TTFT: " TTFT"}


def comparison_table(c: Comparison, title: str = "B against A") -> Table:
    """One row per matched config: both figures, the ratio and its interval, the test, what
    judged it (across processes, one process against a run-to-run spread, or nothing)."""
    rows = tuple((
        p.kind, p.label, _fig(p, p.a_per_s), _fig(p, p.b_per_s), _SHOWN_AS.get(p.unit, p.unit),
        f"{p.ratio:.4f}",
        f"{p.ratio_low:.4f}-{p.ratio_high:.4f}" if math.isfinite(p.ratio_high) else "unbounded",
        _p(p), "yes" if p.significant else "no", judged_by(p),
        _verdict(p) + (" (cards differ)" if p.cards else ""),
    ) for p in c.pairs)
    notes = (f"ratio = B / A of the figure (time to train, TPOT: A / B), below 1 is worse; "
             f"interval 95% from the two sides' intervals; p: Welch's t-test on the raw samples "
             f"(step, request, decode step, iteration or seed times; a --repeat group's process "
             f"figures), significant when p < {c.alpha:g}; 'interval': no raw "
             f"samples, significant when the interval excludes 1; 'bracket': largest batch, "
             f"significant when the two searches' brackets are disjoint; regression: "
             f"significant and worse than A by more than {c.threshold:.1%}",
             "judged by: 'across processes': both sides --repeat groups, Welch's t on their "
             "process figures; '+ run-to-run': a side measured in one process, the interval "
             "widened by how much one process's figure varies across fresh processes (the "
             "stored spread of the device and kind, or the group side's), significant only "
             "when it excludes 1; 'no run-to-run spread known': one process a side cannot "
             "tell a change from run-to-run variance, so no verdict (rerun both sides with "
             "--repeat 3)",
             *dict.fromkeys(p.run_spread.source if p.run_spread.stored else
                            f"{p.label}: {p.run_spread.source}"
                            for p in c.pairs if p.run_spread is not None),
             *dict.fromkeys(p.cards for p in c.pairs if p.cards))
    return Table(title, ("kind", "config", "A", "B", "figure", "B/A", "95% interval", "p / test",
                         "significant", "judged by", "verdict"), rows, notes)


def to_dict(c: Comparison) -> dict[str, Any]:
    """A JSON-ready form (infinite interval ends and absent statistics as None)."""
    def fin(x: float) -> float | None:
        return x if math.isfinite(x) else None

    def spread(p: Pair) -> dict[str, Any] | None:
        r = p.run_spread
        return None if r is None else {"rel_sd": r.rel_sd, "df": r.df, "source": r.source,
                                       "rel_halfwidth": p.rel_runs}
    return {
        "threshold": c.threshold, "alpha": c.alpha, "regressions": len(c.regressions),
        "inconclusive": len(c.inconclusive),
        "env_differences": list(c.env_differences), "only_a": list(c.only_a),
        "only_b": list(c.only_b),
        "pairs": [{"kind": p.kind, "config": p.label, "key": p.key, "a": p.a_id, "b": p.b_id,
                   "unit": p.unit, "a_figure": p.a_per_s, "b_figure": p.b_per_s,
                   "a_samples_per_s": p.a_per_s, "b_samples_per_s": p.b_per_s, "ratio": p.ratio,
                   "interval": [p.ratio_low, fin(p.ratio_high)], "test": p.test, "t": fin(p.t),
                   "df": fin(p.df), "p": fin(p.p), "significant": p.significant,
                   "regression": p.regression, "cards": p.cards, "basis": p.basis,
                   "judged_by": judged_by(p), "processes": list(p.processes),
                   "device": p.device, "run_spread": spread(p), "verdict": _verdict(p)}
                  for p in c.pairs],
    }

"""Coverage: how often does a stated 95% interval hold the figure a config really has?

For K configs of a suite (default: five of the default GPU suite), each is measured in M fresh
processes through dlbench itself (``dlbench throughput ... --repeat M --resume`` into one store,
telemetry off, the suite's warm-up and windows). From the store this script then counts, per
config and overall, how often a stated interval covers the mean of processes *other* than the
ones that stated it (a mean that holds the judged process would be pulled towards it):

  (a) one process's stated 95% interval against the mean of the config's other M - 1
      processes (leave-one-out): with the interval dlbench states now (``stats.interval``:
      batch means over 200+ steps, else from the effective sample size) and with the old one
      (``stats.mean_interval_batch_means``: batch means at any length, a plain t over steps
      below 40 steps). That reference has an error of its own; its 95% half-width is given
      beside the count;
  (b) the across-process interval of a group of R processes (the suites' repeat count,
      ``suites.DEFAULT_REPEAT``) against the mean of the M - R processes outside it (held out).
      The independent count is over disjoint groups (R consecutive processes in stored order,
      as ``--repeat R`` runs them: 3 groups of 3 in 10). Every R-combination is counted too,
      the better point estimate (the average over every way of picking the groups) but not
      independent trials: they share processes. Even a calibrated interval covers a held-out
      mean less than 95% of the time (``calibrated_rate``: 93% for 3 against 7), since that
      mean's error adds to the gap;
  (c) with --other (a store of the same configs from another card, e.g. this script run there):
      the difference of the two cards' references (each the mean of all M processes), and that
      difference over the stated half-widths (one process's median, a group of R's median, the
      reference's own).

Every count of independent trials comes as k/n with its 95% Wilson score interval. The trials
of one config are not quite independent either (their references share processes); the
binomial intervals take them as independent, so they are if anything too narrow. The earlier
analysis (the reference the mean of all M, the judged process or group among them; every
combination counted) is kept in the JSON under ``inclusive_reference`` for comparison; a config
enters the totals where its references are means of at least MIN_REFERENCE processes.

Writes a JSON result (every figure, the configs, the commands run, both environments) and prints
a short table. Run it again with the same --db and it goes on where it stopped (--resume); with
--budget-s it stops starting processes after that many seconds (a group cut short is completed
by the next run), so a long experiment fits in several calls.

    # one H100, 5 configs x 10 processes (about 12 minutes: run it twice with the default budget)
    PYTHONPATH=src python3 benchmarks/coverage.py --db results/coverage-h100/dlbench.db \\
        --processes 10 --out results/coverage-h100/coverage.json
    # the same on a second card, then the comparison of the two cards
    PYTHONPATH=src python3 benchmarks/coverage.py --db results/coverage-h200/dlbench.db \\
        --processes 10 --out results/coverage-h200/coverage.json \\
        --other results/coverage-h100/dlbench.db
    # only the analysis of stores that exist (seconds, no GPU)
    PYTHONPATH=src python3 benchmarks/coverage.py --db A.db --other B.db --analyse-only --out c.json
    # CPU, tiny models (the test does this): 2 configs x 4 processes, windows of 0.3 s at most
    PYTHONPATH=src python3 benchmarks/coverage.py --suite smoke --configs tiny_cnn:train,tiny_cnn:eval \\
        --processes 4 --group 2 --device cpu --max-time 0.3 --db /tmp/cov.db --out /tmp/cov.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from statistics import NormalDist
from typing import Any, Sequence

SRC = str(Path(__file__).resolve().parents[1] / "src")
sys.path.insert(0, SRC)

from dlbench.launch import forking  # noqa: E402
from dlbench.measure import stats  # noqa: E402
from dlbench.store import Store  # noqa: E402
from dlbench.suites import DEFAULT_REPEAT, DeviceFacts, suite_for  # noqa: E402

#: The default suite's configs measured by default: five of its six, one of each family and
#: both modes of ResNet-50.
DEFAULT_CONFIGS = ("resnet50:eval", "resnet50:train", "vgg16:train", "vit_b_16:train",
                   "gpt2:train")
TAG = "coverage"


# -- measuring ---------------------------------------------------------------------------------
def pick_configs(suite: str, selectors: Sequence[str], facts: DeviceFacts) -> list:
    """The suite's configs named by ``model:mode`` selectors, in the selectors' order."""
    _, configs = suite_for(suite, facts)
    out = []
    for sel in selectors:
        model, _, mode = sel.partition(":")
        found = [c for c in configs if c.model == model and (not mode or c.mode == mode)]
        if not found:
            have = ", ".join(f"{c.model}:{c.mode}" for c in configs)
            raise SystemExit(f"--configs {sel!r}: not in suite {suite}; it has {have}")
        out.append(found[0])
    return out


def capped(cfg, max_seconds: float):
    """``cfg`` with its window ended after ``max_seconds`` at most (its minimum cut to match)."""
    stop = cfg.stop
    return replace(cfg, stop=replace(stop, max_seconds=min(stop.max_seconds, max_seconds),
                                     min_seconds=min(stop.min_seconds, max_seconds)))


def command_for(cfg, processes: int, db: str, device: str) -> list[str]:
    """The dlbench command (its arguments after ``dlbench``) that measures ``cfg`` as the suite
    does, in ``processes`` fresh processes (telemetry off: it waits for the idle power to settle
    before each process, and the intervals do not depend on it)."""
    stop = cfg.stop
    cmd = ["throughput", "-m", cfg.model,
           "-b", str(cfg.batch_size), "--mode", cfg.mode, "--precision", cfg.precision,
           "--channels-last", "on" if cfg.channels_last else "off",
           "--warmup", str(cfg.warmup_steps), "--warmup-time", str(cfg.warmup_seconds),
           "--min-steps", str(stop.min_steps), "--min-time", str(stop.min_seconds),
           "--max-time", str(stop.max_seconds), "--target-ci", str(stop.target_rel_ci),
           "--telemetry-interval", "0", "--device", device,
           "--repeat", str(processes), "--resume", "--tag", TAG, "--db", db, "-q"]
    if cfg.input_size:
        cmd += ["--seq-len", str(cfg.input_size)]
    if cfg.compile:
        cmd += ["--compile", cfg.compile]
    return cmd


def measure(configs: list, processes: int, db: str, device: str, budget_s: float | None) -> bool:
    """Every config in ``processes`` processes; False when the budget ran out first."""
    t0 = time.monotonic()
    for cfg in configs:
        args = command_for(cfg, processes, db, device)
        left = None if budget_s is None else budget_s - (time.monotonic() - t0)
        if left is not None and left <= 0:
            return False
        print("$ dlbench " + " ".join(args), flush=True)
        # its tables go nowhere: this script prints its own; progress and errors stay on stderr
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            p for p in (SRC, os.environ.get("PYTHONPATH")) if p))
        # `python -m dlbench ARGS`; in the test session forked by its server (forking.python_args)
        cmd = [sys.executable, *forking.python_args("-m", "dlbench"), *args]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env=env)
        try:
            proc.wait(timeout=left)
        except subprocess.TimeoutExpired:
            # Ctrl-C, as a user would: dlbench keeps the processes it finished, and the next
            # run's --resume completes the group.
            proc.send_signal(signal.SIGINT)
            proc.wait()
            return False
        # exit 3: some processes failed (stored as rows; they are left out of the figures)
        if proc.returncode not in (0, 3):
            raise SystemExit(f"dlbench exited {proc.returncode}: {' '.join(cmd)}")
    return True


# -- analysing ---------------------------------------------------------------------------------
#: The confidence of the binomial intervals given with every coverage rate.
BINOMIAL_CONFIDENCE = 0.95
#: The fewest processes a reference is the mean of for its trial to count in the totals: with
#: one, the reference has no stated error and is as far off as the process it judges.
MIN_REFERENCE = 2


def wilson(k: int, n: int, confidence: float = BINOMIAL_CONFIDENCE) -> tuple[float, float]:
    """The Wilson score interval of a binomial rate ``k / n``. Chosen over the plain normal
    interval because coverage rates sit near 1, where that one overshoots 100% and collapses
    to zero width at ``k = n``; Wilson stays inside [0, 1] and keeps its width there."""
    if n <= 0:
        raise ValueError("no trials")
    if not 0 <= k <= n:
        raise ValueError(f"{k} of {n}")
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    p, z2 = k / n, z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1.0 - p) / n + z2 / (4 * n * n)) / denom
    # exact at the ends: rounding must not put 10/10 below 100% or 0/10 above 0%
    return (0.0 if k == 0 else max(0.0, centre - half),
            1.0 if k == n else min(1.0, centre + half))


def rate(k: int, n: int) -> dict[str, Any]:
    """A coverage count of independent trials: k of n, the rate and its binomial interval."""
    low, high = wilson(k, n) if n else (None, None)
    return {"covered": k, "n": n, "rate": k / n if n else None, "low": low, "high": high}


def dependent_rate(k: int, n: int) -> dict[str, Any]:
    """A count over overlapping trials: no binomial interval applies, so none is given."""
    return {"covered": k, "n": n, "rate": k / n if n else None, "independent": False}


def processes_by_config(store: Store) -> dict[str, list]:
    """Every ok throughput record of the store, by config key, in the order stored."""
    out: dict[str, list] = {}
    for r in store.iter_results(kind="throughput", status="ok"):
        if r.summary() is not None:
            out.setdefault(r.config.key(), []).append(r)
    return out


def figure(r) -> float:
    """A process's figure: samples per second over its window."""
    return r.summary().throughput


def old_bounds(r) -> tuple[float, float]:
    """The throughput interval the old batch-means method states for this process."""
    xs, sps = r.step_times_s, r.samples_per_step
    m = stats.mean(xs)
    h = stats.mean_interval_batch_means(xs, r.config.stop.confidence)
    low = sps / (m + h) if math.isfinite(h) else 0.0
    high = sps / (m - h) if h < m else math.inf
    return low, high


def _rel_halfwidth(figs: Sequence[float]) -> float | None:
    """The relative 95% half-width of the mean of ``figs`` (None for one figure: unknown)."""
    m, h = stats.across_processes(figs)
    return h / m if math.isfinite(h) else None


def calibrated_group_rate(group: int, rest: int, confidence: float = 0.95) -> float | None:
    """The rate at which an exact ``confidence`` t-interval of ``group`` normal figures covers
    the mean of ``rest`` others: below ``confidence``, since the reference's own error adds to
    the gap (the gap's variance is sigma^2 (1/R + 1/(M-R)), the interval's scale sigma^2/R)."""
    if group < 2 or rest < 1:
        return None
    t = stats.t_quantile(0.5 + confidence / 2.0, group - 1) / math.sqrt(1.0 + group / rest)
    return 2.0 * stats.t_cdf(t, group - 1) - 1.0


def disjoint_groups(m: int, group: int) -> list[tuple[int, ...]]:
    """Groups of ``group`` consecutive processes (stored order, as ``--repeat`` runs them) that
    share no process, each leaving at least MIN_REFERENCE others for its reference. Only these
    count as independent trials: every R-combination of M reuses each process many times."""
    if m - group < MIN_REFERENCE:
        return []
    return [tuple(range(i, i + group)) for i in range(0, m - group + 1, group)]


def analyse_config(procs: list, group: int) -> dict[str, Any]:
    """One config's coverage counts.

    One process: does its interval (new and old method) cover the mean of the *other* M - 1
    processes? Judged against a mean that holds the process itself, an interval is helped by
    its own figure. Groups: does the across-process interval of a disjoint group of ``group``
    cover the mean of the processes outside it? Every combination is counted as well, marked
    as not independent. The earlier inclusive figures (the reference the mean of all M) are
    kept under ``inclusive_reference`` for comparison."""
    figs = [figure(r) for r in procs]
    n_proc = len(figs)
    ref, ref_h = stats.across_processes(figs)
    old = list(map(old_bounds, procs))
    new = [(r.summary().throughput_low, r.summary().throughput_high) for r in procs]

    # one process against the mean of the others (leave-one-out)
    loo_refs, loo_rel_h = [], []
    for i in range(n_proc):
        others = figs[:i] + figs[i + 1:]
        loo_refs.append(stats.mean(others))
        loo_rel_h.append(_rel_halfwidth(others))
    new_hits = [lo <= x <= hi for (lo, hi), x in zip(new, loo_refs)]
    old_hits = [lo <= x <= hi for (lo, hi), x in zip(old, loo_refs)]
    known_h = [h for h in loo_rel_h if h is not None]

    # groups against the mean of the processes outside them
    def judged(idx: Sequence[int]) -> tuple[bool, float, float | None]:
        m, h = stats.across_processes([figs[i] for i in idx])
        rest = [figs[i] for i in range(n_proc) if i not in idx]
        return abs(m - stats.mean(rest)) <= h, h / m, _rel_halfwidth(rest)

    # every combination with a process left over: the earlier count and the groups' widths
    # need no reference of MIN_REFERENCE, so they keep the earlier rule
    every = list(itertools.combinations(range(n_proc), group)) if n_proc > group else []
    combos = every if n_proc - group >= MIN_REFERENCE else []
    all_judged = [judged(idx) for idx in combos]
    disjoint = disjoint_groups(n_proc, group)
    disjoint_judged = [judged(idx) for idx in disjoint]
    every_mh = [stats.across_processes([figs[i] for i in idx]) for idx in every]
    # the earlier count: every combination against the mean of all M, its own processes in it
    incl_hits = sum(abs(m - ref) <= h for m, h in every_mh)

    methods: dict[str, int] = {}
    for r in procs:
        methods[r.summary().interval_method] = methods.get(r.summary().interval_method, 0) + 1
    first = procs[0]
    return {
        "label": first.config.label,
        "key": first.config.key(),
        "unit": first.unit,
        "processes": n_proc,
        # the mean of all M: the config's best figure (compared across cards), not the
        # reference any coverage count below is judged against
        "reference": ref,
        "reference_rel_halfwidth": ref_h / ref if math.isfinite(ref_h) else None,
        "process_figures": figs,
        "spread_rel": (max(figs) - min(figs)) / ref,
        "steps": [r.summary().steps for r in procs],
        "interval_methods": methods,
        "one_process": {
            "reference": "leave-one-out: the mean of the other processes",
            # in the totals only where each reference is a mean of MIN_REFERENCE or more
            "counted": n_proc - 1 >= MIN_REFERENCE,
            "new": rate(sum(new_hits), n_proc),
            "old": rate(sum(old_hits), n_proc),
            "new_covers": new_hits,
            "old_covers": old_hits,
            "new_median_rel_halfwidth": stats.percentile(
                [r.summary().rel_halfwidth for r in procs], 50),
            "old_median_rel_halfwidth": stats.percentile(
                [_old_rel(r) for r in procs], 50),
            # the reference has an error of its own: a miss may be the reference's
            "reference_rel_halfwidths": loo_rel_h,
            "reference_median_rel_halfwidth": (stats.percentile(known_h, 50)
                                               if known_h else None),
        },
        "group": {
            "size": group,
            "reference": "held-out: the mean of the processes outside the group",
            "disjoint_groups": [list(idx) for idx in disjoint],
            "disjoint": rate(sum(j[0] for j in disjoint_judged), len(disjoint)),
            "disjoint_rel_halfwidths": [j[1] for j in disjoint_judged],
            "disjoint_reference_rel_halfwidths": [j[2] for j in disjoint_judged],
            "all_combinations": dependent_rate(sum(j[0] for j in all_judged), len(combos)),
            "calibrated_rate": calibrated_group_rate(group, n_proc - group),
            # over every combination: a width is a property of one group, so the median
            # over all of them needs no independence (the card comparison divides by it)
            "median_rel_halfwidth": (stats.percentile([h / m for m, h in every_mh], 50)
                                     if every_mh else None),
            "reference_median_rel_halfwidth": (stats.percentile(
                [j[2] for j in all_judged if j[2] is not None], 50)
                if any(j[2] is not None for j in all_judged) else None),
        },
        "inclusive_reference": {
            "one_process": {"new_covered": sum(lo <= ref <= hi for lo, hi in new),
                            "old_covered": sum(lo <= ref <= hi for lo, hi in old),
                            "n": n_proc},
            "group": dependent_rate(incl_hits, len(every)),
        },
    }


def _old_rel(r) -> float:
    return stats.mean_interval_batch_means(r.step_times_s) / stats.mean(r.step_times_s)


def compare_cards(mine: dict[str, dict], other: dict[str, dict]) -> list[dict[str, Any]]:
    """Per config in both: the other card's reference over this one's, and the difference in
    units of the stated half-widths (> 1: the intervals do not reach across the cards)."""
    out = []
    for key, a in mine.items():
        b = other.get(key)
        if b is None:
            continue
        diff = b["reference"] / a["reference"] - 1.0
        one = a["one_process"]["new_median_rel_halfwidth"]
        grp = a["group"]["median_rel_halfwidth"]
        ref = a["reference_rel_halfwidth"]
        theirs = b["reference_rel_halfwidth"]
        out.append({
            "label": a["label"], "key": key, "reference": a["reference"],
            "other_reference": b["reference"], "difference_rel": diff,
            "over_one_process_halfwidth": abs(diff) / one if one else None,
            "over_group_halfwidth": abs(diff) / grp if grp else None,
            "over_reference_halfwidth": abs(diff) / ref if ref else None,
            # the two references' own 95% half-widths combined: what chance alone would give
            "references_rel_halfwidth": (math.hypot(ref, theirs)
                                         if ref is not None and theirs is not None else None),
        })
    return out


METHOD = {
    "one_process": "a process's stated 95% interval (new: stats.interval; old: batch means) "
                   "against the mean of the config's other M - 1 processes (leave-one-out)",
    "group": "the across-process 95% t-interval of R processes against the mean of the "
             "config's other M - R processes (held out); the independent count is over "
             "disjoint groups of R consecutive processes in stored order",
    "all_combinations": "every R-combination against its held-out mean: the combinations "
                        "share processes, so they are not independent trials and carry no "
                        "binomial interval",
    "calibrated_rate": "what an exact 95% t-interval of R normal figures would cover against "
                       "a held-out mean of M - R (below 95%: that mean has an error too)",
    "binomial_interval": f"the {BINOMIAL_CONFIDENCE:.0%} Wilson score interval (low, high)",
    "counted": f"a config enters the totals where its references are means of at least "
               f"{MIN_REFERENCE} processes",
    "dependence": "the references of one config's trials share processes (a process's "
                  "deviation from the mean of the others correlates about -1/(M-1) with "
                  "another's, a disjoint group's about -R/(M-R)), so the binomial intervals, "
                  "which take the trials as independent, are if anything too narrow",
    "inclusive_reference": "the earlier analysis, kept for comparison: the reference the mean "
                           "of all M processes, the judged process or group among them; "
                           "every R-combination counted",
}


def analyse(db: str, group: int, other: str | None = None) -> dict[str, Any]:
    with Store(db) as store:
        by_key = processes_by_config(store)
    configs = {k: analyse_config(v, group) for k, v in by_key.items() if len(v) >= 2}
    counted = [c for c in configs.values() if c["one_process"]["counted"]]

    def total(path: Sequence[str], field: str, among=configs.values()) -> int:
        out = 0
        for c in among:
            d = c
            for p in path:
                d = d[p]
            out += d[field]
        return out

    one = ("one_process",)
    incl_one, incl_grp = ("inclusive_reference", "one_process"), ("inclusive_reference", "group")
    n_incl = total(incl_one, "n")
    result: dict[str, Any] = {
        "store": db, "group_size": group, "method": METHOD,
        "configs": list(configs.values()),
        "one_process": {
            "new": rate(total(one + ("new",), "covered", counted),
                        total(one + ("new",), "n", counted)),
            "old": rate(total(one + ("old",), "covered", counted),
                        total(one + ("old",), "n", counted)),
        },
        "group": {
            "size": group,
            "disjoint": rate(total(("group", "disjoint"), "covered"),
                             total(("group", "disjoint"), "n")),
            # per disjoint trial, averaged: what calibrated intervals would have covered
            "calibrated_rate": _calibrated_mean(configs.values()),
            "all_combinations": dependent_rate(total(("group", "all_combinations"), "covered"),
                                               total(("group", "all_combinations"), "n")),
        },
        "inclusive_reference": {
            "one_process": {
                "new_covered": total(incl_one, "new_covered"),
                "old_covered": total(incl_one, "old_covered"), "n": n_incl,
                "new_rate": total(incl_one, "new_covered") / n_incl if n_incl else None,
                "old_rate": total(incl_one, "old_covered") / n_incl if n_incl else None},
            "group": dependent_rate(total(incl_grp, "covered"), total(incl_grp, "n")),
        },
        "env": _env_of(by_key),
    }
    if other:
        with Store(other) as store:
            theirs = processes_by_config(store)
        other_configs = {k: analyse_config(v, group) for k, v in theirs.items() if len(v) >= 2}
        result["other"] = {"store": other, "env": _env_of(theirs),
                           "cards": compare_cards(configs, other_configs)}
    return result


def _calibrated_mean(configs) -> float | None:
    pairs = [(c["group"]["disjoint"]["n"], c["group"]["calibrated_rate"]) for c in configs
             if c["group"]["disjoint"]["n"]]
    n = sum(k for k, _ in pairs)
    return sum(k * r for k, r in pairs) / n if n else None


def _env_of(by_key: dict[str, list]) -> dict | None:
    for recs in by_key.values():
        return recs[0].env
    return None


def _pct(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}%}"


def _count(r: dict[str, Any]) -> str:
    """``k/n [low-high]``, or ``k/n`` where no interval applies."""
    if not r["n"]:
        return "-"
    if "low" not in r:
        return f"{r['covered']}/{r['n']}"
    return f"{r['covered']}/{r['n']} [{r['low']:.0%}-{r['high']:.0%}]"


def print_table(result: dict[str, Any]) -> None:
    g = result["group_size"]
    print(f"{'config':36} {'procs':>5} {'spread':>6} {'1 proc new':>16} {'1 proc old':>16} "
          f"{'loo ref':>7} {'disjoint ' + str(g) + 's':>16} {'all ' + str(g) + 's':>8}")
    for c in result["configs"]:
        one, grp = c["one_process"], c["group"]
        print(f"{c['label'][:36]:36} {c['processes']:5d} {_pct(c['spread_rel']):>6} "
              f"{_count(one['new']):>16} {_count(one['old']):>16} "
              f"{_pct(one['reference_median_rel_halfwidth'], 2):>7} "
              f"{_count(grp['disjoint']):>16} {_count(grp['all_combinations']):>8}")
    one, grp, incl = result["one_process"], result["group"], result["inclusive_reference"]
    print(f"one process's 95% interval covers the mean of the other processes: new "
          f"{_pct(one['new']['rate'])} {_count(one['new'])}, old {_pct(one['old']['rate'])} "
          f"{_count(one['old'])}; a disjoint group of {g}'s covers the mean of the rest: "
          f"{_pct(grp['disjoint']['rate'])} {_count(grp['disjoint'])} (in brackets: the "
          f"{BINOMIAL_CONFIDENCE:.0%} Wilson score interval)")
    print(f"every group of {g} (not independent): {_pct(grp['all_combinations']['rate'])} "
          f"{_count(grp['all_combinations'])}; the earlier inclusive reference: one process "
          f"new {incl['one_process']['new_covered']}/{incl['one_process']['n']}, old "
          f"{incl['one_process']['old_covered']}/{incl['one_process']['n']}, groups "
          f"{_count(incl['group'])}")
    for card in (result.get("other") or {}).get("cards", []):
        print(f"other card: {card['label'][:44]}: {card['difference_rel']:+.2%} "
              f"(x{_num(card['over_one_process_halfwidth'])} one process's half-width, "
              f"x{_num(card['over_group_halfwidth'])} a group's, "
              f"x{_num(card['over_reference_halfwidth'])} the reference's; the two "
              f"references' own half-widths combined: {_pct(card['references_rel_halfwidth'])})")


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _earlier_commands(out: Path, db: str) -> list[str]:
    """The commands of an earlier result at ``out`` that analysed a store of the same name."""
    try:
        earlier = json.loads(out.read_text())
    except (OSError, ValueError):
        return []
    if Path(str(earlier.get("store", ""))).name != Path(db).name:
        return []
    return list(earlier.get("commands") or [])


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--db", required=True, help="the store the processes go into (and are read)")
    p.add_argument("--out", help="write the result as JSON here")
    p.add_argument("--suite", default="default", help="the suite the configs come from")
    p.add_argument("--configs", default=",".join(DEFAULT_CONFIGS),
                   help="model:mode of the suite's configs (default: %(default)s)")
    p.add_argument("--processes", type=int, default=10, help="fresh processes per config (M)")
    p.add_argument("--group", type=int, default=DEFAULT_REPEAT,
                   help="processes of a --repeat group (R; default: the suites' %(default)s)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    p.add_argument("--other", help="a store of the same configs from another card")
    p.add_argument("--budget-s", type=float, default=540.0,
                   help="start no process after this many seconds; run again to go on "
                        "(default %(default)s; 0 = no limit)")
    p.add_argument("--max-time", type=float, metavar="S",
                   help="end every window after S seconds at most (and start none shorter): a "
                        "quick pass of the mechanics, with fewer steps behind each interval "
                        "than the suite's windows (default: the suite's own)")
    p.add_argument("--analyse-only", action="store_true", help="measure nothing; read --db")
    args = p.parse_args(argv)
    if args.processes < 2 or not 2 <= args.group <= args.processes:
        raise SystemExit("--processes must be >= 2 and --group in 2..--processes")
    commands = []
    if not args.analyse_only:
        if args.device == "cpu":
            facts = DeviceFacts(cuda=False, bf16=True)
        else:
            from dlbench.jobs.plans import device_facts  # heavy: torch, to size the suite
            facts = device_facts()
        configs = pick_configs(args.suite, args.configs.split(","), facts)
        if args.max_time:
            configs = [capped(c, args.max_time) for c in configs]
        commands = [" ".join(["dlbench"] + command_for(c, args.processes, args.db,
                                                       args.device)) for c in configs]
        Path(args.db).parent.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        finished = measure(configs, args.processes, args.db, args.device,
                           args.budget_s or None)
        print(f"measured for {time.monotonic() - t0:.0f} s", flush=True)
        if not finished:
            print("the time budget ran out: run the same command again to go on "
                  "(--resume completes what is missing)", flush=True)
    result = analyse(args.db, args.group, args.other)
    if args.analyse_only and args.out:
        # analysing again keeps the record of how the store was measured
        commands = _earlier_commands(Path(args.out), args.db)
    result["commands"] = commands
    print_table(result)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

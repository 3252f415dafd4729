"""Coverage: how often does a stated 95% interval hold the figure a config really has?

For K configs of a suite (default: five of the default GPU suite), each is measured in M fresh
processes through dlbench itself (``dlbench throughput ... --repeat M --resume`` into one store,
telemetry off, the suite's warm-up and windows). The reference figure of a config is the mean
over all its processes. From the store this script then counts, per config and overall:

  (a) how often one process's stated 95% interval covers the reference: with the interval
      dlbench states now (``stats.interval``: batch means over 200+ steps, else from the
      effective sample size) and with the old one (``stats.mean_interval_batch_means``: batch
      means at any length, a plain t over steps below 40 steps);
  (b) how often the across-process interval of a group of R processes (the suites' repeat
      count, ``suites.DEFAULT_REPEAT``) covers it, over every R-combination of the M processes.
      The reference includes the group's own processes, which helps it a little; the held-out
      column uses the mean of the other M - R processes instead;
  (c) with --other (a store of the same configs from another card, e.g. this script run there):
      the difference of the two cards' references, and that difference over the stated
      half-widths (one process's median, a group of R's median, the reference's own).

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
    # CPU, tiny models (the test does this): 2 configs x 3 processes, about a minute
    PYTHONPATH=src python3 benchmarks/coverage.py --suite smoke --configs tiny_cnn:train,tiny_cnn:eval \\
        --processes 3 --group 2 --device cpu --db /tmp/cov.db --out /tmp/cov.json
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
from pathlib import Path
from typing import Any, Sequence

SRC = str(Path(__file__).resolve().parents[1] / "src")
sys.path.insert(0, SRC)

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


def command_for(cfg, processes: int, db: str, device: str) -> list[str]:
    """The dlbench command that measures ``cfg`` as the suite does, in ``processes`` fresh
    processes (telemetry off: it waits for the idle power to settle before each process, and
    the intervals do not depend on it)."""
    stop = cfg.stop
    cmd = [sys.executable, "-m", "dlbench", "throughput", "-m", cfg.model,
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
        cmd = command_for(cfg, processes, db, device)
        left = None if budget_s is None else budget_s - (time.monotonic() - t0)
        if left is not None and left <= 0:
            return False
        print("$ " + " ".join(cmd[1:]), flush=True)
        # its tables go nowhere: this script prints its own; progress and errors stay on stderr
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            p for p in (SRC, os.environ.get("PYTHONPATH")) if p))
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


def analyse_config(procs: list, group: int) -> dict[str, Any]:
    """Coverage of the reference (mean of every process) by one process's interval, old and
    new, and by the across-process interval of every ``group``-combination."""
    figs = [figure(r) for r in procs]
    ref, ref_h = stats.across_processes(figs)
    new = [r.summary().throughput_low <= ref <= r.summary().throughput_high for r in procs]
    old = [lo <= ref <= hi for lo, hi in map(old_bounds, procs)]
    combos = list(itertools.combinations(range(len(figs)), group)) if len(figs) > group else []
    hits = held_hits = held_n = 0
    widths = []
    for idx in combos:
        m, h = stats.across_processes([figs[i] for i in idx])
        hits += abs(m - ref) <= h
        widths.append(h / m)
        rest = [figs[i] for i in range(len(figs)) if i not in idx]
        held = stats.mean(rest)
        held_hits += abs(m - held) <= h
        held_n += 1
    methods: dict[str, int] = {}
    for r in procs:
        methods[r.summary().interval_method] = methods.get(r.summary().interval_method, 0) + 1
    first = procs[0]
    return {
        "label": first.config.label,
        "key": first.config.key(),
        "unit": first.unit,
        "processes": len(procs),
        "reference": ref,
        "reference_rel_halfwidth": ref_h / ref if math.isfinite(ref_h) else None,
        "process_figures": figs,
        "spread_rel": (max(figs) - min(figs)) / ref,
        "steps": [r.summary().steps for r in procs],
        "interval_methods": methods,
        "one_process": {
            "new_covered": sum(new), "old_covered": sum(old), "n": len(procs),
            "new_median_rel_halfwidth": stats.percentile(
                [r.summary().rel_halfwidth for r in procs], 50),
            "old_median_rel_halfwidth": stats.percentile(
                [_old_rel(r) for r in procs], 50),
        },
        "group": {
            "size": group, "combinations": len(combos), "covered": hits,
            "held_out_covered": held_hits, "held_out_n": held_n,
            "median_rel_halfwidth": stats.percentile(widths, 50) if widths else None,
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


def analyse(db: str, group: int, other: str | None = None) -> dict[str, Any]:
    with Store(db) as store:
        by_key = processes_by_config(store)
    configs = {k: analyse_config(v, group) for k, v in by_key.items() if len(v) >= 2}
    total = {name: sum(c["one_process"][name] for c in configs.values())
             for name in ("new_covered", "old_covered", "n")}
    gtotal = {name: sum(c["group"][name] for c in configs.values())
              for name in ("covered", "combinations", "held_out_covered", "held_out_n")}
    result: dict[str, Any] = {
        "store": db, "group_size": group, "configs": list(configs.values()),
        "one_process": {**total,
                        "new_rate": total["new_covered"] / total["n"] if total["n"] else None,
                        "old_rate": total["old_covered"] / total["n"] if total["n"] else None},
        "group": {**gtotal,
                  "rate": (gtotal["covered"] / gtotal["combinations"]
                           if gtotal["combinations"] else None),
                  "held_out_rate": (gtotal["held_out_covered"] / gtotal["held_out_n"]
                                    if gtotal["held_out_n"] else None)},
        "env": _env_of(by_key),
    }
    if other:
        with Store(other) as store:
            theirs = processes_by_config(store)
        other_configs = {k: analyse_config(v, group) for k, v in theirs.items() if len(v) >= 2}
        result["other"] = {"store": other, "env": _env_of(theirs),
                           "cards": compare_cards(configs, other_configs)}
    return result


def _env_of(by_key: dict[str, list]) -> dict | None:
    for recs in by_key.values():
        return recs[0].env
    return None


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def print_table(result: dict[str, Any]) -> None:
    g = result["group_size"]
    print(f"{'config':44} {'procs':>5} {'spread':>7} {'1 proc new':>10} {'1 proc old':>10} "
          f"{'group of ' + str(g):>11} {'held out':>9}")
    for c in result["configs"]:
        one, grp = c["one_process"], c["group"]
        print(f"{c['label'][:44]:44} {c['processes']:5d} {_pct(c['spread_rel']):>7} "
              f"{one['new_covered']:>4}/{one['n']:<5} {one['old_covered']:>4}/{one['n']:<5} "
              f"{grp['covered']:>5}/{grp['combinations']:<5} "
              f"{grp['held_out_covered']:>4}/{grp['held_out_n']:<4}")
    one, grp = result["one_process"], result["group"]
    print(f"one process's 95% interval covers the reference: new {_pct(one['new_rate'])}, "
          f"old {_pct(one['old_rate'])} of {one['n']} processes; a group of {g}'s: "
          f"{_pct(grp['rate'])} of {grp['combinations']} groups ({_pct(grp['held_out_rate'])} "
          "against the other processes' mean)")
    for card in (result.get("other") or {}).get("cards", []):
        print(f"other card: {card['label'][:44]}: {card['difference_rel']:+.2%} "
              f"(x{_num(card['over_one_process_halfwidth'])} one process's half-width, "
              f"x{_num(card['over_group_halfwidth'])} a group's, "
              f"x{_num(card['over_reference_halfwidth'])} the reference's; the two "
              f"references' own half-widths combined: {_pct(card['references_rel_halfwidth'])})")


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


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
        commands = [" ".join(["dlbench"] + command_for(c, args.processes, args.db,
                                                       args.device)[3:]) for c in configs]
        Path(args.db).parent.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        finished = measure(configs, args.processes, args.db, args.device,
                           args.budget_s or None)
        print(f"measured for {time.monotonic() - t0:.0f} s", flush=True)
        if not finished:
            print("the time budget ran out: run the same command again to go on "
                  "(--resume completes what is missing)", flush=True)
    result = analyse(args.db, args.group, args.other)
    result["commands"] = commands
    print_table(result)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

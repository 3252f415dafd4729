"""How often does `dlbench compare` fail identical code, and how often does it catch a 5% slowdown?

    python benchmarks/gate.py --out gate-cpu.json              # the CPU: 16.5 min on 2 shared cores
    python benchmarks/gate.py --device cuda --out gate-gpu.json
    python benchmarks/gate.py --merge gpu0.json gpu1.json --out gate-gpu.json  # runs as one

Every trial measures, with real `dlbench throughput --repeat R` commands into a real SQLite
store, three sides of one tiny model (this file's ``build``): A, A2 (identical code: the same
command again) and S (the same model made 5% slower), in a rotating order. It then judges:

- across processes (R processes a side): A2 against A (a regression there is a false alarm)
  and S against A (a regression there is a detection);
- one process a side: the first process of each side alone, as `dlbench compare` judges two
  one-process runs (against the stored run-to-run spread of the device, else inconclusive),
  and, for reference, as the test before it did (Welch's t on the two windows' step times).

The slowdown: ``DLBENCH_GATE_SLOWDOWN=0.05`` makes the model's forward first wait 5% of the
step's own time (the median of its last 9 steps, the wait itself taken out): on the CPU a
busy-wait on the host, as slower code would spend; on a GPU a spin kernel on the GPU's stream
(``torch.cuda._sleep``, calibrated once against CUDA events). A step is
then 1.05x as long, and the figure B/A about 1 / 1.05 = 0.952: below the default --threshold of
0.05 only by chance, which is why the gate is asked here with --threshold 0.02 (a gate meant to
catch 5% must be set below 5%). The model's name (this file) is the same on every side, so
compare matches the three sides as one config.

On a GPU the step must be bound by the GPU, or the spin kernel only fills time the GPU would
have spent idle, waiting for Python to launch the next kernel: the first GPU run (one H100,
32-pixel images at batch 256, `results/pt2.11-cu130-2x-h100/gate-gpu.json`) had steps of about
2.5 ms, windows up to ±69% wide, and a slowed side no slower than the others. Images are
therefore 128 pixels on a GPU (16x the work a step): steps of about 17 ms on an H100, which
the GPU bounds (`results/pt2.11-cu130-2x-h100/gate-128/`, 15 trials on six cards).

On the CPU each process runs torch on one thread (``OMP_NUM_THREADS=1``): on a 2-core machine
shared with other work, a 2-thread step stalls for whole scheduler slices (steps of 0.5 s among
steps of 10 ms) whenever the other core is busy, and a figure then says more about the
neighbours than about the code.

Prints one line per trial and a summary with each rate's 95% Wilson interval; --out writes
JSON with the config, the environment and every trial (each side's record ids and process
figures, each comparison's pair). The rates' uncertainty is the binomial one of the trials.

--merge joins runs made with the same settings (one per GPU of a host, or one per call of a
time-limited machine) into one JSON: every trial keeps the run it came from (``run``: the index
into ``runs``, which holds each run's file, command, environment and store), and the summary is
recomputed over all of them. Runs with different settings are refused: their rates do not add.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from dlbench import InputSpec  # noqa: E402

#: How much slower the S side's model is: the fraction of a step's own time it waits.
SLOWDOWN_ENV = "DLBENCH_GATE_SLOWDOWN"
SIDES = ("A", "A2", "S")


# -- the model: a tiny CNN, optionally slowed ------------------------------------------------------
class Slowed(nn.Module):
    """``inner``, whose every forward first waits ``fraction`` of the step's own time.

    A step's own time is the time between two forward calls less the wait this module added;
    the wait is ``fraction`` times the median of the last 9 (a step that held a one-off pause
    does not make the next wait long). ``clock`` and ``wait`` are injectable for tests."""

    def __init__(self, inner: nn.Module, fraction: float,
                 clock: Callable[[], float] = time.perf_counter,
                 wait: Callable[[float, torch.Tensor], None] | None = None) -> None:
        super().__init__()
        self.inner, self.fraction, self.clock = inner, fraction, clock
        self.wait = wait or _wait
        self._last: float | None = None
        self._waited = 0.0
        self._own: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        now = self.clock()
        if self.fraction and self._last is not None:
            self._own = (self._own + [now - self._last - self._waited])[-9:]
            self._waited = self.fraction * statistics.median(self._own)
            self.wait(self._waited, x)
        self._last = now
        return self.inner(x)


_CYCLES_PER_S: float | None = None


def _wait(seconds: float, x: torch.Tensor) -> None:
    """Spend ``seconds`` where the step's time is spent: the host on the CPU, the GPU's stream
    on a GPU (a host-side wait would hide in the slack of a step the GPU bounds)."""
    global _CYCLES_PER_S
    if x.is_cuda:
        if _CYCLES_PER_S is None:  # once: how many spin cycles a second is on this GPU
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(10_000_000)
            end.record()
            end.synchronize()  # a sync point, in the first (warm-up) step only
            _CYCLES_PER_S = 10_000_000 / (start.elapsed_time(end) / 1e3)
        torch.cuda._sleep(int(seconds * _CYCLES_PER_S))
        return
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:  # busy: slower code spends the CPU, it does not sleep
        pass


def build(input_size: int | None = None) -> tuple[nn.Module, InputSpec]:
    """Three conv blocks on 32-pixel images, 10 classes (about 25k parameters), slowed by
    ``$DLBENCH_GATE_SLOWDOWN`` (a fraction; 0 or unset: not at all)."""
    size = input_size or 32
    layers: list[nn.Module] = []
    channels = 3
    for width in (16, 32, 64):
        layers += [nn.Conv2d(channels, width, 3, padding=1, bias=False), nn.BatchNorm2d(width),
                   nn.ReLU(inplace=True), nn.MaxPool2d(2)]
        channels = width
    model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 10))
    fraction = float(os.environ.get(SLOWDOWN_ENV) or 0.0)
    return Slowed(model, fraction), InputSpec(kind="image", input_size=size, num_classes=10,
                                              default_batch=32,
                                              description="the gate experiment's tiny CNN")


# -- judging one trial: pure functions on records ------------------------------------------------
def wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion k/n (95% by default)."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def rate_text(k: int, n: int) -> str:
    """``3 of 18 (16.7%, 95% Wilson 5.8-39.2%)``: the form the compare guide quotes."""
    lo, hi = wilson(k, n)
    return f"{k} of {n} ({k / n:.1%}, 95% Wilson {lo:.1%}-{hi:.1%})" if n else "0 of 0"


def alone(r: Any) -> Any:
    """A process of a repeat group as if measured alone (one process a side)."""
    return dataclasses.replace(r, repeat_group=None, repeat_index=None, repeat_count=None)


def former_gate(a: Any, b: Any, threshold: float, alpha: float) -> dict[str, Any]:
    """What `dlbench compare` said of one process a side before run-to-run variance was
    allowed for: Welch's t on the two windows' step times, a regression when p < alpha and the
    ratio is worse than 1 - threshold."""
    from dlbench.report.compare import welch_t
    ratio = b.summary().throughput / a.summary().throughput
    p = welch_t(a.step_times_s, b.step_times_s).p
    return {"ratio": ratio, "p": p, "regression": p < alpha and ratio < 1.0 - threshold}


def judge(a: Sequence[Any], b: Sequence[Any], threshold: float, alpha: float,
          spreads: dict | None = None) -> dict[str, Any]:
    """Side B against side A, each the ok records of one --repeat group: across processes, and
    with the first process of each alone (today's rule and the former one)."""
    from dlbench.report import compare as cmp
    groups = cmp.compare(a, b, threshold, alpha, spreads=spreads)
    first_a, first_b = alone(min(a, key=_index)), alone(min(b, key=_index))
    one = cmp.compare([first_a], [first_b], threshold, alpha, spreads=spreads)
    return {"processes": cmp.to_dict(groups)["pairs"][0],
            "one_process": cmp.to_dict(one)["pairs"][0],
            "former_one_process": former_gate(first_a, first_b, threshold, alpha)}


def _index(r: Any) -> int:
    return r.repeat_index if r.repeat_index is not None else 0


def outcome(pair: dict[str, Any]) -> str:
    """regression | inconclusive | pass, of one judged pair (to_dict's layout, or the former
    test's dict)."""
    if pair["regression"]:
        return "regression"
    return "inconclusive" if pair.get("basis") == "inconclusive" else "pass"


def summarize(trials: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Counts over the trials: false alarms (A2 against A) and detections (S against A), for
    each way of judging; with the Wilson interval of each rate."""
    def count(which: str, how: str, result: str) -> dict[str, Any]:
        k = sum(outcome(t[which][how]) == result for t in trials)
        lo, hi = wilson(k, len(trials))
        return {"k": k, "n": len(trials), "rate": k / len(trials) if trials else math.nan,
                "wilson95": [lo, hi], "text": rate_text(k, len(trials))}
    out: dict[str, Any] = {}
    for how in ("processes", "one_process", "former_one_process"):
        out[how] = {"false_alarms": count("identical", how, "regression"),
                    "detections": count("slowed", how, "regression")}
    out["one_process"]["inconclusive_identical"] = count("identical", "one_process",
                                                         "inconclusive")
    out["one_process"]["inconclusive_slowed"] = count("slowed", "one_process", "inconclusive")
    ratios = {w: [t[w]["processes"]["ratio"] for t in trials] for w in ("identical", "slowed")}
    out["mean_ratio"] = {w: statistics.fmean(v) if v else math.nan for w, v in ratios.items()}
    return out


def trial_line(i: int, n: int, t: dict[str, Any]) -> str:
    def show(p: dict[str, Any]) -> str:
        return f"{p['ratio']:.3f}x {outcome(p)}"
    same, slow = t["identical"], t["slowed"]
    return (f"trial {i + 1}/{n} [{' '.join(t['order'])}]  across processes: identical "
            f"{show(same['processes'])}, slowed {show(slow['processes'])}  | one process a "
            f"side: {show(same['one_process'])}, {show(slow['one_process'])}  | former test: "
            f"{outcome(same['former_one_process'])}, {outcome(slow['former_one_process'])}")


# -- measuring -----------------------------------------------------------------------------------
def measure(side: str, tag: str, args: argparse.Namespace, db: Path) -> float:
    """One side: `dlbench throughput --repeat R` of this file's model into ``db`` under ``tag``;
    its wall time."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get(
        "PYTHONPATH", ""))
    env[SLOWDOWN_ENV] = str(args.slowdown if side == "S" else 0.0)
    if args.device == "cpu" and args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    cmd = [sys.executable, "-m", "dlbench", "throughput", "-m", "benchmarks/gate.py:build",
           "-b", str(args.batch), "--input-size", str(args.input_size), "--device", args.device,
           "--repeat", str(args.repeat),
           "--warmup", "5", "--warmup-time", str(args.warmup_time), "--min-time",
           str(args.min_time), "--max-time", str(args.max_time), "--db", str(db.resolve()),
           "--tag", tag, "-q"]
    t0 = time.perf_counter()
    # from the repository root: the model's name (its config key) is the same on every side
    p = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-2000:]}")
    return time.perf_counter() - t0


def run_trials(args: argparse.Namespace, db: Path,
               done: Callable[[list[dict[str, Any]], Any], None] = lambda t, e: None
               ) -> tuple[list[dict[str, Any]], Any]:
    """The trials and the first side's environment; ``done`` is called after each trial with
    all so far, so a run cut off keeps its finished trials. Ctrl-C (or the SIGINT of a
    ``timeout``) ends the loop and returns what finished."""
    trials: list[dict[str, Any]] = []
    env: Any = {}
    try:
        for i in range(args.trials):
            t, env = one_trial(i, args, db)
            trials.append(t)
            print(trial_line(i, args.trials, t), flush=True)
            done(trials, env)
    except KeyboardInterrupt:
        print(f"interrupted: {len(trials)} finished trial(s) kept", flush=True)
    return trials, env


def one_trial(i: int, args: argparse.Namespace, db: Path) -> tuple[dict[str, Any], Any]:
    """Trial ``i``: the three sides measured in a rotating order, then judged."""
    from dlbench.store import Store
    order = SIDES[i % 3:] + SIDES[:i % 3]  # who goes first rotates: drift hits every side
    walls = {side: measure(side, f"gate-{i}-{side}", args, db) for side in order}
    with Store(db) as store:
        recs = {side: [r for r in store.results(tag=f"gate-{i}-{side}") if r.ok]
                for side in SIDES}
    if any(len(v) < 2 for v in recs.values()):
        raise RuntimeError(f"trial {i}: a side has fewer than 2 ok processes: "
                           f"{ {k: len(v) for k, v in recs.items()} }")
    t = {"order": list(order), "wall_s": walls,
         "sides": {s: {"records": [r.id for r in v],
                       "figures": [r.summary().throughput for r in v],
                       "within_rel_halfwidth": [r.summary().rel_halfwidth for r in v]}
                   for s, v in recs.items()},
         "identical": judge(recs["A"], recs["A2"], args.threshold, args.alpha),
         "slowed": judge(recs["A"], recs["S"], args.threshold, args.alpha)}
    return t, recs["A"][0].env


def summary_lines(s: dict[str, Any], config: dict[str, Any]) -> list[str]:
    n = s["processes"]["false_alarms"]["n"]
    lines = [f"{n} trials, --repeat {config['repeat']}, --threshold {config['threshold']}, "
             f"--alpha {config['alpha']}, slowdown {config['slowdown']:.0%} of a step; mean B/A "
             f"across processes: identical {s['mean_ratio']['identical']:.4f}, slowed "
             f"{s['mean_ratio']['slowed']:.4f}"]
    for how, name in (("processes", f"across processes ({config['repeat']} a side)"),
                      ("one_process", "one process a side"),
                      ("former_one_process", "one process a side, the former Welch test")):
        lines.append(f"{name}: false alarms {s[how]['false_alarms']['text']}; detections "
                     f"{s[how]['detections']['text']}")
    lines.append(f"one process a side, inconclusive: identical "
                 f"{s['one_process']['inconclusive_identical']['text']}, slowed "
                 f"{s['one_process']['inconclusive_slowed']['text']}")
    return lines


#: The settings that must agree for two runs' trials to be counted together.
SAME_IN_A_MERGE = ("device", "repeat", "threshold", "alpha", "slowdown", "batch", "input_size",
                   "threads", "warmup_time", "min_time", "max_time")


def merge(docs: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Runs of this experiment (``(name, JSON)`` each) as one: the trials in order, each with
    ``run`` (its run's index in ``runs``); the summary recomputed over all."""
    if not docs:
        raise ValueError("nothing to merge")
    first = docs[0][1]["config"]
    for name, doc in docs[1:]:
        differ = [k for k in SAME_IN_A_MERGE if doc["config"].get(k) != first.get(k)]
        if differ:
            raise ValueError(f"{name} was run with other settings ({', '.join(differ)}): "
                             "its trials do not count with the others")
    trials = [dict(t, run=i) for i, (_, doc) in enumerate(docs) for t in doc["trials"]]
    return {"about": docs[0][1]["about"], "config": {k: first.get(k) for k in SAME_IN_A_MERGE},
            "runs": [{"file": name, "command": doc["command"], "store": doc["config"].get("db"),
                      "wall_s": doc["wall_s"], "trials": len(doc["trials"]),
                      "environment": doc["environment"]} for name, doc in docs],
            "summary": summarize(trials), "trials": trials}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--trials", type=int, default=18,
                    help="trials; each measures three sides of --repeat processes (default 18: "
                         "16.5 minutes on 2 shared CPU cores)")
    ap.add_argument("--repeat", type=int, default=3, help="processes a side (default 3)")
    ap.add_argument("--threshold", type=float, default=0.02,
                    help="compare's --threshold (default 0.02: below the 5%% slowdown)")
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--slowdown", type=float, default=0.05,
                    help="S's wait, a fraction of a step's own time (default 0.05)")
    ap.add_argument("--batch", type=int, default=None,
                    help="batch size (default 32 on the CPU, 256 on a GPU)")
    ap.add_argument("--input-size", type=int, default=None,
                    help="image side in px (default 32 on the CPU; 128 on a GPU, where 32-px "
                         "steps of about 2.5 ms were bound by Python's launches, not the GPU)")
    ap.add_argument("--threads", type=int, default=1,
                    help="CPU: OMP_NUM_THREADS of every process (default 1; 0 leaves it)")
    ap.add_argument("--warmup-time", type=float, default=0.5)
    ap.add_argument("--min-time", type=float, default=1.5, help="window: at least (s)")
    ap.add_argument("--max-time", type=float, default=3.0, help="window: at most (s)")
    ap.add_argument("--db", type=Path, help="the store (default: a temporary one)")
    ap.add_argument("--out", type=Path, help="write the JSON here")
    ap.add_argument("--merge", type=Path, nargs="+", metavar="JSON",
                    help="measure nothing: join these runs' JSON (same settings) into --out")
    args = ap.parse_args(argv)
    if args.merge:
        if not args.out:
            ap.error("--merge writes one JSON: give --out")
        try:
            doc = merge([(str(f), json.loads(f.read_text())) for f in args.merge])
        except (OSError, ValueError) as exc:
            print(f"gate.py --merge: {exc}", file=sys.stderr)
            return 2
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
        print("\n".join(summary_lines(doc["summary"], doc["config"])))
        print(f"wrote {args.out} ({len(doc['trials'])} trials from {len(doc['runs'])} runs)")
        return 0
    args.batch = args.batch or (32 if args.device == "cpu" else 256)
    args.input_size = args.input_size or (32 if args.device == "cpu" else 128)
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    t0 = time.time()
    command = "python benchmarks/gate.py " + " ".join(sys.argv[1:] if argv is None else argv)

    def write(trials: list[dict[str, Any]], env: Any) -> None:
        if args.out and trials:
            doc = {"about": "benchmarks/gate.py: false alarms of dlbench compare on identical "
                            "code and detections of a slowdown, from real dlbench throughput runs",
                   "command": command, "config": config, "wall_s": time.time() - t0,
                   "environment": env, "summary": summarize(trials), "trials": trials}
            args.out.write_text(json.dumps(doc, indent=1) + "\n")

    with tempfile.TemporaryDirectory() as tmp:
        trials, env = run_trials(args, args.db or Path(tmp) / "gate.db", write)
    if not trials:
        print("no trial finished: nothing to judge", file=sys.stderr)
        return 1
    print("\n" + "\n".join(summary_lines(summarize(trials), config)))
    if args.out:
        write(trials, env)
        print(f"wrote {args.out} ({len(trials)} of {args.trials} trials)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Your own models on your GPU, through the command line and the Python API, into one store.

Measures one timm model and one Hugging Face config (built from their configs with random
weights: nothing is downloaded) twice each: once with ``dlbench throughput`` in a fresh process
and once with ``dlbench.measure_throughput`` in this one, into the same store. Then prints both
figures with their 95% intervals, and whether they agree: the two intervals overlap, or the
gap between the figures is under ``--tolerance`` (run-to-run variation between processes is
not inside a one-process interval, so two honest figures can be a fraction of a percent apart
with intervals narrower than that).

    PYTHONPATH=src python3 benchmarks/own_models.py --out results/own-models-h100

(one H100: about 1.5 minutes). It writes OUT/dlbench.db (four throughput records, tagged
``cli`` and ``api``), OUT/cli.log (the command line's own tables), OUT/throughput.csv (``dlbench results export``), OUT/agreement.json and
OUT/agreement.md (the table printed). Exit 0 when every pair agrees, 1 when one does not, 2 on
bad arguments. On a CPU, ``--quick`` makes everything small (the test suite runs it so).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

import dlbench  # noqa: E402  (after the path: the script runs from a checkout)


@dataclass(frozen=True)
class Case:
    """One model measured both ways: its name, batch, input size and settings."""

    model: str
    batch: int
    input_size: int | None
    channels_last: bool


#: On a GPU: an ImageNet CNN of timm and GPT-2 small built from GPT2Config(), in bf16.
GPU_CASES = (Case("timm:convnext_tiny", 128, None, True), Case("hf:gpt2", 16, 1024, False))
#: On a CPU (--quick): the same sources, small enough to run in seconds.
QUICK_CASES = (Case("timm:resnet18", 4, 32, False),
               Case("hf:gpt2?n_layer=2&n_embd=64&n_head=2", 2, 32, False))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path, help="output folder (created)")
    p.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N")
    p.add_argument("--precision", default=None,
                   help="default: bf16 on a GPU, fp32 with --quick")
    p.add_argument("--max-time", type=float, default=10.0,
                   help="longest measured window, seconds (default 10)")
    p.add_argument("--tolerance", type=float, default=0.02,
                   help="figures this close (a fraction) agree even where the intervals do "
                        "not overlap (default 0.02)")
    p.add_argument("--quick", action="store_true",
                   help="tiny models, fp32, short windows: a check of the script on a CPU")
    args = p.parse_args(argv)
    if args.out.exists() and (args.out / "dlbench.db").exists():
        p.error(f"{args.out / 'dlbench.db'} exists; pick a new --out")
    args.out.mkdir(parents=True, exist_ok=True)
    db = args.out / "dlbench.db"
    cases = QUICK_CASES if args.quick else GPU_CASES
    precision = args.precision or ("fp32" if args.quick else "bf16")
    window = (dict(min_steps=5, min_seconds=0.1, max_seconds=min(args.max_time, 2.0),
                   warmup_steps=1, warmup_seconds=0.0) if args.quick
              else dict(min_steps=20, min_seconds=2.0, max_seconds=args.max_time,
                        warmup_steps=10, warmup_seconds=1.0))

    pairs = []
    t0 = time.perf_counter()
    for case in cases:
        cli = _cli(case, db, args.device, precision, window)
        api = dlbench.measure_throughput(
            case.model, batch_size=case.batch, precision=precision, device=args.device,
            input_size=case.input_size, channels_last=case.channels_last, db=db, tag="api",
            stop=dlbench.StopRule(min_steps=window["min_steps"],
                                  min_seconds=window["min_seconds"],
                                  max_seconds=window["max_seconds"]),
            warmup_steps=window["warmup_steps"], warmup_seconds=window["warmup_seconds"])
        pairs.append((case, cli, api))
        _release()  # the next command-line process gets the memory this one cached
    wall = time.perf_counter() - t0

    rows = [_compare(case, cli, api, args.tolerance) for case, cli, api in pairs]
    text = _table(rows, api.env, wall)
    print(text)
    (args.out / "agreement.md").write_text(text + "\n")
    (args.out / "agreement.json").write_text(json.dumps(rows, indent=1) + "\n")
    subprocess.run([sys.executable, "-m", "dlbench", "results", "export", "--db", str(db),
                    "--format", "csv", "--kind", "throughput", "-o",
                    str(args.out / "throughput.csv")], env=_env(), check=True)
    return 0 if all(r["agree"] for r in rows) else 1


def _release() -> None:
    import gc

    import torch  # heavy: loaded already by the measurement
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=str(REPO / "src") + os.pathsep
                + os.environ.get("PYTHONPATH", ""))


def _cli(case: Case, db: Path, device: str, precision: str, window: dict):
    """``dlbench throughput`` in a fresh process; its record read back from the store."""
    cmd = [sys.executable, "-m", "dlbench", "throughput", "-m", case.model,
           "-b", str(case.batch), "--precision", precision, "--device", device,
           "--warmup", str(window["warmup_steps"]),
           "--warmup-time", str(window["warmup_seconds"]),
           "--min-steps", str(window["min_steps"]), "--min-time", str(window["min_seconds"]),
           "--max-time", str(window["max_seconds"]), "--db", str(db), "--tag", "cli", "-q"]
    if case.input_size:
        cmd += ["--input-size", str(case.input_size)]
    if case.channels_last:
        cmd += ["--channels-last", "on"]
    print("$ python3 " + shlex.join(cmd[1:]), file=sys.stderr, flush=True)
    with open(db.parent / "cli.log", "a") as log:  # its tables; this script prints the comparison
        subprocess.run(cmd, env=_env(), check=True, stdout=log)
    record = [r for r in dlbench.load(db, tag="cli") if r.config.model == case.model][-1]
    if not record.ok:
        raise SystemExit(f"{case.model}: the command line's measurement failed: {record.error}")
    return record


def _figure(rec) -> dict:
    s = rec.summary()
    k = rec.units_per_sample  # tokens per sequence for a language model, else 1
    high = s.throughput_high * k
    return {"per_s": s.throughput * k, "low": s.throughput_low * k,
            "high": high if math.isfinite(high) else None,  # None: unbounded (JSON has no inf) "rel_halfwidth": s.rel_halfwidth,
            "steps": s.steps, "run": rec.run_id, "id": rec.id}


def _compare(case: Case, cli, api, tolerance: float) -> dict:
    a, b = _figure(cli), _figure(api)
    gap = abs(a["per_s"] - b["per_s"]) / max(a["per_s"], b["per_s"])
    # An unbounded interval (too few steps) overlaps everything and so says nothing: unknown.
    bounded = all(f["high"] is not None and f["low"] > 0 for f in (a, b))
    overlap = (a["low"] <= b["high"] and b["low"] <= a["high"]) if bounded else None
    return {"model": case.model, "batch": case.batch, "precision": cli.config.precision,
            "unit": cli.unit, "cli": a, "api": b, "gap": gap, "intervals_overlap": overlap,
            "agree": bool(overlap) or gap <= tolerance, "tolerance": tolerance,
            "tflops_cli": cli.achieved_tflops(), "tflops_api": api.achieved_tflops()}


def _yes_no(flag: bool | None) -> str:
    return "unbounded" if flag is None else ("yes" if flag else "no")


def _table(rows: list[dict], env: dict, wall: float) -> str:
    gpus = env.get("gpus") or [{}]
    device = gpus[0].get("name") or env.get("cpu_model") or "?"
    pk = env.get("packages") or {}
    lines = [f"Own models through the CLI and the API on {device} (torch {pk.get('torch')}, "
             f"timm {pk.get('timm')}, transformers {pk.get('transformers')}); {wall:.0f} s",
             "", "| model | batch | prec | CLI (95% interval) | API (95% interval) | gap | "
             "intervals overlap | agree |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        u = {"images": "img/s", "tokens": "tok/s", "sequences": "seq/s"}.get(r["unit"], "/s")
        def cell(f: dict) -> str:
            high = "inf" if f["high"] is None else f"{f['high']:,.0f}"
            return f"{f['per_s']:,.0f} {u} ({f['low']:,.0f}-{high}), {f['steps']} steps"
        lines.append(f"| {r['model']} | {r['batch']} | {r['precision']} | {cell(r['cli'])} | "
                     f"{cell(r['api'])} | {r['gap']:.2%} | {_yes_no(r['intervals_overlap'])} "
                     f"| {'yes' if r['agree'] else 'NO'} |")
    lines += ["", "gap = |CLI - API| / the larger; agree = the intervals overlap or the gap is "
              f"under {rows[0]['tolerance']:.0%} (run-to-run variation between processes is "
              "not inside a one-process interval)"]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

"""``dlbench peak``, ``dlbench roofline`` and ``dlbench gpus``: how close to the hardware."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from dlbench import env as envmod
from dlbench import reference as ref
from dlbench.commands.common import (
    EXIT_FAILED_RESULTS,
    EXIT_INTERRUPTED,
    EXIT_OK,
    add_command,
    add_output_flags,
    add_store_flags,
    csv_list,
    device,
    flatten,
    metavar,
    one_of,
    print_json,
    show_table,
)
from dlbench.config import PRECISIONS, ConfigError
from dlbench.measure.mfu import device_key, mfu
from dlbench.records import compat
from dlbench.records.peak import METHODS as PEAK_METHODS
from dlbench.report import cards, export, tables, terminal
from dlbench.store import Store, StoreError
from dlbench.reference import today
from dlbench.workloads.gpu_fit import SOURCE_IDS, can_fit, fit_gpus, fit_models, place

ORDER = 30
#: ``peak --method``. The sustained figures are estimates (tests/test_peak.py holds them to
#: dlbench.workloads.peak.sweep_estimate_s of the plan); the burst ones were measured on an
#: H100 (docs/ceilings.md).
METHOD_HELP = (
    "sustained (default, on a GPU and on the CPU): each precision's sweep opens with a device "
    "warm-up of a large product of that precision (30 s on a GPU, 2 s on the CPU, where clocks "
    "ramp up in milliseconds and 100 iterations of its largest shapes would take minutes), then "
    "times every shape for a fixed number of iterations (a GPU: 10 untimed and 100 timed, as "
    "mamf-finder reports them; the CPU: 1 and 10); each shape's mean and median, the ceiling "
    "the best mean. On a GPU the bf16, fp16 and fp8 grid has 442 shapes, M and N from 2048, K "
    "up to 16384, and mamf-finder's best H100 shape 2048x2048x13312: about 100 s a precision "
    "on an H100 (an estimate, not a measurement: the bf16 grid's FLOPs at 750 TFLOP/s and the "
    "30 s warm-up), so every precision takes several minutes. burst: each shape timed for about "
    "0.1 s (10 to 50 iterations after 3 untimed ones) on the 76-shape grid, no warm-up, the "
    "ceiling the best median; measured on an H100: 18 s for every verb and precision, 5 s for "
    "--precision bf16 --verbs matmul. --quick keeps either at seconds")
#: ``gpus --source`` by the reference data's own ids (accepted, not shown).
OLD_SOURCES = compat.ARTICLES


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(
        sub, "peak", help="measure the device's ceilings: matmul TFLOP/s, memory and transfer GB/s",
        description="Matrix-multiply TFLOP/s over a sweep of shapes per precision (random data, "
                    "L2 flushed between iterations; on a GPU a mamf-finder-style grid for "
                    "bf16, fp16 and fp8, five large shapes for fp32 and tf32), timed by "
                    "--method: sustained (default) warms the device up, then reports each "
                    "shape's mean and median over a fixed number of iterations, the ceiling "
                    "being the best mean (mamf-finder's figure) with the best median beside "
                    "it; burst is dlbench's method before it (short windows, no warm-up, the "
                    "best median). Also device memory bandwidth (copy, read, write), "
                    "host<->device (pinned, pageable) and GPU<->GPU bandwidth, timed the burst "
                    "way under either method. On a machine without a GPU the same verbs "
                    "measure the CPU.",
        epilog="examples:\n  dlbench peak\n  dlbench peak --precision bf16,fp8 --verbs matmul\n"
               "  dlbench peak --method burst\n  dlbench peak --quick --device cpu",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--method", type=one_of(PEAK_METHODS, flag="method"), default=PEAK_METHODS[0],
                   metavar=metavar(PEAK_METHODS), help=METHOD_HELP)
    p.add_argument("--precision", action="append", type=csv_list(),
                   help="matmul precisions (default: all the device has of "
                        "fp32,tf32,fp16,bf16,fp8; the CPU: fp32,bf16)")
    p.add_argument("--verbs", action="append", type=csv_list(),
                   help="matmul, memory, transfer, p2p (default: all)")
    p.add_argument("--quick", action="store_true", help="small shapes and buffers (seconds)")
    p.add_argument("--device", default="auto", type=device,
                   help="auto (default), cpu, cuda, cuda:N")
    add_store_flags(p)
    p.add_argument("--tag", help="label this run")
    p.add_argument("--json", action="store_true", help="print the records as JSON on stdout")
    p.add_argument("-q", "--quiet", action="store_true", help="no line per point measured")
    p.set_defaults(handler=cmd_peak)

    p = add_command(
        sub, "roofline", help="MFU and the roofline of stored throughput results (PNG + SVG plot)",
        description="For every throughput result of a run: achieved TFLOP/s, MFU against the "
                    "datasheet and the measured peak, arithmetic intensity (FLOPs over the bytes "
                    "of a stated model, see dlbench.measure.roofline) and which roof bounds it; "
                    "a log-log plot of the device's two roofs with every model on it.")
    add_store_flags(p)
    p.add_argument("--run", default="latest-throughput",
                   help="run id prefix, 'latest', or 'latest-throughput' (default): the latest "
                        "run holding throughput results")
    p.add_argument("--tag", help="every run with this tag instead of one run")
    p.add_argument("-o", "--output", default="roofline",
                   help="plot path without extension (default: ./roofline -> .png and .svg)")
    p.add_argument("--no-plot", action="store_true", help="tables only")
    add_output_flags(p, "print as JSON on stdout, a list with one object per device: 'device', "
                        "'roofs' (source, bandwidth_gbs, compute_tflops per precision), "
                        "'results' (per throughput result: id, run_id, model, mode, batch_size, "
                        "precision, achieved_tflops, datasheet and measured peak and MFU, "
                        "why_no_mfu, intensity in FLOP/byte, bound) and 'plot' (the files "
                        "written; [] with --no-plot)",
                     "print only the MFU table, without its title and notes, nor the line "
                     "naming the roofs")
    p.set_defaults(handler=cmd_roofline)

    p = add_command(
        sub, "gpus", help="published results and GPU specs beside yours; speed fitted on TFLOPS",
        description="Published reference results (tf_cnn_benchmarks on 4x Quadro RTX 8000; "
                    "the classic per-model ms-per-batch figures; PyTorch vs TensorFlow on "
                    "CIFAR-10; each with its source) with the user's own rows beside them, and "
                    "the ms-per-batch article's analysis: speed (1/time) on the GPUs' TFLOPS, a "
                    "least-squares line through the origin, R^2, and a prediction with a 95% "
                    "interval for GPUs not measured (a lower bound below zero is clipped to 0 and "
                    "said). For today's models (-m llama-3.1-8b, -m resnet50, -m matmul for "
                    "the measured matmul ceilings; --today lists them) your own records of the "
                    "same model are placed beside the published per-GPU figures, each with its "
                    "source and conditions; a record that is not comparable (a CPU, a failure) "
                    "is shown with a note, never dropped.")
    add_store_flags(p)
    p.add_argument("-m", "--model", default="vgg16",
                   help="model of the fit (default vgg16), or of the placement among "
                        "published figures for a model the fit has no points of")
    p.add_argument("--mode", default="eval", choices=("eval", "train"))
    p.add_argument("--x", dest="x_precision", default="fp32", choices=PRECISIONS,
                   help="which datasheet TFLOPS the fit uses (default fp32, as the "
                        "ms-per-batch article)")
    p.add_argument("--predict", action="append", type=csv_list(),
                   help="spec ids to predict (default: every GPU with that figure); "
                        "'--specs' lists them")
    p.add_argument("--specs", action="store_true", help="print the spec table and exit")
    p.add_argument("--today", action="store_true",
                   help="print the published per-GPU figures for today's comparisons (each "
                        "with its source and conditions) and what was looked for and not "
                        "found, and exit")
    p.add_argument("--cards", action="store_true",
                   help="print the card-to-card spread measured across cards of one GPU model "
                        "(each config, its range, the records) and exit")
    p.add_argument("--source", type=one_of(tuple(SOURCE_IDS), OLD_SOURCES, "source"),
                   metavar=metavar(SOURCE_IDS),
                   help="print that source's published rows and exit: tf-cnn-benchmarks "
                        "(img/s, 1-4 GPUs, NVLink on/off), ms-per-batch (vgg16, resnet152, "
                        "densenet161 at batch 16), cifar10-frameworks (epoch times, PyTorch vs "
                        "TensorFlow)")
    add_output_flags(p, "print as JSON on stdout: the fit (model, mode, x, slope, r2, n, "
                        "points, predictions, clipped, skipped); for a model without a fit "
                        "the placement (model, published, own, notes); with --today the "
                        "published rows and left_out; with --specs the spec rows, with "
                        "--source that source and its rows, with --cards the card-to-card "
                        "spreads",
                     "print only the tables, without their titles and notes (the fit's "
                     "equation and R^2, the sources)")
    p.set_defaults(handler=cmd_gpus)


# -- peak ------------------------------------------------------------------------------------------
def cmd_peak(args: argparse.Namespace) -> int:
    from dlbench.jobs import runs  # heavy: torch

    plan = runs.peak_points(args.device, flatten(args.precision, []), flatten(args.verbs, []),
                            quick=args.quick)
    plan = _with_method(plan, args.method, args.quick)
    env = envmod.capture_environment()
    t0 = time.perf_counter()

    def line(rec) -> None:
        if not args.json and not args.quiet:
            terminal.stderr.print(
                f"{'[green]✓[/green]' if rec.ok else '[yellow]-[/yellow]'} {rec.config.label}: "
                + (tables.peak_figures(rec) if rec.ok else f"{rec.error_type}"), highlight=False)
    run = runs.run_peak(plan, args.db, getattr(args, "command_line", "dlbench peak"), env,
                        tag=args.tag, on_record=line)
    records = run.records
    if args.json:
        sys.stdout.write(export.to_json(records) + "\n")
    else:
        terminal.print_table(tables.peak_table(records, f"Ceilings of {envmod.device_label(env)}"))
    terminal.stderr.print(f"wall time {time.perf_counter() - t0:.1f} s; {len(records)} point(s) "
                          f"stored in {args.db} (run {run.run_id})")
    if run.interrupted:
        return EXIT_INTERRUPTED
    bad = [r for r in records if r.status != "ok" and r.error_type != "unsupported"]
    return EXIT_FAILED_RESULTS if bad else EXIT_OK


def _with_method(plan, method: str, quick: bool):
    """``plan`` (``runs.peak_points``', which plans the default method) with its matmuls
    planned for ``method``: that method's shapes and timing; the other points as they were."""
    if plan.sizes.method == method:
        return plan
    from dlbench.workloads.peak import default_plan, replan  # heavy: torch
    sizes = default_plan(plan.device, quick=quick, method=method)
    return dataclasses.replace(plan, sizes=sizes, points=replan(plan.points, plan.device, sizes))


# -- roofline --------------------------------------------------------------------------------------
def _throughput_records(store: Store, run: str, tag: str | None) -> list:
    if tag:
        return store.results(kind="throughput", tag=tag)
    if run == "latest-throughput":
        recs = store.results(kind="throughput")
        if not recs:
            raise StoreError(f"{store.path} holds no throughput results; run 'dlbench run' first")
        return [r for r in recs if r.run_id == recs[-1].run_id]
    return store.results(kind="throughput", run_id=store.resolve_run(run))


def cmd_roofline(args: argparse.Namespace) -> int:
    from dlbench.measure.roofline import point_for, roofs_for  # heavy: torch

    if not Path(args.db).exists():
        raise StoreError(f"no result store at {args.db}; run 'dlbench run' and 'dlbench peak' first")
    with Store(args.db) as store:
        recs = _throughput_records(store, args.run, args.tag)
        peak_recs = store.results(kind="peak")
    by_dev: dict[str, list] = {}
    for r in recs:
        by_dev.setdefault(device_key(r.env), []).append(r)
    docs = []
    for dev, rs in by_dev.items():
        roofs = roofs_for(dev, rs[0].env, peak_recs)
        if not args.json:
            show_table(tables.mfu_table(rs, roofs=roofs, title=f"MFU and roofline on {dev}",
                                        peak_records=peak_recs), args.quiet)
        bw = f"{tables.fmt_num(roofs.bandwidth_gbs)} GB/s" if roofs.bandwidth_gbs else "unknown"
        if not args.json and not args.quiet:
            terminal.stdout.print(f"roofs ({roofs.source}): memory {bw}; compute "
                                  + ", ".join(f"{p} {tables.fmt_num(v)} TFLOP/s"
                                              for p, v in roofs.compute_tflops.items()))
        paths = []
        if not args.no_plot:
            pts = [p for p in (point_for(r, roofs) for r in rs) if p is not None]
            stem = Path(args.output)
            if len(by_dev) > 1:
                stem = stem.with_name(f"{stem.name}-{envmod._slug(dev)}")
            from dlbench.report.plots import roofline_plot  # heavy: matplotlib
            paths = roofline_plot(pts, roofs, stem)
            terminal.stderr.print("wrote " + ", ".join(str(p) for p in paths))
        docs.append({"device": dev, "roofs": {"source": roofs.source,
                                              "bandwidth_gbs": roofs.bandwidth_gbs,
                                              "compute_tflops": roofs.compute_tflops},
                     "results": [_roofline_row(r, peak_recs, roofs) for r in rs],
                     "plot": [str(p) for p in paths]})
    if args.json:
        print_json(docs)
    return EXIT_OK


def _roofline_row(r, peak_recs: list, roofs) -> dict:
    """One throughput result of ``roofline --json``: the figures of its MFU table row, as
    numbers (MFU as a fraction; None where the table shows '-'), and whose measured ceiling
    it used."""
    from dlbench.measure.roofline import point_for  # heavy: torch
    m = mfu(r, peak_records=peak_recs)
    ceiling = m.ceiling
    pt = point_for(r, roofs) if m.achieved_tflops is not None else None
    c = r.config
    return {"id": r.id, "run_id": r.run_id, "model": c.model, "mode": c.mode,
            "batch_size": c.batch_size, "precision": c.precision,
            "achieved_tflops": m.achieved_tflops,
            "datasheet_peak_tflops": m.datasheet_peak_tflops, "mfu_datasheet": m.datasheet,
            "measured_peak_tflops": m.measured_peak_tflops, "mfu_measured": m.measured,
            "measured_peak_method": ceiling.method if ceiling else None,
            "measured_peak_run": ceiling.run_id if ceiling else None,
            "measured_peak_card": ceiling.card if ceiling else None,
            "measured_peak_same_card": ceiling.same_card if ceiling else None,
            "why_no_mfu": list(dict.fromkeys(w for w in (m.datasheet_reason, m.measured_reason)
                                             if w)),
            "intensity": pt.intensity if pt else None, "bound": pt.bound if pt else None}


# -- gpus ------------------------------------------------------------------------------------------
def cmd_gpus(args: argparse.Namespace) -> int:
    if args.cards:
        if args.json:
            print_json(cards.card_spreads())
        else:
            show_table(cards.spread_table(), args.quiet)
        return EXIT_OK
    if args.specs:
        if args.json:
            print_json([dataclasses.asdict(s) for s in ref.gpu_specs()])
            return EXIT_OK
        rows = tuple((s.id, s.name, *(tables.fmt_num(s.tflops(p)) for p in PRECISIONS),
                      tables.fmt_num(s.memory_bandwidth_gbs), tables.fmt_num(s.memory_gb),
                      tables.fmt_num(s.tdp_w), s.source) for s in ref.gpu_specs())
        show_table(tables.Table(
            "GPU datasheet figures (dense TFLOPS; fp32 non-tensor)",
            ("id", "name", *PRECISIONS, "GB/s", "GB", "W", "source"), rows), args.quiet)
        return EXIT_OK
    if args.source:
        rs = ref.select(source=SOURCE_IDS[args.source])
        src = ref.sources()[SOURCE_IDS[args.source]]
        if args.json:
            print_json({"source": args.source, **src,
                        "rows": [dataclasses.asdict(r) for r in rs]})
            return EXIT_OK
        rows = tuple((r.device, str(r.gpus), r.model, r.mode, r.precision or "-",
                      str(r.batch_size or "-"), r.metric, tables.fmt_num(r.value), r.setup or "")
                     for r in rs)
        show_table(tables.Table(f"{args.source}: {src['title']}",
                                ("device", "GPUs", "model", "mode", "prec", "batch", "metric",
                                 "value", "setup"), rows,
                                (f"source: {src['document']}", src["setup"])), args.quiet)
        return EXIT_OK
    if args.today:
        return _gpus_today(args)
    if not can_fit(args.model, args.mode, args.x_precision):
        return _gpus_place(args)
    try:
        g = fit_gpus(args.model, args.mode, args.x_precision, args.db, flatten(args.predict, []))
    except KeyError as exc:  # a spec id --predict named that the table lacks
        raise ConfigError(f"--predict: {exc.args[0]}") from None
    fit = g.fit
    if args.json:
        sys.stdout.write(json.dumps({
            "model": args.model, "mode": args.mode, "x": f"{args.x_precision}_tflops",
            "slope": fit.slope, "r2": fit.r2, "r2_centered": fit.r2_centered, "n": fit.n,
            "points": [p.__dict__ for p in g.published + g.own],
            "predictions": [{"gpu": s.id, "batches_per_s": y, "low": lo, "high": hi,
                             "ms_per_batch": 1000 / y, "low_clipped": s.id in g.clipped}
                            for s, y, lo, hi in g.predictions],
            "clipped": list(g.clipped), "skipped": list(g.skipped)},
            indent=1) + "\n")
        return EXIT_OK
    rows = [(p.label, who, tables.fmt_num(p.x_tflops), tables.fmt_num(p.y_speed),
             tables.fmt_num(1000 / p.y_speed), tables.fmt_num(fit.slope * p.x_tflops))
            for who, pts in (("published (ms-per-batch)", g.published), ("yours", g.own))
            for p in pts]
    show_table(tables.Table(
        f"{args.model} {args.mode}, batch 16: speed on {args.x_precision} TFLOPS",
        ("device", "from", "TFLOPS", "batches/s", "ms/batch", "fit"), tuple(rows),
        (f"fit through the origin on the {len(g.published)} published FP32 points: batches/s = "
         f"{fit.slope:.4f} x TFLOPS; R^2 = {fit.r2:.3f} (uncentred, as the ms-per-batch "
         f"article; centred {fit.r2_centered:.3f}); your rows are shown, not fitted",
         "each row is one card, and cards of one GPU model differ: a published row's card is "
         "not yours ('dlbench gpus --cards': the spread measured across cards)",
         *(f"not fitted, not a point: {line}" for line in g.skipped))), args.quiet)
    show_table(tables.Table(
        "Predicted for GPUs not measured (95% prediction interval)",
        ("gpu", "TFLOPS", "batches/s", "interval", "ms/batch"),
        tuple((s.name, tables.fmt_num(s.tflops(args.x_precision)), tables.fmt_num(y),
               f"{tables.fmt_num(lo)} - {tables.fmt_num(hi)}", tables.fmt_num(1000 / y))
              for s, y, lo, hi in g.predictions),
        ("a line fitted on 2017-2021 GPUs at batch 16 in FP32; far outside that range "
         "(tensor-core GPUs, large batches) the prediction says what FP32 TFLOPS alone implies",
         *([f"a speed is never negative: the interval's lower end is clipped to 0 for "
            f"{', '.join(g.clipped)} (the line's scatter there is wider than the prediction)"]
           if g.clipped else []))),
        args.quiet)
    return EXIT_OK


def _gpus_today(args: argparse.Namespace) -> int:
    rows = today.published_figures()
    if args.json:
        print_json({"rows": [dataclasses.asdict(r) for r in rows],
                    "left_out": list(today.left_out())})
        return EXIT_OK
    show_table(tables.Table(
        "Published per-GPU figures for today's comparisons",
        ("model", "device", "GPUs", "prec", "per GPU", "unit", "conditions", "source"),
        tuple((r.model, r.device, str(r.gpus), r.precision, tables.fmt_num(r.value),
               today_unit(r.metric), r.conditions, r.sources[0]) for r in rows),
        tuple(f"not here: {line}" for line in today.left_out())), args.quiet)
    return EXIT_OK


def today_unit(metric: str) -> str:
    return {"tokens_per_s_per_gpu": "tokens/s", "tflops": "TFLOP/s"}.get(metric, metric)


def _gpus_place(args: argparse.Namespace) -> int:
    p = place(args.model, args.db)
    if not p.published and not p.own:
        raise ConfigError(" ".join(p.notes) or f"nothing to place for {args.model}")
    if args.json:
        print_json({"model": p.model, "published": [dataclasses.asdict(r) for r in p.published],
                    "own": [dataclasses.asdict(r) for r in p.own], "notes": p.notes})
        return EXIT_OK
    rows = [(r.device, "published", str(r.gpus), r.precision, tables.fmt_num(r.per_gpu),
             r.unit, f"{r.conditions} ({r.source})") for r in p.published]
    rows += [(r.device, "yours", str(r.gpus), r.precision or "-",
              "-" if r.per_gpu is None else tables.fmt_num(r.per_gpu), r.unit,
              f"{r.config}, record {r.record_id}" + (f"; {r.note}" if r.note else ""))
             for r in p.own]
    show_table(tables.Table(
        f"{args.model}: your records beside published per-GPU figures",
        ("device", "from", "GPUs", "prec", "per GPU", "unit", "conditions"), tuple(rows),
        (f"no ms-per-batch fit for {args.model} (it has {', '.join(fit_models())}); "
         "figures are set side by side, not fitted",
         "a published row's conditions (batch, precision, power limit, software) are not "
         "yours: read them before comparing",
         *p.notes)), args.quiet)
    return EXIT_OK


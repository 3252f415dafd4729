"""README's headline tables (and the campaign pages' suite tables), rendered from the committed
stores under ``results/``: a maintainer's script of this repository, not part of the package
(it imports the installed ``dlbench``).

The README quotes a few tables from each campaign. Typed by hand they drifted from their
records (a flag dropped, an interval left from an older method), so they are rendered here, from
the records, and ``tests/test_readme_claims.py`` fails when a published table and this
rendering differ. After a change to how figures or intervals are computed, regenerate them
(from the repository root)::

    python3 tools/headline.py --write

Each table names the records it shows (the selection below, stated in the table's caption), and
every figure carries its record's flags:

- ``noisy (time cap)`` / ``noisy (step cap)`` / ``noisy``: the interval missed its target, and
  what stopped the window;
- ``time cap`` / ``step cap``: the interval reached its target, but the limit ended the window;
- ``N of M steps`` (``requests`` for generation): the window measured fewer than its minimum
  (records from before the minimum won over the time cap);
- ``cv N%``: the step times spread by 10% or more;
- ``throttled (power)`` (and thermal, clocks): NVML saw the card's clocks held back at some
  sample of the window;
- ``no telemetry``: a GPU result without GPU telemetry, so neither energy nor throttling is known;
- ``energy-mismatch (...)``: the energy counter's mean power and the power samples' disagree
  beyond their tolerance (:func:`dlbench.telemetry.energy.power_agreement_tolerance`);
- ``one process``: no ``--repeat`` group, so run-to-run variance is not in the interval.

A flag every figure of a table carries is said once, in its caption, rather than on each row.

Most tables select records by config (the latest ok record of each); the hand-curated
comparisons of the campaign pages (lever searches, before/after rows, interconnect A/B) name
their records by id (:func:`picked`, :func:`gains`, :func:`plain_tuned`,
:func:`maxbatch_picked`): the labels stay prose, every figure, factor, gain and flag comes from
the record. Runs shown whole (a ``dlbench peak`` or ``dlbench net`` run) are named by run id.
"""

from __future__ import annotations

import argparse
import gzip
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from dlbench.launch import tempdirs
from dlbench.measure import stats
from dlbench.measure.mfu import datasheet_mfu, mfu
from dlbench.measure.units import fmt_bps
from dlbench.records import compat
from dlbench.records.peak import ceilings
from dlbench.reference import spec_for_env
from dlbench.report.cards import own_card_peaks
from dlbench.report.flags import short_window, window_cap, window_unit
from dlbench.report.table import fmt_num, fmt_pct
from dlbench.report.tuned_tables import _payback_cell
from dlbench.store import Store
from dlbench.telemetry.summary import energy_mismatch, mismatch_note

#: Where the committed stores live, relative to the repository root.
RESULTS = Path("results")
H100 = "pt2.11-cu130-h100-80gb-hbm3"
H200_4 = "pt2.11-cu130-4x-h200"
H200_8 = "pt2.11-cu130-8x-h200"
CPU = "pt2.14-cpu"

WRITE_COMMAND = "python3 tools/headline.py --write"
_UNITS = {"images": "img/s", "sequences": "seq/s", "tokens": "tok/s"}


# -- flags --------------------------------------------------------------------------------------
def record_flags(r: Any) -> list[str]:
    """Every reason to read ``r``'s figure with care, in a fixed order (module docstring)."""
    s = r.summary()
    out: list[str] = []
    if s is None:
        return [f"error ({r.error_type})"]
    cap = {"time_cap": "time cap", "step_cap": "step cap"}.get(window_cap(r) or "")
    if not r.converged():
        out.append(f"noisy ({cap})" if cap else "noisy")
    elif cap:
        out.append(cap)          # the interval reached its target, but a limit ended the window
    short = short_window(r)
    if short:
        out.append(f"{short[0]} of {short[1]} {window_unit(r)}")
    if s.noisy:
        out.append(f"cv {s.cv:.0%}")
    tele = getattr(r, "telemetry", None) or {}
    summ = tele.get("summary") or {}
    if (r.env or {}).get("accelerator") == "cuda":
        if not summ.get("gpus"):
            out.append("no telemetry")
        elif summ.get("throttled"):
            out.append(f"throttled ({', '.join(summ['throttled'])})")
        mismatch = energy_mismatch(tele)
        if mismatch:
            out.append(mismatch_note(mismatch))
    if getattr(r, "repeat_group", None) is None:
        out.append("one process")
    return out


def _common(flag_lists: Sequence[list[str]]) -> list[str]:
    """The flags every list holds, in the first list's order."""
    if not flag_lists:
        return []
    return [f for f in flag_lists[0] if all(f in fl for fl in flag_lists[1:])]


def _rest(flags: list[str], common: list[str]) -> str:
    return "; ".join(f for f in flags if f not in common) or "–"


def _caption(common: list[str]) -> str:
    return ("Flags every figure here carries: " + "; ".join(common) + ".") if common else \
        "No flag every figure here carries."


# -- selection ----------------------------------------------------------------------------------
def latest(records: Iterable[Any], **match: Any) -> Any:
    """The latest ok record whose config (or, for a data-parallel one, its base) matches
    ``match``: the selection of the campaign pages, where a later record of a config replaces
    an earlier one. A missing record is an error that names what was looked for."""
    found = None
    for r in records:  # stored order: oldest first
        if not r.ok:
            continue
        c = r.config
        base = getattr(c, "base", c)
        if all(getattr(c, k, getattr(base, k, None)) == v for k, v in match.items()):
            found = r
    if found is None:
        raise LookupError(f"no ok record with {match}")
    return found


def _rate(r: Any) -> str:
    s = r.summary()
    return f"{fmt_num(s.throughput * r.units_per_sample)} {_UNITS.get(r.unit, '/s')}"


def _rate_bare(r: Any) -> str:
    s = r.summary()
    return fmt_num(s.throughput * r.units_per_sample)


def _table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return (["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
            + ["| " + " | ".join(row) + " |" for row in rows])


def _name(r: Any) -> str:
    c = getattr(r.config, "base", r.config)
    name = c.model
    if c.model in ("bert-base", "gpt2") and c.input_size is None:
        name += " (seq 512)" if c.model == "bert-base" else " (seq 1024)"
    elif c.model in ("bert-base", "gpt2"):
        name += f" (seq {c.input_size})"
    return name


# -- the tables ---------------------------------------------------------------------------------
DEFAULT_SUITE_RUN = "4e75c79d22a2"


def h100_default(store: Store) -> list[str]:
    """The default suite on one H100: six of its ten configs (the campaign page has all)."""
    recs = store.results(run_id=DEFAULT_SUITE_RUN, kind="throughput")
    picks = [("resnet50", "train"), ("vgg16", "train"), ("vit_b_16", "train"),
             ("bert-base", "train"), ("gpt2", "train"), ("resnet50", "eval")]
    rows, flags = [], []
    chosen = [latest(recs, model=m, mode=mode) for m, mode in picks]
    flags = [record_flags(r) for r in chosen]
    common = _common(flags)
    for r, fl in zip(chosen, flags):
        s = r.summary()
        m = mfu(r)
        rows.append((_name(r) + (", eval" if r.config.mode == "eval" else ""),
                     str(r.config.batch_size), _rate(r), fmt_pct(s.rel_halfwidth),
                     fmt_num(r.achieved_tflops(), 3),
                     "–" if m.datasheet is None else f"{m.datasheet:.1%}", _rest(fl, common)))
    return [f"Run {DEFAULT_SUITE_RUN}. " + _caption(common), ""] + _table(
        ("model", "batch", "throughput", "±95%", "model TFLOP/s", "MFU (datasheet)", "flags"), rows)


#: The two targets of tuned mode: ``dlbench throughput -m M --tuned`` (its tuned record), by run.
TUNED_RUNS = (("resnet50", "746d600ae7f2"), ("gpt2", "4c616c19295b"))


def _setup(c: Any) -> str:
    words = [c.precision]
    if c.channels_last:
        words.append("channels_last")
    if c.pad_vocab:
        words.append("padded vocabulary")
    if c.compile:
        words.append("compiled" + ("" if c.compile == "default" else f" ({c.compile})")
                     + (" with its loss" if c.compile_loss else ""))
    if c.optimizer_impl == "fused":
        words.append("fused SGD" if c.optimizer == "sgd" else f"fused {c.optimizer}")
    if c.cuda_graph:
        words.append("CUDA graph")
    return ", ".join(words + [f"batch {c.batch_size}"])


def _power(r: Any) -> str:
    gpus = ((r.telemetry or {}).get("summary") or {}).get("gpus") or []
    w = [g["mean_power_w"] for g in gpus if g.get("mean_power_w") is not None]
    return f"{max(w):.0f} W mean" if w else "–"


def h100_tuned(store: Store) -> list[str]:
    """Tuned mode's pick for ResNet-50 and GPT-2, each against its plain config in the store."""
    every = store.results(kind="throughput")
    chosen, rows = [], []
    for model, run in TUNED_RUNS:
        tuned = [r for r in store.results(run_id=run, kind="throughput")
                 if r.ok and r.config.model == model and r.config.tuned]
        chosen.append(tuned[-1])
    flags = [record_flags(r) for r in chosen]
    common = _common(flags)
    for r, fl in zip(chosen, flags):
        plain = [p for p in every if p.ok and p.config.key() == r.config.tuned_from]
        factor = (f" ({r.summary().throughput / plain[-1].summary().throughput:.2f}x plain)"
                  if plain else "")
        m = mfu(r)
        rows.append((r.config.model, _setup(r.config), _rate(r) + factor,
                     fmt_pct(r.summary().rel_halfwidth),
                     "–" if m.datasheet is None else f"{m.datasheet:.1%}", _power(r),
                     _rest(fl, common)))
    runs = ", ".join(run for _, run in TUNED_RUNS)
    return [f"Runs {runs}. " + _caption(common), ""] + _table(
        ("model", "tuned configuration", "throughput", "±95%", "MFU (datasheet)", "power",
         "flags"), rows)


def _scaling_rows(store: Store, picks: Sequence[tuple[str, int, str]], counts: Sequence[int],
                  energy: bool = False, name_precision: bool = True
                  ) -> tuple[list[tuple[str, ...]], list[str]]:
    recs = store.results(kind="scaling")
    table, all_flags = [], []
    cells: list[tuple[list[str], list[Any], tuple[str, int, str]]] = []
    for model, batch, precision in picks:
        row = [latest(recs, model=model, batch_size=batch, precision=precision, gpus=n,
                      strategy="ddp", interconnect="default") for n in counts]
        fl = [record_flags(r) for r in row]
        all_flags += fl
        cells.append((fl, row, (model, batch, precision)))
    common = _common(all_flags)
    for fl, row, (model, batch, precision) in cells:
        base = row[0].summary().throughput
        out = [model + ("" if precision == "bf16" or not name_precision else f", {precision}"),
               str(batch)]
        for r, f in zip(row, fl):
            text = _rate_bare(r)
            if r.config.gpus != counts[0]:
                text += f" ({r.summary().throughput / base:.2f})"
            text += f" ±{fmt_pct(r.summary().rel_halfwidth)}"
            rest = _rest(f, common)
            out.append(text + ("" if rest == "–" else f", {rest}"))
        if energy:
            j = [((r.telemetry or {}).get("summary") or {}).get("total") or {} for r in row]
            per = [t.get("j_per_sample") for t in j]
            out.append(" / ".join("–" if x is None else f"{x:.3f}" for x in per) + " J")
        table.append(tuple(out))
    return table, common


def h200_4(store: Store) -> list[str]:
    """ddp on the four-H200 host: img/s (factor over 1 GPU) ±95%, per cell its flags."""
    picks = (("resnet50", 1024, "bf16"), ("vgg16", 512, "bf16"), ("resnet152", 512, "bf16"),
             ("resnet50", 256, "fp32"))
    rows, common = _scaling_rows(store, picks, (1, 2, 4))
    return ["The latest ok record of each config (ddp, default interconnect). "
            + _caption(common), ""] + _table(
        ("model", "batch/GPU", "1 GPU", "2 GPUs", "4 GPUs"), rows)


def h200_8(store: Store) -> list[str]:
    """ddp on the eight-H200 host at 1 and 8 GPUs, with energy per image summed over GPUs."""
    picks = (("resnet50", 1024, "bf16"), ("vgg16", 512, "bf16"))
    rows, common = _scaling_rows(store, picks, (1, 8), energy=True)
    return ["The latest ok record of each config (ddp, default interconnect). "
            + _caption(common), ""] + _table(
        ("model", "batch/GPU", "1 GPU, img/s", "8 GPUs, img/s (factor)",
         "energy per image (1 / 8 GPUs, summed)"), rows)


def scaling_page(precision: str, picks: Sequence[tuple[str, int]]) -> Callable[[Store], list[str]]:
    """A campaign page's scaling table: ddp at 1, 2 and 4 GPUs for each (model, batch/GPU)."""
    def render(store: Store) -> list[str]:
        rows, common = _scaling_rows(store, [(m, b, precision) for m, b in picks], (1, 2, 4),
                                     name_precision=False)
        return ["The latest ok record of each config (ddp, default interconnect); img/s "
                "(factor over 1 GPU) ±95%. " + _caption(common), ""] + _table(
            ("model", "batch/GPU", "1 GPU", "2 GPUs", "4 GPUs"), rows)
    return render


#: `dlbench run` on the development VM (2 threads), the cpu suite as it is now (112 px,
#: sequences of 64), the VM otherwise idle; and the suite's first version (224 px, sequences of
#: 128), every window of which the time cap stopped.
CPU_SUITE_RUN, CPU_SUITE_FIRST_RUN = "e5b507d499df", "13b696de877b"
#: `dlbench net` on the CPU over emulated links: the 2-host run, then the 4-host run.
CPU_NET_RUNS = ("cae6d8e89191", "680215e0133c")


# -- the campaign pages' suite tables ----------------------------------------------------------
def _gib(r: Any) -> str:
    mem = (r.memory or {}).get("allocated_peak_bytes")
    return f"{mem / 2 ** 30:.1f}" if mem else "–"


def suite_run(run: str, columns: Sequence[str]) -> Callable[[Store], list[str]]:
    """Every ok throughput record of one suite run, in stored order, with ``columns`` chosen from
    mode, ms, steps, tflops, mfu, ceiling (MFU against the store's latest measured ceiling of
    the record's own card, else of its GPU model) and gib."""
    def render(store: Store) -> list[str]:
        recs = [r for r in store.results(run_id=run, kind="throughput") if r.ok]
        peak_recs = store.results(kind="peak") if "ceiling" in columns else []
        flags = [record_flags(r) for r in recs]
        common = _common(flags)
        head = {"ms": "ms/step (median)", "steps": "steps",
                "tflops": "model TFLOP/s", "mfu": "MFU (datasheet)",
                "ceiling": "MFU (measured ceiling)", "gib": "peak GiB"}
        rows = []
        for r, fl in zip(recs, flags):
            s = r.summary()
            # the ceiling of the card the record ran on where the store has one (cards of one
            # model differ by about 2%), else the latest of its GPU model
            m = mfu(r, own_card_peaks(r, peak_recs) if peak_recs else None)
            cells = {"ms": fmt_num(s.median_s * 1e3, 4),
                     "steps": str(s.steps), "tflops": fmt_num(r.achieved_tflops(), 3),
                     "mfu": "–" if m.datasheet is None else f"{m.datasheet:.1%}",
                     "ceiling": "–" if m.measured is None else f"{m.measured:.1%}",
                     "gib": _gib(r)}
            name = _name(r) + (", eval" if "mode" not in columns and r.config.mode == "eval"
                               else "")
            mode = (r.config.mode,) if "mode" in columns else ()
            rows.append((name, str(r.config.batch_size)) + mode
                        + (_rate(r), fmt_pct(s.rel_halfwidth))
                        + tuple(cells[c] for c in columns if c != "mode") + (_rest(fl, common),))
        cols = (("model", "batch") + (("mode",) if "mode" in columns else ())
                + ("throughput", "±95%") + tuple(head[c] for c in columns if c != "mode")
                + ("flags",))
        return [f"Run {run}. " + _caption(common), ""] + _table(cols, rows)
    return render


#: the classic-cnn suite's runs in the H100 store carry the suite's former name as their tag
CLASSIC_CNN_TAG = compat.former(compat.SUITES, "classic-cnn")[0]
CLASSIC_CNN_MODELS = ("resnet50", "inception_v3", "nasnet", "vgg16", "resnet152", "inception_v4")


def classic_cnn(store: Store) -> list[str]:
    """The classic-cnn suite (runs tagged with its former name, :data:`CLASSIC_CNN_TAG`): img/s per model, fp16 and fp32, eager and
    compiled, the latest ok record of each; compiled cells with their factor over eager."""
    recs = [r for r in store.results(kind="throughput", tag=CLASSIC_CNN_TAG) if r.ok]
    grid = {(m, p, c): latest(recs, model=m, precision=p, compile=c)
            for m in CLASSIC_CNN_MODELS for p in ("fp16", "fp32") for c in (None, "default")}
    flags = {k: record_flags(r) for k, r in grid.items()}
    common = _common(list(flags.values()))
    rows = []
    for m in CLASSIC_CNN_MODELS:
        row = [m]
        for p in ("fp16", "fp32"):
            eager, comp = grid[(m, p, None)], grid[(m, p, "default")]
            row.append(str(eager.config.batch_size))
            for r, c in ((eager, None), (comp, "default")):
                parts = [f"{r.summary().throughput / eager.summary().throughput:.2f}x"] \
                    if c else []
                rest = _rest(flags[(m, p, c)], common)
                parts += [] if rest == "–" else [rest]
                row.append(_rate_bare(r) + (f" ({'; '.join(parts)})" if parts else ""))
        rows.append(tuple(row))
    return ["Runs of the classic-cnn suite. " + _caption(common), ""] + _table(
        ("model", "fp16 batch", "fp16 eager", "fp16 compiled", "fp32 batch", "fp32 eager",
         "fp32 compiled"), rows)


# -- hand-picked records: tables whose rows name their records ---------------------------------
def _ids(cell: Any) -> tuple[str, ...]:
    return () if cell is None else (cell,) if isinstance(cell, str) else tuple(cell)


def _get(store: Store, rid: str) -> Any:
    r = store.get(rid)
    if not r.ok:
        raise LookupError(f"record {rid} is not ok ({r.error_type}): a table cannot quote it")
    return r


def _value(r: Any, unit: str) -> str:
    """The cell's figure: the rate (``unit`` "rate": with its unit; "bare": without) or the
    mean step time in ms ("ms", as the ms-per-batch scripts print it)."""
    if unit == "ms":
        return fmt_num(r.summary().mean_s * 1e3, 3)
    return _rate(r) if unit == "rate" else _rate_bare(r)


def _figure(r: Any, flags: list[str], common: list[str], unit: str,
            base: Any = None, digits: int = 2) -> str:
    """``value (factor over base) ±95%, flags`` of one record."""
    text = _value(r, unit)
    if base is not None:
        text += f" ({r.summary().throughput / base.summary().throughput:.{digits}f})"
    text += f" ±{fmt_pct(r.summary().rel_halfwidth)}"
    rest = _rest(flags, common)
    return text + ("" if rest == "–" else f", {rest}")


def picked(caption: str, columns: Sequence[str],
           rows: Sequence[tuple[tuple[str, ...], tuple[Any, ...]]], unit: str = "bare",
           factor_over: int | dict[int, int] | str | None = None, digits: int = 2
           ) -> Callable[[Store], list[str]]:
    """A table of records named by id: each row is (its label cells, its record cells); each
    record cell shows its figure ±95% and the flags not common to the whole table, and, with
    ``factor_over``, its factor over the row's record in that cell (a dict: per cell, the cell
    it is a factor over; "first": the table's first record)."""
    def render(store: Store) -> list[str]:
        recs = {rid: _get(store, rid) for _, cells in rows for c in cells for rid in _ids(c)}
        flags = {rid: record_flags(r) for rid, r in recs.items()}
        common = _common(list(flags.values()))
        out = []
        for labels, cells in rows:
            line = list(labels)
            for i, c in enumerate(cells):
                if c is None:
                    line.append("–")
                    continue
                if factor_over == "first":
                    first = recs[_ids(rows[0][1][0])[0]]
                    base = None if _ids(c)[0] == first.id else first
                else:
                    over = factor_over.get(i) if isinstance(factor_over, dict) else \
                        None if factor_over == i else factor_over
                    base_ids = _ids(cells[over]) if over is not None else ()
                    base = recs[base_ids[0]] if base_ids else None
                line.append(" / ".join(_figure(recs[rid], flags[rid], common, unit, base, digits)
                                       for rid in _ids(c)))
            out.append(tuple(line))
        return [caption + " " + _caption(common), ""] + _table(columns, out)
    return render


def gains(caption: str, rows: Sequence[tuple[str, str, Any]],
          unit: str = "rate") -> Callable[[Store], list[str]]:
    """Lever tables: each row (what changed, the record before, the record(s) with the lever),
    with the gain computed from the records and the runs they came from."""
    def render(store: Store) -> list[str]:
        recs = {rid: _get(store, rid) for _, b, a in rows for rid in (b,) + _ids(a)}
        flags = {rid: record_flags(r) for rid, r in recs.items()}
        common = _common(list(flags.values()))
        out = []
        for label, before, after in rows:
            b = recs[before]
            afters = [recs[a] for a in _ids(after)]
            gain = " / ".join(f"{a.summary().throughput / b.summary().throughput - 1:+.1%}"
                              for a in afters)
            runs = ", ".join(dict.fromkeys(r.run_id for r in [b] + afters))
            out.append((label, _figure(b, flags[before], common, unit),
                        " / ".join(_figure(a, flags[a.id], common, unit) for a in afters),
                        gain, runs))
        return [caption + " " + _caption(common), ""] + _table(
            ("config (train)", "before", "with the lever", "gain", "runs"), out)
    return render


MS_PER_BATCH = picked(
    "Run e991c923eb3f (the ms-per-batch suite), ms per batch of 16 (mean step) ±95%.",
    ("setup", "vgg16 eval", "vgg16 train", "resnet152 eval", "resnet152 train",
     "densenet161 eval", "densenet161 train"),
    ((("FP32",), ("688e5a5feb08", "b5c7020049f1", "41cb734903f0", "62f9f504766c",
                  "7a99f1685d27", "ae1b02bba69c")),
     (("FP16",), ("10b12fc6745a", "b41ac2e3bc2e", "ed409ab09f50", "31ed3adf945a",
                  "9a2fcebda815", "fd334e714567"))), unit="ms")

_INTERCONNECT_COLS = ("model", "default", "no-p2p (NCCL_P2P_DISABLE=1: host shared memory)",
                      "no-p2p+no-shm (sockets)")
INTERCONNECT_4 = picked(
    "ddp at 4 GPUs, bf16, img/s (factor over default) ±95%; default: the latest default-profile "
    "record, the others run da0b697532f1.", _INTERCONNECT_COLS,
    ((("resnet50",), ("c828ce0b1be2", "a6caee5619e7", "3f3c18c77d7d")),
     (("vgg16",), ("7190dd83c291", "dc3ef3d46074", "d569391748b8"))), factor_over=0, digits=3)
INTERCONNECT_2 = picked(
    "ddp at 2 GPUs, bf16, img/s (factor over default) ±95%; default: the latest default-profile "
    "record, the others run f9417393c970.", _INTERCONNECT_COLS,
    ((("resnet50",), ("6c2f92a69183", "c770acbdda24", "04403c31db22")),
     (("inception_v3",), ("bc5e01c065a6", "eb86d53eeb10", "c9e29a346090")),
     (("vgg16",), ("118404dd871c", "2ffffe1afc99", "47008f8b541f")),
     (("resnet152",), ("0d1c921b1697", "ae135e8ff36e", "6f5e6dbeb6c4"))),
    factor_over=0, digits=3)

_STRATEGY_IDS = (
    ("resnet50", "bf16", ("9478f7656a7c 6c2f92a69183 ef8132aedfea 79b39690db08 651c871669e7 "
     "755f74bc543c")),
    ("inception_v3", "bf16", ("e56acfc14477 bc5e01c065a6 1f7f5e8670bf dc4c5c8240fe ff7886d82863 "
     "205af75f63c7")),
    ("vgg16", "bf16", ("5f5e0e98f843 118404dd871c bf84688e9f35 cba166dd6925 30103cb87d52 "
     "7c0e60c3d98e")),
    ("resnet152", "bf16", ("5dbec394a54c 0d1c921b1697 a438bcd28e73 28ccbd81a426 158c1d4b7da5 "
     "a48c108b4269")),
    ("resnet50", "fp32", ("1db98cba86d5 9e17caddada4 86e7bde4b89b cb0f58297327 755c0541d92f "
     "9c25ffa369df")),
    ("inception_v3", "fp32", ("0a24ac009403 b9a9f97db8cf 72d2b2b25c3f b24067a0c22d b9efead5739e "
     "39ef8e951d69")),
    ("vgg16", "fp32", ("7ce3cf6d9ff8 178c87a17cb5 7c045caf2621 a4a66686e64f 1001ab457c4e "
     "e8031bfd1a49")),
    ("resnet152", "fp32", ("0085794229f5 cab4b4fe8ca5 4a69c12b6ad4 59312266914e 1b114fb9fc81 "
     "49d344d505c7")),
)
STRATEGIES = picked(
    "The latest ok record of each config (default interconnect); img/s (factor over the "
    "strategy's 1 GPU) ±95%.",
    ("model", "precision", "ddp, 1 GPU", "ddp, 2 GPUs", "dp, 1 GPU", "dp, 2 GPUs", "ps, 1 GPU",
     "ps, 2 GPUs"),
    tuple(((m, p), tuple(ids.split())) for m, p, ids in _STRATEGY_IDS),
    factor_over={1: 0, 3: 2, 5: 4})
TWO_H200 = picked(
    "ResNet-50 b256 bf16 on a host of two H200, runs f10e1774b20e and 9e6e5c8fd9e5; img/s "
    "(factor over 1 GPU) ±95%.", ("strategy", "1 GPU", "2 GPUs"),
    ((("ddp",), ("559698c9c8ee", "616fb942c9ef")),
     (("ddp, `--interconnect no-p2p`",), ("559698c9c8ee", "98c8c56bdeb5")),
     (("dp (nn.DataParallel)",), ("9a72179b0678", "96bd0fbd23fa")),
     (("ps (parameter server)",), ("976d85852c3e", "85be22ea8411"))), factor_over=0)

TUNE_RESNET50 = picked(
    "`dlbench tune -m resnet50 -b 256`, run 8a823bc3d0ed; img/s (factor over plain) ±95%.",
    ("lever (ResNet-50, batch 256, train)", "decision", "img/s"),
    ((("plain eager, bf16, NCHW", ""), ("8176a184fe2a",)),
     (("+ channels_last", "kept"), ("65433e4a972f",)),
     (("fused optimizer", "within 1%, not kept"), ("dd834f72689d",)),
     (("+ fp16 instead of bf16", "kept"), ("d8083762cdf1",)),
     (("+ torch.compile (60 s setup)", "kept"), ("ae446f3f686d",)),
     (("+ batch 512", "kept"), ("5ba53d191b31",))), factor_over="first")

LEVERS = gains(
    "Each row: the record before and the record(s) with the lever; gain from the records.", (
        ("ResNet-50 b512 fp16, channels_last, compiled: fused SGD kernels",
         "5ba53d191b31", "4b3343316b41"),
        ("the same, whole step in a CUDA graph (`--cuda-graph on`)",
         "4b3343316b41", "b066ae76b34c"),
        ("the same at batch 1024", "b066ae76b34c", "b995a35552fa"),
        ("the same at batch 1536; 1792 ran out of memory", "b995a35552fa", "98648aba3e3a"),
        ("GPT-2 b32 bf16, compiled: vocabulary padded to 50,304 (`--pad-vocab`)",
         "815d994385a0", "9a82306552cc"),
        ("the same, whole step in a CUDA graph", "9a82306552cc", "0dc69f7697fc"),
        ("the padded GPT-2 at batch 64, no graph", "9a82306552cc", "8b6e0002b1d0"),
        (("GPT-2 b32 padded, compiled: **the loss compiled with the model** "
          "(`--compile-loss on`)"), "1dc508558c9f", "a917c039122a"),
        ("the same in a CUDA graph", "a917c039122a", "6643ec864ddf"),
        ("the same at batch 64, on two machines", "a917c039122a",
         ("414a11c800af", "f18e050f4967")),
        ("GPT-2 b64 with the compiled loss: fused SGD kernels", "f18e050f4967", "3211ed22d070"),
        ("the same, fused SGD and a CUDA graph", "f18e050f4967", "b803d84458d2"),
        ("GPT-2 b32 with the compiled loss under max-autotune-no-cudagraphs (375 s to compile)",
         "a917c039122a", "aa096ad997c3"),
        ("GPT-2's tuned config at batch 96 and 128 (not profiled)", "b5e8c00d4a24",
         ("62c32bf94b6d", "486b657efec7")),
        ("ResNet-50's tuned config (fp16, graph, b1024): the loss compiled with the model",
         "b70a3c3f08c9", "4922517cdf1d"),
        ("the same with cuDNN's heuristics (`--no-autotune`), not its autotuning",
         "b70a3c3f08c9", "fcfa20784ca2"),
        (("the same compiled under **max-autotune-no-cudagraphs**, against the default compile "
          "on the same machine"), "f315a66c6417", "5879c12c763d"),
    ))


TUNE_GPT2 = picked(
    "`dlbench tune -m gpt2 -b 16` (seq 1024), run 8b9f1a9d0b82; tok/s (factor over plain) ±95%.",
    ("lever (GPT-2)", "decision", "tok/s"),
    ((("plain eager, bf16", ""), ("e019c9bc054c",)),
     (("vocabulary padded to 50,304", "kept"), ("ef4a8a4826fc",)),
     (("fused optimizer", "within 1%"), ("8bfaf49b7261",)),
     (("flash attention pinned", "within 1%"), ("6abdde3aba6a",)),
     (("fp16", "lost"), ("e3b8ac7dca51",)),
     (("torch.compile (36 s setup)", "kept"), ("5980ced1bafc",)),
     (("the loss compiled with the model", "kept"), ("abd65dd5700b",)),
     (("CUDA graph", "within 1%"), ("37c7b712d2bd",)),
     (("batch 32", "kept"), ("2faa8df463a3",))), factor_over="first", digits=3)

#: GPT-2 b64 (padded vocabulary, compiled with its loss) on each card it ran on, best first.
GPT2_CARD_RECORDS = (("de2870c46ef2", "tuned mode"), ("b803d84458d2", "fused SGD, CUDA graph"),
                     ("3211ed22d070", "fused SGD"), ("f18e050f4967", ""), ("414a11c800af", ""),
                     ("b5e8c00d4a24", ""), ("c4cf9e9b617a", ""))
#: GPT-2 small's FLOPs per token by the PaLM formula 6N + 12LHT: N = 124,439,808 parameters
#: (tied embedding), L = 12 layers, H = 768, T = 1,024 tokens.
GPT2_FLOP_PER_TOKEN = 6 * 124_439_808 + 12 * 12 * 768 * 1024


def gpt2_cards(store: Store) -> list[str]:
    """The GPT-2 40% MFU goal, per card: tok/s ±95%, MFU against the datasheet by the formula
    and by dlbench's count, with the card's UUID prefix."""
    recs = [(_get(store, rid), note) for rid, note in GPT2_CARD_RECORDS]
    flags = [record_flags(r) for r, _ in recs]
    common = _common(flags)
    rows = []
    for (r, note), fl in zip(recs, flags):
        tok_s = r.summary().throughput * r.units_per_sample
        uuid = (r.env.get("gpus") or [{}])[0].get("uuid", "?")
        # the datasheet's dense peak (reference/gpus.json, with its source), as dlbench's MFU
        formula, _, _, _ = datasheet_mfu(tok_s * GPT2_FLOP_PER_TOKEN / 1e12, r.env,
                                         r.config.precision)
        m = mfu(r)
        rows.append((uuid[:12], fmt_num(tok_s) + (f" ({note})" if note else ""),
                     fmt_pct(r.summary().rel_halfwidth),
                     "–" if formula is None else f"{formula:.1%}",
                     "–" if m.datasheet is None else f"{m.datasheet:.1%}", _rest(fl, common),
                     r.run_id))
    return ["GPT-2 b64, bf16, padded vocabulary, compiled with its loss. " + _caption(common),
            ""] + _table(("card (UUID prefix)", "tok/s", "±95%", "6N + 12LHT",
                          "dlbench's count", "flags", "run"), rows)


def plain_tuned(caption: str, label_columns: Sequence[str],
                rows: Sequence[tuple[tuple[str, ...], str, str]],
                pick: bool = False, setup: bool = False) -> Callable[[Store], list[str]]:
    """Plain against tuned per config: each row (its labels, the plain record, the tuned one),
    the tuned figure's factor over plain, and when the tuned setup pays back its extra setup
    time (``pick``: which of the two tuned mode keeps, the faster)."""
    def render(store: Store) -> list[str]:
        recs = {rid: _get(store, rid) for _, a, b in rows for rid in (a, b)}
        flags = {rid: record_flags(r) for rid, r in recs.items()}
        common = _common(list(flags.values()))
        out = []
        for labels, plain, tuned in rows:
            p, q = recs[plain], recs[tuned]
            faster = q.summary().throughput > p.summary().throughput
            last = ("tuned" if faster else "plain (tuned lost)") if pick else \
                _payback_cell(p, q)
            out.append(tuple(labels) + (_figure(p, flags[plain], common, "rate"),)
                       + ((_setup(q.config),) if setup else ())
                       + (_figure(q, flags[tuned], common, "rate", base=p), last))
        return [caption + " " + _caption(common), ""] + _table(
            tuple(label_columns) + ("plain",) + (("tuned configuration",) if setup else ())
            + ("tuned (factor)", "pick" if pick else "tuned pays back after"), out)
    return render


TUNED_SUITE = plain_tuned(
    "`dlbench run --tuned --resume`, run 7e4154f06811; the tuned ResNet-50, BERT and GPT-2 rows "
    "from runs 7c70f3fafaf5 and 46792a1570d6 (newer recipes); ±95%.", ("model",), (
        (("resnet50 (b1024)",), "cdaae0bb64a2", "c9aad42eb7e2"),
        (("inception_v3",), "cd5c3f48c91c", "3e30e96f2a92"),
        (("nasnet (large)",), "4562d1c172e3", "3d4ee6c77ccc"),
        (("vgg16",), "b52b88879dc0", "07cfbedad0ea"),
        (("resnet152",), "5d5543fbf80c", "1c89b01c49b1"),
        (("inception_v4",), "cb6bceea07e3", "5e366d6a16cb"),
        (("vit_b_16",), "88f59be0c424", "1f917be966d6"),
        (("bert-base",), "06e58d035b45", "30cd275b3161"),
        (("gpt2 (b32)",), "aae30843c2db", "0cefa4bbe04b"),
        (("resnet50, eval",), "c6e030c8a3ce", "732f8d5abcdd")))

_MPB_TUNED = (
    "bd5ae592869f", "372593c2bb4b", "f838c966e6d7", "89315f442ea2", "13d5c9c7ec36", "406b4bef3b9e",
    "481b07c25079", "d9deccd96645", "b3c13820fb2e", "e7c2cc7ca06b", "3bc1a72c0726", "87ebf55347e9",
    "d425b77c6867", "6fff5cd76353", "d189444cafd8", "9b915d7ff2a1", "0936b433b905", "ea39e6da6c7e",
    "e6961b999d5d", "adb068bdc451", "2f609ca7d53f", "5ab1530b9f63", "71e7afebed3f", "888d546ec2c3",
)
MS_PER_BATCH_TUNED = plain_tuned(
    "`dlbench throughput -m vgg16,resnet152,densenet161 -b 16 --precision fp32,fp16 --mode "
    "eval,train --method fwd-bwd --tuned`, run b235ab913c19; ±95%.",
    ("model", "mode", "precision"),
    tuple(((m, mode, prec), _MPB_TUNED[2 * i], _MPB_TUNED[2 * i + 1])
          for i, (m, mode, prec) in enumerate(
              (m, mode, prec) for m in ("vgg16", "resnet152", "densenet161")
              for mode in ("eval", "train") for prec in ("fp32", "fp16"))),
    pick=True)


def energy_run(run: str) -> Callable[[Store], list[str]]:
    """Every ok throughput record of a run with its telemetry: mean power, energy per sample
    (the energy counter's, over the window), samples per joule and the mean SM clock."""
    def render(store: Store) -> list[str]:
        recs = [r for r in store.results(run_id=run, kind="throughput") if r.ok]
        flags = [record_flags(r) for r in recs]
        common = _common(flags)
        rows = []
        for r, fl in zip(recs, flags):
            summ = (r.telemetry or {}).get("summary") or {}
            tot, gpus = summ.get("total") or {}, summ.get("gpus") or [{}]
            clock = gpus[0].get("mean_sm_clock_mhz")
            name = _name(r) + (", eval" if r.config.mode == "eval" else "")
            rows.append((name, str(r.config.batch_size), _rate(r),
                         fmt_pct(r.summary().rel_halfwidth),
                         "–" if tot.get("mean_power_w") is None else f"{tot['mean_power_w']:.0f}",
                         "–" if tot.get("j_per_sample") is None else fmt_num(tot["j_per_sample"], 3),
                         "–" if tot.get("samples_per_j") is None else
                         fmt_num(tot["samples_per_j"], 3),
                         "–" if clock is None else fmt_num(clock), _rest(fl, common)))
        return [f"Run {run}; energy from the NVML energy counter over the window. "
                + _caption(common), ""] + _table(
            ("model", "batch", "throughput", "±95%", "mean W", "J/sample", "samples/J",
             "SM MHz", "flags"), rows)
    return render


TARGETS = plain_tuned(
    "`dlbench throughput -m MODEL --tuned`, runs 746d600ae7f2 (ResNet-50) and 4c616c19295b "
    "(GPT-2; its plain record stored earlier, taken by `--resume`); ±95%.", ("command",), (
        (("`dlbench throughput -m resnet50 --tuned --profile 10`",), "8b248dcfe99f",
         "1d65b62624ab"),
        (("`dlbench throughput -m gpt2 --tuned`",), "aae30843c2db", "de2870c46ef2")),
    setup=True)


_ERROR_CODE = re.compile(r"[A-Z][A-Z_]{7,}")


def _bracket(m: Any) -> str:
    """``1,792 (1,920)``: the largest batch that fitted and the first that failed, the failure
    named when it was not an out-of-memory; ``*`` where the probe at that batch fitted and the
    longer measurement ran out of memory (the search record corrected); ``†``: no autotuning."""
    failed = [p for p in m.probes if p.batch == m.first_oom_batch]
    first = failed[-1] if failed else None
    why = ""
    if first is not None and first.outcome not in ("ok", "oom"):
        code = _ERROR_CODE.search(first.error or "")
        why = f": {code.group(0) if code else first.outcome}"
    text = f"{m.best_batch:,} ({m.first_oom_batch:,}{why})"
    if any(p.fits for p in failed):
        text += "*"
    if not getattr(m.config.base, "autotune", True):
        text += " †"
    return text


def _peak(m: Any) -> str:
    p = m.best_probe()
    if p is None or not p.allocated_peak_bytes:
        return "–"
    share = f" ({p.allocated_peak_bytes / p.device_total_bytes:.0%})" if p.device_total_bytes \
        else ""
    return f"{p.allocated_peak_bytes / 2**30:.1f} GiB{share}"


def _measured_at(store: Store, search: str, measured: str) -> tuple[Any, Any]:
    """A search record and the throughput record measured at its batch; a throughput record
    of another setup or batch is an error (the table would pair figures that do not belong)."""
    m = store.get(search)
    if not m.ok:
        raise LookupError(f"search {search} found no batch ({m.error_type}): a table cannot "
                          "quote it")
    t = _get(store, measured)
    if t.config.key() != replace(m.config.base, batch_size=m.best_batch).key():
        raise LookupError(f"record {measured} was not measured at search {search}'s batch "
                          f"{m.best_batch} and setup")
    return m, t


def maxbatch_picked(caption: str,
                    rows: Sequence[tuple[str, tuple[str, str], tuple[str, str]]]
                    ) -> Callable[[Store], list[str]]:
    """The largest batch per model in bf16 and fp32: each row (its label, the bf16 search and
    the throughput record measured at its batch, the same for fp32); each side shows the
    bracket, the probe's allocated peak there and the throughput ±95% with its flags."""
    def render(store: Store) -> list[str]:
        pairs = {ids: _measured_at(store, *ids) for _, *sides in rows for ids in sides}
        flags = {ids: record_flags(t) for ids, (_, t) in pairs.items()}
        common = _common(list(flags.values()))
        out = []
        for label, *sides in rows:
            line = [label]
            for ids in sides:
                m, t = pairs[ids]
                line += [_bracket(m), _peak(m), _figure(t, flags[ids], common, "rate")]
            out.append(tuple(line))
        return [caption + " " + _caption(common), ""] + _table(
            ("model", "bf16: largest (first failure)", "peak", "throughput there ±95%",
             "fp32: largest (first failure)", "peak", "throughput there ±95%"), out)
    return render


_MAXBATCH_ROWS = (
    ("resnet50", ("fed55c9f21c6", "ba6e4a4319bf"), ("12c16ebf4d9c", "6aa625f93fd5")),
    ("resnet152", ("3b9e77281427", "3b3d7cc1fa12"), ("5bfd5aa136b9", "d53c86b3975b")),
    ("inception_v3", ("2198d7ff2250", "724568336ddb"), ("1d99d2c41835", "ffcae7608e1d")),
    ("inception_v4", ("77ba5567b9e2", "ebdd78a516f7"), ("69e89c2569a4", "b8d168bc0132")),
    ("vgg16 (fp32 ‡)", ("938a08d02d02", "b371808bbe10"), ("cb73c08a34b4", "abca1da88146")),
    ("nasnet (large)", ("6b1b888398f4", "865b732ec51c"), ("921793283c15", "2d38fb616894")),
    ("densenet161", ("39c06d6f012e", "795a278ab3a6"), ("00665f71045a", "31a6bb130fa5")),
    ("vit_b_16", ("daaeadff20c0", "7fed8a90c2bd"), ("4ac373fab281", "832f0f099424")),
    ("gpt2 (seq 1024)", ("30463d0bb000", "e58e2635cbb9"), ("43c37f233185", "d496571b22c2")),
)
MAXBATCH = maxbatch_picked(
    "Each search's record, and the throughput measured at its batch after it; ±95%.",
    _MAXBATCH_ROWS)
MAXBATCH_EXCERPT = maxbatch_picked(
    "From the H100 campaign's records (searches and the throughput measured at their batch); "
    "±95%.",
    tuple(r for r in _MAXBATCH_ROWS if r[0] in ("resnet50", "vit_b_16", "gpt2 (seq 1024)")))


def _peak_flags(r: Any) -> list[str]:
    """A ceiling point's flags: its iterations' spread (``cv N%`` at 10% or more) and
    ``one process`` (a ``dlbench peak`` sweep runs once, its points are not repeated)."""
    cv = stats.stdev(r.times_s) / stats.mean(r.times_s) if len(r.times_s) > 1 else 0.0
    return ([f"cv {cv:.0%}"] if cv >= 0.1 else []) + (
        ["one process"] if getattr(r, "repeat_group", None) is None else [])


def ceilings_run(run: str) -> Callable[[Store], list[str]]:
    """A ``dlbench peak`` run: per matmul precision and memory verb, the ceiling (the largest
    median rate over the points swept, :func:`dlbench.records.peak.ceilings`), the point that
    set it, the 95% interval of that point's mean iteration time (relative) and its flags, and
    the datasheet's dense peak for the matmuls."""
    def render(store: Store) -> list[str]:
        recs = [r for r in store.results(run_id=run, kind="peak") if r.ok]
        if not recs:
            raise LookupError(f"run {run} has no ok peak record")
        tops = ceilings(recs)
        setters = {}
        for key, c in tops.items():  # the point whose median is the ceiling
            setters[key] = next(r for r in recs if r.config.label == c["label"]
                                and r.median() == c["median"])
        flags = {key: _peak_flags(r) for key, r in setters.items()}
        common = _common(list(flags.values()))
        spec, _ = spec_for_env(recs[0].env)
        rows = []
        for key, c in tops.items():
            r = setters[key]
            half = stats.interval(r.times_s).halfwidth / stats.mean(r.times_s)
            sheet = "–"
            if r.config.verb == "matmul" and spec is not None:
                try:
                    sheet = fmt_num(spec.tflops(key)) if spec.tflops(key) else "–"
                except ValueError:
                    sheet = "–"
            name = f"{key} matmul" if r.config.verb == "matmul" else key
            rows.append((name, f"{fmt_num(c['median'])} {c['unit']}", fmt_pct(half),
                         c["label"], str(c["points"]), sheet, _rest(flags[key], common)))
        return [f"Run {run}; ±95%: the interval of the ceiling point's mean iteration time. "
                + _caption(common), ""] + _table(
            ("ceiling", "measured (median)", "±95%", "set by", "points", "datasheet (dense)",
             "flags"), rows)
    return render


def _net_flags(r: Any) -> list[str]:
    """An emulated-network record's flags: a fixed step count stops its window (no interval
    target to miss), so the spread of its steps (``cv N%``) and ``one process``."""
    s = r.summary()
    return ([f"cv {s.cv:.0%}"] if s.noisy else []) + (
        ["one process"] if getattr(r, "repeat_group", None) is None else [])


_LINK_ORDER = ("unshaped", "1gbit", "100mbit", "10mbit")


def net_runs(runs: Sequence[str]) -> Callable[[Store], list[str]]:
    """``dlbench net`` runs: per hosts, link and strategy, the slowest host's mean step ±95%, all
    hosts' samples/s, compute alone, bytes sent per step per host, the busiest host's traffic and
    the link probe, with each record's flags."""
    def render(store: Store) -> list[str]:
        recs = [r for run in runs for r in store.results(run_id=run, kind="net")]
        bad = [r.id for r in recs if not r.ok]
        if bad or not recs:
            raise LookupError(f"runs {', '.join(runs)}: failed or no net records {bad}")
        recs.sort(key=lambda r: (r.config.hosts, _LINK_ORDER.index(r.config.link)
                                 if r.config.link in _LINK_ORDER else 99, r.config.strategy))
        flags = {r.id: _net_flags(r) for r in recs}
        common = _common(list(flags.values()))
        rows = []
        for r in recs:
            c, s, probe = r.config, r.summary(), r.probe or {}
            h, busy = r.busiest_host(), r.busiest_bps()
            rows.append((
                str(c.hosts), c.link, c.strategy,
                f"{fmt_num(s.mean_s * 1e3, 3)} ±{fmt_pct(s.rel_halfwidth)}",
                fmt_num(s.throughput), fmt_num(r.compute_s * 1e3, 2),
                " / ".join(f"{x / 1e3:,.1f}" for x in r.tx_per_step()),
                f"h{h}: {fmt_bps(busy[0])} / {fmt_bps(busy[1])}" if busy else "–",
                f"{fmt_bps(probe['goodput_bps'])}, {probe['rtt_s'] * 1e6:.0f} us"
                if probe.get("goodput_bps") else "–",
                _rest(flags[r.id], common)))
        return [f"Runs {', '.join(runs)}. " + _caption(common), ""] + _table(
            ("hosts", "link", "strategy", "step ms ±95%", "samples/s", "compute ms",
             "sent kB/step per host", "busiest host out / in", "probe goodput, RTT", "flags"),
            rows)
    return render


# -- generation ---------------------------------------------------------------------------------
def _ms(seconds: float | None) -> str:
    return "–" if seconds is None else fmt_num(seconds * 1e3, 3)


def generate_runs(runs: Sequence[str]) -> Callable[[Store], list[str]]:
    """``dlbench generate`` runs: every record in stored order, failures included: output tok/s
    ±95%, TTFT and TPOT, the decode steps' bandwidth against the store's measured copy roof
    (the latest ``dlbench peak`` run of the device, else the datasheet's, said in the column),
    prefill MFU against the measured matmul ceiling, energy per output token, flags."""
    from dlbench.report.generate_figures import bandwidth_roof, prefill_mfu  # the page's roofs

    def render(store: Store) -> list[str]:
        recs = [r for run in runs for r in store.results(run_id=run, kind="generate")]
        peaks = store.results(kind="peak")
        flags = [record_flags(r) for r in recs if r.ok]
        common = _common(flags)
        # one precision: said in the caption; several: a column
        precisions = list(dict.fromkeys(r.config.precision_label for r in recs))
        mixed = len(precisions) > 1
        rows = []
        for r in recs:
            c = r.config
            label = (c.model, str(c.batch_size)) + ((c.precision_label,) if mixed else ()) + (
                c.path_label,)
            if not r.ok:
                rows.append(label + (f"error ({r.error_type})",) + ("–",) * 8)
                continue
            s, ttft, tpot = r.summary(), r.ttft(), r.tpot()
            roof = bandwidth_roof(r, peaks)
            frac = r.roofline_fraction(roof.gbs if roof else None)
            m = prefill_mfu(r, peaks)
            energy = r.energy_per_output_token_j()
            rows.append(label + (
                f"{fmt_num(s.throughput)} ±{fmt_pct(s.rel_halfwidth)}",
                f"{_ms(ttft.mean_s)} ({_ms(ttft.p99_s)})",
                f"{_ms(tpot.mean_s)} ({_ms(tpot.median_s)} / {_ms(tpot.p99_s)})",
                fmt_num(r.decode_gbs()),
                "–" if frac is None else f"{frac:.1%} of {fmt_num(roof.gbs)} ({roof.source})",
                fmt_num(m.tflops, 3),
                "–" if m.measured is None else f"{m.measured:.1%}",
                "–" if energy is None else fmt_num(energy, 3),
                _rest(record_flags(r), common)))
        cols = ("model", "batch") + (("precision",) if mixed else ()) + (
            "path", "output tok/s ±95%", "TTFT ms mean (p99)",
            "TPOT ms mean (median / p99)", "decode GB/s", "memory roof",
            "prefill TFLOP/s", "prefill MFU (measured)", "J / output token", "flags")
        said = "" if mixed else f"Every figure in {precisions[0]}. "
        return [f"Runs {', '.join(runs)}. " + said + _caption(common), ""] + _table(cols, rows)
    return render


def generate_paths(runs: Sequence[str]) -> Callable[[Store], list[str]]:
    """Each path against eager (``model.generate()``) of the same model, batch, lengths and
    precision in ``runs``: the factor of output tok/s, the extra setup (model build and first
    request: compilation, graph capture) and the output tokens that pay it back."""
    # function-level: the generation views, as generate_runs takes its roofs
    from dlbench.report.generate_tables import path_pairs, payback_cell
    from dlbench.records.payback import payback

    def render(store: Store) -> list[str]:
        recs = [r for run in runs for r in store.results(run_id=run, kind="generate") if r.ok]
        pairs = path_pairs(recs)
        common = _common([record_flags(r) for pair in pairs for r in pair])
        rows = []
        for base, r in pairs:
            factor = r.summary().throughput / base.summary().throughput
            rows.append((r.config.model, str(r.config.batch_size), r.config.path_label,
                         fmt_num(base.summary().throughput), fmt_num(r.summary().throughput),
                         f"{factor:.2f}x", f"{_ms(base.tpot().mean_s)} / {_ms(r.tpot().mean_s)}",
                         f"{payback(base, r).extra_setup_s:+.0f}", payback_cell(base, r),
                         _rest(record_flags(base), common) + " / "
                         + _rest(record_flags(r), common)))
        cols = ("model", "batch", "path", "eager tok/s", "path tok/s", "factor",
                "TPOT ms eager / path", "extra setup s", "pays back after",
                "flags eager / path")
        return [f"Runs {', '.join(runs)}; output tok/s of each path over eager's. "
                + _caption(common), ""] + _table(cols, rows)
    return render


# -- serving: dlbench serve ---------------------------------------------------------------------
def serve_record_flags(r: Any) -> list[str]:
    """A ``dlbench serve`` load point's flags: the serve view's own
    (:func:`dlbench.report.serve_tables.serve_flags`: failed requests, the client behind its
    schedule, short outputs, token counts not the server's, prompts reused, a throttled GPU);
    ``no telemetry`` and ``energy-mismatch`` as for every GPU record; ``p99 unbounded above``
    where too few requests (under 368) bound a p99 TTFT or TPOT from above at 95%; and ``one
    process``. A load point is no timed window of steps, so :func:`record_flags` does not apply."""
    from dlbench.report.serve_tables import serve_flags  # the serve view's own flags

    if not r.ok:
        return [f"error ({r.error_type})"]
    out = serve_flags(r)
    tele = r.telemetry or {}
    if (r.env or {}).get("accelerator") == "cuda":
        if not (tele.get("summary") or {}).get("gpus"):
            out.append("no telemetry")
        mismatch = energy_mismatch(tele)
        if mismatch:
            out.append(mismatch_note(mismatch))
    if any(d is not None and d.p99_high_s is None for d in (r.ttft(), r.tpot())):
        out.append("p99 unbounded above")
    if getattr(r, "repeat_group", None) is None:
        out.append("one process")
    return out


def _pcts(d: Any) -> tuple[str, str]:
    return ("–", "–") if d is None else (_ms(d.p50_s), _ms(d.p99_s))


def serve_sweep(run: str) -> Callable[[Store], list[str]]:
    """A ``dlbench serve`` run's load points in the order they ran, failures included: the
    realised arrival rate of a rate point, completed requests, req/s and output tok/s over the
    window, TTFT, TPOT and ITL at p50 and p99, goodput under the point's SLO with its share of
    the measured requests (and that share's Wilson interval), the SLO judged at p99, GPU energy
    per output token (net of idle), flags."""

    def render(store: Store) -> list[str]:
        recs = store.results(run_id=run, kind="serve")
        if not recs:
            raise LookupError(f"run {run}: no serve records")
        flags = {r.id: serve_record_flags(r) for r in recs}
        common = _common([flags[r.id] for r in recs if r.ok])
        rows = []
        for r in recs:
            c = r.config
            if not r.ok:
                rows.append((c.load_label, "–", f"0/{r.requests}", f"error ({r.error_type})")
                            + ("–",) * 11)
                continue
            frac, at_p99 = r.good_fraction(), r.slo_at_p99()
            energy, net = r.energy_per_output_token_j(), r.net_energy_per_output_token_j()
            rows.append((
                c.load_label, "–" if c.rate is None else fmt_num(r.offered_rate(), 3),
                f"{r.completed()}/{r.requests}", fmt_num(r.request_throughput(), 3),
                fmt_num(r.output_tokens_per_s()), *_pcts(r.ttft()), *_pcts(r.tpot()),
                *_pcts(r.itl()),
                f"{fmt_num(r.goodput(), 3)} ({frac[0]:.0%}; {frac[1]:.0%}–{frac[2]:.0%})",
                "–" if at_p99 is None else ("yes" if at_p99 else "no"),
                "–" if energy is None else f"{fmt_num(energy, 3)} ({fmt_num(net, 3)})",
                _rest(flags[r.id], common)))
        c = recs[0].config
        return [f"Run {run}: {c.model}, /v1/{c.api}, {c.tokens_label} tokens a request; SLO "
                f"{c.slo.label}. Offered: the rate a rate point's drawn arrivals realised; req/s "
                "and out tok/s: completed requests and their tokens over the window (the first "
                "request's due time to the last one's end); goodput: requests per second within "
                "the SLO (the share of measured requests within it, its 95% interval); SLO at "
                "p99: p99 TTFT and TPOT within their limits, no request failed; J / out tok: the "
                "GPU's energy over the window per output token (net of its idle power). "
                + _caption(common), ""] + _table(
            ("load", "offered req/s", "done", "req/s", "out tok/s", "TTFT ms p50", "TTFT p99",
             "TPOT ms p50", "TPOT p99", "ITL ms p50", "ITL p99", "goodput req/s (in SLO)",
             "SLO at p99", "J / out tok (net)", "flags"), rows)
    return render


def serve_overhead(run: str) -> Callable[[Store], list[str]]:
    """A ``dlbench serve --stub`` run: at each load point, what the client (and the loopback)
    adds to TTFT and ITL over the stub's own delays, the client's event-loop lag, the requests
    sent late, output tok/s, flags (:func:`dlbench.report.serve_tables.overhead_table`'s
    figures)."""

    def render(store: Store) -> list[str]:
        recs = [r for r in store.results(run_id=run, kind="serve")
                if r.ok and (r.server or {}).get("stub")]
        stubs = {(r.server["stub"].get("ttft_ms", 0.0), r.server["stub"].get("itl_ms", 0.0))
                 for r in recs}
        if not recs or len(stubs) != 1:
            raise LookupError(f"run {run}: no stub points, or stubs of different delays")
        [(ttft_ms, itl_ms)] = stubs
        late_ms = recs[0].config.late_threshold_s * 1e3
        flags = {r.id: serve_record_flags(r) for r in recs}
        common = _common(list(flags.values()))
        rows = []
        for r in recs:
            ttft, itl = r.ttft(), r.itl()
            lag = (r.client or {}).get("p99_s")
            rows.append((r.config.load_label, _ms(ttft.p50_s - ttft_ms / 1e3),
                         _ms(ttft.p99_s - ttft_ms / 1e3),
                         "–" if itl is None else _ms(itl.p50_s - itl_ms / 1e3),
                         "–" if itl is None else _ms(itl.p99_s - itl_ms / 1e3), _ms(lag),
                         f"{r.late():,} of {r.requests:,}", fmt_num(r.output_tokens_per_s()),
                         _rest(flags[r.id], common)))
        c = recs[0].config
        return [f"Run {run}: dlbench's stub, first token after {ttft_ms:g} ms and then one every "
                f"{itl_ms:g} ms, {c.tokens_label} tokens a request; over the stub: measured minus "
                "the stub's delay, the client and the loopback together. "
                + _caption(common), ""] + _table(
            ("load", "TTFT over stub ms p50", "p99", "ITL over stub ms p50", "p99",
             "loop lag p99 ms", f"sent > {late_ms:g} ms late", "out tok/s", "flags"), rows)
    return render


def generate_levers(caption: str, rows: Sequence[tuple[str, str]]
                    ) -> Callable[[Store], list[str]]:
    """A lever of ``dlbench generate`` record by record: each row (the record without it, the
    record with it), named by id: both paths' output tok/s ±95% and mean TPOT, the factor, the
    flags of each, and the runs (and so the cards) they came from."""
    def render(store: Store) -> list[str]:
        recs = {rid: _get(store, rid) for pair in rows for rid in pair}
        flags = {rid: record_flags(r) for rid, r in recs.items()}
        common = _common(list(flags.values()))
        out = []
        for before, after in rows:
            b, a = recs[before], recs[after]
            out.append((b.config.model, str(b.config.batch_size),
                        f"{b.config.path_label} / {a.config.path_label}",
                        f"{fmt_num(b.summary().throughput)} ±{fmt_pct(b.summary().rel_halfwidth)}",
                        f"{fmt_num(a.summary().throughput)} ±{fmt_pct(a.summary().rel_halfwidth)}",
                        f"{a.summary().throughput / b.summary().throughput:.2f}x",
                        f"{_ms(b.tpot().mean_s)} / {_ms(a.tpot().mean_s)}",
                        _rest(flags[before], common) + " / " + _rest(flags[after], common),
                        f"{b.run_id}, {a.run_id}"))
        return [caption + " " + _caption(common), ""] + _table(
            ("model", "batch", "paths", "without tok/s", "with tok/s", "factor",
             "TPOT ms without / with", "flags without / with", "runs"), out)
    return render


@dataclass(frozen=True)
class Headline:
    name: str                                   # the marker's name
    store: str                                  # folder under results/
    render: Callable[[Store], list[str]]
    path: str = "README.md"                     # the file the table is published in


def strategy_runs(runs: Sequence[str]) -> Callable[[Store], list[str]]:
    """The strategy table (:func:`dlbench.report.strategy_tables.strategy_table`) of the
    language-model ``dlbench scale`` records of ``runs``, against the store's matmul ceiling;
    a config measured twice shows its latest ok record (a failure stays where nothing
    replaced it)."""
    # the strategy view's own rows
    from dlbench.report.strategy_tables import latest_per_config, strategy_table

    def render(store: Store) -> list[str]:
        recs = latest_per_config([r for run in runs
                                  for r in store.results(run_id=run, kind="scaling")])
        table = strategy_table(recs, store.results(kind="peak"))
        common = _common([record_flags(r) for r in recs if r.ok])
        return ([f"Runs {', '.join(runs)}. " + _caption(common), ""]
                + table.to_markdown().split("\n")[2:])
    return render


def largest_batch_run(run: str) -> Callable[[Store], list[str]]:
    """The largest batch per strategy (:func:`dlbench.report.strategy_tables.largest_batch_table`)
    that ``dlbench maxbatch --strategy`` found in ``run``."""
    from dlbench.report.strategy_tables import largest_batch_table  # the strategy view's own

    def render(store: Store) -> list[str]:
        searches = store.results(run_id=run, kind="maxbatch")
        table = largest_batch_table(searches)
        return [f"Run {run}.", ""] + table.to_markdown().split("\n")[2:]
    return render


# -- collectives: dlbench comm, and beside nccl-tests -------------------------------------------
def _comm_flags(r: Any) -> list[str]:
    """A ``dlbench comm`` record's flags: the spread of its samples (``cv N%`` at 10% or more,
    over the slowest rank's time per sample), a busbw NVLS or CollNet made (not comparable with
    a ring's) and ``one process``. A comm job samples no telemetry, as a ``dlbench peak`` sweep."""
    s = r.sample_times_s()
    cv = stats.stdev(s) / stats.mean(s) if len(s) > 1 else 0.0
    return (([f"cv {cv:.0%}"] if cv >= 0.1 else [])
            + (["busbw not comparable (NVLS/CollNet)"] if r.busbw_comparable is False else [])
            + (["one process"] if getattr(r, "repeat_group", None) is None else []))


def _comm_cells(store: Store, runs: Sequence[str]) -> dict[tuple[str, int, bool], Any]:
    """(run, size, in place) -> the ok all_reduce record of ``runs``; a failed one is an error."""
    out = {}
    for run in runs:
        recs = store.results(run_id=run, kind="comm")
        bad = [r.id for r in recs if not r.ok]
        if bad or not recs:
            raise LookupError(f"run {run}: failed or no comm records {bad}")
        for r in recs:
            if r.config.op != "all_reduce":
                raise LookupError(f"run {run}: {r.config.op} is not an all_reduce")
            out[(run, r.config.size_bytes, r.config.inplace)] = r
    return out


def _pair_flags(recs: Sequence[Any], flags: dict[str, list[str]], common: list[str]) -> str:
    """The flags of a row's records (out-of-place / in-place) not common to the table: said once
    where they agree."""
    rest = [_rest(flags[r.id], common) for r in recs]
    return rest[0] if len(set(rest)) == 1 else " / ".join(rest)


def comm_runs(runs: Sequence[str]) -> Callable[[Store], list[str]]:
    """``dlbench comm`` all_reduce runs side by side, a row per size and run (in the order of
    ``runs``): the timing mode, the out-of-place time per iteration with its p50/p99, busbw out of
    place / in place, NCCL's algorithm and protocol, and the flags."""
    from dlbench.report.comm_tables import _choice, _size, _us, timing_label  # the comm view

    def render(store: Store) -> list[str]:
        cells = _comm_cells(store, runs)
        flags = {r.id: _comm_flags(r) for r in cells.values()}
        common = _common(list(flags.values()))
        rows = []
        for size in sorted({s for _, s, _ in cells}):
            for run in runs:
                o, i = cells.get((run, size, False)), cells.get((run, size, True))
                if o is None or i is None:
                    continue
                choice = _choice(o) + ("" if _choice(i) == _choice(o)
                                       else f" (in-place {_choice(i)})")
                rows.append((_size(size), timing_label(o), _us(o.time_s),
                             f"{_us(o.p50_s)}/{_us(o.p99_s)}",
                             f"{o.busbw() / 1e9:.2f} / {i.busbw() / 1e9:.2f}", choice,
                             _pair_flags((o, i), flags, common)))
        first = next(iter(cells.values()))
        return [f"Runs {', '.join(runs)}: all_reduce of {first.config.dtype} on "
                f"{first.config.ranks} ranks ({first.config.backend}, NCCL "
                f"{first.nccl_version}); time and p50/p99 out of place, µs per iteration; "
                "busbw GB/s; flags out of place / in place where they differ. "
                + _caption(common), ""] + _table(
            ("size", "timing", "time µs", "p50/p99 µs", "busbw out / in", "NCCL algo/proto",
             "flags"), rows)
    return render


def _committed_text(folder: str, name: str) -> str:
    """A text file committed beside a store under this checkout's ``results/`` (nccl-tests'
    output, which no store holds)."""
    return (Path(__file__).resolve().parents[1] / RESULTS / folder / name).read_text()


def comm_beside_nccl_tests(folder: str, graph: str, graph_more: str | None, eager: str,
                           graph_file: str, default_file: str,
                           from_bytes: int) -> Callable[[Store], list[str]]:
    """dlbench's all_reduce busbw beside nccl-tests' ``all_reduce_perf`` on the same host, from
    ``from_bytes`` up: the ``graph`` run beside nccl-tests ``-G`` (``graph_file``, committed in
    ``folder`` from the same call) and its default loop (``default_file``), the ``graph_more``
    run (more iterations per replay, a shorter range, maybe another call) beside ``-G``, the
    ``eager`` run beside the default loop; each ratio is dlbench / nccl-tests, out of place / in
    place, nccl-tests' figures as it printed them (:mod:`dlbench.report.nccl_tests`). A campaign
    without a ``graph_more`` run passes None: its column is left out."""
    from dlbench.report.comm_tables import _size, timing_label  # the comm view
    from dlbench.report.nccl_tests import only_run  # nccl-tests' printed tables

    def render(store: Store) -> list[str]:
        g_run = only_run(_committed_text(folder, graph_file))
        d_run = only_run(_committed_text(folder, default_file))
        if not g_run.graph or d_run.graph:
            raise ValueError(f"{graph_file} must be a -G run and {default_file} not")
        runs = (graph, eager) if graph_more is None else (graph, graph_more, eager)
        cells = _comm_cells(store, runs)
        flags = {r.id: _comm_flags(r) for r in cells.values()}
        common = _common(list(flags.values()))
        label = {run: timing_label(next(r for (k, _, _), r in cells.items() if k == run))
                 for run in runs}

        def pair(run: str, size: int) -> tuple[Any, Any] | None:
            o, i = cells.get((run, size, False)), cells.get((run, size, True))
            return None if o is None or i is None else (o, i)

        def bw(p: tuple[Any, Any]) -> str:
            return " / ".join(f"{r.busbw() / 1e9:.2f}" for r in p)

        def ratio(p: tuple[Any, Any] | None, nt: Any) -> str:
            if p is None:
                return "–"
            return " / ".join(f"{r.busbw() / 1e9 / nt.busbw(r.config.inplace):.3f}" for r in p)

        rows = []
        for size in sorted({s for _, s, _ in cells if s >= from_bytes}):
            g, e = pair(graph, size), pair(eager, size)
            if g is None or e is None:
                continue
            gt, dt = g_run.row(size), d_run.row(size)
            more = None if graph_more is None else pair(graph_more, size)
            notes = [f"{label[run]}: {_pair_flags(p, flags, common)}"
                     for run, p in ((graph, g), (graph_more, more), (eager, e))
                     if p is not None and _pair_flags(p, flags, common) != "–"]
            rows.append((_size(size), bw(g), f"{gt.out_busbw:.2f} / {gt.in_busbw:.2f}",
                         ratio(g, gt)) + (() if graph_more is None else (ratio(more, gt),))
                        + (f"{dt.out_busbw:.2f} / {dt.in_busbw:.2f}", ratio(g, dt), bw(e),
                           ratio(e, dt), "; ".join(notes) or "–"))
        said = (f"Runs {graph} ({label[graph]}) and {eager} ({label[eager]})"
                if graph_more is None else f"Runs {graph} ({label[graph]}), {graph_more} "
                f"({label[graph_more]}) and {eager} ({label[eager]})")
        return [f"{said} beside nccl-tests {g_run.version} ({graph_file}: -G "
                f"{g_run.graph}; {default_file}: its default loop), busbw GB/s out of place / in "
                "place; ratios dlbench / nccl-tests; flags out of place / in place where they "
                "differ. " + _caption(common), ""] + _table(
            ("size", f"dlbench {label[graph]}", f"nccl-tests -G {g_run.graph}",
             f"{label[graph]} / -G")
            + (() if graph_more is None else (f"{label[graph_more]} / -G",))
            + ("nccl-tests default", f"{label[graph]} / default", "dlbench eager",
               "eager / default", "flags"), rows)
    return render


def comm_p99_beside_nccl_tests(folder: str, graph: str, eager: str,
                               per_iter_file: str) -> Callable[[Store], list[str]]:
    """dlbench's p99 time per iteration beside nccl-tests' ``-I`` (per-iteration CUDA-event
    timing; ``per_iter_file``, committed in ``folder``), at every size both measured: the
    ``eager`` run (an event after each iteration, as ``-I``) and the ``graph`` run (each sample a
    replay's time over its iterations, so its p99 is of means over a replay), out of place / in
    place; the ratio is eager's p99 over ``-I``'s i_p99, and ``-I``'s i_cv% sits beside the
    flags that say dlbench's spread."""
    from dlbench.report.comm_tables import _size, timing_label  # the comm view
    from dlbench.report.nccl_tests import only_run  # nccl-tests' printed tables

    def render(store: Store) -> list[str]:
        i_run = only_run(_committed_text(folder, per_iter_file))
        if not i_run.per_iteration or i_run.graph:
            raise ValueError(f"{per_iter_file} must be an -I run without -G")
        cells = _comm_cells(store, (graph, eager))
        flags = {r.id: _comm_flags(r) for r in cells.values()}
        common = _common(list(flags.values()))
        label = {run: timing_label(next(r for (k, _, _), r in cells.items() if k == run))
                 for run in (graph, eager)}
        samples = sorted({len(r.sample_times_s()) for r in cells.values()})

        def pair(run: str, size: int) -> tuple[Any, Any] | None:
            o, i = cells.get((run, size, False)), cells.get((run, size, True))
            return None if o is None or i is None else (o, i)

        rows = []
        for size in sorted({s for _, s, _ in cells}):
            g, e = pair(graph, size), pair(eager, size)
            if g is None or e is None:
                continue
            it = i_run.row(size)
            notes = [f"{label[run]}: {_pair_flags(p, flags, common)}"
                     for run, p in ((graph, g), (eager, e))
                     if _pair_flags(p, flags, common) != "–"]
            rows.append((
                _size(size), " / ".join(f"{r.p99_s * 1e6:.1f}" for r in g),
                " / ".join(f"{r.p99_s * 1e6:.1f}" for r in e),
                f"{it.out_i_p99_us:.1f} / {it.in_i_p99_us:.1f}",
                " / ".join(f"{r.p99_s * 1e6 / it.p99_us(r.config.inplace):.2f}" for r in e),
                f"{it.out_i_cv_pct:.0f}% / {it.in_i_cv_pct:.0f}%", "; ".join(notes) or "–"))
        return [f"Runs {graph} ({label[graph]}) and {eager} ({label[eager]}) beside nccl-tests "
                f"{i_run.version} ({per_iter_file}: -I 1, {i_run.iters} iterations a size), p99 "
                "µs per iteration out of place / in place: dlbench's over "
                f"{' or '.join(map(str, samples))} samples, each the slowest rank's, nccl-tests' "
                "i_p99, each iteration the slowest GPU's; ratio eager / -I; -I's i_cv%; flags "
                "out of place / in place where they differ. " + _caption(common), ""] + _table(
            ("size", f"dlbench {label[graph]} p99", f"dlbench {label[eager]} p99",
             "nccl-tests -I p99", "eager / -I", "nccl-tests -I cv", "flags"), rows)
    return render


def generate_length_runs(runs: Sequence[str]) -> Callable[[Store], list[str]]:
    """:func:`generate_runs`'s table with each record's prompt and output lengths beside its
    batch (``prompt+output`` tokens), for runs that sweep the lengths."""
    inner = generate_runs(runs)

    def render(store: Store) -> list[str]:
        lines = inner(store)
        recs = [r for run in runs for r in store.results(run_id=run, kind="generate")]
        head, rule, *rows = lines[2:]
        if len(rows) != len(recs):
            raise LookupError(f"runs {', '.join(runs)}: {len(rows)} rows for {len(recs)} records")

        def after_batch(line: str, cell: str) -> str:
            cells = line.split(" | ")
            return " | ".join(cells[:2] + [cell] + cells[2:])
        lengths = [f"{r.config.prompt_len}+{r.config.output_len}" for r in recs]
        return lines[:2] + [after_batch(head, "prompt+output"), rule + "---|"] + [
            after_batch(row, cell) for row, cell in zip(rows, lengths)]
    return render


# -- PyTorch against JAX, data parallel ---------------------------------------------------------
def frameworks_pairs(caption: str, runs: Sequence[str]) -> Callable[[Store], list[str]]:
    """PyTorch against JAX, a row per config and GPU count that both frameworks measured in
    ``runs`` (:func:`dlbench.report.frameworks.pairs`: the same model, batch per GPU and
    precision, PyTorch at whatever layout and compile setting it ran): each side's rate ±95%
    with its factor over the same framework's 1-GPU record, JAX / PyTorch, each side's first
    step and allocator peak, and each side's flags in its cell. Energy is left out: a JAX
    data-parallel record's telemetry may hold fewer GPUs than it ran on."""
    from dlbench.report.frameworks import pairs, torch_setting  # the comparison view's pairing

    def render(store: Store) -> list[str]:
        recs = [r for run in runs for r in store.results(run_id=run, kind="scaling")]
        bad = [r.id for r in recs if not r.ok]
        if bad or not recs:
            raise LookupError(f"runs {', '.join(runs)}: failed or no scaling records {bad}")
        matched = pairs(recs)
        if any(len(side) != 1 for _, by in matched for side in by.values()):
            raise LookupError("a --repeat group: this table shows one process a side")

        def key(r: Any) -> tuple:
            c = r.config.base
            return (c.framework, c.model, c.batch_size, c.precision, c.input_size)

        one_gpu = {key(r): r for r in recs if r.config.gpus == 1}
        flags = {r.id: record_flags(r) for r in recs}
        common = _common(list(flags.values()))
        rows = []
        for rep, by in matched:
            t, j = by["torch"][0], by["jax"][0]
            cells = []
            for r in (t, j):
                base = one_gpu.get(key(r)) if r.config.gpus > 1 else None
                cells.append(_figure(r, flags[r.id], common, "rate", base))
            rows.append((_name(rep), str(rep.config.base.batch_size), str(rep.config.gpus),
                         torch_setting(t), *cells,
                         f"{j.summary().throughput / t.summary().throughput:.2f}",
                         f"{t.first_step_s:.1f} / {j.first_step_s:.1f}",
                         f"{_gib(t)} / {_gib(j)}"))
        return [caption + " " + _caption(common), ""] + _table(
            ("model", "batch/GPU", "GPUs", "PyTorch as", "PyTorch (x 1 GPU) ±95%",
             "JAX (x 1 GPU) ±95%", "JAX / PyTorch", "first step s PT / JAX",
             "peak GiB PT / JAX"), rows)
    return render


# -- collectives: rounds of dlbench beside rounds of nccl-tests --------------------------------
def comm_rounds_beside_nccl_tests(folder: str, rounds: Sequence[tuple[str, str]],
                                  from_bytes: int) -> Callable[[Store], list[str]]:
    """dlbench's all_reduce busbw beside nccl-tests' round by round, from ``from_bytes`` up:
    each round a ``dlbench comm`` run and the nccl-tests output committed in ``folder`` that it
    is set beside (``rounds``: (run, file) in the order they ran; ``-G`` runs beside graph
    timing, nccl-tests' default loop beside batched), busbw out of place / in place, the ratio
    dlbench / nccl-tests in each placement, NCCL's algorithm and protocol (said once where every
    round's records agree), and the flags not common to the table, per round."""
    from dlbench.report.comm_tables import _choice, _size, timing_label  # the comm view
    from dlbench.report.nccl_tests import only_run  # nccl-tests' printed tables

    def render(store: Store) -> list[str]:
        printed = [only_run(_committed_text(folder, name)) for _, name in rounds]
        runs = [run for run, _ in rounds]
        cells = _comm_cells(store, runs)
        for run, nt in zip(runs, printed):  # like against like: -G beside graph timing only
            timing = next(r for (k, _, _), r in cells.items() if k == run).config.timing
            if (timing == "graph") != bool(nt.graph):
                raise ValueError(f"run {run} ({timing}) is set beside an nccl-tests run "
                                 f"{'with' if nt.graph else 'without'} -G")
        flags = {r.id: _comm_flags(r) for r in cells.values()}
        common = _common(list(flags.values()))
        label = {run: timing_label(next(r for (k, _, _), r in cells.items() if k == run))
                 for run in runs}
        rows = []
        for size in sorted({s for _, s, _ in cells if s >= from_bytes}):
            line, choices, notes = [_size(size)], [], []
            for i, (run, nt) in enumerate(zip(runs, printed), 1):
                pair = (cells[(run, size, False)], cells[(run, size, True)])
                row = nt.row(size)
                line += [" / ".join(f"{r.busbw() / 1e9:.2f}" for r in pair),
                         f"{row.out_busbw:.2f} / {row.in_busbw:.2f}",
                         " / ".join(f"{r.busbw() / 1e9 / row.busbw(r.config.inplace):.3f}"
                                    for r in pair)]
                choices += [_choice(r) for r in pair]
                rest = _pair_flags(pair, flags, common)
                if rest != "–":
                    notes.append(f"round {i}: {rest}")
            line += [" / ".join(dict.fromkeys(choices)), "; ".join(notes) or "–"]
            rows.append(tuple(line))
        def loop(nt: Any) -> str:
            return f"-G {nt.graph}" if nt.graph else "default loop"
        said = "; ".join(f"round {i}: run {run} ({label[run]}) beside {name} ({loop(nt)})"
                         for i, ((run, name), nt) in enumerate(zip(rounds, printed), 1))
        columns = ["size"]
        for i, (run, nt) in enumerate(zip(runs, printed), 1):
            columns += [f"{i}: dlbench {label[run]}", f"{i}: nccl-tests {loop(nt)}",
                        f"{i}: dlbench / {'-G' if nt.graph else 'default'}"]
        dtypes = sorted({r.config.dtype for r in cells.values()})
        return [f"all_reduce of {', '.join(dtypes)}, busbw GB/s out of place / in place beside "
                f"nccl-tests {printed[0].version}, {said}; ratios dlbench / nccl-tests in the same "
                "placement. " + _caption(common), ""] + _table(
            tuple(columns) + ("NCCL algo/proto", "flags"), rows)
    return render


def comm_ops_beside_nccl_tests(folder: str, run: str, files: Sequence[str],
                               from_bytes: int) -> Callable[[Store], list[str]]:
    """One ``dlbench comm`` run's collectives beside nccl-tests' ``*_perf`` of each (``files``,
    committed in ``folder``, one per collective, each file's collective read from its
    ``Collective test starting`` line), from ``from_bytes`` up: busbw out of place / in place,
    the ratio dlbench / nccl-tests in each placement ("–" where dlbench has no such placement:
    all_to_all in place), NCCL's algorithm and protocol, and the flags not common to the
    table. Like against like is checked: graph timing beside ``-G`` only, the same element
    type."""
    from dlbench.report.comm_tables import _choice, _size, timing_label  # the comm view
    from dlbench.report.nccl_tests import only_run  # nccl-tests' printed tables

    def render(store: Store) -> list[str]:
        recs = store.results(run_id=run, kind="comm")
        bad = [r.id for r in recs if not r.ok]
        if bad or not recs:
            raise LookupError(f"run {run}: failed or no comm records {bad}")
        cells = {(r.config.op, r.config.size_bytes, r.config.inplace): r for r in recs}
        printed = {}
        for name in files:
            nt = only_run(_committed_text(folder, name))
            some = next((r for (op, _, _), r in cells.items() if op == nt.op), None)
            if some is None:
                raise LookupError(f"run {run} has no {nt.op} for {name}")
            if not nt.like(some.config.op, some.config.dtype, some.config.timing):
                raise ValueError(f"{name} ({'-G' if nt.graph else 'no -G'}, "
                                 f"{nt.rows[-1].dtype}) is not like run {run}'s {nt.op} "
                                 f"({some.config.timing} timing, {some.config.dtype})")
            printed[nt.op] = (name, nt)
        flags = {r.id: _comm_flags(r) for r in recs}
        common = _common(list(flags.values()))
        rows = []
        for op, (name, nt) in printed.items():
            for size in sorted({s for o, s, _ in cells if o == op and s >= from_bytes}):
                pair = [cells.get((op, size, place)) for place in (False, True)]
                row = nt.row(size)
                mine = [r for r in pair if r is not None]
                rows.append((op, _size(size),
                             " / ".join("–" if r is None else f"{r.busbw() / 1e9:.2f}"
                                        for r in pair),
                             f"{row.out_busbw:.2f} / {row.in_busbw:.2f}",
                             " / ".join("–" if r is None else
                                        f"{r.busbw() / 1e9 / row.busbw(r.config.inplace):.3f}"
                                        for r in pair),
                             " / ".join(dict.fromkeys(_choice(r) for r in mine)),
                             _pair_flags(mine, flags, common)))
        some, nt = recs[0], next(iter(printed.values()))[1]
        return [f"Run {run} ({timing_label(some)}, {some.config.dtype}, "
                f"{some.config.ranks} ranks) beside nccl-tests {nt.version} "
                f"({', '.join(name for name, _ in printed.values())}: -G {nt.graph}), busbw "
                "GB/s out of place / in place; ratios dlbench / nccl-tests in the same "
                "placement. " + _caption(common), ""] + _table(
            ("op", "size", f"dlbench {timing_label(some)}", f"nccl-tests -G {nt.graph}",
             "dlbench / -G", "NCCL algo/proto", "flags"), rows)
    return render


# -- ceilings: one row per dlbench peak run -----------------------------------------------------
def _published_ceiling(env: dict, precision: str) -> float | None:
    """The published matmul ceiling of the record's GPU model in ``precision`` (mamf-finder's,
    :mod:`dlbench.reference.today`), None where none is published."""
    from dlbench.reference import today  # published figures, each with its source

    spec, _ = spec_for_env(env)
    if spec is None:
        return None
    return next((f.value for f in today.figures_for("matmul")
                 if f.gpu_id == spec.id and f.precision == precision), None)


def ceilings_by_run(caption: str, runs: Sequence[str]) -> Callable[[Store], list[str]]:
    """``dlbench peak`` matmul runs side by side, a row per run and precision: the card (its
    UUID's prefix), the method (sustained with its warm-up, or burst), the ceiling (sustained:
    the largest per-shape mean, mamf-finder's figure; burst: the largest per-shape median) with
    the 95% interval of its point's mean iteration time and its shape, the largest median and
    the best single iteration beside it with their shapes, the shapes swept, the run's wall
    time, the ceiling over the published one of the GPU model, and the flags."""
    def render(store: Store) -> list[str]:
        wall = {r.run_id: r for r in store.runs()}
        found = []
        for run in runs:
            recs = [r for r in store.results(run_id=run, kind="peak")
                    if r.ok and r.config.verb == "matmul"]
            if not recs:
                raise LookupError(f"run {run} has no ok matmul peak record")
            for key, c in ceilings(recs).items():
                setter = next(r for r in recs if r.config.label == c["ceiling_label"]
                              and r.ceiling_rate() == c["ceiling"])
                found.append((run, key, c, setter))
        flags = {setter.id: _peak_flags(setter) for *_, setter in found}
        common = _common(list(flags.values()))
        rows = []
        for run, key, c, r in found:
            method = (f"sustained ({c['warmup_s']:.0f} s warm-up)" if c["method"] == "sustained"
                      else c["method"])
            half = stats.interval(r.times_s).halfwidth / stats.mean(r.times_s)
            published = _published_ceiling(r.env, r.config.precision)
            w = wall[run]
            seconds = (datetime.fromisoformat(w.finished_at)
                       - datetime.fromisoformat(w.started_at)).total_seconds()
            shape = c["ceiling_label"].rsplit(" ", 1)[-1]
            rows.append((run, r.env["gpus"][0]["uuid"][:12], key, method,
                         f"{fmt_num(c['ceiling'])} ±{fmt_pct(half)} ({shape})",
                         f"{fmt_num(c['median'])} ({c['label'].rsplit(' ', 1)[-1]})",
                         f"{fmt_num(c['best'])} ({c['best_label'].rsplit(' ', 1)[-1]})",
                         f"{c['points']} ({c['iterations']})", f"{seconds:.0f}",
                         "–" if published is None else f"{c['ceiling'] / published:.3f}",
                         _rest(flags[r.id], common)))
        return [caption + " " + _caption(common), ""] + _table(
            ("run", "card", "precision", "method", "ceiling TFLOP/s ±95% (shape)",
             "largest median (shape)", "best iteration (shape)",
             "shapes (iterations at the ceiling)",
             "wall s", "ceiling / published", "flags"), rows)
    return render


H100_PAGE = "docs/results/2026-11-h100.md"
H200_4_PAGE = "docs/results/2026-11-4x-h200.md"
CPU_PAGE = "docs/results/2026-11-cpu.md"
GENERATE_PAGE = "docs/results/2026-11-h100-generate.md"
H100_GENERATE = f"{H100}/generate"
#: The two sweeps of the generation campaign, one per card of a two-H100 host (llama-3.2-1b on
#: GPU 0, llama-3.1-8b on GPU 1).
GENERATE_RUNS = ("591df2f3d966", "6468e4f56a9f")
#: The second H100 campaign, one H100 alone: llama-3.1-8b at batch 1 (eager and compile+fuse),
#: llama-3.2-1b at batch 1 (compile+fuse), both at batch 64 (eager and compile+fuse), and
#: llama-3.1-8b at the largest batch that fits (compile+fuse).
GENERATE_FUSED_RUNS = ("b2072278de6c", "dc2b4cff3d0f", "74b4288175a6", "54adeb174928",
                       "e79af84a040c")
#: The third H100 campaign, one H100 alone in each of three calls: llama-3.2-3b at batch 1, 8,
#: 32 and 64 (eager and compile+fuse), llama-3.1-8b with folded grouped-query attention at
#: batch 1, 64 and 711 and generate() at 711, llama-3.2-1b at the largest batch (the first
#: try, 2,770, ran out of memory: a failed row); a fourth call: llama-3.1-8b at batch 1 in
#: fp16 beside bf16 (graph) and compiled, and generate() at llama-3.2-1b's largest batch.
GENERATE_THIRD_RUNS = ("379c73a293fa", "9f99f5c83ff2", "d96491002ed7", "6540bcf5d49f",
                       "0841268fc73f", "885a0b2fd33d", "d02adca0f1c4", "bbee1b8b6d52",
                       "6e054e9223f5", "7577e3346062")
#: --fold-gqa record by record: llama-3.1-8b compile+fuse (second campaign) against
#: compile+fuse+fold (third), at batch 1, 64 and 711.
GENERATE_FOLD_PAIRS = (("815d75d51d1f", "091c74eb8639"), ("876d90d31f42", "89937b600526"),
                       ("7f1ac82c4ce0", "fc1fbd9e5903"))
H200_GENERATE_PAGE = "docs/results/2026-11-h200-generate.md"
H200_GENERATE = "pt2.11-cu130-h200/generate"
#: The H200 generation sweeps, one host of two cards (llama-3.1-8b on GPU 0, the 1B and 3B on
#: GPU 1), in the page's order: compiled paths, then eager.
H200_GENERATE_RUNS = ("1906588970b4", "0f0d91a0ae1f", "01be8621afd8", "c348466f8fa8",
                      "d08b46795914", "f36e3a4f64ac", "9e866eba7e3d", "d6fbdd0ef6b3",
                      "4d5638958bc7")
#: The third H200 session: each card's sweep with --tuned --fuse (eager and compile+fuse side by
#: side), the two cards at once, each process on its own half of the host's cores.
H200_GENERATE_TUNED_RUNS = ("42c655dcea4b", "51bd5bb999ac")
SHARDED_PAGE = "docs/results/2026-11-2x-h200-sharded.md"
H200_2 = "pt2.11-cu130-2x-h200"
#: Language-model training by strategy on two H200s: 1B ddp/fsdp at 1 and 2 GPUs, 8B fsdp
#: with checkpointing, 3B fsdp at 1 and 2, tp at 2 (after the optimizer fix), 3B ddp at 1.
SHARDED_RUNS = ("5f95571f9220", "a97b2333a494", "27242a480627", "c494a3d5ac40",
                "dff519c359fc", "2ed3766a0b87", "c0e4a6a72f1b", "96ea19689dca")
SHARDED_H100_PAGE = "docs/results/2026-11-4x-h100-sharded.md"
H100_4 = "pt2.11-cu130-4x-h100"
#: Language-model training by strategy on four H100s of one host (two of them where a run says
#: 2 GPUs), measured after the initialisation fix: llama-3.2-1b fsdp at 8 sequences a GPU on 2
#: and 1 GPUs (a --repeat 2 group each), ddp at 4 on 2 and 1, tp at 2, fsdp at 4 with and without
#: fp8, fsdp and fsdp+tp at 4 GPUs, selective checkpointing and CPU offload at 2; llama-3.1-8b
#: fsdp with checkpointing at 4 and 2, and its offload runs, which the calls' limits stopped.
SHARDED_H100_RUNS = ("e9b6882bf599", "daa88c4f778a", "186a8ed34a71", "4770487b4cd1",
                     "a4cf95a70989", "71009351ad5b", "8db10112938b", "cbdef414efd6",
                     "840b81e437de", "e6df4e9cf288", "a086769e7471", "d0ccccdc4f6e",
                     "bca347b2cbb0")
#: The same host's first measurements, taken with the initialisation bug (every rank trained
#: from PyTorch's default weights), kept apart in ``superseded/`` as the page's evidence.
SHARDED_H100_SUPERSEDED = f"{H100_4}/superseded"
#: The host's third lending, one call, two pairs at once: llama-3.2-3b ddp and fsdp at 1 and 2
#: GPUs and tp at 2 (GPUs 0,1), then llama-3.2-1b fsdp at 2 GPUs as a --repeat 3 group; on
#: GPUs 2,3 llama-3.1-8b fsdp with CPU offload and checkpointing, then llama-3.2-1b tp as a
#: --repeat 3 group.
SHARDED_H100_THIRD_RUNS = ("cdb0bae2de9f", "05882d05df5e", "288dfd9f36de", "7fef713ac1fb",
                           "dba4f2783dca")
SHARDED_H100_MAXBATCH_RUN = "209422b59fcf"
#: Generation on one card of the same host: bf16 and fp8 graph-captured at batch 1, fp8
#: compiled at 1 and 64, then bf16 compiled at 64 and 1 (a later call).
GENERATE_FP8_RUNS = ("ccf14a34cf75", "6f7d05c4d5f8", "7711f742059d")
GENERATE_4X_PAGE = "docs/results/2026-11-4x-h100-generate.md"
H100_4_GENERATE = f"{H100_4}/generate"
#: Generation on the same four-H100 host, two device calls, one list of runs per GPU at the same
#: time; one fp8 recipe a table, as a generate table's row names the precision. fp8's
#: weight-only recipe, llama-3.1-8b on GPU 0: graph-captured at batch 1 and compiled at 1 and 64
#: (first call), then bf16 and weight-only compiled at batch 1 one after the other (second call).
GENERATE_4X_WO_RUNS = ("b0f23aa2eff6", "79e5f343dbde", "5c3e7dd4a8aa", "80f27034a7f7")
#: fp8's dynamic recipe (every fp8 row of this table is dynamic), llama-3.1-8b at batch 1: bf16
#: and fp8 graph-captured on GPU 0 (first call), fp8 compiled on GPU 1 (second call).
GENERATE_4X_DYNAMIC_RUNS = ("98c01b1791ff", "4c7db2507e19")
#: llama-3.2-3b at the largest batch -b auto found (968): generate() and compile+fuse on GPU 1
#: (first call), compile without --fuse on GPU 2 (second call).
GENERATE_4X_LARGEST_RUNS = ("aba302c3ac70", "be3f4a3e5ab3")
#: llama-3.2-1b at batch 1, graph-captured, as a --repeat 3 group on GPU 1 (first call): its
#: prose quotes the group, whose generate table would have no '±95% jobs' cell.
GENERATE_4X_REPEAT_RUN = "ff986811406a"
COMM_PAGE = "docs/results/2026-11-2x-h200-comm.md"
H200_2_COMM = f"{H200_2}/comm"
#: The collectives on a host of two H200s, one device call: all_reduce 8 B..1 GiB
#: with --timing graph (10 iterations a replay) and eager; then, in a second call, graph with 20
#: iterations a replay from 1 MiB to 128 MiB, beside nccl-tests' -G 20 of that call.
COMM_GRAPH_RUN, COMM_EAGER_RUN, COMM_GRAPH20_RUN = "b894a9c848bf", "a9784718ef66", "85d706a3a728"
#: SIGTERM to a two-rank NCCL `dlbench scale` job: kept as interrupted, without a result.
COMM_SIGTERM_RUN = "dcbe1136164d"
COMM_H100_PAGE = "docs/results/2026-11-4x-h100-comm.md"
H100_4_COMM = f"{H100_4}/comm"
#: The collectives on GPUs 0 and 1 of the four-H100 host (GPUs 2 and 3 ran another job), one
#: device call: all_reduce 8 B..1 GiB with --timing graph (10 iterations a replay) and eager,
#: beside nccl-tests' -G 20, default loop and -I 1 of the same call; no graph run with more
#: iterations a replay.
COMM_H100_GRAPH_RUN, COMM_H100_EAGER_RUN = "07790f9e7703", "2ccecd9ac135"
#: SIGTERM to a two-rank NCCL `dlbench scale` job on the same two cards: kept as interrupted,
#: without a result.
COMM_H100_SIGTERM_RUN = "2ba5feb91d03"
SERVE_PAGE = "docs/results/2026-11-h100-serve.md"
H100_SERVE = f"{H100}/serve"
#: `dlbench serve` on one H100 alone: the request-rate and concurrency sweep against
#: `transformers serve` (llama-3.2-1b's config, random weights), and the client's own overhead
#: against dlbench's stub on the same host.
SERVE_RUN, SERVE_STUB_RUN = "b7dcec268a21", "2b8382ad76b4"

H100_2_PAGE = "docs/results/2026-11-2x-h100.md"
#: all_reduce 8 B..1 GiB, graph x20, every call on the job's own stream, beside nccl-tests -G 20
#: built with MPI, on hosts of two H200s (the two-H100 kind came as H200s), in the order they
#: ran. Host C: NCCL's own API on ncclMemAlloc's buffers rotated twice, then on one set of
#: buffers (--no-rotate), and torch's API rotated, before and after; hosts A and B ran before
#: rotation existed (one set of buffers). Host B also batched x20 beside nccl-tests' default loop.
COMM_STREAM_PAGE = "docs/results/2026-11-2x-h200-comm-stream.md"
H200_2_STREAM_B = f"{H200_2}/comm-stream/host-b"
H200_2_STREAM_C = f"{H200_2}/comm-stream/host-c"
STREAM_C_NCCL = (("7675595261a3", "nccl-mpi-G20-1.txt"), ("8808d1ebb8a7", "nccl-mpi-G20-1.txt"),
                 ("c1bfce931ec7", "nccl-mpi-G20-1.txt"))
STREAM_C_TORCH = (("541d9a801a39", "nccl-mpi-G20-1.txt"), ("b50c63930901", "nccl-mpi-G20-1.txt"))
STREAM_B_NCCL = (("74652106c321", "nccl-mpi-G20-1.txt"), ("2f586d0554e8", "nccl-mpi-G20-2.txt"),
                 ("21368dca0f8f", "nccl-mpi-G20-3.txt"))
STREAM_B_BATCHED = (("6a01ce3d923b", "nccl-mpi-n20-1.txt"), ("49f4eb46a15e", "nccl-mpi-n20-1.txt"))
#: Host D: two of a host of four H200s (CUDA_VISIBLE_DEVICES=0,1), the code after rotation,
#: benchmarks/beside_nccl_tests.sh's sequence (order.txt): NCCL's API on ncclMemAlloc's buffers
#: and torch's API twice each beside three -G 20 runs, eager beside -I 1, bf16, the other four
#: collectives.
H200_2_STREAM_D = f"{H200_2}/comm-stream/host-d"
STREAM_D_NCCL = (("20e0d023ff53", "nccl-mpi-G20-1.txt"), ("97e0de98514c", "nccl-mpi-G20-2.txt"))
STREAM_D_TORCH = (("67560e4beea2", "nccl-mpi-G20-1.txt"), ("6a7e29ef485f", "nccl-mpi-G20-3.txt"))
STREAM_D_BF16 = (("d3e66f577ede", "nccl-mpi-G20-bf16.txt"),)
STREAM_D_OPS_RUN = "67dcabb90de1"
STREAM_D_OPS_FILES = tuple(f"nccl-mpi-G20-{c}.txt" for c in
                           ("all_gather", "reduce_scatter", "broadcast", "alltoall"))
#: eager beside -I 1: (graph run, eager run, -G file, -I file), NCCL's API then torch's
STREAM_D_EAGER_NCCL = ("97e0de98514c", "ceac5e0136f3", "nccl-mpi-G20-2.txt", "nccl-mpi-I1-2.txt")
STREAM_D_EAGER_TORCH = ("6a7e29ef485f", "f396ce5883c3", "nccl-mpi-G20-3.txt", "nccl-mpi-I1-2.txt")
H100_2 = "pt2.11-cu130-2x-h100"
H100_2_COMM = f"{H100_2}/comm"
#: The same sequence on a host of two H100s, run by benchmarks/beside_nccl_tests.sh itself (its
#: order.txt pairs each run with the first like nccl-tests run after it).
H100_2_STREAM = f"{H100_2}/comm-stream"
H100_STREAM_NCCL = (("5dde9ced49ec", "nccl-mpi-G20-1.txt"), ("274368950c87", "nccl-mpi-G20-2.txt"))
H100_STREAM_TORCH = (("9303a5eea2e8", "nccl-mpi-G20-1.txt"), ("328e0141c132", "nccl-mpi-G20-3.txt"))
H100_STREAM_BF16 = (("dbb0edad6b97", "nccl-mpi-G20-bf16.txt"),)
H100_STREAM_OPS_RUN = "54961573ec4a"
H100_STREAM_EAGER_NCCL = ("274368950c87", "8690d57cd007", "nccl-mpi-G20-2.txt",
                          "nccl-mpi-I1-2.txt")
H100_STREAM_EAGER_TORCH = ("328e0141c132", "2105428d61b1", "nccl-mpi-G20-3.txt",
                           "nccl-mpi-I1-2.txt")
#: A host of two H100s (NV18), lent three times, a fresh host each time. PyTorch DDP against
#: JAX data parallel at 1 and 2 GPUs, bf16, frameworks.sh's window (first call): ResNet-50 b128
#: (torch, jax), GPT-2 b8 (torch, jax).
H100_2_FRAMEWORKS_RUNS = ("c93308749211", "a8128adc3f25", "64c5aa21b32e", "062d4bb98538")
#: The interconnect A/B at 2 GPUs: the first call's run, which the call's time limit cut after
#: five results, and its --resume in the third call, on another host.
H100_2_INTERCONNECT_RUNS = ("cd6d4b790d4b", "259090fabae4")
H100_2_INTERCONNECT = picked(
    "ddp at 2 GPUs, bf16, channels_last, img/s (factor over default) ±95%; runs "
    "cd6d4b790d4b (first call) and 259090fabae4 (its --resume, third call, another host); "
    "calls: the device call, and so the host, of each column's record.",
    ("model", "calls: default / no-p2p / no-p2p+no-shm") + _INTERCONNECT_COLS[1:],
    ((("resnet50", "1 / 1 / 3"), ("3a64a0427c8b", "0a67784f52e0", "16026b19cbda")),
     (("vgg16", "1 / 3 / 3"), ("5f890ccac0b8", "11015851f77f", "c9c7f2233d7b")),
     (("inception_v3", "1 / 3 / 3"), ("a22477bbd659", "dacd1d68673d", "203ec8cf80c2")),
     (("resnet152", "1 / 3 / 3"), ("139569c52d21", "9247181af246", "2b38ef2bda56"))),
    factor_over=0, digits=3)
#: all_reduce 8 B..1 GiB, graph timing with 20 iterations a replay, twice, each run after an
#: nccl-tests -G 20 run of the same call (first call): (dlbench run, nccl-tests output).
H100_2_COMM_ROUNDS = (("7a3b9f29ca7b", "nccl-G20-1.txt"), ("b9552949cc91", "nccl-G20-2.txt"))
#: The same host kind, three more calls (a fresh host each): nccl-tests built with MPI (one
#: process per GPU) beside dlbench comm graph x20 with torch.distributed (--api torch) and with
#: NCCL's own API (--api nccl). The third call's rounds, in the order they ran: NCCL's API, then
#: torch's beside the same nccl-tests run, then NCCL's API beside the second.
H100_2_COMM_API = f"{H100_2}/comm-api"
H100_2_COMM_API_ROUNDS = (("11edb7aded2c", "third-nccl-mpi-G20-1.txt"),
                          ("102330cfc71e", "third-nccl-mpi-G20-1.txt"),
                          ("f9be3eaa92a1", "third-nccl-mpi-G20-2.txt"))
#: llama-3.1-8b, graph-captured, fused and folded, on one card (second call): prompt length
#: 128, 512 and 2048 at batch 1 and 16, then output length 32 and 512 at batch 1.
H100_2_GENERATE_RUNS = ("978cbe9a278e", "032dd16bc756")
#: fp8's dynamic and weight-only recipes, the same path, batch 1, 128+128 (third call, GPU 1).
H100_2_FP8_RUNS = ("2e9c51d4a9ae", "eaf85e385db0")
#: dlbench peak --verbs matmul --precision bf16 (third call): GPU 0 burst then sustained,
#: GPU 1 sustained.
H100_2_PEAK_RUNS = ("b8f9aedb5153", "51a1c2c4a9f6", "1a347ef2fcac")
H100_2_CEILINGS = ceilings_by_run(
    "`dlbench peak --verbs matmul --precision bf16` on two H100s of one host, one run a row; "
    "±95%: the interval of the ceiling shape's mean iteration time; published: mamf-finder's "
    "for the GPU model (src/dlbench/reference/today.json).", H100_2_PEAK_RUNS)

HEADLINES = (
    Headline("h100-default", H100, h100_default),
    Headline("h100-tuned", H100, h100_tuned),
    Headline("h200-4", H200_4, h200_4),
    Headline("h200-8", H200_8, h200_8),
    Headline("h100-default-suite", H100,
             suite_run(DEFAULT_SUITE_RUN, ("ms", "tflops", "mfu", "gib")), H100_PAGE),
    Headline("h100-classic-cnn", H100, classic_cnn, H100_PAGE),
    Headline("h200-scaling-bf16", H200_4, scaling_page("bf16", (
        ("resnet50", 1024), ("inception_v3", 512), ("vgg16", 512), ("resnet152", 512),
        ("inception_v4", 512), ("nasnet", 64))), H200_4_PAGE),
    Headline("h200-scaling-fp32", H200_4, scaling_page("fp32", (
        ("resnet50", 256), ("inception_v3", 256), ("vgg16", 256), ("resnet152", 256),
        ("inception_v4", 256), ("nasnet", 64))), H200_4_PAGE),
    Headline("h200-default-suite", H200_4,
             suite_run("eea04ab2c011", ("tflops", "mfu", "ceiling")), H200_4_PAGE),
    Headline("cpu-suite", CPU, suite_run(CPU_SUITE_RUN, ("mode", "ms", "steps")), CPU_PAGE),
    Headline("h100-ms-per-batch", H100, MS_PER_BATCH, H100_PAGE),
    Headline("h100-tune-resnet50", H100, TUNE_RESNET50, H100_PAGE),
    Headline("h100-levers", H100, LEVERS, H100_PAGE),
    Headline("h100-tune-gpt2", H100, TUNE_GPT2, H100_PAGE),
    Headline("h100-gpt2-cards", H100, gpt2_cards, H100_PAGE),
    Headline("h100-tuned-suite", H100, TUNED_SUITE, H100_PAGE),
    Headline("h100-ms-per-batch-tuned", H100, MS_PER_BATCH_TUNED, H100_PAGE),
    Headline("h100-targets", H100, TARGETS, H100_PAGE),
    Headline("tuning-resnet50", H100, TUNE_RESNET50, "docs/tuning.md"),
    Headline("h200-8-page", H200_8, h200_8, "docs/results/2026-11-8x-h200.md"),
    Headline("h100-energy-suite", H100, energy_run("21dab0cda4ef"), H100_PAGE),
    Headline("h100-roofline", H100, suite_run(DEFAULT_SUITE_RUN, ("tflops", "mfu", "ceiling")),
             H100_PAGE),
    Headline("h100-cli", H100, picked(
        "The same code through the command line; ±95%.", ("command", "result"), (
            (("`dlbench throughput -m resnet50 -b 256 --precision bf16 --channels-last on`",),
             ("04dd7146ab2f",)),
            ((("`dlbench scale -m resnet50 -b 256 --gpus 1 --strategy ddp,ps --precision bf16 "
               "--channels-last on` (torchrun, one rank; ddp / ps)"),),
             (("41d288676723", "2b54f6152df1"),))), unit="rate"), H100_PAGE),
    Headline("h200-interconnect-4", H200_4, INTERCONNECT_4, H200_4_PAGE),
    Headline("h200-interconnect-2", H200_4, INTERCONNECT_2, H200_4_PAGE),
    Headline("h200-strategies", H200_4, STRATEGIES, H200_4_PAGE),
    Headline("two-h200", H200_4, TWO_H200, H200_4_PAGE),
    Headline("scaling-interconnect-4", H200_4, INTERCONNECT_4, "docs/scaling.md"),
    Headline("h100-maxbatch", H100, MAXBATCH, H100_PAGE),
    Headline("memory-maxbatch", H100, MAXBATCH_EXCERPT, "docs/memory.md"),
    Headline("h100-ceilings", H100, ceilings_run("c52cfaa9d7a8"), H100_PAGE),
    Headline("cpu-net", CPU, net_runs(CPU_NET_RUNS), CPU_PAGE),
    Headline("h100-generate", H100_GENERATE, generate_runs(GENERATE_RUNS), GENERATE_PAGE),
    Headline("h100-generate-paths", H100_GENERATE, generate_paths(GENERATE_RUNS),
             GENERATE_PAGE),
    Headline("h100-generate-fused", H100_GENERATE, generate_runs(GENERATE_FUSED_RUNS),
             GENERATE_PAGE),
    Headline("h100-generate-fused-paths", H100_GENERATE, generate_paths(GENERATE_FUSED_RUNS),
             GENERATE_PAGE),
    Headline("h100-generate-third", H100_GENERATE, generate_runs(GENERATE_THIRD_RUNS),
             GENERATE_PAGE),
    Headline("h100-generate-third-paths", H100_GENERATE, generate_paths(GENERATE_THIRD_RUNS),
             GENERATE_PAGE),
    Headline("h100-generate-fold", H100_GENERATE, generate_levers(
        "Records named by id: llama-3.1-8b's compiled, fused decode step without and with "
        "--fold-gqa, bf16, 128+128; output tok/s of each, the factor with over without.",
        GENERATE_FOLD_PAIRS), GENERATE_PAGE),
    Headline("h200-generate", H200_GENERATE, generate_runs(H200_GENERATE_RUNS),
             H200_GENERATE_PAGE),
    Headline("h200-generate-paths", H200_GENERATE, generate_paths(H200_GENERATE_RUNS),
             H200_GENERATE_PAGE),
    Headline("h200-generate-tuned", H200_GENERATE, generate_runs(H200_GENERATE_TUNED_RUNS),
             H200_GENERATE_PAGE),
    Headline("h200-generate-tuned-paths", H200_GENERATE,
             generate_paths(H200_GENERATE_TUNED_RUNS), H200_GENERATE_PAGE),
    Headline("2x-h200-strategies", H200_2, strategy_runs(SHARDED_RUNS), SHARDED_PAGE),
    Headline("4x-h100-strategies", H100_4, strategy_runs(SHARDED_H100_RUNS), SHARDED_H100_PAGE),
    Headline("4x-h100-strategies-third", H100_4, strategy_runs(SHARDED_H100_THIRD_RUNS),
             SHARDED_H100_PAGE),
    Headline("4x-h100-largest-batch", H100_4, largest_batch_run(SHARDED_H100_MAXBATCH_RUN),
             SHARDED_H100_PAGE),
    Headline("4x-h100-generate-fp8", H100_4, generate_runs(GENERATE_FP8_RUNS), SHARDED_H100_PAGE),
    Headline("4x-h100-generate-weight-only", H100_4_GENERATE, generate_runs(GENERATE_4X_WO_RUNS),
             GENERATE_4X_PAGE),
    Headline("4x-h100-generate-dynamic", H100_4_GENERATE,
             generate_runs(GENERATE_4X_DYNAMIC_RUNS), GENERATE_4X_PAGE),
    Headline("4x-h100-generate-largest", H100_4_GENERATE,
             generate_runs(GENERATE_4X_LARGEST_RUNS), GENERATE_4X_PAGE),
    Headline("4x-h100-generate-largest-paths", H100_4_GENERATE,
             generate_paths(GENERATE_4X_LARGEST_RUNS[:1]), GENERATE_4X_PAGE),
    Headline("2x-h200-comm", H200_2_COMM, comm_runs((COMM_GRAPH_RUN, COMM_EAGER_RUN)),
             COMM_PAGE),
    Headline("2x-h200-comm-nccl-tests", H200_2_COMM, comm_beside_nccl_tests(
        H200_2_COMM, COMM_GRAPH_RUN, COMM_GRAPH20_RUN, COMM_EAGER_RUN, "nccl-G.txt",
        "nccl-default.txt", 1 << 20), COMM_PAGE),
    Headline("2x-h200-stream-c-nccl", H200_2_STREAM_C, comm_rounds_beside_nccl_tests(
        H200_2_STREAM_C, STREAM_C_NCCL, 1 << 20), COMM_STREAM_PAGE),
    Headline("2x-h200-stream-c-torch", H200_2_STREAM_C, comm_rounds_beside_nccl_tests(
        H200_2_STREAM_C, STREAM_C_TORCH, 1 << 20), COMM_STREAM_PAGE),
    Headline("2x-h200-stream-b-nccl", H200_2_STREAM_B, comm_rounds_beside_nccl_tests(
        H200_2_STREAM_B, STREAM_B_NCCL, 1 << 20), COMM_STREAM_PAGE),
    Headline("2x-h200-stream-b-batched", H200_2_STREAM_B, comm_rounds_beside_nccl_tests(
        H200_2_STREAM_B, STREAM_B_BATCHED, 1 << 20), COMM_STREAM_PAGE),
    Headline("2x-h200-stream-d-nccl", H200_2_STREAM_D, comm_rounds_beside_nccl_tests(
        H200_2_STREAM_D, STREAM_D_NCCL, 1 << 20), COMM_STREAM_PAGE),
    Headline("2x-h200-stream-d-torch", H200_2_STREAM_D, comm_rounds_beside_nccl_tests(
        H200_2_STREAM_D, STREAM_D_TORCH, 1 << 20), COMM_STREAM_PAGE),
    Headline("2x-h200-stream-d-bf16", H200_2_STREAM_D, comm_rounds_beside_nccl_tests(
        H200_2_STREAM_D, STREAM_D_BF16, 1 << 20), COMM_STREAM_PAGE),
    Headline("2x-h200-stream-d-ops", H200_2_STREAM_D, comm_ops_beside_nccl_tests(
        H200_2_STREAM_D, STREAM_D_OPS_RUN, STREAM_D_OPS_FILES, 1 << 20), COMM_STREAM_PAGE),
    Headline("2x-h200-stream-d-eager-nccl", H200_2_STREAM_D, comm_beside_nccl_tests(
        H200_2_STREAM_D, *STREAM_D_EAGER_NCCL[:1], None, *STREAM_D_EAGER_NCCL[1:], 1 << 20),
        COMM_STREAM_PAGE),
    Headline("2x-h200-stream-d-eager-torch", H200_2_STREAM_D, comm_beside_nccl_tests(
        H200_2_STREAM_D, *STREAM_D_EAGER_TORCH[:1], None, *STREAM_D_EAGER_TORCH[1:], 1 << 20),
        COMM_STREAM_PAGE),
    Headline("2x-h200-stream-d-p99", H200_2_STREAM_D, comm_p99_beside_nccl_tests(
        H200_2_STREAM_D, *STREAM_D_EAGER_NCCL[:2], STREAM_D_EAGER_NCCL[3]), COMM_STREAM_PAGE),
    Headline("2x-h100-stream-nccl", H100_2_STREAM, comm_rounds_beside_nccl_tests(
        H100_2_STREAM, H100_STREAM_NCCL, 1 << 20), H100_2_PAGE),
    Headline("2x-h100-stream-torch", H100_2_STREAM, comm_rounds_beside_nccl_tests(
        H100_2_STREAM, H100_STREAM_TORCH, 1 << 20), H100_2_PAGE),
    Headline("2x-h100-stream-bf16", H100_2_STREAM, comm_rounds_beside_nccl_tests(
        H100_2_STREAM, H100_STREAM_BF16, 1 << 20), H100_2_PAGE),
    Headline("2x-h100-stream-ops", H100_2_STREAM, comm_ops_beside_nccl_tests(
        H100_2_STREAM, H100_STREAM_OPS_RUN, STREAM_D_OPS_FILES, 1 << 20), H100_2_PAGE),
    Headline("2x-h100-stream-eager-nccl", H100_2_STREAM, comm_beside_nccl_tests(
        H100_2_STREAM, *H100_STREAM_EAGER_NCCL[:1], None, *H100_STREAM_EAGER_NCCL[1:], 1 << 20),
        H100_2_PAGE),
    Headline("2x-h100-stream-eager-torch", H100_2_STREAM, comm_beside_nccl_tests(
        H100_2_STREAM, *H100_STREAM_EAGER_TORCH[:1], None, *H100_STREAM_EAGER_TORCH[1:],
        1 << 20), H100_2_PAGE),
    Headline("4x-h100-comm", H100_4_COMM, comm_runs((COMM_H100_GRAPH_RUN, COMM_H100_EAGER_RUN)),
             COMM_H100_PAGE),
    Headline("4x-h100-comm-nccl-tests", H100_4_COMM, comm_beside_nccl_tests(
        H100_4_COMM, COMM_H100_GRAPH_RUN, None, COMM_H100_EAGER_RUN, "nccl-G.txt",
        "nccl-default.txt", 1 << 20), COMM_H100_PAGE),
    Headline("4x-h100-comm-p99", H100_4_COMM, comm_p99_beside_nccl_tests(
        H100_4_COMM, COMM_H100_GRAPH_RUN, COMM_H100_EAGER_RUN, "nccl-I.txt"), COMM_H100_PAGE),
    Headline("h100-serve", H100_SERVE, serve_sweep(SERVE_RUN), SERVE_PAGE),
    Headline("h100-serve-overhead", H100_SERVE, serve_overhead(SERVE_STUB_RUN), SERVE_PAGE),
    Headline("2x-h100-frameworks", H100_2, frameworks_pairs(
        "PyTorch DDP (eager, NCHW) against JAX data parallel, bf16, runs "
        f"{', '.join(H100_2_FRAMEWORKS_RUNS)}; img/s for ResNet-50, tok/s for GPT-2.",
        H100_2_FRAMEWORKS_RUNS), H100_2_PAGE),
    Headline("2x-h100-interconnect", H100_2, H100_2_INTERCONNECT, H100_2_PAGE),
    Headline("2x-h100-comm", H100_2_COMM, comm_runs([r for r, _ in H100_2_COMM_ROUNDS]),
             H100_2_PAGE),
    Headline("2x-h100-comm-nccl-tests", H100_2_COMM, comm_rounds_beside_nccl_tests(
        H100_2_COMM, H100_2_COMM_ROUNDS, 1 << 20), H100_2_PAGE),
    Headline("2x-h100-comm-api", H100_2_COMM_API, comm_rounds_beside_nccl_tests(
        H100_2_COMM_API, H100_2_COMM_API_ROUNDS, 256 << 10), H100_2_PAGE),
    Headline("2x-h100-generate", H100_2, generate_length_runs(H100_2_GENERATE_RUNS),
             H100_2_PAGE),
    Headline("2x-h100-generate-fp8", H100_2, generate_runs(H100_2_FP8_RUNS), H100_2_PAGE),
    Headline("2x-h100-ceilings", H100_2, H100_2_CEILINGS, H100_2_PAGE),
    Headline("ceilings-2x-h100", H100_2, H100_2_CEILINGS, "docs/ceilings.md"),
)


# -- rendering into README ---------------------------------------------------------------------
def begin_mark(name: str) -> str:
    return f"<!-- headline:{name} generated by `{WRITE_COMMAND}` -->"


def end_mark(name: str) -> str:
    return f"<!-- /headline:{name} -->"


def open_store(results: Path, folder: str, workdir: Path) -> Store:
    """A copy of a committed store, unzipped into ``workdir`` (the committed file stays as it
    is: opening a store may add columns to it)."""
    target = workdir / f"{folder.replace('/', '_')}.db"
    if not target.exists():
        with gzip.open(results / folder / "dlbench.db.gz", "rb") as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
    return Store(target)


def render_all(root: Path, workdir: Path) -> dict[str, list[str]]:
    """Every headline table's lines, by name, from the stores under ``root/results``."""
    stores: dict[str, Store] = {}
    out = {}
    for h in HEADLINES:
        if h.store not in stores:
            stores[h.store] = open_store(root / RESULTS, h.store, workdir)
        out[h.name] = h.render(stores[h.store])
    for s in stores.values():
        s.close()
    return out


def blocks(text: str) -> dict[str, list[str]]:
    """The lines between each pair of headline marks in ``text``, by name."""
    out = {}
    for m in re.finditer(r"<!-- headline:([\w-]+) .*?-->\n(.*?)\n?<!-- /headline:\1 -->", text,
                         re.S):
        out[m.group(1)] = m.group(2).split("\n") if m.group(2) else []
    return out


def replace_blocks(text: str, rendered: dict[str, list[str]]) -> str:
    """``text`` with each marked block's lines replaced by its rendering; a name that has no
    marks in ``text`` is an error (the README lost a table the code renders)."""
    for name, lines in rendered.items():
        pattern = re.compile(rf"<!-- headline:{re.escape(name)} .*?-->\n.*?<!-- /headline:"
                             rf"{re.escape(name)} -->", re.S)
        if not pattern.search(text):
            raise ValueError(f"README has no marks for headline table {name!r}: add "
                             f"{begin_mark(name)} and {end_mark(name)} where it goes")
        block = "\n".join([begin_mark(name)] + lines + [end_mark(name)])
        text = pattern.sub(lambda _m, b=block: b, text, count=1)  # b: no backslash escapes
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 tools/headline.py",
        description="Render README's headline tables from the committed stores under results/.")
    parser.add_argument("--write", action="store_true", help="rewrite the marked tables in "
                        "README.md and the campaign pages; without it, print them")
    parser.add_argument("--root", default=".", help="the repository root (default: .)")
    args = parser.parse_args(argv)
    root = Path(args.root)
    if not (root / RESULTS).is_dir():
        parser.error(f"{root / RESULTS} is not a folder: run from the repository root or "
                     "pass --root")
    with tempfile.TemporaryDirectory(dir=tempdirs.root()) as tmp:
        rendered = render_all(root, Path(tmp))
    if args.write:
        for rel in dict.fromkeys(h.path for h in HEADLINES):
            path = root / rel
            mine = {h.name: rendered[h.name] for h in HEADLINES if h.path == rel}
            path.write_text(replace_blocks(path.read_text(), mine))
            print(f"{path}: {len(mine)} headline tables written")
        return 0
    for name, lines in rendered.items():
        print("\n".join([begin_mark(name)] + lines + [end_mark(name), ""]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

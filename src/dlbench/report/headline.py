"""README's headline tables (and the campaign pages' suite tables), rendered from the committed
stores under ``results/``.

The README quotes a few tables from each campaign. Typed by hand they drifted from their
records (a flag dropped, an interval left from an older method), so they are rendered here, from
the records, and ``tests/test_readme_claims.py`` fails when a published table and this
rendering differ. After a change to how figures or intervals are computed, regenerate them
(from the repository root)::

    python3 -m dlbench.report.headline --write

Each table names the records it shows (the selection below, stated in the table's caption), and
every figure carries its record's flags:

- ``noisy (time cap)`` / ``noisy (step cap)`` / ``noisy``: the interval missed its target, and
  what stopped the window;
- ``cv N%``: the step times spread by 10% or more;
- ``throttled (power)`` (and thermal, clocks): NVML saw the card's clocks held back at some
  sample of the window;
- ``no telemetry``: a GPU result without GPU telemetry, so neither energy nor throttling is known;
- ``energy-mismatch (...)``: the energy counter's mean power and the power samples' disagree
  beyond their tolerance (:func:`dlbench.telemetry.energy.power_agreement_tolerance`);
- ``one process``: no ``--repeat`` group, so run-to-run variance is not in the interval.

A flag every figure of a table carries is said once, in its caption, rather than on each row.
"""

from __future__ import annotations

import argparse
import gzip
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from dlbench.measure.mfu import measured_peaks, mfu
from dlbench.report.table import fmt_num, fmt_pct
from dlbench.store import Store
from dlbench.telemetry.summary import energy_mismatch, mismatch_note

#: Where the committed stores live, relative to the repository root.
RESULTS = Path("results")
H100 = "pt2.11-cu130-h100-80gb-hbm3"
H200_4 = "pt2.11-cu130-4x-h200"
H200_8 = "pt2.11-cu130-8x-h200"
CPU = "pt2.14-cpu"

WRITE_COMMAND = "python3 -m dlbench.report.headline --write"
_UNITS = {"images": "img/s", "sequences": "seq/s", "tokens": "tok/s"}


# -- flags --------------------------------------------------------------------------------------
def record_flags(r: Any) -> list[str]:
    """Every reason to read ``r``'s figure with care, in a fixed order (module docstring)."""
    s = r.summary()
    out: list[str] = []
    if s is None:
        return [f"error ({r.error_type})"]
    if not r.converged():
        reason = {"time_cap": "time cap", "step_cap": "step cap"}.get(r.stop_reason or "")
        out.append(f"noisy ({reason})" if reason else "noisy")
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


CPU_SUITE_RUN = "13b696de877b"


# -- the campaign pages' suite tables ----------------------------------------------------------
def _gib(r: Any) -> str:
    mem = (r.memory or {}).get("allocated_peak_bytes")
    return f"{mem / 2 ** 30:.1f}" if mem else "–"


def suite_run(run: str, columns: Sequence[str]) -> Callable[[Store], list[str]]:
    """Every ok throughput record of one suite run, in stored order, with ``columns`` chosen from
    mode, ms, steps, tflops, mfu, ceiling (MFU against the store's latest measured ceiling of
    the device) and gib."""
    def render(store: Store) -> list[str]:
        recs = [r for r in store.results(run_id=run, kind="throughput") if r.ok]
        peaks = measured_peaks(store.results(kind="peak")) if "ceiling" in columns else None
        flags = [record_flags(r) for r in recs]
        common = _common(flags)
        head = {"ms": "ms/step (median)", "steps": "steps",
                "tflops": "model TFLOP/s", "mfu": "MFU (datasheet)",
                "ceiling": "MFU (measured ceiling)", "gib": "peak GiB"}
        rows = []
        for r, fl in zip(recs, flags):
            s = r.summary()
            m = mfu(r, peaks)
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


CLASSIC_CNN_TAG = "seed000"
CLASSIC_CNN_MODELS = ("resnet50", "inception_v3", "nasnet", "vgg16", "resnet152", "inception_v4")


def classic_cnn(store: Store) -> list[str]:
    """The classic-cnn suite (runs tagged ``seed000``): img/s per model, fp16 and fp32, eager and
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
    return [f"Runs tagged {CLASSIC_CNN_TAG}. " + _caption(common), ""] + _table(
        ("model", "fp16 batch", "fp16 eager", "fp16 compiled", "fp32 batch", "fp32 eager",
         "fp32 compiled"), rows)


@dataclass(frozen=True)
class Headline:
    name: str                                   # the marker's name
    store: str                                  # folder under results/
    render: Callable[[Store], list[str]]
    path: str = "README.md"                     # the file the table is published in


H100_PAGE = "docs/results/2026-11-h100.md"
H200_4_PAGE = "docs/results/2026-11-4x-h200.md"
CPU_PAGE = "docs/results/2026-11-cpu.md"

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
)


# -- rendering into README ---------------------------------------------------------------------
def begin_mark(name: str) -> str:
    return f"<!-- headline:{name} generated by `{WRITE_COMMAND}` -->"


def end_mark(name: str) -> str:
    return f"<!-- /headline:{name} -->"


def open_store(results: Path, folder: str, workdir: Path) -> Store:
    """A copy of a committed store, unzipped into ``workdir`` (the committed file stays as it
    is: opening a store may add columns to it)."""
    target = workdir / f"{folder}.db"
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
        prog="python3 -m dlbench.report.headline",
        description="Render README's headline tables from the committed stores under results/.")
    parser.add_argument("--write", action="store_true", help="rewrite the marked tables in "
                        "README.md and the campaign pages; without it, print them")
    parser.add_argument("--root", default=".", help="the repository root (default: .)")
    args = parser.parse_args(argv)
    root = Path(args.root)
    if not (root / RESULTS).is_dir():
        parser.error(f"{root / RESULTS} is not a folder: run from the repository root or "
                     "pass --root")
    with tempfile.TemporaryDirectory() as tmp:
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

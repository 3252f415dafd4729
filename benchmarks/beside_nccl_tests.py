"""dlbench's collectives beside nccl-tests', run by run: the ratio tables of
``benchmarks/beside_nccl_tests.sh``.

    python benchmarks/beside_nccl_tests.py OUTDIR [--from 1MiB]

``OUTDIR/order.txt`` says what ran, in order: a line ``dlbench RUN_ID`` after each ``dlbench
comm`` run (its records in ``OUTDIR/dlbench.db``) and ``nccl-tests FILE`` after each nccl-tests
run (its output in ``OUTDIR/FILE``). Each collective of a dlbench run is set beside the first
nccl-tests run after it of the same collective and element type whose loop is like its timing:
graph timing beside ``-G``, eager and batched beside a run without ``-G``. Pairing with the
next run rather than the nearest keeps the rule one that a reader can check against the order.

For each pair: busbw out of place / in place, nccl-tests' as it printed them, and the ratio
dlbench / nccl-tests in each placement, from ``--from`` up (below about 1 MiB both sides measure
launch and synchronisation more than the fabric); then the lowest and highest ratio. Writes
``OUTDIR/beside.md`` and prints it.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from dlbench.report.comm_tables import _size, timing_label  # noqa: E402
from dlbench.report.nccl_tests import Run, only_run  # noqa: E402
from dlbench.store import Store  # noqa: E402
from dlbench.workloads.collectives import parse_size  # noqa: E402


@dataclass(frozen=True)
class Pair:
    """One collective of one dlbench run and the nccl-tests run it is set beside."""

    run_id: str
    op: str
    records: dict[tuple[int, bool], Any]  # (size, in place) -> record
    file: str
    printed: Run


def read_order(outdir: Path) -> list[tuple[str, str]]:
    """(what, id) per line of order.txt: ('dlbench', RUN_ID) or ('nccl-tests', FILE)."""
    out = []
    for n, line in enumerate((outdir / "order.txt").read_text().splitlines(), 1):
        what, _, ref = line.strip().partition(" ")
        if what not in ("dlbench", "nccl-tests") or not ref:
            raise ValueError(f"order.txt line {n}: expected 'dlbench RUN_ID' or "
                             f"'nccl-tests FILE', got {line!r}")
        out.append((what, ref.strip()))
    return out


def pairs(outdir: Path, store: Store) -> list[Pair]:
    """Every (dlbench run, collective) with the first like nccl-tests run after it; a
    collective with none after it is left out (said on stderr)."""
    order = read_order(outdir)
    printed = {ref: only_run((outdir / ref).read_text())
               for what, ref in order if what == "nccl-tests"}
    out = []
    for at, (what, ref) in enumerate(order):
        if what != "dlbench":
            continue
        by_op: dict[str, dict[tuple[int, bool], Any]] = {}
        for r in store.results(run_id=ref, kind="comm"):
            if r.ok:
                by_op.setdefault(r.config.op, {})[(r.config.size_bytes, r.config.inplace)] = r
        for op, records in by_op.items():
            some = next(iter(records.values()))
            c = some.config
            after = [f for w, f in order[at + 1:] if w == "nccl-tests"
                     and printed[f].like(c.op, c.dtype, getattr(c, "timing", "eager"))]
            if not after:
                print(f"run {ref} {op}: no like nccl-tests run after it", file=sys.stderr)
                continue
            out.append(Pair(ref, op, records, after[0], printed[after[0]]))
    return out


def _cell(values: list[float | None], fmt: str) -> str:
    return " / ".join("–" if v is None else format(v, fmt) for v in values)


def render(pair: Pair, from_bytes: int) -> list[str]:
    """A pair's heading, table and range of ratios."""
    some = next(iter(pair.records.values()))
    loop = (f"-G {pair.printed.graph}" if pair.printed.graph else
            "its default loop" + (", -I 1" if pair.printed.per_iteration else ""))
    outs = [r for (_, place), r in pair.records.items() if not place]
    # torch.distributed has no out-of-place all_reduce or broadcast: its "out of place" call is
    # an in-place one on a second buffer, not like nccl-tests' out-of-place call
    note = (" Its out-of-place rows are in-place calls on a second buffer."
            if any(r.called_in_place for r in outs) else "")
    lines = [f"### run {pair.run_id}: {pair.op}, {some.config.dtype}, {timing_label(some)}, "
             f"beside {pair.file} ({loop})", ""] + ([note.strip(), ""] if note else []) + [
             "| size | dlbench busbw out / in GB/s | nccl-tests out / in | dlbench / nccl-tests |",
             "|---|---|---|---|"]
    ratios: list[float] = []
    for size in sorted({s for s, _ in pair.records if s >= from_bytes}):
        try:
            row = pair.printed.row(size)
        except LookupError:
            continue
        mine = [pair.records.get((size, place)) for place in (False, True)]
        bw = [None if r is None else r.busbw() / 1e9 for r in mine]
        theirs = [row.out_busbw, row.in_busbw]
        ratio = [None if b is None or t == 0 else b / t for b, t in zip(bw, theirs)]
        ratios += [x for x in ratio if x is not None]
        lines.append(f"| {_size(size)} | {_cell(bw, '.2f')} | {_cell(theirs, '.2f')} | "
                     f"{_cell(ratio, '.3f')} |")
    if ratios:
        lines += ["", f"ratios {min(ratios):.3f} to {max(ratios):.3f}"]
    return lines + [""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--from", dest="from_bytes", default="1MiB",
                    help="smallest size in the tables (default 1MiB)")
    args = ap.parse_args(argv)
    store = Store(str(args.outdir / "dlbench.db"))
    try:
        found = pairs(args.outdir, store)
    finally:
        store.close()
    if not found:
        print(f"nothing to set side by side in {args.outdir}", file=sys.stderr)
        return 1
    text = "\n".join(line for p in found for line in render(p, parse_size(args.from_bytes)))
    (args.outdir / "beside.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

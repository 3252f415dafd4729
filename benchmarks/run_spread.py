"""Derive the run-to-run spread that `dlbench compare` allows for a side measured in one process,
from the committed stores' repeat groups, and write it to src/dlbench/reference/run_spread.json.

    python benchmarks/run_spread.py            # every committed store under results/
    python benchmarks/run_spread.py A.db.gz B.db ...

For every --repeat group of a throughput or generate config (processes whose own interval is
at most 1%, two or more of them), the relative standard deviation of its processes' figures;
the groups of one config pool their variances; a device model's spread is its widest config's.
Every entry names the records of each group it came from. Stores without repeat groups add
nothing. Seconds; no GPU needed.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from dlbench.report.compare import derive_run_spreads  # noqa: E402
from dlbench.store import Store  # noqa: E402

OUT = ROOT / "src/dlbench/reference/run_spread.json"
ABOUT = ("Run-to-run spread of one process's figure across fresh processes of identical code, "
         "per kind and device model: from --repeat groups whose processes' own intervals are "
         "<= 1%; rel_sd = the relative standard deviation of a group's process figures, the "
         "groups of one config pooled (df = sum of n - 1); a device's figure is its widest "
         "config's. dlbench compare widens the interval of a side measured in one process by "
         "t(df) * rel_sd (per such side, in quadrature). Written by benchmarks/run_spread.py.")


def committed_stores() -> list[Path]:
    """Every committed store under results/ (the gate experiment's scratch stores are never
    committed: a spread of that tiny model would stand for every config of its CPU)."""
    return sorted(p for p in (ROOT / "results").rglob("*.db.gz"))


def read_records(paths: list[Path]) -> tuple[list, list[str]]:
    """The throughput and generate records of each store (gzipped ones through a copy) and
    the stores that held repeat groups (the spread's sources)."""
    records, sources = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i, p in enumerate(paths):
            db = p
            if p.suffix == ".gz":
                db = Path(tmp) / f"{i}-{p.stem}"
                with gzip.open(p) as src, open(db, "wb") as dst:
                    shutil.copyfileobj(src, dst)
            with Store(db) as store:
                recs = store.results(kind="throughput") + store.results(kind="generate")
            if any(r.repeat_group for r in recs):
                records += recs
                full = p.resolve()
                sources.append(str(full.relative_to(ROOT)) if full.is_relative_to(ROOT)
                               else str(p))
    return records, sources


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or committed_stores()
    records, sources = read_records(paths)
    spreads = derive_run_spreads(records)
    OUT.write_text(json.dumps({"about": ABOUT, "sources": sources, **spreads}, indent=1) + "\n")
    for kind, devices in spreads.items():
        for device, entry in devices.items():
            print(f"{kind} on {device}: sd {entry['rel_sd']:.3%} of one process's figure "
                  f"(df {entry['df']}, widest of {len(entry['configs'])} configs)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Derive the card-to-card spread that `dlbench compare` and `dlbench gpus` allow for, from the
committed stores, and write it to src/dlbench/reference/card_spread.json.

    python benchmarks/card_spread.py results/*/dlbench.db.gz

For every throughput config measured on three or more physical cards of one GPU model (told
apart by the GPU UUID each record keeps), with each record's own interval at most 1%, the range
of the figures across the cards; a model's spread is its widest config's half-range. Every entry
names the records it came from. Seconds; no GPU needed.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from dlbench.report.cards import derive_spreads  # noqa: E402
from dlbench.store import Store  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "src/dlbench/reference/card_spread.json"


def main(paths: list[str]) -> int:
    records, sources = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for p in paths:
            db = Path(p)
            if db.suffix == ".gz":  # the committed stores are gzipped
                plain = Path(tmp) / db.parent.name / db.stem
                plain.parent.mkdir()
                with gzip.open(db) as src, open(plain, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                db = plain
            with Store(db) as store:
                records += store.results(kind="throughput")
            sources.append(p)
    doc = {"about": "Card-to-card spread of throughput figures per GPU model: configs measured "
                    "on >= 3 physical cards (by GPU UUID), each record's interval <= 1%; "
                    "rel_halfwidth = (max - min) / 2 / mean across cards; a model's figure is "
                    "its widest config's. Written by benchmarks/card_spread.py.",
           "sources": sources, **derive_spreads(records)}
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    for model, entry in doc["throughput"].items():
        print(f"{model}: +-{entry['rel_halfwidth']:.2%} over {len(entry['configs'])} configs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

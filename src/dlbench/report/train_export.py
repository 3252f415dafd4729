"""Training runs as CSV: the old entry point, kept for scripts that call it.

The one path is ``dlbench results export --format csv --kind train`` (the ``train`` columns of
:mod:`dlbench.report.export`, docs/schema.md); this module writes exactly that table:
``python -m dlbench.report.train_export DB OUT.csv [--tag T]``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from dlbench.report import export
from dlbench.store import Store

#: The train CSV's column names.
COLUMNS = tuple(c.name for c in export.columns("train"))


def to_csv(records: Sequence) -> str:
    return export.to_csv(records, "train")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dlbench.report.train_export",
                                 description="Training runs of a dlbench store as CSV (as "
                                             "'dlbench results export --format csv --kind "
                                             "train').")
    ap.add_argument("db")
    ap.add_argument("output", help="CSV file to write ('-' for stdout)")
    ap.add_argument("--tag", help="only runs with this tag")
    args = ap.parse_args(argv)
    with Store(args.db) as store:
        text = to_csv(store.results(kind="train", tag=args.tag))
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The exports committed beside each campaign store, regenerated from the store by one command
(a maintainer's script of this repository, not part of the package: it imports the installed
``dlbench``).

A folder of ``results/`` that holds a store (``dlbench.db.gz``) and its exports keeps them as
``dlbench results export`` writes them today: ``all.csv`` where the store holds one kind of
record, else ``all-KIND.csv`` for each kind, and ``all.json.gz`` (``all.json`` where the folder
keeps it plain). An export written by an older dlbench goes stale when the figures it carries
change (a new interval method, a flag that now means what it says), so the files are rewritten
from the store, never by hand, and ``tests/test_committed_exports.py`` fails when one drifts::

    python3 tools/committed_exports.py --write      # rewrite every folder's exports
    python3 tools/committed_exports.py              # list the folders that drifted

A folder whose store has no exports beside it gets none: what a folder publishes is decided
where it is made (its README lists its files).
"""

from __future__ import annotations

import argparse
import gzip
import sys
import tempfile
from pathlib import Path

from dlbench.launch import tempdirs
from dlbench.report import export
from dlbench.store import Store

RESULTS = Path("results")
STORE = "dlbench.db.gz"


def folders(results: Path = RESULTS) -> list[Path]:
    """The folders whose store has exports beside it (``all*.csv`` or ``all.json*``)."""
    return sorted(p.parent for p in results.rglob(STORE)
                  if any(p.parent.glob("all*.csv")) or any(p.parent.glob("all.json*")))


def _records(folder: Path, workdir: Path) -> list:
    db = workdir / "store.db"
    with gzip.open(folder / STORE, "rb") as src:
        db.write_bytes(src.read())
    with Store(str(db)) as store:
        return store.results()


def contents(folder: Path, workdir: Path) -> dict[str, bytes]:
    """File name -> what ``dlbench results export`` writes for ``folder``'s store today, a
    ``.gz`` file's as it holds it (uncompressed): what :func:`drift` compares."""
    recs = _records(folder, workdir)
    kinds = export.kinds_of(recs) or ["throughput"]
    out = {name: export.to_csv(recs, k).encode()
           for k, name in export.csv_files("all.csv", kinds).items()}
    text = (export.to_json(recs) + "\n").encode()
    if (folder / "all.json").exists() and not (folder / "all.json.gz").exists():
        out["all.json"] = text
    else:
        out["all.json.gz"] = text
    return out


def _file_bytes(name: str, content: bytes) -> bytes:
    # mtime 0 and no file name in the header: the same store gives the same bytes
    return gzip.compress(content, compresslevel=9, mtime=0) if name.endswith(".gz") else content


def expected(folder: Path, workdir: Path) -> dict[str, bytes]:
    """File name -> the bytes ``dlbench results export`` writes for ``folder``'s store today."""
    return {name: _file_bytes(name, content)
            for name, content in contents(folder, workdir).items()}


def _same(path: Path, content: bytes) -> bool:
    """``path`` holds ``content`` (uncompressed, where ``path`` is a ``.gz`` file). Compared
    uncompressed, so that a check compresses nothing: gzip headers differ between writers, and
    compressing the largest stores' JSON at level 9 costs seconds."""
    if not path.exists():
        return False
    if path.suffix == ".gz":
        with gzip.open(path, "rb") as f:
            return f.read() == content
    return path.read_bytes() == content


def drift(folder: Path, workdir: Path) -> list[str]:
    """What differs in ``folder``: files to write or rewrite, stale exports to remove."""
    want = contents(folder, workdir)
    out = [f"{name}: {'differs' if (folder / name).exists() else 'missing'}"
           for name, data in want.items() if not _same(folder / name, data)]
    stale = [p.name for p in folder.glob("all*.csv") if p.name not in want]
    stale += [p.name for p in folder.glob("all.json*") if p.name not in want]
    return out + [f"{name}: stale (no longer written)" for name in sorted(stale)]


def write(folder: Path, workdir: Path) -> None:
    """Rewrite ``folder``'s exports from its store and remove those no longer written."""
    want = contents(folder, workdir)
    for p in list(folder.glob("all*.csv")) + list(folder.glob("all.json*")):
        if p.name not in want:
            p.unlink()
    for name, content in want.items():
        if not _same(folder / name, content):
            (folder / name).write_bytes(_file_bytes(name, content))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 tools/committed_exports.py",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--write", action="store_true", help="rewrite the exports that drifted")
    p.add_argument("--results", default=str(RESULTS), help="the results folder (results/)")
    args = p.parse_args(argv)
    drifted = 0
    for folder in folders(Path(args.results)):
        with tempfile.TemporaryDirectory(dir=tempdirs.root()) as tmp:
            if args.write:
                write(folder, Path(tmp))
                print(f"{folder}: written")
                continue
            for line in drift(folder, Path(tmp)):
                drifted += 1
                print(f"{folder}/{line}")
    return 1 if drifted else 0


if __name__ == "__main__":
    sys.exit(main())

"""How the read commands scale with the store: ``results ls --results``, ``results show --tag``,
``results export`` (CSV and JSON) and ``report`` (HTML) timed on a generated store of N results.

The store is made of real records: every record of a committed store (default
results/pt2.14-cpu/dlbench.db.gz: CPU throughput and net records) copied over and over with new
ids, run ids and times, in runs of ``--per-run`` results; every three runs share a tag
(``sweep-K``, a resumed sweep). Each command runs as its own process (``python -m dlbench``,
the same interpreter); its wall time, CPU time and peak RSS (``os.wait4``'s ``ru_maxrss``: the
largest one process's) are measured, CPU time including the worker processes a large export
starts, and the peak RSS of the command and its workers together is sampled (``/proc``, every
50 ms). The store is generated once into ``--store`` and reused while it holds N results.

    python benchmarks/store_scale.py [-n 100000] [--store /tmp/store-scale.db] [--out F.json]
    python benchmarks/store_scale.py --src /tmp/before/src   # another dlbench tree, same store
    python benchmarks/store_scale.py --only csv json --same-as /tmp/before/src

``--same-as TREE`` runs each export again with that tree, right after, times it too, and says
whether the two wrote the same bytes (every file): how a faster exporter shows it changed nothing.
"""

from __future__ import annotations

import argparse
import filecmp
import gzip
import json
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "results" / "pt2.14-cpu" / "dlbench.db.gz"
TAGGED = 3  # runs per tag


def _plain(src: Path, tmp: Path) -> Path:
    if src.suffix != ".gz":
        return src
    out = tmp / src.stem
    with gzip.open(src) as f, open(out, "wb") as g:
        shutil.copyfileobj(f, g)
    return out


def generate(template: Path, target: Path, n: int, per_run: int) -> float:
    """Write a store of ``n`` results copied from ``template``'s; the seconds it took."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        src = sqlite3.connect(_plain(template, Path(tmp)))
        schema = [sql for (sql,) in src.execute(
            "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%'")]
        meta = src.execute("SELECT key, value FROM meta").fetchall()
        cols = [r[1] for r in src.execute("PRAGMA table_info(results)")]
        rows = [dict(zip(cols, r)) for r in src.execute("SELECT * FROM results ORDER BY rowid")]
        run_cols = [r[1] for r in src.execute("PRAGMA table_info(runs)")]
        run0 = dict(zip(run_cols, src.execute("SELECT * FROM runs LIMIT 1").fetchone()))
        src.close()
    docs = [json.loads(r["record_json"]) for r in rows]
    if target.exists():
        target.unlink()
    db = sqlite3.connect(target)
    for sql in schema:
        db.execute(sql)
    db.execute("CREATE INDEX IF NOT EXISTS results_created ON results(created_at)")
    db.executemany("INSERT INTO meta VALUES (?, ?)", meta)
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    marks = ",".join("?" * len(cols))
    batch = []
    for i in range(n):
        run = i // per_run
        run_id = f"{run:012x}"
        when = (start + timedelta(seconds=10 * i)).isoformat()
        if i % per_run == 0:
            db.execute(f"INSERT INTO runs ({', '.join(run_cols)}) VALUES "
                       f"({','.join('?' * len(run_cols))})",
                       tuple({**run0, "run_id": run_id, "started_at": when, "finished_at": when,
                              "status": "done", "tag": f"sweep-{run // TAGGED}",
                              "command": f"dlbench run --tag sweep-{run // TAGGED}"}[c]
                             for c in run_cols))
        k = i % len(rows)
        rid = f"{0xa00000000000 + i:012x}"
        doc = {**docs[k], "id": rid, "run_id": run_id, "created_at": when}
        row = {**rows[k], "id": rid, "run_id": run_id, "created_at": when,
               "record_json": json.dumps(doc)}
        batch.append(tuple(row[c] for c in cols))
        if len(batch) == 5000:
            db.executemany(f"INSERT INTO results VALUES ({marks})", batch)
            batch.clear()
    db.executemany(f"INSERT INTO results VALUES ({marks})", batch)
    db.commit()
    db.close()
    return time.perf_counter() - t0


def count(store: Path) -> int:
    try:
        db = sqlite3.connect(f"{store.resolve().as_uri()}?mode=ro", uri=True)
        try:
            return db.execute("SELECT COUNT(*) FROM results").fetchone()[0]
        finally:
            db.close()
    except sqlite3.Error:
        return -1


def tree_rss_mb(pid: int) -> float:
    """The resident memory of ``pid`` and of every process under it, together (MB; Linux
    /proc; 0 where it cannot be read): an export's worker processes included."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                total += next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), 0)
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return total / 1024


def timed(argv: list[str], env: dict[str, str], timeout: float) -> dict:
    """Run ``python -m dlbench ARGV``: wall seconds, CPU seconds (its worker processes
    included), peak RSS (MB: of the largest process, from ``wait4``; and of the process with
    its workers together, sampled every 50 ms) and exit code."""
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "dlbench", *argv], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = t0 + timeout
    tree_peak, sampled = 0.0, 0.0
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            p.kill()
            pid, status, usage = os.wait4(p.pid, 0)
            break
        if time.perf_counter() - sampled >= 0.05:
            tree_peak, sampled = max(tree_peak, tree_rss_mb(p.pid)), time.perf_counter()
        time.sleep(0.01)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    return {"argv": ["dlbench", *argv], "wall_s": round(wall, 3),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
            "peak_tree_rss_mb": round(tree_peak, 1), "rc": p.returncode,
            "timed_out": wall > timeout, "stderr_tail": err[-300:]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=100_000, help="results in the store (default 100000)")
    ap.add_argument("--per-run", type=int, default=100, help="results per run (default 100)")
    ap.add_argument("--store", default="/tmp/store-scale.db", help="where the store is made")
    ap.add_argument("--template", default=str(TEMPLATE), help="store whose records are copied")
    ap.add_argument("--src", default=str(ROOT / "src"), help="the dlbench source tree to time")
    ap.add_argument("--timeout", type=float, default=600, help="seconds a command may take")
    ap.add_argument("--only", nargs="*", help="only these commands (ls, show, csv, json, report)")
    ap.add_argument("--same-as", metavar="TREE",
                    help="run each export with this dlbench source tree too, and compare bytes")
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()

    store = Path(args.store)
    gen_s = None
    if count(store) != args.n:
        gen_s = generate(Path(args.template), store, args.n, args.per_run)
        print(f"generated {args.n} results in {store} in {gen_s:.1f} s")
    size_mb = store.stat().st_size / 1e6
    tag = f"sweep-{(args.n // args.per_run) // TAGGED // 2}"
    tag_results = sqlite3.connect(store).execute(
        "SELECT COUNT(*) FROM results WHERE run_id IN (SELECT run_id FROM runs WHERE tag=?)",
        (tag,)).fetchone()[0]
    out_dir = Path(tempfile.mkdtemp(prefix="store-scale-"))
    other_dir = out_dir / "same-as"
    commands = {
        "ls": ["results", "ls", "--results", "--db", str(store)],
        "show": ["results", "show", "--tag", tag, "--db", str(store)],
        "csv": ["results", "export", "--format", "csv", "-o", str(out_dir / "all.csv"),
                "--db", str(store)],
        "json": ["results", "export", "--format", "json", "-o", str(out_dir / "all.json"),
                 "--db", str(store)],
        "report": ["report", "-o", str(out_dir / "report.html"), "--db", str(store)],
    }
    env = {**os.environ, "PYTHONPATH": args.src, "COLUMNS": "200"}
    rows = {}
    for name, argv in commands.items():
        if args.only and name not in args.only:
            continue
        rows[name] = r = timed(argv, env, args.timeout)
        if name in ("csv", "json", "report"):
            written = sum(p.stat().st_size for p in out_dir.iterdir() if p.is_file())
            r["output_mb"] = round(written / 1e6, 1)
            if name != "report":
                r["records_per_s"] = round(args.n / r["wall_s"]) if r["rc"] == 0 else None
                r["records_per_cpu_s"] = round(args.n / r["cpu_s"]) if r["rc"] == 0 else None
            if args.same_as and name != "report":
                r["same_as"] = _same_as(argv, out_dir, other_dir, args, timeout=args.timeout)
            for p in out_dir.iterdir():
                if p.is_file():
                    p.unlink()
        print(f"{name:5} {r['wall_s']:9.2f} s wall {r['cpu_s']:9.2f} s cpu "
              f"{r['peak_rss_mb']:9.1f} MB ({r['peak_tree_rss_mb']:.1f} MB with its workers)"
              f"  rc {r['rc']}"
              + (f"  {r['records_per_s']} records/s" if r.get("records_per_s") else "")
              + ("  TIMED OUT" if r["timed_out"] else ""), flush=True)
        if r.get("same_as"):
            o = r["same_as"]
            print(f"  --same-as {o['wall_s']:9.2f} s wall {o['cpu_s']:9.2f} s cpu "
                  f"{o['peak_rss_mb']:9.1f} MB ({o['peak_tree_rss_mb']:.1f} MB with its workers)"
                  f"  rc {o['rc']}  {o['records_per_s']} records/s; "
                  f"bytes {'identical' if o['identical'] else 'DIFFER: ' + str(o['differ'])}",
                  flush=True)
    shutil.rmtree(out_dir, ignore_errors=True)
    doc = {"benchmark": "store_scale", "n_results": args.n, "per_run": args.per_run,
           "store_mb": round(size_mb, 1), "generate_s": gen_s and round(gen_s, 1),
           "tag": tag, "tag_results": tag_results, "src": args.src, "same_as": args.same_as,
           "template": str(Path(args.template).relative_to(ROOT))
           if Path(args.template).is_relative_to(ROOT) else args.template,
           "commands": rows,
           "env": {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version,
                   "platform": platform.platform(), "machine": platform.machine(),
                   "cpus": os.cpu_count(), "when": datetime.now(timezone.utc).isoformat(
                       timespec="seconds")}}
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0 if all(r["rc"] == 0 and r.get("same_as", {}).get("identical", True)
                    for r in rows.values()) else 1


def _same_as(argv: list[str], out_dir: Path, other_dir: Path, args: argparse.Namespace,
             timeout: float) -> dict:
    """The export of ``argv`` again with the ``--same-as`` tree, into ``other_dir``: its
    figures, and whether every file it wrote equals the one the first run wrote."""
    other_dir.mkdir(exist_ok=True)
    out = str(out_dir / Path(argv[argv.index("-o") + 1]).name)
    again = [str(other_dir / Path(a).name) if a == out else a for a in argv]
    env = {**os.environ, "PYTHONPATH": args.same_as, "COLUMNS": "200"}
    r = timed(again, env, timeout)
    r["records_per_s"] = round(args.n / r["wall_s"]) if r["rc"] == 0 else None
    mine = sorted(p.name for p in out_dir.iterdir() if p.is_file())
    theirs = sorted(p.name for p in other_dir.iterdir())
    differ = [n for n in mine if n not in theirs or not filecmp.cmp(
        out_dir / n, other_dir / n, shallow=False)] + [n for n in theirs if n not in mine]
    r["identical"], r["differ"] = not differ and r["rc"] == 0, differ
    for p in other_dir.iterdir():
        p.unlink()
    return r


if __name__ == "__main__":
    sys.exit(main())

"""Seeds converged per setup of a time-to-accuracy run: python3 benchmarks/seeds_converged.py
DB [TAG]. One line per setup (GPUs x batch per GPU): global batch, seeds that reached the target
within the cap, epochs per seed, the olympic mean, and whether the result is valid (MLPerf: at
most one run of five may fail). Exit code 0 when every setup is valid, 3 otherwise."""

import sys

from dlbench.store import Store
from dlbench.training.scoring import convergence


def main(argv: list[str]) -> int:
    if not argv or len(argv) > 2:
        print(__doc__.split("\n")[0], file=sys.stderr)
        return 2
    with Store(argv[0]) as store:
        recs = store.results(kind="train", tag=argv[1] if len(argv) > 1 else None)
    if not recs:
        print(f"no train results in {argv[0]}", file=sys.stderr)
        return 2
    rows = convergence(recs)
    print("| GPUs | batch/GPU | global batch | seeds converged | epochs per seed | olympic mean | valid |")
    print("|---|---|---|---|---|---|---|")
    for s in rows:
        epochs = " / ".join("cap" if e is None else str(e) for e in s.epochs)
        mean = f"{s.score.mean_s:.2f} s" if s.score.valid else "-"
        print(f"| {s.gpus} | {s.batch_size} | {s.global_batch} | {s.converged} of {s.runs} | "
              f"{epochs} | {mean} | {'yes' if s.score.valid else 'no: ' + (s.score.reason or '')} |")
    return 0 if all(s.score.valid for s in rows) else 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

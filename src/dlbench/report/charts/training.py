"""Charts of training runs (record kind ``train``): loss and accuracy against iteration and
against wall time since run start, one line per run, for each model and dataset.

The 2017 parameter-server CIFAR-10 study over 1/10 GbE and InfiniBand compared per-iteration
curves (which match across set-ups) with per-time curves (which do not: waiting on the slowest
worker, the network); these charts draw both views. The loss is every iteration's loss on rank
0, smoothed by a running mean over about 1% of the run so that thousands of points stay legible;
accuracy is the evaluation after each epoch, with the target as a dashed line.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from dlbench.report.charts.base import Chart, commands_of, finish, pyplot, wrap
from dlbench.report.plots import plain_log_ticks

#: At most this many runs drawn per chart (the first seeds of each setup first).
MAX_LINES = 12
#: Points per loss line after smoothing and thinning.
MAX_POINTS = 400


def smooth(xs: Sequence[float], ys: Sequence[float], points: int = MAX_POINTS
           ) -> tuple[list[float], list[float]]:
    """A trailing running mean of ``ys`` over about 1% of the series, kept at up to ``points``
    places (non-finite losses, a diverged run's, are left out)."""
    pairs = [(x, y) for x, y in zip(xs, ys) if y == y and abs(y) != float("inf")]
    if not pairs:
        return [], []
    w = max(1, len(pairs) // 100)
    step = max(1, len(pairs) // points)
    prefix = [0.0]
    for _, y in pairs:
        prefix.append(prefix[-1] + y)
    out_x, out_y = [], []
    for i in range(w - 1, len(pairs), step):
        out_x.append(pairs[i][0])
        out_y.append((prefix[i + 1] - prefix[i + 1 - w]) / w)
    return out_x, out_y


def _label(r: Any) -> str:
    c = r.config
    return f"b{c.batch_size} x{c.gpus} seed {c.seed}" + ("" if r.ok else f" ({r.error_type})")


def _pick(recs: list) -> list:
    """Up to MAX_LINES runs: every setup's runs in seed order, first seeds of all setups first."""
    by_seed = sorted(recs, key=lambda r: (r.config.seed, r.config.gpus, r.config.batch_size))
    return by_seed[:MAX_LINES]


def training_charts(records: Sequence[Any], commands: Mapping[str, str]) -> list[Chart]:
    """One chart per model and dataset: a 2 x 2 grid of loss and accuracy against iteration and
    against wall time. Runs without any series (a crash before the first epoch) are left out."""
    groups: dict[tuple, list] = {}
    for r in records:
        if r.kind == "train" and r.iter_loss:
            groups.setdefault((r.config.model, r.config.dataset), []).append(r)
    out = []
    for (model, dataset), recs in groups.items():
        runs = _pick(recs)
        plt = pyplot()
        fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), dpi=100)
        (l_it, l_t), (a_it, a_t) = axes
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        for i, r in enumerate(runs):
            color = colors[i % len(colors)]
            iters = range(1, len(r.iter_loss) + 1)
            x, y = smooth(iters, r.iter_loss)
            l_it.plot(x, y, color=color, lw=1, label=_label(r))
            x, y = smooth(r.iter_time_s, r.iter_loss)
            l_t.plot(x, y, color=color, lw=1)
            ends = [r.steps_per_epoch * (e + 1) for e in range(len(r.eval_accuracy))]
            a_it.plot(ends, r.eval_accuracy, color=color, marker="o", ms=3, lw=1)
            a_t.plot(r.eval_end_s, r.eval_accuracy, color=color, marker="o", ms=3, lw=1)
        for ax in (a_it, a_t):
            for target in sorted({r.config.target for r in runs}):
                ax.axhline(target, color="black", ls="--", lw=0.8)
            ax.set_ylabel("evaluation accuracy (dashed: target)")
        for ax in (l_it, l_t):
            ax.set_ylabel("training loss (running mean, rank 0)")
            ax.set_yscale("log")
            # Plain numbers: the page's charts draw text without mathtext, so 10^x labels break.
            plain_log_ticks(ax, "y")
        for ax in (l_it, a_it):
            ax.set_xlabel("iteration (optimizer steps)")
        for ax in (l_t, a_t):
            ax.set_xlabel("wall time since run start (s)")
        for ax in axes.flat:
            ax.grid(True, lw=0.3, alpha=0.6)
        l_it.legend(fontsize=7, loc="upper right")
        left = len(recs) - len(runs)
        title = (f"{model} on {dataset}: loss and accuracy against iteration and wall time; "
                 f"{len(runs)} run(s)" + (f", {left} more not drawn" if left else ""))
        fig.suptitle(wrap(title, fig, 10), fontsize=10)
        out.append(finish(plt, fig, title, commands_of(runs, commands)))
    return out

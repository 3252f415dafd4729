"""The user's GPU among published GPUs (throughput records and the shipped reference data): the
2022 RTX 3060 article's analysis drawn, speed in ms per batch of 16 (the classic per-model
scripts) against FP32 TFLOPS with the least-squares line through the origin fitted on the
published points, and the user's own FP32 results placed beside it."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from dlbench import reference as ref
from dlbench.measure.regression import fit_through_origin
from dlbench.report.charts.base import Chart, commands_of, finish, pyplot, wrap

SOURCE = "ms-per-batch"  # the table's source id in reference/results.json
X_PRECISION = "fp32"
PUBLISHED = "published: ms per batch, 2022 (dlbench gpus --source ms-per-batch)"


def published_charts(records: Sequence[Any], commands: Mapping[str, str]) -> list[Chart]:
    """One figure, a panel per model and mode that has both the user's FP32 results on a GPU of
    the spec table and at least two published points to fit (the ms-per-batch table: vgg16,
    resnet152, densenet161, eval and train). The user's points are shown, not fitted."""
    own: dict[tuple[str, str], list] = {}
    used: list = []
    for r in records:
        if r.kind != "throughput":
            continue
        p = ref.own_point(r, X_PRECISION)
        if p is not None:
            own.setdefault((r.config.model, r.config.mode), []).append(p)
            used.append(r)
    panels = []
    for (model, mode), mine in own.items():
        pub = ref.reference_points(model, mode, source=SOURCE, x_precision=X_PRECISION)
        if len(pub) >= 2:
            panels.append((model, mode, pub, mine))
    if not panels:
        return []
    plt = pyplot()
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(max(7.0, 4.2 * cols), 3.9 * rows + 0.6),
                             dpi=100, squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, (model, mode, pub, mine) in zip(axes.flat, panels):
        fit = fit_through_origin([p.x_tflops for p in pub], [p.y_speed for p in pub])
        xmax = max(p.x_tflops for p in pub + mine) * 1.08
        ax.plot([0, xmax], [0, fit.slope * xmax], color="gray", lw=1,
                label=f"fit: {fit.slope:.3g} x TFLOPS, R^2 {fit.r2:.3f}")
        ax.scatter([p.x_tflops for p in pub], [p.y_speed for p in pub], color="tab:blue",
                   s=22, zorder=3, label="published (ms per batch, 2022)")
        for p in pub:
            ax.annotate(p.label.split(" (")[0], (p.x_tflops, p.y_speed), fontsize=6,
                        xytext=(3, 2), textcoords="offset points")
        ax.scatter([p.x_tflops for p in mine], [p.y_speed for p in mine], color="tab:red",
                   marker="*", s=90, zorder=4, label="yours")
        for p in mine:
            ax.annotate(p.label, (p.x_tflops, p.y_speed), fontsize=6, color="tab:red",
                        xytext=(-3, 4), textcoords="offset points", ha="right")
        ax.set_xlim(0, xmax)
        ax.set_ylim(0, max(p.y_speed for p in pub + mine) * 1.15)
        ax.set_xlabel("FP32 TFLOPS (datasheet, non-tensor)", fontsize=8)
        ax.set_ylabel("speed (batches of 16 per second)", fontsize=8)
        ax.set_title(f"{model} {mode}", fontsize=9)
        ax.tick_params(labelsize=7)
        ax.grid(True, lw=0.3, alpha=0.6)
        ax.legend(fontsize=6, loc="lower right")
    title = ("Your GPU among published GPUs: speed against FP32 TFLOPS, least squares through "
             "the origin on the published ms-per-batch FP32 points (R^2 uncentred, as the 2022 "
             "article that fitted them)")
    fig.suptitle(wrap(title, fig), fontsize=9)
    return [finish(plt, fig, title, commands_of(used, commands) + [PUBLISHED])]

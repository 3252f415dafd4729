"""The serving charts of a stored ``dlbench serve`` run as PNG files, for a campaign page.

    python benchmarks/serve_charts.py STORE.db RUN OUT_STEM [--loads rate|concurrency|all]

Draws what ``dlbench report`` draws (the same builders, :mod:`dlbench.report.charts.serve`):
the latency-throughput chart (TTFT and TPOT, p50 and p99, against output tokens/s, the SLO's
limits drawn) to ``OUT_STEM-latency.png`` and, where the run has two or more rate points, goodput
against the offered rate to ``OUT_STEM-goodput.png``. ``--loads rate`` (the default) keeps the
rate points only: a closed-loop concurrency point and an open-loop rate point of the same
throughput load a server differently, and one curve through both zigzags between them. The
report embeds these charts as SVG and writes no PNG; this script keeps their figure and saves it
as PNG instead (100 dpi). Open a copy of a committed store, never the committed file.
"""

from __future__ import annotations

import argparse
import sys

from dlbench.report.charts import base
from dlbench.report.charts import serve as charts
from dlbench.store import Store

DPI = 100


def _png(path: str):
    """A stand-in for :func:`dlbench.report.charts.base.finish` that lays the figure out as it
    does, footer included, and saves it to ``path`` as PNG instead of SVG."""
    def finish(plt, fig, title, cmds):
        fig.tight_layout(rect=(0, 0.04, 1, 1))
        base.footer(fig, cmds)
        fig.savefig(path, dpi=DPI, metadata={"Software": None})
        plt.close(fig)
        return base.Chart(title, "", tuple(cmds))
    return finish


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("store")
    p.add_argument("run", help="the run id of the dlbench serve sweep")
    p.add_argument("out_stem", help="e.g. docs/results/img/h100-serve")
    p.add_argument("--loads", choices=("rate", "concurrency", "all"), default="rate")
    a = p.parse_args(argv)
    with Store(a.store) as store:
        recs = store.results(run_id=a.run, kind="serve")
        commands = {r.run_id: r.command for r in store.runs()}
    if a.loads != "all":
        recs = [r for r in recs if (r.config.rate is not None) == (a.loads == "rate")]
    written = []
    for name, build in (("latency", charts.latency_throughput_charts),
                        ("goodput", charts.goodput_charts)):
        path = f"{a.out_stem}-{name}.png"
        keep, charts.finish = charts.finish, _png(path)
        try:
            made = build(recs, commands)
        finally:
            charts.finish = keep
        if len(made) > 1:
            raise SystemExit(f"run {a.run} has {len(made)} setups: one chart each would "
                             f"overwrite {path}")
        if made:
            written.append(path)
    print("\n".join(written) or "no chart: fewer than two load points of a setup")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""docs/api.md against the code: every signature the page lists (each parameter, its kind and
its default) against the function or class it names, the figures the summaries return, the
interval's confidence and the extras the page names. The page's example is run by
tests/test_api.py."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import tomllib
from pathlib import Path

import pytest
from fakes.pages import assert_says

import dlbench
from dlbench.measure.generation import Latency
from dlbench.measure.serving import Distribution
from dlbench.measure.stats import Summary

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "api.md").read_text()
LISTED = ("measure_throughput", "measure_step", "measure_generation", "measure_serving", "load",
          "to_dataframe", "StopRule", "InputSpec")


def says(text: str) -> None:
    assert_says(PAGE, text)


def listed_signatures() -> dict[str, ast.arguments]:
    """The page's first code block, one ``dlbench.NAME(...) -> ...`` entry at a time, each
    entry's parameters parsed as those of a ``def``."""
    block = re.search(r"^```\n(.*?)^```", PAGE, re.S | re.M).group(1)
    text = " ".join(re.sub(r"#[^\n]*", "", block).split())  # comments: the extras to install
    out = {}
    for m in re.finditer(r"dlbench\.(\w+)\(", text):
        depth, end = 1, m.end()
        while depth:                       # to the parenthesis that closes the entry
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            end += 1
        out[m.group(1)] = ast.parse(f"def f({text[m.end():end - 1]}): pass").body[0].args
    return out


def test_the_page_lists_every_entry_point():
    assert sorted(listed_signatures()) == sorted(LISTED)
    assert all(callable(getattr(dlbench, name)) for name in LISTED)


@pytest.mark.parametrize("name", LISTED)
def test_a_listed_signature_is_the_codes(name):
    args = listed_signatures()[name]
    real = inspect.signature(getattr(dlbench, name)).parameters.values()
    kinds = {inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional",
             inspect.Parameter.KEYWORD_ONLY: "keyword-only",
             inspect.Parameter.VAR_KEYWORD: "**"}
    got = [(p.name, kinds[p.kind], None if p.default is inspect.Parameter.empty else p.default)
           for p in real]
    positional = args.args
    pos_defaults = [None] * (len(positional) - len(args.defaults)) + [
        ast.literal_eval(d) for d in args.defaults]
    listed = [(a.arg, "positional", d) for a, d in zip(positional, pos_defaults)]
    listed += [(a.arg, "keyword-only", None if d is None else ast.literal_eval(d))
               for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    if args.kwarg:
        listed.append((args.kwarg.arg, "**", None))
    assert listed == got


def test_what_the_summaries_hold():
    latency = [f.name for f in dataclasses.fields(Latency)]
    assert latency[:4] == ["mean_s", "median_s", "p90_s", "p99_s"]
    says("`rec.tpot()` (mean, median, p90, p99 in seconds)")
    dist = {f.name for f in dataclasses.fields(Distribution)}
    with_interval = {q for q in ("mean", "p50", "p90", "p99") if f"{q}_low_s" in dist}
    assert {"mean_s", "p50_s", "p90_s", "p99_s"} <= dist
    assert with_interval == {"mean", "p50", "p99"}
    says("`rec.e2e()` (mean, median, p90, p99; the mean, median and p99 with their intervals)")
    summary = {f.name for f in dataclasses.fields(Summary)}
    assert {"throughput", "throughput_low", "throughput_high", "rel_halfwidth", "median_s",
            "steps"} <= summary
    assert inspect.signature(dlbench.StopRule).parameters["confidence"].default == 0.95
    says("`throughput_low`/`throughput_high` (its 95% interval), `rel_halfwidth`, `median_s`, "
         "`steps`.")


def test_the_extras_the_page_names():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert any(d.startswith("aiohttp") for d in extras["serve"])
    assert any(d.startswith("pandas") for d in extras["pandas"])
    says("-> list[ServeRecord] # pip install 'dlbench[serve]'")
    says("-> pandas.DataFrame # records or a store; pip install 'dlbench[pandas]'")

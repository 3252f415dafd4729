"""Which physical card a result ran on, and the spread of one config across cards of one model.

Two H100s are not one card: the same GPT-2 config measured on five H100s spread over about 2%,
while each record's own interval was 0.05-0.7% wide. A comparison of figures from two cards of
one model must therefore allow for the card-to-card spread measured across cards
(:mod:`dlbench.reference` ``card_spread.json``, each entry with the records it was derived
from), not only for the two within-process intervals. Pure functions, no I/O.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any, Sequence

from dlbench.measure.mfu import device_index, device_key, measured_peaks
from dlbench.report.table import Table, fmt_num


@functools.cache
def card_spreads() -> dict[str, Any]:
    """The shipped spreads (``dlbench/reference/card_spread.json``, written by
    ``benchmarks/card_spread.py`` from the committed stores)."""
    text = resources.files("dlbench.reference").joinpath("card_spread.json").read_text()
    return json.loads(text)


def card_uuids(r: Any) -> tuple[str, ...]:
    """UUIDs of the GPUs the record ran on (its first host's), from its environment; () on the
    CPU or where the environment has no UUIDs (records older than their capture)."""
    env = getattr(r, "env", None) or {}
    gpus = env.get("gpus") or []
    if env.get("accelerator") != "cuda" or not gpus:
        return ()
    c = r.config
    if r.kind == "generate" and c.device == "cpu":  # a CPU run on a GPU host: no card
        return ()
    if r.kind in ("throughput", "generate"):
        used = [device_index(c.device)]
    elif r.kind == "maxbatch":
        used = [device_index(c.base.device)]
    elif r.kind == "peak":
        used = [device_index(c.device)] + ([device_index(c.peer)] if c.peer else [])
    elif r.kind == "scaling":
        used = list(range(max(1, c.gpus // max(1, c.nnodes))))
    elif r.kind == "comm":
        used = list(range(min(c.ranks, len(gpus))))
    elif r.kind == "train":
        used = list(range(min(c.gpus, len(gpus))))
    else:
        return ()
    return tuple(str(gpus[i].get("uuid")) for i in used if i < len(gpus) and gpus[i].get("uuid"))


def _on_own_cards(r: Any, peak_records: Sequence[Any]) -> list[Any]:
    """Of ``peak_records``, those that measured one of the cards ``r`` ran on (a peak run
    measures its host's first visible GPU)."""
    mine = set(card_uuids(r))
    return [p for p in peak_records
            if getattr(p, "kind", None) == "peak" and mine and card_uuids(p)[:1]
            and card_uuids(p)[0] in mine]


def own_card_peaks(r: Any, peak_records: Sequence[Any]) -> dict[str, dict[str, float]]:
    """:func:`measured_peaks` for ``r``: the latest matmul ceiling measured on one of its own
    cards, filed under ``r``'s device key; else, by device key, the latest of each GPU model.

    A peak run keys its ceiling by the label of the host it saw (``4x NVIDIA H100 ...`` with
    every card visible), which differs from the label of a run limited to some of the cards
    (``2x ...`` under ``CUDA_VISIBLE_DEVICES``); measured on one of ``r``'s own cards, the
    ceiling is that card's whatever the label. Cards of one model differ by about 2%: a
    ceiling from another card would move a result's measured MFU by as much; the model's is
    the fallback for records without UUIDs or a store whose peak ran on another host."""
    mine = [p for p in _on_own_cards(r, peak_records)
            if p.config.verb == "matmul" and p.ok]
    if not mine:
        return measured_peaks(peak_records)
    latest = measured_peaks(mine)[device_key(mine[-1].env or {})]
    return {device_key(r.env or {}): latest}


def card_model(r: Any) -> str | None:
    env = getattr(r, "env", None) or {}
    gpus = env.get("gpus") or []
    return gpus[0].get("name") if env.get("accelerator") == "cuda" and gpus else None


def different_cards(a: Any, b: Any) -> bool:
    """Whether two records ran on different physical cards of the same GPU model (both known)."""
    ua, ub = card_uuids(a), card_uuids(b)
    return bool(ua and ub) and card_model(a) == card_model(b) and set(ua) != set(ub)


def spread_for(gpu_model: str | None, kind: str = "throughput") -> dict[str, Any] | None:
    """The card-to-card spread measured for this GPU model (and kind): ``rel_halfwidth`` (half
    the relative range across cards, the largest over the configs measured), with the source
    entries; None where none was measured (then the comparison says so)."""
    if not gpu_model:
        return None
    return card_spreads().get(kind, {}).get(gpu_model)


def spread_summary(values_by_card: dict[str, float]) -> dict[str, float] | None:
    """Figures of one config on several cards: min, max, mean and the relative half-range
    ``(max - min) / 2 / mean`` (a half-width comparable with an interval's)."""
    vals = list(values_by_card.values())
    if len(vals) < 2:
        return None
    lo, hi = min(vals), max(vals)
    m = sum(vals) / len(vals)
    return {"min": lo, "max": hi, "mean": m, "cards": len(vals), "rel_halfwidth": (hi - lo) / 2 / m}


def by_card(records: Sequence[Any], figure) -> dict[str, float]:
    """The figure of each card (the last ok record per card UUID)."""
    out: dict[str, float] = {}
    for r in records:
        u = card_uuids(r)
        v = figure(r) if r.ok else None
        if u and v is not None:
            out[" ".join(u)] = v
    return out


def derive_spreads(records: Sequence[Any], max_rel_halfwidth: float = 0.01,
                   min_cards: int = 3) -> dict[str, Any]:
    """Card-to-card spread per GPU model, from throughput records of one config measured on
    several cards: for each config measured on at least ``min_cards`` cards (records whose own
    interval is at most ``max_rel_halfwidth``, so the spread is the cards', not the noise's),
    its range across cards; the model's figure is the widest config's half-range.

    Returns ``{"throughput": {gpu_model: {"rel_halfwidth": h, "configs": [...]}}}``, each config
    entry naming the record ids it came from (the shipped ``card_spread.json``)."""
    groups: dict[tuple[str, str], list[Any]] = {}
    for r in records:
        if r.kind != "throughput" or not r.ok or card_model(r) is None or not card_uuids(r):
            continue
        s = r.summary()
        if s is None or not s.rel_halfwidth <= max_rel_halfwidth:
            continue
        groups.setdefault((card_model(r), r.config.key()), []).append(r)
    out: dict[str, Any] = {}
    for (model, _key), recs in sorted(groups.items()):
        per_card = by_card(recs, lambda r: r.units_per_s())
        if len(per_card) < min_cards:
            continue
        summ = spread_summary(per_card)
        last = {" ".join(card_uuids(r)): r for r in recs}
        entry = {"config": recs[0].config.label, "unit": f"{recs[0].unit}/s", **summ,
                 "records": sorted(r.id for r in last.values())}
        m = out.setdefault(model, {"rel_halfwidth": 0.0, "configs": []})
        m["configs"].append(entry)
        m["rel_halfwidth"] = max(m["rel_halfwidth"], summ["rel_halfwidth"])
    return {"throughput": out}


def spread_table():
    """The shipped card-to-card spreads as a table: per GPU model, each config measured on
    several cards, its range and the records it comes from."""
    doc = card_spreads()
    rows = []
    for model, entry in doc.get("throughput", {}).items():
        for c in entry["configs"]:
            rows.append((model, c["config"], str(c["cards"]),
                         f"{fmt_num(c['min'])} - {fmt_num(c['max'])} {c['unit']}",
                         f"+-{c['rel_halfwidth']:.2%}", " ".join(c["records"])))
        rows.append((model, "the model's spread (widest config)", "", "",
                     f"+-{entry['rel_halfwidth']:.2%}", ""))
    return Table("Card-to-card spread: one config on several cards of one GPU model",
                 ("GPU", "config", "cards", "range", "half-range", "records"), tuple(rows),
                 (doc.get("about", ""), "from: " + ", ".join(doc.get("sources", [])),
                  "dlbench compare widens the interval of two figures from different cards of "
                  "one model by this spread; a GPU model not listed has none measured"))

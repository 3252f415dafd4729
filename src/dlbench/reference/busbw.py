"""Published all_reduce bus bandwidth per platform (``comm_busbw.json``), each row with its
source, and which rows describe the host a ``dlbench comm`` record ran on. Data only.

A row matches a record's host when its GPU is the record's (the spec table's id, through
:func:`dlbench.reference.spec_for_env`), its node count and GPU count are the record's, and its
link (NVLink or PCIe, read from ``nvidia-smi topo -m`` in the record's environment) is the
host's. A per-NIC row (InfiniBand) matches any job across nodes: dlbench does not know a host's
NICs, so the reader multiplies. A row whose GPU is not in the spec table (RTX 5090) is data for
the docs and matches no host.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any, Mapping

from dlbench.reference import spec_for_env


@dataclass(frozen=True)
class BusbwReference:
    """One published figure (see ``comm_busbw.json``'s ``about``)."""

    platform: str
    gpu_id: str | None
    interconnect: str            # nvlink, pcie, nvlink+network, infiniband
    nodes: int | None            # None: any job across nodes (per-NIC rows)
    gpus: tuple[int, ...] | None  # None: any GPU count within one node
    algorithm: str               # ring, nvls, or default (NCCL's own choice)
    busbw_gbs: float
    basis: str                   # maintainer or measured
    comparable: bool             # with dlbench's figure, which never runs NVLS
    sources: tuple[str, ...]
    says: str
    per: str | None = None       # "nic": per network card of each node
    nccl: str | None = None


@functools.lru_cache(maxsize=None)
def _document() -> dict[str, Any]:
    text = resources.files("dlbench.reference").joinpath("comm_busbw.json").read_text("utf-8")
    return json.loads(text)


@functools.lru_cache(maxsize=None)
def busbw_references() -> tuple[BusbwReference, ...]:
    """Every row of ``comm_busbw.json``."""
    out = []
    for row in _document()["rows"]:
        gpus = row.get("gpus")
        out.append(BusbwReference(**{**row, "gpus": None if gpus is None else tuple(gpus),
                                     "sources": tuple(row["sources"])}))
    return tuple(out)


def left_out() -> tuple[str, ...]:
    """The figures that were looked for and not found (the data file says which)."""
    return tuple(_document().get("left_out", ()))


_NV_LINK = re.compile(r"^NV\d+$")


def gpu_link(topology: str | None) -> str | None:
    """``nvlink`` when ``nvidia-smi topo -m`` shows an NVLink (``NV#``) between two GPUs,
    ``pcie`` when it shows GPUs and none, None when there is no matrix to read."""
    if not topology:
        return None
    seen_gpu = False
    for line in topology.splitlines():
        cells = line.split()
        if not cells or not re.fullmatch(r"GPU\d+", cells[0]):
            continue
        seen_gpu = True
        if any(_NV_LINK.match(c) for c in cells[1:]):
            return "nvlink"
    return "pcie" if seen_gpu else None


def references_for(env: Mapping[str, Any], ranks: int, nodes: int | None
                   ) -> list[BusbwReference]:
    """The rows that describe a job of ``ranks`` GPUs on ``nodes`` hosts of ``env``'s kind."""
    spec, _ = spec_for_env(env)
    link = gpu_link(env.get("topology"))
    out = []
    for r in busbw_references():
        if r.per == "nic":
            if nodes is not None and nodes > 1:
                out.append(r)
            continue
        if spec is None or r.gpu_id != spec.id or nodes is None or r.nodes != nodes:
            continue
        if r.gpus is not None and ranks not in r.gpus:
            continue
        host_link = r.interconnect.split("+")[0]
        if link is not None and host_link != link:
            continue
        out.append(r)
    return out

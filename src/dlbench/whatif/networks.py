"""Links for the what-if model: the named ones of :mod:`dlbench.reference.networks` (each figure
with its source), and links the user describes (``--bandwidth``, ``--latency``).

A measured figure always beats the named table: ``dlbench whatif --busbw-from`` takes bandwidth
and latency from ``dlbench comm`` records, and ``dlbench net`` measures its emulated links.
"""

from __future__ import annotations

import re

from dlbench.config import ConfigError
from dlbench.reference.networks import NETWORKS, Network, find_network  # noqa: F401 (re-exported)


def get_network(name: str) -> Network:
    net = find_network(name)
    if net is None:
        raise ConfigError(f"unknown network {name!r}; known: "
                          f"{', '.join(n.name for n in NETWORKS)} ('dlbench whatif --networks')")
    return net


_BW_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*(kbit|mbit|gbit|tbit|kb/s|mb/s|gb/s|tb/s)$")
_LAT_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*(ns|us|ms|s)$")


def parse_bandwidth(text: str) -> float:
    """``10gbit`` (bits per second) or ``25GB/s`` (bytes per second) -> bytes per second."""
    m = _BW_RE.match(text.strip().lower())
    if not m:
        raise ConfigError(f"--bandwidth: cannot read {text!r}; write e.g. 10gbit, 400gbit, "
                          "25GB/s (per direction)")
    v, unit = float(m.group(1)), m.group(2)
    scale = {"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[unit[0]]
    return v * scale / 8 if unit.endswith("bit") else v * scale


def parse_latency(text: str) -> float:
    """``5us``, ``0.5ms``, ``600ns`` -> seconds."""
    m = _LAT_RE.match(text.strip().lower())
    if not m:
        raise ConfigError(f"--latency: cannot read {text!r}; write e.g. 600ns, 5us, 0.1ms")
    return float(m.group(1)) * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2)]


def custom_network(bandwidth: str, latency: str, kind: str = "network",
                   efficiency: float = 1.0) -> Network:
    """A link the user describes (``--bandwidth``, ``--latency``), taken as payload figures."""
    return Network(name=f"{bandwidth}/{latency}", kind=kind,
                   bandwidth_Bps=parse_bandwidth(bandwidth), latency_s=parse_latency(latency),
                   efficiency=efficiency, source="given on the command line",
                   latency_source="given on the command line")

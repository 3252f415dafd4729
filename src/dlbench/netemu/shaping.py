"""What a link is, and the ``tc`` commands that make a veth behave like it. Pure: no I/O.

A link is a rate (bits per second, each direction) and an optional one-way delay. The rate is
enforced with a token bucket (``tbf``) on *both* ends of a host's veth pair: the end inside the
host's namespace limits what the host sends, the end on the bridge limits what it receives. So
every host has a full-duplex port of that rate on a non-blocking switch, as a server's NIC on a
data-centre switch. The delay is ``netem`` on the host's end only (every frame a host sends waits
that long once), so host-to-host latency is the delay.

``tbf`` counts whole frames as the kernel holds them (Ethernet header included, no preamble or
inter-frame gap), the same bytes the interface counters report: a rate here is a rate of those
bytes. TCP over a 1500-byte MTU carries 1448 bytes of payload per 1514-byte frame, so payload
moves at about 95.6% of the shaped rate.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from dlbench.config import ConfigError

#: Frame sizes of TCP over Ethernet at MTU 1500 with timestamps: what a full segment costs.
MTU_FRAME_BYTES = 1514           # 1500 IP bytes + 14 Ethernet header bytes (the kernel's skb)
TCP_PAYLOAD_BYTES = 1448         # 1500 - 20 (IP) - 32 (TCP with the timestamp option)
#: Smallest burst: the token bucket must hold two full frames or it cannot send one at the rate.
MIN_BURST_BYTES = 2 * MTU_FRAME_BYTES
#: Burst as time at the rate: 1 ms. Small, so a step's traffic cannot ride a large free burst
#: (a burst of B bytes lets B go out at the veth's own speed once per idle period).
BURST_S = 1e-3
#: Queue in front of the bucket, as time at the rate: deep enough that TCP keeps the link busy
#: rather than losing frames and backing off, as a switch port's buffer does.
QUEUE_S = 0.1
MIN_QUEUE_BYTES = 64 * 1024
#: The slowest and fastest rates accepted: below 100 kbit/s one step of even a tiny model takes
#: many seconds; above 100 Gbit/s tbf on a veth is limited by the CPU, not the rate.
MIN_RATE_BPS = 100e3
MAX_RATE_BPS = 100e9

_UNITS = {"bit": 1.0, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}
_RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*(bit|kbit|mbit|gbit|tbit)$")
_DELAY_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*(us|ms|s)$")
_UNSHAPED = ("unshaped", "none", "off", "veth")


@dataclass(frozen=True)
class LinkSpec:
    """One emulated link: ``name`` as typed, ``rate_bps`` (None = as fast as the veth goes) and
    ``delay_s`` (one-way, added by netem; 0 = none)."""

    name: str
    rate_bps: float | None = None
    delay_s: float = 0.0

    @property
    def shaped(self) -> bool:
        return self.rate_bps is not None or self.delay_s > 0


def parse_rate(text: str) -> float:
    """``10mbit``, ``2.5gbit``, ``100kbit`` (tc's units, bits per second) -> bits per second."""
    m = _RATE_RE.match(text.strip().lower())
    if not m:
        raise ConfigError(f"--link: cannot read the rate {text!r}; write it as tc does, e.g. "
                          "100mbit, 1gbit, 2.5gbit (bit, kbit, mbit, gbit), or a network name "
                          "such as 1gbe or 10gbe ('dlbench whatif --networks' lists them)")
    return float(m.group(1)) * _UNITS[m.group(2)]


def parse_delay(text: str) -> float:
    """``2ms``, ``500us``, ``0.1s`` -> seconds."""
    m = _DELAY_RE.match(text.strip().lower())
    if not m:
        raise ConfigError(f"--link: cannot read the delay {text!r}; write e.g. 500us, 2ms")
    return float(m.group(1)) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2)]


def parse_link(text: str, find_network: Callable[[str], Any] | None = None) -> LinkSpec:
    """A ``--link`` item: ``RATE[/DELAY]``, a network name (its bandwidth), or ``unshaped``.

    ``10mbit``, ``1gbit/2ms``, ``1gbe`` (the what-if table's 1 Gbit/s Ethernet), ``unshaped``.
    A network name sets the rate only; its latency needs netem and is added only when written
    after a slash. Names are looked up with ``find_network`` (the caller passes
    :func:`dlbench.reference.networks.find_network`: a name to an object with ``bandwidth_Bps``, or
    None), so that the emulator does not import the what-if model that checks it; without it
    only rates are read.
    """
    t = text.strip().lower()
    rate_text, _, delay_text = t.partition("/")
    delay = parse_delay(delay_text) if delay_text else 0.0
    if rate_text in _UNSHAPED:
        return LinkSpec(t, None, delay)
    if _RATE_RE.match(rate_text):
        rate = parse_rate(rate_text)
    else:
        net = find_network(rate_text) if find_network is not None else None
        if net is None:
            parse_rate(rate_text)  # raises with the message that lists the ways to write it
            raise AssertionError("unreachable")
        rate = net.bandwidth_Bps * 8
    if not MIN_RATE_BPS <= rate <= MAX_RATE_BPS:
        raise ConfigError(f"--link {text}: the rate must be between 100kbit and 100gbit")
    return LinkSpec(t, rate, delay)


def burst_bytes(rate_bps: float) -> int:
    return max(MIN_BURST_BYTES, math.ceil(rate_bps / 8 * BURST_S))


def queue_bytes(rate_bps: float) -> int:
    return max(MIN_QUEUE_BYTES + burst_bytes(rate_bps), math.ceil(rate_bps / 8 * QUEUE_S))


def _tc(netns: str | None) -> list[str]:
    return ["tc"] + (["-n", netns] if netns else [])


def tbf_args(rate_bps: float) -> list[str]:
    return ["tbf", "rate", f"{int(round(rate_bps))}bit", "burst", str(burst_bytes(rate_bps)),
            "limit", str(queue_bytes(rate_bps))]


def shape_commands(dev: str, link: LinkSpec, netns: str | None = None,
                   host_side: bool = True) -> list[list[str]]:
    """The ``tc`` argv lists that give ``dev`` the link's behaviour (``replace``: idempotent).

    ``host_side``: the host's own end (rate and delay); else the bridge's end (rate only).
    An unshaped link has no commands here; :func:`unshape_command` removes an earlier shape.
    """
    tc = _tc(netns)
    delay = link.delay_s if host_side else 0.0
    if delay > 0:
        # netem at the root delays every frame; tbf as its child (netem's one class, 1:1) sets
        # the rate, the layout tc-netem(8) documents for rate plus delay.
        cmds = [tc + ["qdisc", "replace", "dev", dev, "root", "handle", "1:", "netem", "delay",
                      f"{int(round(delay * 1e6))}us", "limit", "100000"]]
        if link.rate_bps is not None:
            cmds.append(tc + ["qdisc", "replace", "dev", dev, "parent", "1:1", "handle", "10:"]
                        + tbf_args(link.rate_bps))
        return cmds
    if link.rate_bps is None:
        return []
    return [tc + ["qdisc", "replace", "dev", dev, "root", "handle", "1:"] + tbf_args(link.rate_bps)]


def unshape_command(dev: str, netns: str | None = None) -> list[str]:
    """Back to the veth's default (no queueing discipline); fails harmlessly if none was set."""
    return _tc(netns) + ["qdisc", "del", "dev", dev, "root"]


def payload_rate(rate_bps: float) -> float:
    """Bits per second of TCP payload through a link shaped at ``rate_bps`` (full frames)."""
    return rate_bps * TCP_PAYLOAD_BYTES / MTU_FRAME_BYTES

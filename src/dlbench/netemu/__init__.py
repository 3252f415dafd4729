"""Emulated hosts over shaped links on one Linux machine, for ``dlbench net``.

- :mod:`~dlbench.netemu.shaping`: what a link is (rate, delay) and the tc commands for it (pure);
- :mod:`~dlbench.netemu.topology`: namespaces, veth pairs, a bridge, the private range
  10.231.0.0/24, and the clean-up that always runs (and ``--cleanup`` for a killed run);
- :mod:`~dlbench.netemu.probe`: the link's measured round-trip time and TCP goodput;
- :mod:`~dlbench.netemu.launch`: one gloo rank per host (``ip netns exec``), collected into a
  :class:`~dlbench.records.net.NetRecord`; :mod:`~dlbench.netemu.host_rank` is that rank's process.

Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN); without, :class:`NetEmuUnavailable` says so.
"""

from dlbench.netemu.topology import NetEmuError, NetEmuUnavailable, privilege_problem

__all__ = ["NetEmuError", "NetEmuUnavailable", "privilege_problem"]

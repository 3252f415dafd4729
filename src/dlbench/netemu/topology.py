"""Emulated hosts on one Linux machine: network namespaces, veth pairs, one bridge, tc shaping.

Layout (N hosts)::

    namespace dlbench-<tok>-<pid>-h0          namespace dlbench-<tok>-<pid>-h1     ...
      lo, dlb<tok>h0  10.231.0.1/24             lo, dlb<tok>h1  10.231.0.2/24
            |  (veth pair)                            |
      dlb<tok>p0 ------------ bridge dlb<tok>br ----- dlb<tok>p1          (root namespace)

Addresses come from 10.231.0.0/24 and exist only inside dlbench's namespaces. The bridge has no
address, and the namespaces have no default route, so the emulated hosts reach each other and
nothing else; nothing outside can reach them.

Everything made is recorded the moment it exists, and :meth:`Topology.close` removes it in
reverse order, whether the run ended normally, raised, or was interrupted (``with Topology(...)``,
plus an ``atexit`` hook for a ``sys.exit`` elsewhere). A run killed outright (SIGKILL) cannot clean
up after itself: its names carry the ``dlb`` / ``dlbench-`` prefixes and the owner's pid (in the
namespace name, and in the alias of every root-side link), so :func:`cleanup_leftovers` (``dlbench
net --cleanup``) finds whatever belongs to a process that no longer exists and removes it.

Every external command runs under a time limit; every loop here is bounded by a count.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from dlbench.env import process_alive as _alive
from dlbench.netemu.shaping import LinkSpec, shape_commands, unshape_command

#: The private range the emulated hosts use, and only inside their namespaces.
SUBNET = "10.231.0.0/24"
_NET_PREFIX = "10.231.0."
#: Names: namespaces ``dlbench-<token>-<owner pid>-h<i>``; root-side links ``dlb<token>...``
#: (interface names are at most 15 characters, so the pid goes in the link's alias instead).
NS_PREFIX = "dlbench-"
# The ranks' result folder of a run, in the temporary directory: dlbench-net-PID-XXXX.
TMP_PREFIX = "dlbench-net-"
LINK_PREFIX = "dlb"
ALIAS_PREFIX = "dlbench-net"
NS_RE = re.compile(r"^dlbench-([0-9a-f]{5})-(\d+)-h(\d+)$")
LINK_RE = re.compile(r"^dlb([0-9a-f]{5})(br|p\d+|h\d+)$")
ALIAS_RE = re.compile(r"^dlbench-net owner=(\d+) token=([0-9a-f]{5})$")
#: Seconds any one ip/tc command may take (they take milliseconds).
CMD_TIMEOUT_S = 20.0
#: Processes found inside a leftover namespace get this long after SIGTERM before SIGKILL.
KILL_GRACE_S = 3.0
#: Capabilities (bit numbers in /proc/self/status CapEff): ip netns add bind-mounts a file under
#: /run/netns and ip netns exec mounts a fresh /sys, so CAP_SYS_ADMIN is needed besides
#: CAP_NET_ADMIN for the links and qdiscs.
CAP_NET_ADMIN = 12
CAP_SYS_ADMIN = 21


class NetEmuError(RuntimeError):
    """The emulated network could not be built, shaped or removed; the message says why."""


class NetEmuUnavailable(NetEmuError):
    """This machine or user cannot emulate networks at all (not root, no iproute2, not Linux)."""


Runner = Callable[[Sequence[str]], subprocess.CompletedProcess]


def run_cmd(argv: Sequence[str]) -> subprocess.CompletedProcess:
    """Run one ip/tc command under :data:`CMD_TIMEOUT_S`; raise :class:`NetEmuError` on failure."""
    try:
        p = subprocess.run(list(argv), capture_output=True, text=True, timeout=CMD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise NetEmuError(f"'{' '.join(argv)}' took more than {CMD_TIMEOUT_S:.0f} s") from None
    except FileNotFoundError:
        raise NetEmuUnavailable(f"'{argv[0]}' is not installed (it comes with iproute2)") from None
    if p.returncode != 0:
        raise NetEmuError(f"'{' '.join(argv)}' failed: {(p.stderr or p.stdout).strip()}")
    return p


def _capabilities() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except OSError:
        return None
    return None


def privilege_problem() -> str | None:
    """Why this process cannot build emulated hosts, or None if it has what it needs."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces are a Linux feature; this is {sys.platform}"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"'{tool}' is not installed: install iproute2 (e.g. apt-get install iproute2)"
    caps = _capabilities()
    if caps is None:
        return None if os.geteuid() == 0 else "cannot read this process's capabilities"
    missing = [n for n, bit in (("CAP_NET_ADMIN", CAP_NET_ADMIN), ("CAP_SYS_ADMIN", CAP_SYS_ADMIN))
               if not caps >> bit & 1]
    if missing:
        return (f"dlbench net needs root (or {' and '.join(missing)}) to create network "
                "namespaces, veth links and tc queueing disciplines; rerun it with sudo")
    return None


def require_privileges() -> None:
    problem = privilege_problem()
    if problem:
        raise NetEmuUnavailable(problem)


@dataclass(frozen=True)
class Host:
    """One emulated host: its namespace, its interface there, the bridge-side end, its address."""

    index: int
    netns: str
    dev: str
    peer: str
    address: str


@dataclass
class Topology:
    """``hosts`` emulated hosts on one bridge; a context manager that always cleans up.

    ``runner`` runs one ip/tc argv (injectable for tests of the command sequence).
    """

    hosts: int
    runner: Runner = run_cmd
    token: str = field(default_factory=lambda: secrets.token_hex(3)[:5])
    owner: int = field(default_factory=os.getpid)
    members: list[Host] = field(default_factory=list)
    link: LinkSpec | None = None
    cleanup_errors: list[str] = field(default_factory=list)
    _made: list[tuple[str, str]] = field(default_factory=list, init=False)  # (netns|link, name)
    _closed: bool = field(default=False, init=False)

    @property
    def bridge(self) -> str:
        return f"{LINK_PREFIX}{self.token}br"

    @property
    def alias(self) -> str:
        return f"{ALIAS_PREFIX} owner={self.owner} token={self.token}"

    def __enter__(self) -> "Topology":
        self.build()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- building ---------------------------------------------------------------------------------
    def build(self) -> None:
        """Make the bridge, namespaces and veth pairs; on any failure remove what was made."""
        require_privileges()
        atexit.register(self.close)
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self) -> None:
        run = self.runner
        try:
            run(["ip", "link", "add", self.bridge, "type", "bridge"])
        except NetEmuError as exc:
            raise NetEmuUnavailable(f"the kernel refused to create a bridge ({exc}); network "
                                    "emulation is not possible here") from None
        self._made.append(("link", self.bridge))
        run(["ip", "link", "set", self.bridge, "alias", self.alias])
        run(["ip", "link", "set", self.bridge, "up"])
        for i in range(self.hosts):
            ns = f"{NS_PREFIX}{self.token}-{self.owner}-h{i}"
            dev, peer = f"{LINK_PREFIX}{self.token}h{i}", f"{LINK_PREFIX}{self.token}p{i}"
            try:
                run(["ip", "netns", "add", ns])
            except NetEmuError as exc:
                raise NetEmuUnavailable(f"the kernel refused to create a network namespace "
                                        f"({exc}); network emulation is not possible here") from None
            self._made.append(("netns", ns))
            run(["ip", "link", "add", dev, "type", "veth", "peer", "name", peer])
            self._made.append(("link", peer))   # deleting either end deletes the pair
            run(["ip", "link", "set", peer, "alias", self.alias])
            run(["ip", "link", "set", dev, "netns", ns])
            address = f"{_NET_PREFIX}{i + 1}"
            run(["ip", "-n", ns, "addr", "add", f"{address}/24", "dev", dev])
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
            run(["ip", "-n", ns, "link", "set", dev, "up"])
            run(["ip", "link", "set", peer, "master", self.bridge])
            run(["ip", "link", "set", peer, "up"])
            self.members.append(Host(i, ns, dev, peer, address))

    def shape(self, link: LinkSpec) -> None:
        """Give every host's port the link's rate (both directions) and delay (its sends)."""
        if self.link is not None and self.link.shaped:
            self.unshape()
        for h in self.members:
            for cmd in shape_commands(h.dev, link, netns=h.netns, host_side=True):
                self._tc(cmd)
            for cmd in shape_commands(h.peer, link, netns=None, host_side=False):
                self._tc(cmd)
        self.link = link

    def _tc(self, cmd: list[str]) -> None:
        try:
            self.runner(cmd)
        except NetEmuError as exc:
            if "netem" in cmd and "unknown" in str(exc).lower():
                raise NetEmuError("this kernel has no netem queueing discipline "
                                  "(CONFIG_NET_SCH_NETEM), so a link delay cannot be emulated "
                                  "here; rates (tbf) still work: drop the '/DELAY' part of "
                                  "--link") from None
            raise

    def unshape(self) -> None:
        for h in self.members:
            for cmd in (unshape_command(h.dev, h.netns), unshape_command(h.peer)):
                try:
                    self.runner(cmd)
                except NetEmuError:
                    pass  # no qdisc there: already unshaped
        self.link = None

    def describe(self) -> dict:
        """What a record keeps of the topology: names, addresses, the link's qdiscs."""
        return {"subnet": SUBNET, "bridge": self.bridge,
                "hosts": [{"netns": h.netns, "dev": h.dev, "address": h.address}
                          for h in self.members],
                "link": None if self.link is None else {"name": self.link.name,
                                                        "rate_bps": self.link.rate_bps,
                                                        "delay_s": self.link.delay_s}}

    # -- removing ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Remove everything made, in reverse order; errors are collected, never raised here
        (a clean-up must not hide the exception that caused it)."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        for kind, name in reversed(self._made):
            try:
                if kind == "netns":
                    _kill_inside(name, self.runner)
                    self.runner(["ip", "netns", "del", name])
                elif _link_exists(name, self.runner):
                    self.runner(["ip", "link", "del", name])
            except NetEmuError as exc:
                self.cleanup_errors.append(str(exc))
        left = [n for n in leftovers(self.runner, include_live=True) if self.token in n]
        if left:
            self.cleanup_errors.append(f"still present after clean-up: {', '.join(left)}")


# -- finding and removing leftovers -------------------------------------------------------------


def list_netns(runner: Runner = run_cmd) -> list[str]:
    out = runner(["ip", "netns", "list"]).stdout
    # Lines read "name" or "name (id: 3)".
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def list_links(runner: Runner = run_cmd) -> list[dict]:
    return json.loads(runner(["ip", "-j", "link", "show"]).stdout or "[]")


def _link_exists(name: str, runner: Runner) -> bool:
    return any(d.get("ifname") == name for d in list_links(runner))


def _kill_inside(netns: str, runner: Runner) -> list[int]:
    """End the processes still inside one of dlbench's namespaces (ranks of a dead run): SIGTERM,
    then SIGKILL after :data:`KILL_GRACE_S`. A namespace whose name is deleted lives on while a
    process is inside, so this comes before ``ip netns del``."""
    try:
        pids = [int(p) for p in runner(["ip", "netns", "pids", netns]).stdout.split()]
    except NetEmuError:
        return []
    pids = [p for p in pids if p != os.getpid()]
    for p in pids:
        try:
            os.kill(p, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + KILL_GRACE_S
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    for p in pids:
        if _alive(p):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return pids


def leftovers(runner: Runner = run_cmd, include_live: bool = False) -> list[str]:
    """Names of dlbench's namespaces and root-side links whose owner process is gone (or all of
    them with ``include_live``)."""
    found = []
    for ns in list_netns(runner):
        m = NS_RE.match(ns)
        if m and (include_live or not _alive(int(m.group(2)))):
            found.append(ns)
    for d in list_links(runner):
        name = d.get("ifname", "")
        if not LINK_RE.match(name):
            continue
        a = ALIAS_RE.match(d.get("ifalias") or "")
        # A dlb-named link without dlbench's alias was caught between creation and aliasing.
        if include_live or a is None or not _alive(int(a.group(1))):
            found.append(name)
    return found


def stale_tmp_dirs(root: str | None = None, include_live: bool = False) -> list[Path]:
    """The ranks' result folders (``dlbench-net-PID-*`` in the temporary directory) whose run's
    process no longer exists: a run killed outright never reached its own clean-up."""
    found = []
    for path in Path(root or tempfile.gettempdir()).glob(f"{TMP_PREFIX}*"):
        m = re.match(rf"{re.escape(TMP_PREFIX)}(\d+)-", path.name)
        if path.is_dir() and m and (include_live or not _alive(int(m.group(1)))):
            found.append(path)
    return found


def cleanup_leftovers(runner: Runner = run_cmd, include_live: bool = False
                      ) -> tuple[list[str], list[str]]:
    """Remove what :func:`leftovers` finds, and a killed run's temporary folders; returns
    (removed, errors)."""
    require_privileges()
    removed, errors = [], []
    for path in stale_tmp_dirs(include_live=include_live):
        shutil.rmtree(path, ignore_errors=True)
        removed.append(str(path))
    names = leftovers(runner, include_live)
    for name in [n for n in names if n.startswith(NS_PREFIX)]:
        try:
            _kill_inside(name, runner)
            runner(["ip", "netns", "del", name])
            removed.append(name)
        except NetEmuError as exc:
            errors.append(str(exc))
    # Deleting a namespace deletes its veth ends, and with them their peers: look again. The
    # kernel tears a namespace down in the background, so a peer may still be listed and then
    # vanish before its own delete: gone is gone, whoever removed it.
    present = {d.get("ifname") for d in list_links(runner)}
    for name in [n for n in names if not n.startswith(NS_PREFIX)]:
        if name not in present:
            removed.append(name)
            continue
        try:
            runner(["ip", "link", "del", name])
            removed.append(name)
        except NetEmuError as exc:
            if name in {d.get("ifname") for d in list_links(runner)}:
                errors.append(str(exc))
            else:
                removed.append(name)
    return removed, errors

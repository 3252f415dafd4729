"""dlbench net: real namespaces, real tc, real gloo; two emulated hosts, two ranks.

The emulated tests need root (or CAP_NET_ADMIN and CAP_SYS_ADMIN) and a kernel that lets this
process make network namespaces; they are skipped with the reason where either is missing. One
job measures three windows (ddp unshaped, ddp and ps at 16 Mbit/s) and the tests read its
records; the clean-up tests start ``dlbench net`` and kill it.
"""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlbench.config import ConfigError
from dlbench.netemu import topology as topo_mod
from dlbench.netemu.shaping import LinkSpec, burst_bytes, parse_link, queue_bytes, shape_commands
from dlbench.netemu.topology import NetEmuError, NetEmuUnavailable, Topology, privilege_problem
from dlbench.records.net import NetConfig
from dlbench.records.throughput import ThroughputConfig
from dlbench.reference.networks import find_network
from dlbench.whatif import check
from dlbench.whatif.patterns import ps_collectives, ring_allreduce

SRC = str(Path(__file__).resolve().parents[1] / "src")
_ENV = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}


# -- pure parts: no privileges needed -----------------------------------------------------------
def test_parse_link_forms():
    assert parse_link("10mbit") == LinkSpec("10mbit", 10e6, 0.0)
    assert parse_link("1gbit/2ms") == LinkSpec("1gbit/2ms", 1e9, 2e-3)
    assert parse_link("unshaped").rate_bps is None
    assert parse_link("10gbe", find_network).rate_bps == 10e9   # a network name: its rate
    with pytest.raises(ConfigError, match="tc does"):
        parse_link("10gbe")                                 # names only with a lookup
    with pytest.raises(ConfigError, match="tc does"):
        parse_link("fast", find_network)
    with pytest.raises(ConfigError, match="between"):
        parse_link("10kbit")


def test_tc_commands_shape_both_ends():
    link = LinkSpec("16mbit", 16e6)
    host = shape_commands("dlbabcdeh0", link, netns="ns0", host_side=True)
    assert host == [["tc", "-n", "ns0", "qdisc", "replace", "dev", "dlbabcdeh0", "root",
                     "handle", "1:", "tbf", "rate", "16000000bit", "burst",
                     str(burst_bytes(16e6)), "limit", str(queue_bytes(16e6))]]
    assert burst_bytes(16e6) == 3028               # two full frames: 1 ms at 16 Mbit/s is less
    assert queue_bytes(16e6) == 200_000            # 100 ms at the rate
    delayed = shape_commands("d", LinkSpec("x", 16e6, 2e-3), host_side=True)
    assert "netem" in delayed[0] and "2000us" in delayed[0] and "tbf" in delayed[1]
    # The bridge's end gets the rate only: a frame is delayed once, by its sender.
    assert all("netem" not in c for c in shape_commands("d", LinkSpec("x", 16e6, 2e-3),
                                                        host_side=False))
    assert shape_commands("d", LinkSpec("unshaped")) == []


class FakeRunner:
    """Records ip/tc argv lists; fails the command that contains ``fail_on``."""

    def __init__(self, fail_on: str | None = None):
        self.calls, self.fail_on = [], fail_on

    def __call__(self, argv):
        self.calls.append(list(argv))
        if self.fail_on and self.fail_on in argv:
            raise NetEmuError(f"'{' '.join(argv)}' failed: injected")
        return subprocess.CompletedProcess(argv, 0, stdout="[]" if "-j" in argv else "",
                                           stderr="")


def test_a_failed_build_removes_what_it_made(monkeypatch):
    monkeypatch.setattr(topo_mod, "require_privileges", lambda: None)
    run = FakeRunner(fail_on="dlbench-abcde-1-h1")     # the second namespace cannot be made
    t = Topology(2, runner=run, token="abcde", owner=1)
    with pytest.raises(NetEmuUnavailable, match="namespace"):
        t.build()
    removed = [c for c in run.calls if c[:3] in (["ip", "netns", "del"], ["ip", "link", "del"])]
    assert ["ip", "netns", "del", "dlbench-abcde-1-h0"] in removed
    # Links are removed only if they still exist (the fake lists none): the namespace first.
    assert removed[0] == ["ip", "netns", "del", "dlbench-abcde-1-h0"]


def test_without_privileges_it_says_so(monkeypatch):
    monkeypatch.setattr(topo_mod, "_capabilities", lambda: 0)
    msg = privilege_problem()
    assert msg and "root" in msg and "CAP_NET_ADMIN" in msg


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root and setpriv to run a child without the capabilities")
def test_a_process_without_the_capabilities_is_told_so():
    # The child keeps uid 0 but loses CAP_NET_ADMIN and CAP_SYS_ADMIN from its bounding set,
    # as in a container that does not grant them: the kernel would refuse, and dlbench says why.
    out = subprocess.run(["setpriv", "--bounding-set", "-net_admin,-sys_admin", sys.executable,
                          "-c", "from dlbench.netemu.topology import privilege_problem; "
                                "print(privilege_problem())"],
                         env=_ENV, capture_output=True, text=True, timeout=60)
    assert "CAP_NET_ADMIN and CAP_SYS_ADMIN" in out.stdout, out.stdout + out.stderr


# -- real namespaces ------------------------------------------------------------------------------
def _namespaces_possible() -> str | None:
    problem = privilege_problem()
    if problem:
        return problem
    try:
        with Topology(1):
            pass
    except NetEmuUnavailable as exc:
        return str(exc)
    return None


_WHY = _namespaces_possible()
needs_netns = pytest.mark.skipif(_WHY is not None, reason=f"network emulation impossible: {_WHY}")


def _ours(pid: int) -> list[str]:
    """Namespaces and links whose owner is ``pid`` (by name, or by alias)."""
    import json
    names = [n for n in topo_mod.list_netns() if f"-{pid}-h" in n]
    links = json.loads(subprocess.run(["ip", "-j", "link", "show"], capture_output=True,
                                      text=True).stdout or "[]")
    names += [d["ifname"] for d in links if f"owner={pid} " in (d.get("ifalias") or "")]
    return names


@pytest.fixture(scope="module")
def net_records():
    from dlbench.netemu.launch import NetLauncher
    base = ThroughputConfig(model="tiny_mlp", batch_size=8, device="cpu",
                            telemetry_interval_s=None)
    links = {"unshaped": parse_link("unshaped"), "16mbit": parse_link("16mbit")}

    def cfg(strategy, link):
        return NetConfig(base=base, hosts=2, strategy=strategy, link=link,
                         rate_bps=links[link].rate_bps, steps=8, warmup_steps=2)
    windows = [cfg("ddp", "unshaped"), cfg("ddp", "16mbit"), cfg("ps", "16mbit")]
    with Topology(2) as topo:
        recs = NetLauncher(timeout_s=120, pg_timeout_s=60, compute_steps=5).run(
            windows, links, topo, env={})
    assert not topo.cleanup_errors
    assert not _ours(os.getpid())
    bad = [r for r in recs if not r.ok]
    assert not bad, bad[0].error
    return {(r.config.strategy, r.config.link): r for r in recs}


@pytest.mark.slow
@needs_netns
def test_shaped_link_slows_the_step_by_about_what_the_model_predicts(net_records):
    fast, slow = net_records[("ddp", "unshaped")], net_records[("ddp", "16mbit")]
    assert slow.step_s > 5 * fast.step_s          # measurably slower, not noise
    # The slowdown against the model's: the bandwidth term (~100 ms) dominates both, and a wrong
    # factor (bits for bytes, 2(n-1)/n misapplied, one direction shaped twice) would be off by
    # 2x or more either way. What the model leaves out only adds time: gloo's per-step software
    # cost (~1-3 ms alone) and, on a loaded 2-core machine, the scheduling of the shaped
    # transfer's threads (a full CI run measured 145 ms against 106 predicted, 1.37x). Hence a
    # band that is tight below and looser above, still well short of 2x on either side.
    link_fast, _ = check.emulated_link(fast)
    link_slow, _ = check.emulated_link(slow)
    g = slow.grad_bytes
    predicted = ring_allreduce(g, 2, link_slow).time_s - ring_allreduce(g, 2, link_fast).time_s
    measured = slow.step_s - fast.step_s
    assert 0.8 * predicted <= measured <= 1.6 * predicted, (measured, predicted)


@pytest.mark.slow
@needs_netns
def test_bytes_on_the_wire_match_ring_allreduce(net_records):
    for link in ("unshaped", "16mbit"):
        r = net_records[("ddp", link)]
        _, wire = check.emulated_link(r)
        # Ring all-reduce: each host sends and receives 2(n-1)/n of the gradient bytes (n = 2:
        # all of them), plus TCP/IP/Ethernet headers and ACKs. The counters are exact, so 5%
        # is room for the few control messages in the window, not for a wrong factor.
        want = 2 * (2 - 1) / 2 * r.grad_bytes * wire
        for host in range(2):
            assert r.tx_per_step()[host] == pytest.approx(want, rel=0.05)
            assert r.rx_per_step()[host] == pytest.approx(want, rel=0.05)


@pytest.mark.slow
@needs_netns
def test_parameter_server_bytes_follow_gloo_reduce_and_broadcast(net_records):
    r = net_records[("ps", "16mbit")]
    _, wire = check.emulated_link(r)
    cost = ps_collectives(r.shard_bytes, check.emulated_link(r)[0], "gloo")
    for host in range(2):
        assert r.tx_per_step()[host] == pytest.approx(cost.sent[host] * wire, rel=0.05)
    # The owner of the big first layer sends half again as much (and, with two hosts, the other
    # receives it: both carry that much in one direction).
    assert cost.sent[0] > 1.4 * cost.sent[1]
    assert r.tx_per_step()[0] > 1.3 * r.tx_per_step()[1]
    assert r.step_s > net_records[("ddp", "16mbit")].step_s     # more, one-way, collectives


@pytest.mark.slow
@needs_netns
def test_loss_per_iteration_matches_across_links_and_strategies(net_records):
    curves = [r.losses for r in net_records.values()]
    for c in curves[1:]:
        assert c == pytest.approx(curves[0], rel=1e-4)
    assert curves[0][-1] < curves[0][0]
    # ...while per wall time they differ: the shaped windows end later.
    assert net_records[("ddp", "16mbit")].step_end_s[-1] > \
        3 * net_records[("ddp", "unshaped")].step_end_s[-1]


# A run's owner without the command line around it (which imports torch: seconds): the same
# topology and launcher dlbench net uses, running long enough to be killed mid-way.
_OWNER = """
from dlbench.records.throughput import ThroughputConfig
from dlbench.netemu.launch import NetLauncher
from dlbench.netemu.shaping import parse_link
from dlbench.netemu.topology import Topology
from dlbench.records.net import NetConfig
base = ThroughputConfig(model="tiny_mlp", batch_size=8, device="cpu", telemetry_interval_s=None)
link = parse_link("1mbit")
cfg = NetConfig(base=base, hosts=2, strategy="ddp", link="1mbit", rate_bps=1e6, steps=1000)
with Topology(2) as topo:
    NetLauncher(timeout_s=300).run([cfg], {"1mbit": link}, topo, env={})
"""


def _start_net(tmp_path, cli: bool = True) -> subprocess.Popen:
    argv = ([sys.executable, "-m", "dlbench", "net", "-m", "tiny_mlp", "--link", "1mbit",
             "--strategy", "ddp", "--steps", "1000", "-q", "--db", str(tmp_path / "net.db")]
            if cli else [sys.executable, "-c", _OWNER])
    return subprocess.Popen(argv, env=_ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _wait_for_ranks(proc, limit_s=60.0) -> list[int]:
    """Until the run's namespaces exist with a process inside each; returns their pids."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
        nss = [n for n in topo_mod.list_netns() if f"-{proc.pid}-h" in n]
        if len(nss) == 2:
            pids = [subprocess.run(["ip", "netns", "pids", n], capture_output=True,
                                   text=True).stdout.split() for n in nss]
            if all(pids):
                return [int(p) for ps in pids for p in ps]
        time.sleep(0.1)
    raise AssertionError("the ranks did not start")


@pytest.mark.slow
@needs_netns
def test_cleanup_after_a_killed_run_leaves_nothing(tmp_path, capsys):
    proc = _start_net(tmp_path, cli=False)
    try:
        ranks = _wait_for_ranks(proc)
        proc.send_signal(signal.SIGKILL)             # no clean-up can run in it
        proc.wait(timeout=10)
        assert _ours(proc.pid), "a killed run leaves its namespaces: the case --cleanup is for"
        from dlbench.cli import main
        assert main(["net", "--cleanup"]) == 0
        assert "removed" in capsys.readouterr().out
        assert not _ours(proc.pid)
        for pid in ranks:                            # the ranks inside ended too
            assert not Path(f"/proc/{pid}").exists() or \
                Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.slow
@needs_netns
def test_sigterm_unwinds_and_removes_everything(tmp_path):
    proc = _start_net(tmp_path)
    try:
        _wait_for_ranks(proc)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 130, out.decode()[-2000:]
        assert not _ours(proc.pid)
    finally:
        if proc.poll() is None:
            proc.kill()


@needs_netns
def test_a_delay_needs_netem_or_is_measured():
    from dlbench.netemu.launch import probe_link
    with Topology(2) as topo:
        try:
            topo.shape(parse_link("unshaped/5ms"))
        except NetEmuError as exc:
            # This kernel has no netem: the error says so and what still works.
            assert "netem" in str(exc) and "tbf" in str(exc)
            return
        rtt = probe_link(topo)["rtt_s"]
        assert rtt == pytest.approx(2 * 5e-3, abs=3e-3)   # each side's sends wait 5 ms


def test_cleanup_counts_a_peer_the_kernel_removed_first(monkeypatch):
    # The kernel tears a deleted namespace down in the background: its veth peer is still listed,
    # then gone before its own delete, which fails with "Cannot find device". Removed, not an error.
    import json
    import types
    monkeypatch.setattr(topo_mod, "require_privileges", lambda: None)
    dead = 2 ** 22 + 7  # no such pid
    ns, peer = f"dlbench-abcde-{dead}-h0", "dlbabcdep0"
    state = {"links": [{"ifname": peer, "ifalias": f"dlbench-net owner={dead} token=abcde"}],
             "netns": [ns]}

    def runner(argv):
        out = ""
        if argv[:3] == ["ip", "netns", "list"]:
            out = "\n".join(state["netns"])
        elif argv[:3] == ["ip", "-j", "link"]:
            out = json.dumps(state["links"])
        elif argv[:3] == ["ip", "netns", "del"]:
            state["netns"].remove(argv[3])
        elif argv[:3] == ["ip", "link", "del"]:
            state["links"] = []  # the kernel got there first
            raise NetEmuError(f"'ip link del {argv[3]}' failed: Cannot find device \"{argv[3]}\"")
        return types.SimpleNamespace(stdout=out, stderr="", returncode=0)

    removed, errors = topo_mod.cleanup_leftovers(runner)
    assert sorted(removed) == sorted([ns, peer]) and errors == []


def test_cleanup_finds_a_killed_runs_temporary_folder_and_spares_a_live_one(tmp_path):
    # A run killed outright (SIGKILL) never removes its ranks' result folder; the pid in its
    # name tells --cleanup whether the run is still going.
    dead = tmp_path / f"{topo_mod.TMP_PREFIX}999999999-abc"
    live = tmp_path / f"{topo_mod.TMP_PREFIX}{os.getpid()}-def"
    other = tmp_path / "dlbench-something-else"
    for d in (dead, live, other):
        d.mkdir()
    assert topo_mod.stale_tmp_dirs(str(tmp_path)) == [dead]
    assert sorted(topo_mod.stale_tmp_dirs(str(tmp_path), include_live=True)) == sorted([dead, live])

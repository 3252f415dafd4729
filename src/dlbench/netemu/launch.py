"""Start one rank per emulated host, drive the link through the windows, collect the records.

Each rank is ``ip netns exec <host's namespace> python -m dlbench.netemu.host_rank JOB RANK``,
in its own session (so the parent alone decides when it stops), with ``MASTER_ADDR`` = host 0's address
in the private range and ``GLOO_SOCKET_IFNAME`` = the host's interface. Every namespace is fresh,
so the rendezvous port is always free there.

One job measures several windows (one per link and strategy; see
:mod:`dlbench.workloads.net`): start-up is paid once. Before window k every rank, idle, writes
``wait<K>.<R>``; the parent shapes the link (and probes it, once per link), then writes
``go<K>``. Each rank writes each window's results as soon as it has them
(``rank<R>.w<K>.json``), so a failure loses only the windows it stopped.

Failures: a rank that raises writes its traceback and exits; the others are stopped
:data:`FAIL_GRACE_S` later (they would otherwise wait for the process-group timeout), and every
window not finished becomes an error record with the first failure (the cause, not its echoes).
Ctrl-C or any exception in the parent stops every rank before it propagates, so the topology can
then be removed (a namespace lives on while a process is inside it). Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import dlbench
from dlbench.launch import signals, tempdirs
from dlbench.launch.torchrun import JobOutcome
from dlbench.netemu.shaping import LinkSpec
from dlbench.netemu.topology import TMP_PREFIX, NetEmuError, Topology
from dlbench.records.base import ErrorType
from dlbench.records.net import NetConfig, NetRecord

MASTER_PORT = 29500
#: After the first rank fails, how long the others get before they are stopped.
FAIL_GRACE_S = 5.0
#: After SIGTERM, how long a rank gets before SIGKILL.
STOP_GRACE_S = 5.0
POLL_S = 0.02
#: Probe transfer: about this long at the link's rate, within [64 KiB, 8 MiB].
PROBE_S = 0.25
PROBE_MIN_BYTES = 64 * 1024
PROBE_MAX_BYTES = 8 * 1024 * 1024
PROBE_TIMEOUT_S = 60.0


def _env(extra: dict[str, str]) -> dict[str, str]:
    src = str(Path(dlbench.__file__).resolve().parents[1])
    path = os.environ.get("PYTHONPATH", "")
    env = {**os.environ, "PYTHONPATH": src + (os.pathsep + path if path else "")}
    env.setdefault("OMP_NUM_THREADS", "1")
    return signals.child_env({**env, **extra})  # ranks watch this process, not a stale name


def _stop(procs: Sequence[subprocess.Popen]) -> None:
    """SIGTERM to every process still running, then SIGKILL to those that linger (bounded)."""
    live = [p for p in procs if p.poll() is None]
    for p in live:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline and any(p.poll() is None for p in live):
        time.sleep(POLL_S)
    for p in live:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def probe_link(topo: Topology, a: int = 0, b: int = 1) -> dict[str, Any]:
    """RTT and goodput from host ``a`` to host ``b`` (see :mod:`dlbench.netemu.probe`)."""
    rate = topo.link.rate_bps if topo.link is not None else None
    nbytes = PROBE_MAX_BYTES if rate is None else int(
        min(PROBE_MAX_BYTES, max(PROBE_MIN_BYTES, rate / 8 * PROBE_S)))
    ha, hb = topo.members[a], topo.members[b]
    py = [sys.executable, "-m", "dlbench.netemu.probe"]
    env = _env({})
    server = subprocess.Popen(["ip", "netns", "exec", hb.netns, *py, "server", hb.address],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        out = subprocess.run(["ip", "netns", "exec", ha.netns, *py, "client", hb.address,
                              str(nbytes)], env=env, capture_output=True, text=True,
                             timeout=PROBE_TIMEOUT_S)
        if out.returncode != 0:
            raise NetEmuError(f"the link probe from {ha.address} to {hb.address} failed: "
                              f"{out.stderr.strip()[-1500:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        raise NetEmuError(f"the link probe took more than {PROBE_TIMEOUT_S:.0f} s") from None
    finally:
        _stop([server])


class NetLauncher:
    """Run the windows of one job on a built :class:`Topology`.

    ``timeout_s`` bounds each window (start-up included in the first); ``pg_timeout_s`` any one
    collective, and a rank's wait for the parent between windows; ``compute_steps`` the
    compute-only calibration.
    """

    def __init__(self, timeout_s: float = 600.0, pg_timeout_s: float = 120.0,
                 compute_steps: int = 5, threads: int = 1) -> None:
        self.timeout_s = timeout_s
        self.pg_timeout_s = pg_timeout_s
        self.compute_steps = compute_steps
        self.threads = threads

    def run(self, windows: Sequence[NetConfig], links: dict[str, LinkSpec], topo: Topology,
            env: dict, on_record: Callable[[NetRecord], None] = lambda r: None,
            started: list[subprocess.Popen] | None = None) -> list[NetRecord]:
        """One record per window, in order (failures as error records). ``on_record`` gets each
        as soon as it exists; ``started`` receives the rank processes (for tests)."""
        hosts = topo.members
        if any(len(hosts) != w.hosts for w in windows):
            raise ValueError(f"the topology has {len(hosts)} hosts; every window needs as many")
        probes: dict[str, dict] = {}
        records: list[NetRecord] = []
        # In dlbench's own folder (dlbench.launch.tempdirs): a run killed outright leaves it to
        # the next dlbench run. The pid in the name is how `dlbench net --cleanup` told a killed
        # run's folder from a live one when it lay in the temporary directory itself.
        with tempfile.TemporaryDirectory(prefix=f"{TMP_PREFIX}{os.getpid()}-",
                                         dir=tempdirs.root()) as tmp:
            out_dir = Path(tmp)
            job = {"windows": [w.to_dict() for w in windows], "out_dir": str(out_dir),
                   "pg_timeout_s": self.pg_timeout_s, "compute_steps": self.compute_steps,
                   "threads": self.threads, "devs": [h.dev for h in hosts]}
            job_path = out_dir / "job.json"
            job_path.write_text(json.dumps(job))
            procs: list[subprocess.Popen] = [] if started is None else started
            logs = []
            timed_out, done = False, 0
            try:
                for h in hosts:
                    log = open(out_dir / f"rank{h.index}.log", "wb")
                    logs.append(log)
                    procs.append(subprocess.Popen(
                        ["ip", "netns", "exec", h.netns, sys.executable, "-m",
                         "dlbench.netemu.host_rank", str(job_path), str(h.index)],
                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                        env=_env({"MASTER_ADDR": hosts[0].address,
                                  "MASTER_PORT": str(MASTER_PORT),
                                  "WORLD_SIZE": str(len(hosts)), "RANK": str(h.index),
                                  "LOCAL_RANK": "0", "GLOO_SOCKET_IFNAME": h.dev})))
                deadline = time.monotonic() + self.timeout_s
                for k, w in enumerate(windows):
                    state = self._wait(procs, lambda: all(
                        (out_dir / f"wait{k}.{h.index}").exists() for h in hosts), deadline)
                    if state != "ready":
                        timed_out = state == "timeout"
                        break
                    link = links[w.link]
                    if topo.link != link:
                        topo.shape(link)
                    if w.link not in probes:
                        probes[w.link] = probe_link(topo)
                    (out_dir / f"go{k}").touch()
                    # Each window has its own time budget, counted from its go.
                    deadline = time.monotonic() + self.timeout_s
                    # Records of the windows before this one are complete: hand them on now.
                    done = self._emit(windows, done, k, out_dir, topo, env, probes, records,
                                      on_record)
                else:
                    # Every window's results are on disk once the last one's files exist; what
                    # the ranks do after that (tearing down gloo and torch) is not waited for.
                    last = len(windows) - 1
                    state = self._wait(procs, lambda: all(
                        (out_dir / f"rank{h.index}.w{last}.json").exists() for h in hosts),
                        deadline)
                    timed_out = state == "timeout"
            finally:
                _stop(procs)   # on success a no-op; on Ctrl-C or an exception, every rank ends
                for log in logs:
                    log.close()
            done = self._emit(windows, done, len(windows), out_dir, topo, env, probes, records,
                              on_record)
            if done < len(windows):
                rank_files = {}
                for p in out_dir.glob("rank*.json"):
                    if ".w" not in p.name:
                        d = json.loads(p.read_text())
                        rank_files[d["rank"]] = d
                tail = "".join(f"--- rank {i} ---\n" + (out_dir / f"rank{i}.log").read_text(
                    errors="replace")[-1500:] for i in range(len(logs)))
                codes = [p.returncode for p in procs]
                out = JobOutcome(max((c for c in codes if c), default=0), None, rank_files,
                                 tail, timed_out)
                rank, kind, msg = out.first_failure()
                errors = {str(r): d.get("error") or "" for r, d in rank_files.items()
                          if not d.get("ok")}
                where = f"rank {rank}: " if rank is not None else ""
                for w in windows[done:]:
                    rec = NetRecord(config=w, env=env, status="error",
                                    error_type=kind or ErrorType.EXCEPTION, error=where + msg,
                                    failed_rank=rank, rank_errors=errors,
                                    probe=probes.get(w.link, {}), topology=topo.describe())
                    records.append(rec)
                    on_record(rec)
        return records

    def _wait(self, procs: Sequence[subprocess.Popen], ready: Callable[[], bool],
              deadline: float) -> str:
        """Until ``ready()`` ('ready'), every rank exits ('exited'), a rank fails and the grace
        passes ('failed'), or the deadline ('timeout')."""
        failed_at = None
        while True:
            if ready():
                return "ready"
            codes = [p.poll() for p in procs]
            if all(c is not None for c in codes):
                return "exited"
            now = time.monotonic()
            if failed_at is None and any(c not in (None, 0) for c in codes):
                failed_at = now
            if failed_at is not None and now - failed_at > FAIL_GRACE_S:
                return "failed"
            if now > deadline:
                return "timeout"
            time.sleep(POLL_S)

    @staticmethod
    def _emit(windows: Sequence[NetConfig], done: int, upto: int, out_dir: Path,
              topo: Topology, env: dict, probes: dict, records: list,
              on_record: Callable[[NetRecord], None]) -> int:
        """Records for windows ``done..upto-1`` whose every rank's file exists; returns the new
        count of windows done (in order: it stops at the first incomplete one)."""
        n = len(topo.members)
        while done < upto:
            paths = [out_dir / f"rank{r}.w{done}.json" for r in range(n)]
            if not all(p.exists() for p in paths):
                break
            rs = [json.loads(p.read_text()) for p in paths]
            rec = _record(windows[done], env, rs, topo, probes.get(windows[done].link, {}))
            records.append(rec)
            on_record(rec)
            done += 1
        return done


def _record(cfg: NetConfig, env: dict, rs: list[dict], topo: Topology, probe: dict
            ) -> NetRecord:
    r0 = rs[0]
    return NetRecord(
        config=cfg, env=env,
        rank_step_times_s=tuple(tuple(d["step_times_s"]) for d in rs),
        rank_compute_times_s=tuple(tuple(d["compute_times_s"]) for d in rs),
        rank_tx_bytes=tuple(d["tx_bytes"] for d in rs),
        rank_rx_bytes=tuple(d["rx_bytes"] for d in rs),
        rank_samples_per_step=tuple(d["samples_per_step"] for d in rs),
        losses=tuple(r0["losses"]), step_end_s=tuple(r0["step_end_s"]),
        param_count=r0["param_count"], grad_bytes=r0["grad_bytes"],
        shard_bytes=tuple(r0["shard_bytes"]) if cfg.strategy == "ps" else (),
        first_step_s=max(d["first_step_s"] for d in rs), probe=probe,
        topology={**topo.describe(), "link": {"name": cfg.link, "rate_bps": cfg.rate_bps,
                                              "delay_s": cfg.delay_s}}, unit=r0["unit"])

"""``dlbench monitor``: sample the GPUs in the foreground, one line per GPU per interval.

The CIFAR-10 framework study logged GPU load, memory and power every 5 s to CSV while training ran;
this does the same for any workload (``--interval 5``), with clocks, temperature, energy and
throttle reasons.
"""

from __future__ import annotations

import datetime as _dt
import time
from typing import Any, Iterator

from dlbench.telemetry.sampler import warn_once
from dlbench.telemetry.sources import (
    GPU_FIELDS,
    HOST_FIELDS,
    HostSource,
    NvmlSource,
    SourceUnavailable,
    reason_names,
)

MIB = 1024 ** 2
MONITOR_GPU_COLUMNS = ("time", "t_s", "gpu", "util_gpu_pct", "util_mem_pct", "mem_used_mib",
                       "mem_total_mib", "power_w", "energy_j", "temp_c", "sm_clock_mhz",
                       "mem_clock_mhz", "throttle", "pcie_tx_mbs", "pcie_rx_mbs")
MONITOR_HOST_COLUMNS = ("time", "t_s", "cpu_pct", "mem_used_mib")


class Monitor:
    """The GPUs NVML lists (or the host, without NVML), read on demand."""

    def __init__(self, gpus: list[int] | None = None) -> None:
        self.nvml: NvmlSource | None = None
        self.host: HostSource | None = None
        try:
            sel = "all" if gpus is None else [{"index": i, "nvml_index": i} for i in gpus]
            self.nvml = NvmlSource.open(sel)
        except SourceUnavailable as exc:
            warn_once(f"{exc}; sampling the host instead")
            self.host = HostSource()
        self._e0: dict[int, int] = {}

    @property
    def columns(self) -> tuple[str, ...]:
        return MONITOR_GPU_COLUMNS if self.nvml else MONITOR_HOST_COLUMNS

    def sample(self, t_s: float, slow: bool = True) -> list[dict[str, Any]]:
        now = _dt.datetime.now().isoformat(timespec="milliseconds")
        if self.nvml is None:
            v = dict(zip(HOST_FIELDS, self.host.read()))
            return [{"time": now, "t_s": round(t_s, 3), "cpu_pct": v["cpu_pct"],
                     "mem_used_mib": _mib(v["mem_used_bytes"])}]
        out = []
        for g in self.nvml.gpus:
            v = dict(zip(GPU_FIELDS, self.nvml.read(g, slow)))
            e = v["energy_mj"]
            if e is not None:
                e0 = self._e0.setdefault(g.index, e)
                # modulo 2**64: the counter is unsigned 64-bit and may wrap
                e = ((e - e0) % 2 ** 64) / 1e3
            out.append({
                "time": now, "t_s": round(t_s, 3), "gpu": g.index,
                "util_gpu_pct": v["util_gpu_pct"], "util_mem_pct": v["util_mem_pct"],
                "mem_used_mib": _mib(v["mem_used_bytes"]), "mem_total_mib": _mib(g.memory_total_bytes),
                "power_w": None if v["power_w"] is None else round(v["power_w"], 2),
                "energy_j": None if e is None else round(e, 3), "temp_c": v["temp_c"],
                "sm_clock_mhz": v["sm_clock_mhz"], "mem_clock_mhz": v["mem_clock_mhz"],
                "throttle": "|".join(reason_names(v["throttle_reasons"]))
                if v["throttle_reasons"] is not None else None,
                "pcie_tx_mbs": None if v["pcie_tx_kbs"] is None else round(v["pcie_tx_kbs"] / 1e3, 1),
                "pcie_rx_mbs": None if v["pcie_rx_kbs"] is None else round(v["pcie_rx_kbs"] / 1e3, 1),
            })
        return out

    def ticks(self, interval_s: float, duration_s: float | None) -> Iterator[list[dict[str, Any]]]:
        """Samples every ``interval_s`` until ``duration_s`` (or forever; Ctrl-C stops it)."""
        start = time.perf_counter()
        k = 0
        while True:
            t = time.perf_counter() - start
            if duration_s is not None and t > duration_s + 1e-9:
                return
            # PCIe counters cost ~20 ms per call: at most once a second.
            yield self.sample(t, slow=interval_s >= 1 or k % max(1, round(1 / interval_s)) == 0)
            k += 1
            time.sleep(max(0.0, start + k * interval_s - time.perf_counter()))

    def close(self) -> None:
        if self.nvml is not None:
            self.nvml.close()


def _mib(b: Any) -> float | None:
    return None if b is None else round(b / MIB, 1)


def format_line(row: dict[str, Any]) -> str:
    """One human line of a monitor row."""
    def f(key: str, fmt: str, unit: str = "") -> str:
        v = row.get(key)
        return "-" if v is None else f"{v:{fmt}}{unit}"

    if "gpu" not in row:
        return (f"{row['time'][11:19]} host cpu {f('cpu_pct', '5.1f', '%')} "
                f"mem {f('mem_used_mib', '.0f', ' MiB')}")
    thr = row.get("throttle") or ""
    thr = "|".join(r for r in thr.split("|") if r and r != "gpu_idle")
    return (f"{row['time'][11:19]} gpu{row['gpu']} util {f('util_gpu_pct', '3d', '%')} "
            f"mem {f('mem_used_mib', '.0f')}/{f('mem_total_mib', '.0f', ' MiB')} "
            f"{f('power_w', '6.1f', ' W')} {f('energy_j', '.1f', ' J')} "
            f"{f('temp_c', 'd', ' C')} sm {f('sm_clock_mhz', 'd', ' MHz')}"
            + (f" throttle {thr}" if thr else ""))

"""What a sample reads: NVML per GPU (nvidia-ml-py's ``pynvml``), and the host (psutil).

Both are optional and imported lazily: without them a source is unavailable and says why, and
nothing raises. A field NVML does not offer on a device (NOT_SUPPORTED, or a function missing
from an old nvidia-ml-py) is read once, then left out of every later sample, so a tick costs only
the calls that answer.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

# Clock-event ("throttle") reason bits, from nvml.h (nvmlClocksEventReason*); stable across
# driver versions, so they are defined here rather than read from whichever pynvml is installed.
REASON_BITS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "hw_power_brake": 0x80,
    "display_clocks": 0x100,
}
# What a user acts on: the card held its clocks down for power, for heat, or by a hardware
# slowdown. Idle, application-clock settings, sync boost and display clocks are not throttling
# of a busy card.
THROTTLE_GROUPS: dict[str, int] = {
    "power": REASON_BITS["sw_power_cap"] | REASON_BITS["hw_power_brake"],
    "thermal": REASON_BITS["sw_thermal"] | REASON_BITS["hw_thermal"],
    "clocks": REASON_BITS["hw_slowdown"],
}

NVML_ERROR_NOT_SUPPORTED = 3          # nvml.h: NVML_ERROR_NOT_SUPPORTED
NVML_ERROR_FUNCTION_NOT_FOUND = 13    # nvml.h: the driver lacks the entry point
NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2  # nvml.h: nvmlClockType_t
NVML_TEMPERATURE_GPU = 0
NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES = 0, 1
# Cumulative NVLink data counters in KiB; scopeId UINT_MAX sums every link (nvml.h).
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139
NVML_SCOPE_ALL_LINKS = 0xFFFFFFFF

# Column order of one GPU sample (after the timestamp). Units in the names.
GPU_FIELDS = ("power_w", "energy_mj", "util_gpu_pct", "util_mem_pct", "mem_used_bytes",
              "temp_c", "sm_clock_mhz", "mem_clock_mhz", "throttle_reasons", "pcie_tx_kbs",
              "pcie_rx_kbs", "nvlink_tx_kib", "nvlink_rx_kib")
# PCIe counters are measured by the driver over a 20 ms interval inside the call, so each costs
# ~20 ms of the sampler's time: they are read at most every SLOW_INTERVAL_S, not every tick.
SLOW_FIELDS = ("pcie_tx_kbs", "pcie_rx_kbs")
HOST_FIELDS = ("cpu_pct", "proc_cpu_pct", "rss_bytes", "mem_used_bytes")


class SourceUnavailable(RuntimeError):
    """A source cannot sample on this machine; the message says why and what to install."""


def _unsupported(exc: BaseException) -> bool:
    if isinstance(exc, (AttributeError, NotImplementedError)):
        return True  # a function or constant this nvidia-ml-py lacks
    return getattr(exc, "value", None) in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace").strip("\x00").strip()
    return str(value)


@dataclass
class GpuHandle:
    """One GPU being sampled: its NVML handle and the fields it answers."""

    index: int                      # the index the caller asked for (torch's, where it applies)
    nvml_index: int | None
    uuid: str | None
    name: str | None
    memory_total_bytes: int | None
    power_limit_w: float | None
    handle: Any
    dead: set[str] = field(default_factory=set)


class NvmlSource:
    """Per-GPU readings from NVML. :meth:`open` initialises NVML and finds the devices; the
    sampler thread calls :meth:`read`; :meth:`close` shuts NVML down."""

    def __init__(self, nvml: Any, gpus: list[GpuHandle]) -> None:
        self.nvml = nvml
        self.gpus = gpus
        self._reads: dict[str, Callable[[Any], Any]] = self._readers()

    @classmethod
    def open(cls, selectors: Sequence[dict[str, Any]] | str = "all") -> "NvmlSource":
        """Initialise NVML for the GPUs named by ``selectors`` (``"all"`` or dicts with ``index``
        and, where known, ``uuid``; a UUID is matched first, as CUDA_VISIBLE_DEVICES may hide
        devices so torch's indices are not NVML's)."""
        try:
            import pynvml  # optional (the gpu extra): without it there is no GPU telemetry
        except Exception as exc:
            raise SourceUnavailable("nvidia-ml-py is not installed (pip install 'dlbench[gpu]' "
                                    f"or nvidia-ml-py): {exc}") from None
        try:
            pynvml.nvmlInit()
        except Exception as exc:
            raise SourceUnavailable(f"NVML could not start (no NVIDIA driver?): {exc}") from None
        try:
            gpus = cls._find(pynvml, selectors)
        except Exception as exc:
            _shutdown(pynvml)
            raise SourceUnavailable(f"NVML could not list the GPUs: {exc}") from None
        if not gpus:
            _shutdown(pynvml)
            raise SourceUnavailable("NVML found none of the GPUs to sample")
        return cls(pynvml, gpus)

    @staticmethod
    def _find(nvml: Any, selectors: Sequence[dict[str, Any]] | str) -> list[GpuHandle]:
        if selectors == "all":  # every device NVML lists, by NVML's own index
            selectors = [{"index": i, "nvml_index": i} for i in range(int(nvml.nvmlDeviceGetCount()))]
        out = []
        for sel in selectors:
            index = int(sel.get("index", 0))
            nvml_index = sel.get("nvml_index")
            handle = None
            if sel.get("uuid"):
                try:
                    handle = nvml.nvmlDeviceGetHandleByUUID(sel["uuid"])
                except Exception:
                    handle = None
            if handle is None:
                if nvml_index is None:
                    nvml_index = _nvml_index(index)
                if nvml_index is None:
                    continue  # hidden behind a UUID or MIG name we could not resolve: never guess
                handle = nvml.nvmlDeviceGetHandleByIndex(nvml_index)
            out.append(GpuHandle(
                index=index, nvml_index=nvml_index,
                uuid=_text(_quiet(lambda h=handle: nvml.nvmlDeviceGetUUID(h))),
                name=_text(_quiet(lambda h=handle: nvml.nvmlDeviceGetName(h))),
                memory_total_bytes=_quiet(lambda h=handle: int(nvml.nvmlDeviceGetMemoryInfo(h).total)),
                power_limit_w=_quiet(lambda h=handle: nvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1e3),
                handle=handle))
        return out

    def _readers(self) -> dict[str, Callable[[Any], Any]]:
        n = self.nvml

        def throttle(h: Any) -> int:
            # nvidia-ml-py >= 12.535 names them "clocks event reasons"; the old name is deprecated.
            fn = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
                n.nvmlDeviceGetCurrentClocksThrottleReasons
            return int(fn(h))

        return {
            "power_w": lambda h: n.nvmlDeviceGetPowerUsage(h) / 1e3,        # milliwatts
            "energy_mj": lambda h: int(n.nvmlDeviceGetTotalEnergyConsumption(h)),
            "util": lambda h: n.nvmlDeviceGetUtilizationRates(h),
            "mem_used_bytes": lambda h: int(n.nvmlDeviceGetMemoryInfo(h).used),
            "temp_c": lambda h: n.nvmlDeviceGetTemperature(h, NVML_TEMPERATURE_GPU),
            "sm_clock_mhz": lambda h: n.nvmlDeviceGetClockInfo(h, NVML_CLOCK_SM),
            "mem_clock_mhz": lambda h: n.nvmlDeviceGetClockInfo(h, NVML_CLOCK_MEM),
            "throttle_reasons": throttle,
            "pcie_tx_kbs": lambda h: n.nvmlDeviceGetPcieThroughput(h, NVML_PCIE_UTIL_TX_BYTES),
            "pcie_rx_kbs": lambda h: n.nvmlDeviceGetPcieThroughput(h, NVML_PCIE_UTIL_RX_BYTES),
            "nvlink": lambda h: n.nvmlDeviceGetFieldValues(h, [
                (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, NVML_SCOPE_ALL_LINKS),
                (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, NVML_SCOPE_ALL_LINKS)]),
        }

    def read(self, gpu: GpuHandle, slow: bool = True) -> tuple[Any, ...]:
        """One sample of ``gpu`` in :data:`GPU_FIELDS` order (None for a field that did not
        answer). ``slow=False`` skips the PCIe counters."""
        values: dict[str, Any] = {}
        for key, fn in self._reads.items():
            if key in gpu.dead or (not slow and key in SLOW_FIELDS):
                continue
            try:
                v = fn(gpu.handle)
            except Exception as exc:
                if _unsupported(exc):
                    gpu.dead.add(key)
                continue
            if key == "util":
                values["util_gpu_pct"], values["util_mem_pct"] = int(v.gpu), int(v.memory)
            elif key == "nvlink":
                tx, rx = v[0], v[1]
                if getattr(tx, "nvmlReturn", 0) != 0 and getattr(rx, "nvmlReturn", 0) != 0:
                    gpu.dead.add(key)  # no NVLink on this device
                    continue
                values["nvlink_tx_kib"] = int(tx.value.ullVal) if tx.nvmlReturn == 0 else None
                values["nvlink_rx_kib"] = int(rx.value.ullVal) if rx.nvmlReturn == 0 else None
            else:
                values[key] = v
        return tuple(values.get(k) for k in GPU_FIELDS)

    def describe(self) -> list[dict[str, Any]]:
        return [{"index": g.index, "nvml_index": g.nvml_index, "uuid": g.uuid, "name": g.name,
                 "memory_total_bytes": g.memory_total_bytes, "power_limit_w": g.power_limit_w}
                for g in self.gpus]

    def unsupported(self) -> list[list[str]]:
        return [sorted(g.dead) for g in self.gpus]

    def close(self) -> None:
        _shutdown(self.nvml)


class HostSource:
    """The host: system CPU %, this process's CPU % and resident size, system memory used."""

    def __init__(self) -> None:
        try:
            import psutil  # where it is missing, telemetry goes on without the host's figures
        except Exception as exc:
            raise SourceUnavailable(f"psutil is not installed (pip install psutil): {exc}") from None
        self._psutil = psutil
        self._proc = psutil.Process()
        # cpu_percent measures since the previous call: prime both so the first sample is real.
        psutil.cpu_percent(None)
        self._proc.cpu_percent(None)

    def read(self) -> tuple[Any, ...]:
        p = self._psutil
        return (_quiet(lambda: p.cpu_percent(None)), _quiet(lambda: self._proc.cpu_percent(None)),
                _quiet(lambda: int(self._proc.memory_info().rss)),
                _quiet(lambda: int(p.virtual_memory().used)))


def _quiet(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception:
        return None


def _nvml_index(torch_index: int) -> int | None:
    """NVML's index of torch's device ``torch_index``, through CUDA_VISIBLE_DEVICES."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return torch_index
    parts = [p.strip() for p in visible.split(",") if p.strip()]
    if torch_index < len(parts) and parts[torch_index].isdigit():
        return int(parts[torch_index])
    return None


def _shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:
        pass


def reason_names(bits: int) -> list[str]:
    """The names of the reason bits set in ``bits``."""
    return [name for name, bit in REASON_BITS.items() if bits & bit]

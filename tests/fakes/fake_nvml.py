"""A fake ``pynvml`` module for exercising NVML code paths without a GPU.

Build one with :func:`make_fake_pynvml` and install it with
``monkeypatch.setitem(sys.modules, "pynvml", fake)``. Only the calls the project
uses are provided; values follow NVML's units (milliwatts, millijoules, MHz, bytes).

The sampled readings of a :class:`FakeGpu` can be scripted: a field holds a plain
value, a list (each read takes the next item; the last one repeats: a power ramp, a
throttle event, an energy counter that wraps) or a callable (called on every read,
e.g. a counter driven by the clock). ``call_delay_s`` makes every reading slow, and a
field named in ``unsupported`` raises NOT_SUPPORTED as NVML does on a device without it.
"""

from __future__ import annotations

import time
import types
from dataclasses import dataclass, field
from typing import Any

# Clock and sensor ids as defined by NVML (nvml.h).
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_CLOCK_VIDEO = 3
NVML_TEMPERATURE_GPU = 0
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139
NVML_ERROR_UNKNOWN = 999
NVML_ERROR_NOT_SUPPORTED = 3
# Clock-event reason bits (nvmlClocksEventReason*).
REASON_GPU_IDLE = 0x1
REASON_SW_POWER_CAP = 0x4
REASON_HW_SLOWDOWN = 0x8
REASON_SW_THERMAL = 0x20
REASON_HW_THERMAL = 0x40


class NVMLError(Exception):
    """Mirror of ``pynvml.NVMLError`` so callers can catch the fake's failures."""

    def __init__(self, message: str = "", value: int = NVML_ERROR_UNKNOWN) -> None:
        super().__init__(message)
        self.value = value


class NVMLError_NotSupported(NVMLError):
    def __init__(self, message: str = "Not Supported") -> None:
        super().__init__(message, NVML_ERROR_NOT_SUPPORTED)


@dataclass
class FakeGpu:
    """One device as NVML would report it."""

    name: str = "NVIDIA H200"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    pci_bus_id: str = "00000000:18:00.0"
    memory_total_bytes: int = 143_771_336_704
    power_limit_mw: int = 700_000
    power_usage_mw: int = 120_000
    max_sm_clock_mhz: int = 1980
    max_mem_clock_mhz: int = 3201
    sm_clock_mhz: int = 1980
    mem_clock_mhz: int = 3201
    temperature_c: int = 35
    gpu_util_pct: Any = 0
    energy_mj: Any = 0
    mem_util_pct: Any = 0
    memory_used_bytes: Any = 0
    throttle_reasons: Any = 0
    pcie_tx_kbs: Any = 0
    pcie_rx_kbs: Any = 0
    nvlink_tx_kib: Any = None     # None: no NVLink (the field answers NOT_SUPPORTED)
    nvlink_rx_kib: Any = None
    call_delay_s: float = 0.0     # every sampled reading sleeps this long (a slow driver)
    unsupported: set[str] = field(default_factory=set)
    reads: dict[str, int] = field(default_factory=dict)

    def value(self, name: str) -> Any:
        """The next scripted value of field ``name`` (see the module docstring)."""
        if name in self.unsupported:
            raise NVMLError_NotSupported()
        if self.call_delay_s:
            time.sleep(self.call_delay_s)
        v = getattr(self, name)
        n = self.reads.get(name, 0)
        self.reads[name] = n + 1
        if callable(v):
            return v()
        if isinstance(v, list):
            return v[min(n, len(v) - 1)]
        return v


@dataclass
class FakeNvmlState:
    """What the fake saw: lets tests assert that NVML was shut down."""

    gpus: list[FakeGpu]
    driver: str = "580.95.05"
    fail_init: bool = False
    init_calls: int = 0
    shutdown_calls: int = 0
    handles: list[int] = field(default_factory=list)


def _gpu(state: FakeNvmlState, handle: Any) -> FakeGpu:
    if not isinstance(handle, int) or not 0 <= handle < len(state.gpus):
        raise NVMLError("invalid handle")
    return state.gpus[handle]


def make_fake_pynvml(
    gpus: list[FakeGpu] | None = None,
    driver: str = "580.95.05",
    fail_init: bool = False,
) -> types.ModuleType:
    """Return a module object that quacks like ``pynvml`` for ``gpus``.

    The module's ``state`` attribute is a :class:`FakeNvmlState` recording calls.
    With ``fail_init`` the module imports but ``nvmlInit`` raises, as on a machine
    with the package installed and no driver.
    """
    state = FakeNvmlState(gpus=list(gpus or []), driver=driver, fail_init=fail_init)
    mod = types.ModuleType("pynvml")
    mod.state = state  # type: ignore[attr-defined]
    mod.NVMLError = NVMLError  # type: ignore[attr-defined]
    mod.NVMLError_NotSupported = NVMLError_NotSupported  # type: ignore[attr-defined]
    mod.NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED  # type: ignore[attr-defined]
    mod.NVML_PCIE_UTIL_TX_BYTES = NVML_PCIE_UTIL_TX_BYTES  # type: ignore[attr-defined]
    mod.NVML_PCIE_UTIL_RX_BYTES = NVML_PCIE_UTIL_RX_BYTES  # type: ignore[attr-defined]
    mod.NVML_CLOCK_GRAPHICS = NVML_CLOCK_GRAPHICS  # type: ignore[attr-defined]
    mod.NVML_CLOCK_SM = NVML_CLOCK_SM  # type: ignore[attr-defined]
    mod.NVML_CLOCK_MEM = NVML_CLOCK_MEM  # type: ignore[attr-defined]
    mod.NVML_CLOCK_VIDEO = NVML_CLOCK_VIDEO  # type: ignore[attr-defined]
    mod.NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU  # type: ignore[attr-defined]

    def nvmlInit() -> None:
        state.init_calls += 1
        if state.fail_init:
            raise NVMLError("NVML Shared Library Not Found")

    def nvmlShutdown() -> None:
        state.shutdown_calls += 1

    def nvmlDeviceGetHandleByIndex(index: int) -> int:
        if not 0 <= index < len(state.gpus):
            raise NVMLError("invalid index")
        state.handles.append(index)
        return index

    def nvmlDeviceGetMaxClockInfo(handle: int, clock: int) -> int:
        gpu = _gpu(state, handle)
        return {NVML_CLOCK_SM: gpu.max_sm_clock_mhz, NVML_CLOCK_GRAPHICS: gpu.max_sm_clock_mhz,
                NVML_CLOCK_MEM: gpu.max_mem_clock_mhz}[clock]

    def nvmlDeviceGetClockInfo(handle: int, clock: int) -> int:
        gpu = _gpu(state, handle)
        name = "mem_clock_mhz" if clock == NVML_CLOCK_MEM else "sm_clock_mhz"
        return gpu.value(name)

    def nvmlDeviceGetMemoryInfo(handle: int) -> types.SimpleNamespace:
        gpu = _gpu(state, handle)
        total = gpu.memory_total_bytes
        used = gpu.value("memory_used_bytes")
        return types.SimpleNamespace(total=total, free=total - used, used=used)

    def nvmlDeviceGetHandleByUUID(uuid: Any) -> int:
        text = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
        for i, gpu in enumerate(state.gpus):
            if gpu.uuid == text:
                state.handles.append(i)
                return i
        raise NVMLError("not found", 6)

    def nvmlDeviceGetPcieThroughput(handle: int, counter: int) -> int:
        gpu = _gpu(state, handle)
        return gpu.value("pcie_tx_kbs" if counter == NVML_PCIE_UTIL_TX_BYTES else "pcie_rx_kbs")

    def nvmlDeviceGetFieldValues(handle: int, field_ids: list[Any]) -> list[Any]:
        gpu = _gpu(state, handle)
        out = []
        for fid in field_ids:
            fid = fid[0] if isinstance(fid, tuple) else fid
            name = {NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: "nvlink_tx_kib",
                    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: "nvlink_rx_kib"}.get(fid)
            v = gpu.value(name) if name else None
            out.append(types.SimpleNamespace(
                fieldId=fid, nvmlReturn=0 if v is not None else NVML_ERROR_NOT_SUPPORTED,
                value=types.SimpleNamespace(ullVal=v or 0)))
        return out

    functions = {
        "nvmlInit": nvmlInit,
        "nvmlShutdown": nvmlShutdown,
        "nvmlSystemGetDriverVersion": lambda: state.driver,
        "nvmlDeviceGetCount": lambda: len(state.gpus),
        "nvmlDeviceGetHandleByIndex": nvmlDeviceGetHandleByIndex,
        "nvmlDeviceGetName": lambda h: _gpu(state, h).name,
        "nvmlDeviceGetUUID": lambda h: _gpu(state, h).uuid,
        # Older nvidia-ml-py returns bytes here; callers must cope with both.
        "nvmlDeviceGetPciInfo": lambda h: types.SimpleNamespace(
            busId=_gpu(state, h).pci_bus_id.encode()
        ),
        "nvmlDeviceGetPowerManagementLimit": lambda h: _gpu(state, h).power_limit_mw,
        "nvmlDeviceGetEnforcedPowerLimit": lambda h: _gpu(state, h).power_limit_mw,
        "nvmlDeviceGetPowerUsage": lambda h: _gpu(state, h).value("power_usage_mw"),
        "nvmlDeviceGetTotalEnergyConsumption": lambda h: _gpu(state, h).value("energy_mj"),
        "nvmlDeviceGetTemperature": lambda h, sensor: _gpu(state, h).value("temperature_c"),
        "nvmlDeviceGetUtilizationRates": lambda h: types.SimpleNamespace(
            gpu=_gpu(state, h).value("gpu_util_pct"), memory=_gpu(state, h).value("mem_util_pct")
        ),
        "nvmlDeviceGetCurrentClocksEventReasons":
            lambda h: _gpu(state, h).value("throttle_reasons"),
        "nvmlDeviceGetHandleByUUID": nvmlDeviceGetHandleByUUID,
        "nvmlDeviceGetPcieThroughput": nvmlDeviceGetPcieThroughput,
        "nvmlDeviceGetFieldValues": nvmlDeviceGetFieldValues,
        "nvmlDeviceGetMaxClockInfo": nvmlDeviceGetMaxClockInfo,
        "nvmlDeviceGetClockInfo": nvmlDeviceGetClockInfo,
        "nvmlDeviceGetMemoryInfo": nvmlDeviceGetMemoryInfo,
    }
    for name, fn in functions.items():
        setattr(mod, name, fn)
    return mod

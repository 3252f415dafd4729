"""A fake ``pynvml`` module for exercising NVML code paths without a GPU.

Build one with :func:`make_fake_pynvml` and install it with
``monkeypatch.setitem(sys.modules, "pynvml", fake)``. Only the calls the project
uses are provided; values follow NVML's units (milliwatts, MHz, bytes).
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any

# Clock and sensor ids as defined by NVML (nvml.h).
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_CLOCK_VIDEO = 3
NVML_TEMPERATURE_GPU = 0


class NVMLError(Exception):
    """Mirror of ``pynvml.NVMLError`` so callers can catch the fake's failures."""


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
    gpu_util_pct: int = 0
    energy_mj: int = 0


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
        return {NVML_CLOCK_SM: gpu.sm_clock_mhz, NVML_CLOCK_GRAPHICS: gpu.sm_clock_mhz,
                NVML_CLOCK_MEM: gpu.mem_clock_mhz}[clock]

    def nvmlDeviceGetMemoryInfo(handle: int) -> types.SimpleNamespace:
        total = _gpu(state, handle).memory_total_bytes
        return types.SimpleNamespace(total=total, free=total, used=0)

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
        "nvmlDeviceGetPowerUsage": lambda h: _gpu(state, h).power_usage_mw,
        "nvmlDeviceGetTotalEnergyConsumption": lambda h: _gpu(state, h).energy_mj,
        "nvmlDeviceGetTemperature": lambda h, sensor: _gpu(state, h).temperature_c,
        "nvmlDeviceGetUtilizationRates": lambda h: types.SimpleNamespace(
            gpu=_gpu(state, h).gpu_util_pct, memory=0
        ),
        "nvmlDeviceGetMaxClockInfo": nvmlDeviceGetMaxClockInfo,
        "nvmlDeviceGetClockInfo": nvmlDeviceGetClockInfo,
        "nvmlDeviceGetMemoryInfo": nvmlDeviceGetMemoryInfo,
    }
    for name, fn in functions.items():
        setattr(mod, name, fn)
    return mod

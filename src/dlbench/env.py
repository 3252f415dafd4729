"""Capture of the software and hardware environment a benchmark ran in.

Every result record carries the dict returned by :func:`capture_environment`, so a
number can always be traced back to the machine, driver and library versions that
produced it. :func:`identity` and :func:`differences` decide whether two results are
comparable at all, and :func:`env_key` names that identity in the store; :func:`device_label`
and :func:`file_tag` name an environment in tables and file names.

Capture never raises: any field that cannot be determined is ``None``. NVML
(``pynvml`` from the ``nvidia-ml-py`` package) is optional; without it the GPU details
come from ``torch.cuda`` and ``nvidia-smi`` alone.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import re
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, TypeVar

SCHEMA_VERSION = 1

# Distributions whose versions change benchmark numbers (kernels, defaults, model code).
# jax, jaxlib, flax, optax: read from the installed metadata, never imported here (importing
# JAX would start its backend); a JAX record adds the XLA backend it ran on (env["jax"]).
PACKAGES = ("torch", "torchvision", "timm", "transformers", "numpy", "nvidia-ml-py", "dlbench",
            "jax", "jaxlib", "flax", "optax", "torchao")

# Variables read verbatim, and prefixes of whole families of tuning knobs.
ENV_VAR_NAMES = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_MAX_CONNECTIONS", "OMP_NUM_THREADS")
ENV_VAR_PREFIXES = ("NCCL_", "TORCH_", "TORCHINDUCTOR_", "NVSHMEM_", "PYTORCH_", "XLA_", "JAX_")

NVIDIA_SMI_TIMEOUT_S = 10.0

# nvidia-smi underlines table headers with terminal escapes even when piped.
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

# Order of the fields in identity() and hence in differences().
_IDENTITY_FIELDS = (
    "accelerator",
    "gpu_count",
    "gpu_names",
    "driver",
    "cuda_runtime",
    "cudnn",
    "torch",
    "cpu_model",
)
# On CPU-only environments the thread budget decides throughput as much as the chip.
_CPU_IDENTITY_FIELDS = ("cpu_affinity_cores", "torch_threads")

T = TypeVar("T")


# --------------------------------------------------------------------------- helpers


def _safe(fn: Callable[[], T], default: T | None = None) -> T | None:
    """Return ``fn()``, or ``default`` if it raises anything (capture must never fail)."""
    try:
        return fn()
    except Exception:
        return default


def _text(value: Any) -> str | None:
    """Decode NVML strings, which are ``bytes`` in some nvidia-ml-py versions."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace").strip("\x00").strip()
    return str(value).strip()


def _proc_field(path: str, key: str) -> str | None:
    """Value of the first ``key: value`` line in a /proc file, or None."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                name, sep, value = line.partition(":")
                if sep and name.strip() == key:
                    return value.strip()
    except OSError:
        return None
    return None


def _run_nvidia_smi(*args: str) -> str | None:
    """stdout of ``nvidia-smi ARGS`` or None when absent, failing or hung."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        proc = subprocess.run(
            [exe, *args],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    out = _ANSI_ESCAPE.sub("", proc.stdout).strip()
    return out or None


# ------------------------------------------------------------------ host and python


def _cpu_model() -> str | None:
    model = _proc_field("/proc/cpuinfo", "model name")
    if model:
        return model
    # Non-x86 Linux and other OSes have no "model name" line.
    return platform.processor() or None


def _cpu_affinity_cores() -> int | None:
    if not hasattr(os, "sched_getaffinity"):
        return None
    return _safe(lambda: len(os.sched_getaffinity(0)))


def _memory_total_bytes() -> int | None:
    value = _proc_field("/proc/meminfo", "MemTotal")  # e.g. "131891768 kB"
    if not value:
        return None
    parts = value.split()
    if not parts or not parts[0].isdigit():
        return None
    scale = 1024 if len(parts) > 1 and parts[1].lower() == "kb" else 1
    return int(parts[0]) * scale


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    except Exception:
        return None


def _package_versions(torch_module: Any) -> dict[str, str | None]:
    versions = {name: _package_version(name) for name in PACKAGES}
    # The imported module's version keeps the build suffix ("+cu130", "+cpu") that
    # wheel metadata often drops, and source builds may have no metadata at all.
    if torch_module is not None:
        versions["torch"] = _safe(lambda: str(torch_module.__version__)) or versions["torch"]
    return versions


def _env_vars() -> dict[str, str]:
    selected = {
        name: value
        for name, value in os.environ.items()
        if name in ENV_VAR_NAMES or name.startswith(ENV_VAR_PREFIXES)
    }
    return dict(sorted(selected.items()))


def _host_info() -> dict[str, Any]:
    return {
        "hostname": _safe(socket.gethostname),
        "os": _safe(platform.platform),
        "kernel": _safe(platform.release),
        "python": _safe(platform.python_version),
        "python_impl": _safe(platform.python_implementation),
        "cpu_model": _safe(_cpu_model),
        "cpu_logical_cores": _safe(os.cpu_count),
        "cpu_affinity_cores": _cpu_affinity_cores(),
        "memory_total_bytes": _safe(_memory_total_bytes),
    }


# ---------------------------------------------------------------------------- torch


def _import_torch() -> Any:
    try:
        import torch  # captured where it can be: an environment without torch is still described
    except Exception:
        return None
    return torch


def _format_nccl(version: Any) -> str | None:
    """Format torch.cuda.nccl.version() as ``"2.28.9"``.

    Recent torch returns a tuple (major, minor, patch[, suffix]); old releases
    returned NCCL's integer code (major*10000 + minor*100 + patch since 2.9).
    """
    if version is None:
        return None
    if isinstance(version, tuple | list):
        numbers = ".".join(str(part) for part in version[:3])
        suffix = f"{version[3]}" if len(version) > 3 and version[3] else ""
        return numbers + suffix
    if isinstance(version, int):
        if version >= 10000:
            major, rest = divmod(version, 10000)
        else:
            major, rest = divmod(version, 1000)
        minor, patch = divmod(rest, 100)
        return f"{major}.{minor}.{patch}"
    return str(version)


def _cudnn_version(torch: Any) -> int | None:
    version = _safe(torch.backends.cudnn.version)
    return int(version) if isinstance(version, int) else None


def _torch_info(torch: Any, cuda_available: bool) -> dict[str, Any]:
    if torch is None:
        return dict.fromkeys(("torch_threads", "torch_git", "cuda_runtime", "cudnn", "nccl"))
    nccl = None
    if cuda_available:
        nccl = _format_nccl(_safe(torch.cuda.nccl.version))
    return {
        "torch_threads": _safe(torch.get_num_threads),
        "torch_git": _safe(lambda: torch.version.git_version),
        "cuda_runtime": _safe(lambda: torch.version.cuda),
        "cudnn": _cudnn_version(torch),
        "nccl": nccl,
    }


def _cuda_available(torch: Any) -> bool:
    if torch is None:
        return False
    return bool(_safe(torch.cuda.is_available, False))


def _torch_uuid(props: Any) -> str | None:
    raw = _safe(lambda: props.uuid)
    if raw is None:
        return None
    uuid = str(raw).strip()
    if not uuid:
        return None
    # torch prints the bare UUID; NVML and nvidia-smi prefix it with "GPU-".
    return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


def _torch_pci_bus_id(props: Any) -> str | None:
    try:
        domain, bus, device = props.pci_domain_id, props.pci_bus_id, props.pci_device_id
    except AttributeError:
        return None
    if not all(isinstance(part, int) for part in (domain, bus, device)):
        return None
    # Same layout as NVML's busId so the two can be matched.
    return f"{domain:08X}:{bus:02X}:{device:02X}.0"


def _torch_gpu(torch: Any, index: int) -> dict[str, Any]:
    gpu: dict[str, Any] = {
        "index": index,
        "name": None,
        "uuid": None,
        "memory_total_bytes": None,
        "compute_capability": None,
        "sm_count": None,
        "pci_bus_id": None,
        "power_limit_w": None,
        "max_sm_clock_mhz": None,
        "max_mem_clock_mhz": None,
    }
    props = _safe(lambda: torch.cuda.get_device_properties(index))
    if props is None:
        return gpu
    major, minor = _safe(lambda: props.major), _safe(lambda: props.minor)
    gpu.update(
        name=_safe(lambda: str(props.name)),
        uuid=_torch_uuid(props),
        memory_total_bytes=_safe(lambda: int(props.total_memory)),
        compute_capability=f"{major}.{minor}" if major is not None and minor is not None else None,
        sm_count=_safe(lambda: int(props.multi_processor_count)),
        pci_bus_id=_torch_pci_bus_id(props),
    )
    return gpu


# ----------------------------------------------------------------------------- NVML


@contextmanager
def _nvml_session() -> Iterator[Any]:
    """Yield an initialised ``pynvml`` module, or None when NVML is unusable.

    Imported lazily because nvidia-ml-py is an optional dependency; shut down on
    every exit path so repeated captures do not leak NVML references.
    """
    try:
        import pynvml  # optional (the gpu extra): without it the capture has no NVML fields
    except Exception:
        yield None
        return
    try:
        pynvml.nvmlInit()
    except Exception:
        yield None
        return
    try:
        yield pynvml
    finally:
        _safe(pynvml.nvmlShutdown)


def _nvml_max_clock(nvml: Any, handle: Any, clock_name: str) -> int | None:
    return _safe(lambda: int(nvml.nvmlDeviceGetMaxClockInfo(handle, getattr(nvml, clock_name))))


def _nvml_device(nvml: Any, handle: Any) -> dict[str, Any]:
    pci = _safe(lambda: nvml.nvmlDeviceGetPciInfo(handle))
    # The management limit is the configured cap (nvidia-smi -pl), in milliwatts.
    power_mw = _safe(lambda: nvml.nvmlDeviceGetPowerManagementLimit(handle))
    return {
        "uuid": _text(_safe(lambda: nvml.nvmlDeviceGetUUID(handle))),
        "pci_bus_id": _text(_safe(lambda: pci.busId)) if pci is not None else None,
        "power_limit_w": round(power_mw / 1000.0, 1) if isinstance(power_mw, int | float) else None,
        "max_sm_clock_mhz": _nvml_max_clock(nvml, handle, "NVML_CLOCK_SM"),
        "max_mem_clock_mhz": _nvml_max_clock(nvml, handle, "NVML_CLOCK_MEM"),
    }


def _nvml_devices(nvml: Any) -> list[dict[str, Any]]:
    count = _safe(lambda: int(nvml.nvmlDeviceGetCount()), 0) or 0
    devices = []
    for index in range(count):
        handle = _safe(lambda i=index: nvml.nvmlDeviceGetHandleByIndex(i))
        if handle is not None:
            devices.append(_nvml_device(nvml, handle))
    return devices


def _nvml_info() -> dict[str, Any] | None:
    """Driver version and per-device details from NVML, or None without NVML."""
    with _nvml_session() as nvml:
        if nvml is None:
            return None
        return {
            "driver": _text(_safe(nvml.nvmlSystemGetDriverVersion)),
            "devices": _nvml_devices(nvml),
        }


def _match_nvml(
    gpu: dict[str, Any], devices: list[dict[str, Any]], index: int
) -> dict[str, Any] | None:
    """Find the NVML record of a torch device.

    NVML enumerates every physical GPU while torch sees only CUDA_VISIBLE_DEVICES,
    so indices agree only when nothing is hidden; match on UUID, then PCI bus id.
    """
    for key in ("uuid", "pci_bus_id"):
        wanted = gpu.get(key)
        if not wanted:
            continue
        for device in devices:
            found = device.get(key)
            if found and found.upper() == wanted.upper():
                return device
    if "CUDA_VISIBLE_DEVICES" not in os.environ and index < len(devices):
        return devices[index]
    return None


def _merge_nvml(gpu: dict[str, Any], device: dict[str, Any] | None) -> dict[str, Any]:
    if device is None:
        return gpu
    merged = dict(gpu)
    for key, value in device.items():
        if value is not None:
            merged[key] = value
    return merged


# ------------------------------------------------------------------------ nvidia-smi


def _smi_driver() -> str | None:
    out = _run_nvidia_smi("--query-gpu=driver_version", "--format=csv,noheader")
    if out is None:
        return None
    first = out.splitlines()[0].strip()
    return first or None


# ------------------------------------------------------------------------ public API


def capture_environment(include_topology: bool = True) -> dict[str, Any]:
    """Describe the machine and software stack this process runs on.

    Returns a JSON-serialisable dict (see the module docstring); fields that cannot
    be determined are ``None``. CUDA is only touched when ``torch.cuda.is_available()``
    is true. ``include_topology`` adds ``nvidia-smi topo -m`` when a GPU is present.
    """
    torch = _import_torch()
    cuda_available = _cuda_available(torch)
    env: dict[str, Any] = {"schema": SCHEMA_VERSION}
    env.update(_host_info())
    env["packages"] = _package_versions(torch)
    env.update(_torch_info(torch, cuda_available))

    nvml = _nvml_info()
    env["nvml"] = nvml is not None
    driver = nvml["driver"] if nvml is not None else None
    env["driver"] = driver or _smi_driver()

    gpu_count = int(_safe(torch.cuda.device_count, 0) or 0) if cuda_available else 0
    gpus = [_torch_gpu(torch, index) for index in range(gpu_count)]
    if nvml is not None:
        gpus = [_merge_nvml(gpu, _match_nvml(gpu, nvml["devices"], gpu["index"])) for gpu in gpus]
    env["accelerator"] = "cuda" if gpu_count > 0 else "cpu"
    env["gpu_count"] = gpu_count
    env["gpus"] = gpus
    env["topology"] = _run_nvidia_smi("topo", "-m") if gpu_count > 0 and include_topology else None

    env["env_vars"] = _env_vars()
    env["slurm_job_id"] = os.environ.get("SLURM_JOB_ID")
    env["captured_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return env


def identity(env: dict[str, Any]) -> dict[str, Any]:
    """The fields of ``env`` that decide whether two results are comparable.

    Host names, timestamps and tuning variables are left out on purpose: the same
    hardware and software stack on another node is still a fair comparison.
    """
    packages = env.get("packages") or {}
    gpus = env.get("gpus") or []
    ident: dict[str, Any] = {
        "accelerator": env.get("accelerator"),
        "gpu_count": env.get("gpu_count"),
        "gpu_names": [gpu.get("name") for gpu in gpus],
        "driver": env.get("driver"),
        "cuda_runtime": env.get("cuda_runtime"),
        "cudnn": env.get("cudnn"),
        "torch": packages.get("torch"),
        "cpu_model": env.get("cpu_model"),
    }
    if env.get("accelerator") != "cuda":
        for field in _CPU_IDENTITY_FIELDS:
            ident[field] = env.get(field)
    return ident


def env_key(env: dict[str, Any]) -> str:
    """A short hash of :func:`identity` (GPU, driver, CUDA, torch, ...): the store files each
    result under it, so results measured in the same environment are found together."""
    blob = json.dumps(identity(env), sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _show(value: Any) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, list):
        return "[" + ", ".join(_show(item) for item in value) + "]"
    return str(value)


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """One ``"field: A vs B"`` line per identity field in which two environments differ.

    An empty list means the results are comparable. Fields only one side has (the
    CPU thread budget when one side is a GPU run) are skipped: the ``accelerator``
    line already reports that mismatch.
    """
    ia, ib = identity(a), identity(b)
    lines = []
    for field in (*_IDENTITY_FIELDS, *_CPU_IDENTITY_FIELDS):
        if field not in ia or field not in ib:
            continue
        if ia[field] != ib[field]:
            lines.append(f"{field}: {_show(ia[field])} vs {_show(ib[field])}")
    return lines


def _gpu_names(env: dict[str, Any]) -> list[str]:
    return [str(gpu.get("name") or "unknown GPU") for gpu in env.get("gpus") or []]


def _cpu_threads(env: dict[str, Any]) -> Any:
    for field in ("torch_threads", "cpu_affinity_cores", "cpu_logical_cores"):
        if env.get(field) is not None:
            return env[field]
    return "?"


def device_label(env: dict[str, Any]) -> str:
    """Short human label: ``"NVIDIA H100 80GB HBM3"``, ``"2x NVIDIA H200"`` or
    ``"CPU: <model> (<n> threads)"``."""
    names = _gpu_names(env)
    if env.get("accelerator") == "cuda" and names:
        if len(set(names)) == 1:
            return names[0] if len(names) == 1 else f"{len(names)}x {names[0]}"
        # Mixed GPUs: list each model with its count, in order of first appearance.
        counts = {name: names.count(name) for name in dict.fromkeys(names)}
        return " + ".join(name if n == 1 else f"{n}x {name}" for name, n in counts.items())
    model = env.get("cpu_model") or "unknown CPU"
    return f"CPU: {model} ({_cpu_threads(env)} threads)"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.")


def _torch_tag(env: dict[str, Any]) -> str:
    version = (env.get("packages") or {}).get("torch") or ""
    match = re.match(r"(\d+)\.(\d+)", version)
    return f"pt{match.group(1)}.{match.group(2)}" if match else "pt"


def _gpu_tag(env: dict[str, Any]) -> str:
    names = [re.sub(r"^nvidia\s+", "", name, flags=re.IGNORECASE) for name in _gpu_names(env)]
    distinct = list(dict.fromkeys(names))
    if len(distinct) == 1:
        tag = _slug(distinct[0])
        return tag if len(names) == 1 else f"{len(names)}x-{tag}"
    return "-".join(_slug(name) for name in distinct) or "gpu"


def file_tag(env: dict[str, Any]) -> str:
    """Filename-safe tag such as ``pt2.11-cu130-h100-80gb-hbm3`` or ``pt2.14-cpu``.

    Lowercase and limited to ``[a-z0-9.-]``; multi-GPU runs read ``2x-h200``.
    """
    parts = [_torch_tag(env)]
    if env.get("accelerator") == "cuda" and env.get("gpus"):
        cuda = env.get("cuda_runtime")
        parts.append("cu" + str(cuda).replace(".", "") if cuda else "cuda")
        parts.append(_gpu_tag(env))
    else:
        parts.append("cpu")
    return _slug("-".join(parts))


def process_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (signal 0 checks without sending)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    except OverflowError:
        return False
    return True

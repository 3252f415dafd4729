"""Tests for dlbench.env: real capture on the CPU, GPU paths through fakes."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import time
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from dlbench import env as envmod

try:  # repo root on sys.path ("python -m pytest", or tests/ made a package)
    from tests.fakes.fake_nvml import FakeGpu, make_fake_pynvml
except ModuleNotFoundError:  # plain "pytest" puts tests/ itself on sys.path
    from fakes.fake_nvml import FakeGpu, make_fake_pynvml  # type: ignore[no-redef]

H200_UUIDS = (
    "GPU-1b0c7e52-6a3e-4c1f-9d35-0a7f2e6b9c01",
    "GPU-2c1d8f63-7b4f-4d20-8e46-1b803f7cad12",
)
H200_BUS_IDS = ("00000000:18:00.0", "00000000:2A:00.0")

TOP_LEVEL_KEYS = {
    "schema", "hostname", "os", "kernel", "python", "python_impl", "cpu_model",
    "cpu_logical_cores", "cpu_affinity_cores", "torch_threads", "memory_total_bytes",
    "packages", "torch_git", "cuda_runtime", "cudnn", "nccl", "driver", "nvml",
    "accelerator", "gpu_count", "gpus", "topology", "env_vars", "slurm_job_id",
    "captured_at",
}
GPU_KEYS = {
    "index", "name", "uuid", "memory_total_bytes", "compute_capability", "sm_count",
    "pci_bus_id", "power_limit_w", "max_sm_clock_mhz", "max_mem_clock_mhz",
}


def _is_json_plain(value: Any) -> bool:
    """True when value is built only from JSON's own types."""
    if value is None or isinstance(value, str | int | float | bool):
        return True
    if isinstance(value, list):
        return all(_is_json_plain(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json_plain(v) for k, v in value.items())
    return False


# ------------------------------------------------------------------------- fixtures


@pytest.fixture
def no_nvidia_smi(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend nvidia-smi is not installed."""
    monkeypatch.setattr(envmod.shutil, "which", lambda name: None)


@pytest.fixture
def fake_torch_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """Report torch 2.11.0+cu130 (as on the GPU machines) and CUDA runtime 13.0."""
    monkeypatch.setattr(torch, "__version__", "2.11.0+cu130")
    monkeypatch.setattr(torch.version, "cuda", "13.0")


def _props(name: str, uuid: str, bus: int, memory: int = 150_754_820_096) -> SimpleNamespace:
    # torch reports the UUID without NVML's "GPU-" prefix.
    return SimpleNamespace(
        name=name, major=9, minor=0, total_memory=memory, multi_processor_count=132,
        uuid=uuid.removeprefix("GPU-"), pci_domain_id=0, pci_bus_id=bus, pci_device_id=0,
    )


def _fake_cuda(
    monkeypatch: pytest.MonkeyPatch, props: list[SimpleNamespace], nccl: Any = (2, 28, 9)
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(props))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props[index])
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: nccl)


@pytest.fixture
def two_h200(monkeypatch: pytest.MonkeyPatch, fake_torch_version: None) -> Any:
    """Two H200s visible to torch and to a fake NVML; returns the fake pynvml module."""
    _fake_cuda(monkeypatch, [
        _props("NVIDIA H200", H200_UUIDS[0], 0x18),
        _props("NVIDIA H200", H200_UUIDS[1], 0x2A),
    ])
    fake = make_fake_pynvml(
        [
            FakeGpu(uuid=H200_UUIDS[0], pci_bus_id=H200_BUS_IDS[0], power_limit_mw=700_000),
            FakeGpu(uuid=H200_UUIDS[1], pci_bus_id=H200_BUS_IDS[1], power_limit_mw=600_000,
                    max_sm_clock_mhz=1755),
        ],
        driver="580.95.05",
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return fake


# ------------------------------------------------------------------- real CPU capture


def test_real_capture_has_all_keys_and_plain_types() -> None:
    env = envmod.capture_environment()
    assert set(env) == TOP_LEVEL_KEYS
    assert env["schema"] == 1
    assert _is_json_plain(env)
    assert json.loads(json.dumps(env)) == env
    assert set(env["packages"]) == set(envmod.PACKAGES)
    assert env["packages"]["torch"] is not None
    assert env["packages"]["torch"] == torch.__version__
    assert env["python"] == ".".join(str(p) for p in sys.version_info[:3])
    assert isinstance(env["cpu_logical_cores"], int) and env["cpu_logical_cores"] >= 1
    assert env["torch_threads"] == torch.get_num_threads()
    assert env["torch_git"] == torch.version.git_version
    assert env["cuda_runtime"] == torch.version.cuda
    assert env["cudnn"] is None or isinstance(env["cudnn"], int)
    # captured_at is timezone-aware UTC ISO-8601.
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", env["captured_at"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only path")
def test_real_capture_on_cpu_machine_reports_cpu(no_nvidia_smi: None) -> None:
    start = time.perf_counter()
    env = envmod.capture_environment()
    elapsed = time.perf_counter() - start
    assert env["accelerator"] == "cpu"
    assert env["gpu_count"] == 0
    assert env["gpus"] == []
    assert env["topology"] is None
    assert env["nccl"] is None
    # Generous bound against a loaded CI box; the CPU path normally takes ~0.1 s.
    assert elapsed < 2.0
    label = envmod.device_label(env)
    assert label.startswith("CPU: ") and label.endswith(f"({torch.get_num_threads()} threads)")
    assert envmod.file_tag(env) == "pt{}.{}-cpu".format(*torch.__version__.split(".")[:2])


@pytest.mark.skipif(not hasattr(envmod.os, "sched_getaffinity"), reason="Linux only")
def test_affinity_and_memory_read_from_the_os() -> None:
    env = envmod.capture_environment()
    assert env["cpu_affinity_cores"] == len(envmod.os.sched_getaffinity(0))
    assert isinstance(env["memory_total_bytes"], int) and env["memory_total_bytes"] > 2**20


def test_env_vars_keep_only_relevant_families_sorted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    monkeypatch.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    monkeypatch.setenv("NVSHMEM_DEBUG", "WARN")
    monkeypatch.setenv("DLBENCH_UNRELATED", "x")
    monkeypatch.setenv("MY_NCCL_THING", "x")
    monkeypatch.setenv("SLURM_JOB_ID", "123456")
    env = envmod.capture_environment(include_topology=False)
    ev = env["env_vars"]
    assert ev["NCCL_DEBUG"] == "INFO"
    assert ev["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
    assert ev["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    assert ev["OMP_NUM_THREADS"] == "4"
    assert ev["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert ev["NVSHMEM_DEBUG"] == "WARN"
    assert "DLBENCH_UNRELATED" not in ev and "MY_NCCL_THING" not in ev
    assert list(ev) == sorted(ev)
    assert env["slurm_job_id"] == "123456"


def test_cuda_is_not_touched_when_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    touched: list[str] = []

    def forbidden(name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            touched.append(name)
            raise AssertionError(f"{name} called without CUDA")
        return call

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for name in ("device_count", "get_device_properties", "init", "current_device"):
        monkeypatch.setattr(torch.cuda, name, forbidden(name))
    monkeypatch.setattr(torch.cuda.nccl, "version", forbidden("nccl.version"))
    env = envmod.capture_environment()
    assert touched == []
    assert env["accelerator"] == "cpu" and env["gpu_count"] == 0 and env["nccl"] is None


# --------------------------------------------------------------- GPU path via fakes


def test_fake_gpu_capture_merges_torch_and_nvml(two_h200: Any, no_nvidia_smi: None) -> None:
    env = envmod.capture_environment()
    assert json.loads(json.dumps(env)) == env
    assert env["accelerator"] == "cuda"
    assert env["gpu_count"] == 2
    assert env["nvml"] is True
    assert env["driver"] == "580.95.05"
    assert env["nccl"] == "2.28.9"
    assert env["cuda_runtime"] == "13.0"
    assert env["topology"] is None  # nvidia-smi absent: no topology, no error
    first, second = env["gpus"]
    assert set(first) == GPU_KEYS
    assert first == {
        "index": 0,
        "name": "NVIDIA H200",
        "uuid": H200_UUIDS[0],
        "memory_total_bytes": 150_754_820_096,
        "compute_capability": "9.0",
        "sm_count": 132,
        "pci_bus_id": H200_BUS_IDS[0],
        "power_limit_w": 700.0,
        "max_sm_clock_mhz": 1980,
        "max_mem_clock_mhz": 3201,
    }
    assert second["uuid"] == H200_UUIDS[1]
    assert second["power_limit_w"] == 600.0
    assert second["max_sm_clock_mhz"] == 1755
    assert envmod.device_label(env) == "2x NVIDIA H200"
    assert envmod.file_tag(env) == "pt2.11-cu130-2x-h200"
    assert two_h200.state.init_calls == 1
    assert two_h200.state.shutdown_calls == 1


def test_nvml_matched_by_uuid_when_devices_are_hidden(
    monkeypatch: pytest.MonkeyPatch, two_h200: Any, no_nvidia_smi: None
) -> None:
    # torch sees only physical GPU 1 as its device 0; NVML still lists both.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    _fake_cuda(monkeypatch, [_props("NVIDIA H200", H200_UUIDS[1], 0x2A)])
    env = envmod.capture_environment()
    (gpu,) = env["gpus"]
    assert gpu["index"] == 0
    assert gpu["uuid"] == H200_UUIDS[1]
    assert gpu["power_limit_w"] == 600.0
    assert gpu["max_sm_clock_mhz"] == 1755
    assert envmod.device_label(env) == "NVIDIA H200"


def test_nvml_init_failure_falls_back_to_torch_and_nvidia_smi(
    monkeypatch: pytest.MonkeyPatch, fake_torch_version: None
) -> None:
    h100 = _props("NVIDIA H100 80GB HBM3", H200_UUIDS[0], 0x18, memory=85_045_231_616)
    _fake_cuda(monkeypatch, [h100])
    fake = make_fake_pynvml([FakeGpu()], fail_init=True)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    calls: list[list[str]] = []

    def fake_run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append(cmd[1:])
        assert kwargs.get("timeout") == envmod.NVIDIA_SMI_TIMEOUT_S
        if "--query-gpu=driver_version" in cmd:
            out = "580.95.05\n"
        else:  # real nvidia-smi underlines the header with escapes even when piped
            out = "\x1b[4m\tGPU0\x1b[0m\nGPU0\t X \n"
        return subprocess.CompletedProcess(cmd, 0, stdout=out, stderr="")

    monkeypatch.setattr(envmod.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(envmod.subprocess, "run", fake_run)
    env = envmod.capture_environment()
    assert env["nvml"] is False
    assert fake.state.init_calls == 1 and fake.state.shutdown_calls == 0
    assert env["driver"] == "580.95.05"
    assert env["topology"] == "GPU0\nGPU0\t X"
    assert ["topo", "-m"] in calls
    (gpu,) = env["gpus"]
    assert gpu["uuid"] == H200_UUIDS[0]  # from torch, "GPU-" prefix restored
    assert gpu["pci_bus_id"] == H200_BUS_IDS[0]  # built from torch's PCI ids
    assert gpu["power_limit_w"] is None and gpu["max_sm_clock_mhz"] is None
    assert envmod.device_label(env) == "NVIDIA H100 80GB HBM3"
    assert envmod.file_tag(env) == "pt2.11-cu130-h100-80gb-hbm3"


def test_missing_pynvml_and_missing_nvidia_smi_do_not_raise(
    monkeypatch: pytest.MonkeyPatch, fake_torch_version: None, no_nvidia_smi: None
) -> None:
    _fake_cuda(monkeypatch, [_props("NVIDIA H200", H200_UUIDS[0], 0x18)], nccl=22809)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes "import pynvml" fail
    env = envmod.capture_environment()
    assert env["nvml"] is False
    assert env["driver"] is None
    assert env["topology"] is None
    assert env["nccl"] == "2.28.9"  # integer NCCL code from older torch builds
    assert env["gpus"][0]["name"] == "NVIDIA H200"


def test_hung_nvidia_smi_is_abandoned(monkeypatch: pytest.MonkeyPatch) -> None:
    def hang(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        raise subprocess.TimeoutExpired(cmd, kwargs.get("timeout", 0))

    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setattr(envmod.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(envmod.subprocess, "run", hang)
    env = envmod.capture_environment()
    assert env["driver"] is None


def test_failing_device_properties_leave_fields_unknown(
    monkeypatch: pytest.MonkeyPatch, no_nvidia_smi: None
) -> None:
    _fake_cuda(monkeypatch, [])
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    env = envmod.capture_environment()
    (gpu,) = env["gpus"]
    assert gpu["index"] == 0
    assert all(gpu[key] is None for key in GPU_KEYS - {"index"})
    assert envmod.device_label(env) == "unknown GPU"


# ------------------------------------------------------- identity and differences


def _gpu_env(**overrides: Any) -> dict[str, Any]:
    env: dict[str, Any] = {
        "schema": 1,
        "hostname": "node-a",
        "captured_at": "2025-01-01T00:00:00+00:00",
        "accelerator": "cuda",
        "gpu_count": 1,
        "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-a"}],
        "driver": "580.95.05",
        "cuda_runtime": "13.0",
        "cudnn": 91300,
        "packages": {"torch": "2.11.0+cu130"},
        "cpu_model": "Intel(R) Xeon(R) Platinum 8480+",
        "cpu_affinity_cores": 16,
        "torch_threads": 16,
        "env_vars": {"NCCL_DEBUG": "INFO"},
    }
    env.update(overrides)
    return env


def test_identity_ignores_host_time_and_tuning_variables() -> None:
    a = _gpu_env()
    b = _gpu_env(
        hostname="node-b",
        captured_at="2025-06-01T12:00:00+00:00",
        env_vars={},
        gpus=[{"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-b"}],
        cpu_affinity_cores=8,  # irrelevant on GPU runs
    )
    assert envmod.identity(a) == envmod.identity(b)
    assert envmod.differences(a, b) == []
    assert envmod.identity(a) == {
        "accelerator": "cuda",
        "gpu_count": 1,
        "gpu_names": ["NVIDIA H100 80GB HBM3"],
        "driver": "580.95.05",
        "cuda_runtime": "13.0",
        "cudnn": 91300,
        "torch": "2.11.0+cu130",
        "cpu_model": "Intel(R) Xeon(R) Platinum 8480+",
    }


def test_differences_lists_each_changed_field() -> None:
    a = _gpu_env()
    b = _gpu_env(
        gpu_count=2,
        gpus=[{"name": "NVIDIA H200"}, {"name": "NVIDIA H200"}],
        driver=None,
        packages={"torch": "2.14.1"},
    )
    assert envmod.differences(a, b) == [
        "gpu_count: 1 vs 2",
        "gpu_names: [NVIDIA H100 80GB HBM3] vs [NVIDIA H200, NVIDIA H200]",
        "driver: 580.95.05 vs unknown",
        "torch: 2.11.0+cu130 vs 2.14.1",
    ]


def test_cpu_identity_includes_thread_budget() -> None:
    cpu = _gpu_env(accelerator="cpu", gpu_count=0, gpus=[], driver=None)
    fewer = copy.deepcopy(cpu) | {"cpu_affinity_cores": 8, "torch_threads": 8}
    assert envmod.differences(cpu, fewer) == [
        "cpu_affinity_cores: 16 vs 8",
        "torch_threads: 16 vs 8",
    ]
    assert envmod.device_label(cpu) == "CPU: Intel(R) Xeon(R) Platinum 8480+ (16 threads)"
    assert envmod.file_tag(cpu) == "pt2.11-cpu"


def test_cpu_versus_gpu_reports_accelerator_not_thread_budget() -> None:
    gpu = _gpu_env()
    cpu = _gpu_env(accelerator="cpu", gpu_count=0, gpus=[])
    assert envmod.differences(gpu, cpu) == [
        "accelerator: cuda vs cpu",
        "gpu_count: 1 vs 0",
        "gpu_names: [NVIDIA H100 80GB HBM3] vs []",
    ]


# ----------------------------------------------------------------- labels and tags


def test_labels_and_tags_for_mixed_gpus_are_filename_safe() -> None:
    env = _gpu_env(
        gpu_count=3,
        gpus=[{"name": "NVIDIA H100 80GB HBM3"}, {"name": "NVIDIA H100 80GB HBM3"},
              {"name": "NVIDIA GeForce RTX 4090"}],
        cuda_runtime="12.8",
    )
    assert envmod.device_label(env) == "2x NVIDIA H100 80GB HBM3 + NVIDIA GeForce RTX 4090"
    tag = envmod.file_tag(env)
    assert tag == "pt2.11-cu128-h100-80gb-hbm3-geforce-rtx-4090"
    assert re.fullmatch(r"[a-z0-9.-]+", tag)


def test_tag_and_label_survive_an_empty_record() -> None:
    assert envmod.device_label({}) == "CPU: unknown CPU (? threads)"
    assert envmod.file_tag({}) == "pt-cpu"
    assert envmod.differences({}, {}) == []

"""The environment dlbench gives every rank: NCCL's transport switches per interconnect profile,
and the safety variables no profile can override."""

from __future__ import annotations

from dlbench.config import INTERCONNECT_PROFILES, choice

# Variables passed to every rank, always: dlbench never turns NVLink multicast (NVLS) on, since
# on some systems it needs fabric-manager state that a benchmark must not depend on or disturb.
SAFETY_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
              "NVSHMEM_DISABLE_NVLS": "1"}

# Interconnect profiles: NCCL's own switches for its transports (NCCL docs, "Environment
# Variables"). P2P = NVLink / PCIe peer-to-peer between GPUs; SHM = through host shared memory;
# IB = InfiniBand / RoCE verbs. With P2P and SHM both off, NCCL goes through its network path.
PROFILE_ENV: dict[str, dict[str, str]] = {
    "default": {},
    "no-p2p": {"NCCL_P2P_DISABLE": "1"},
    "no-shm": {"NCCL_SHM_DISABLE": "1"},
    "no-p2p+no-shm": {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"},
    "no-ib": {"NCCL_IB_DISABLE": "1"},
}


def interconnect_env(name: str) -> dict[str, str]:
    """The variables of a profile plus the safety variables (which no profile can override)."""
    choice("interconnect", name, INTERCONNECT_PROFILES)
    return {**PROFILE_ENV[name], **SAFETY_ENV}


# The profile names are data of the config layer (configs validate them); their variables live here.
assert tuple(PROFILE_ENV) == INTERCONNECT_PROFILES, "keep config.INTERCONNECT_PROFILES in step"

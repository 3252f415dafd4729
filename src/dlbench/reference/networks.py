"""Named links (Ethernet, InfiniBand, NVLink, PCIe): bandwidth and latency, each figure with its
source. Data: the what-if model predicts over these links, ``dlbench net`` shapes its emulated
ones to their rates, and the report lists them.

``bandwidth_Bps`` is the link's data rate in bytes per second *per direction* (after the line
code: 64b/66b, 128b/130b), as the standard or the datasheet gives it; NVLink datasheets quote
both directions added, so their figure is halved here. ``efficiency`` is the share of that rate
left for the payload of a collective once protocol headers are paid (derived in each row's
notes); the what-if model moves ``payload / (bandwidth_Bps * efficiency)`` seconds per byte.

``latency_s`` is the per-message (per ring step) latency the model charges. Where a datasheet or
NCCL's own cost model gives a figure it is cited; where none exists (kernel TCP over Ethernet) the
row says "assumption" and why, and ``dlbench whatif --latency`` overrides it.
"""

from __future__ import annotations

from dataclasses import dataclass

# Payload share of TCP over Ethernet at MTU 1500: 1448 payload bytes per 1538 bytes on the wire
# (1500 + 14 header + 4 FCS + 8 preamble + 12 inter-frame gap), plus a delayed ACK (84 wire bytes
# with preamble and gap) every second segment of the opposite flow, which a collective that sends
# both ways carries on the same direction: 1448 / (1538 + 42).
ETH_TCP_EFFICIENCY = 1448 / (1538 + 42)
# InfiniBand RDMA at a 4096-byte MTU: LRH 8 + BTH 12 + ICRC 4 + VCRC 2 = 26 header bytes.
IB_EFFICIENCY = 4096 / (4096 + 26)
# PCIe: 256-byte maximum payload per TLP, about 24 bytes of header, sequence number, LCRC and
# framing each (PCI-SIG base specification's TLP format); NVLink's 16-byte flit headers per
# 256-byte packet are of the same order, so the same share is assumed.
PCIE_EFFICIENCY = 256 / (256 + 24)
NVLINK_EFFICIENCY = 256 / (256 + 16)

_NCCL_TUNING = ("NCCL's cost model, src/graph/tuning.cc hwLat (ring, Simple protocol: NVLink "
                "3.4 us, PCI 5.7 us, network 9.6 us per step), github.com/NVIDIA/nccl "
                "(commit 01afd20)")
_ETH_LATENCY = ("assumption: no datasheet gives it. One-way latency of a message through the "
                "kernel TCP stack, a NIC and one switch, of the order of tens of microseconds; "
                "dlbench net's probe measured 30-70 us one way between namespaces on this "
                "project's CPU machine (docs/network.md). Override with --latency")


@dataclass(frozen=True)
class Network:
    """One row of the table; see the module docstring for what each figure means."""

    name: str
    kind: str                  # "network" (between nodes) or "intra" (between GPUs of a node)
    bandwidth_Bps: float
    latency_s: float
    efficiency: float
    source: str                # of the bandwidth
    latency_source: str
    aliases: tuple[str, ...] = ()
    notes: str = ""

    @property
    def payload_Bps(self) -> float:
        """Payload bytes per second per direction: what the model divides bytes by."""
        return self.bandwidth_Bps * self.efficiency

    @property
    def gbit(self) -> float:
        return self.bandwidth_Bps * 8 / 1e9


def _eth(gbit: int, std: str) -> Network:
    return Network(
        name=f"{gbit}gbe", kind="network", bandwidth_Bps=gbit * 1e9 / 8, latency_s=25e-6,
        efficiency=ETH_TCP_EFFICIENCY,
        source=f"IEEE Std 802.3 ({std}): {gbit} Gb/s MAC data rate (ieee802.org/3)",
        latency_source=_ETH_LATENCY, aliases=(f"{gbit}g", f"{gbit}gbit-ethernet"),
        notes="TCP over Ethernet at MTU 1500; RoCE (RDMA over Ethernet) would have IB-like "
              "headers and latency")


NETWORKS: tuple[Network, ...] = (
    _eth(1, "1000BASE-T, clause 40, formerly 802.3ab"),
    _eth(10, "10GBASE-R, clause 49, formerly 802.3ae"),
    _eth(25, "25GBASE-R, clause 107, formerly 802.3by"),
    _eth(100, "100GBASE-R, clauses 82/91, formerly 802.3ba/bj"),
    _eth(400, "400GBASE-R, clause 119, formerly 802.3bs"),
    Network(
        name="ib-fdr", kind="network", bandwidth_Bps=4 * 14.0625e9 * 64 / 66 / 8, latency_s=9.6e-6,
        efficiency=IB_EFFICIENCY,
        source="InfiniBand Trade Association roadmap (infinibandta.org/infiniband-roadmap): FDR "
               "4x = 4 lanes x 14.0625 Gb/s, 64b/66b code: 54.5 Gb/s of data ('56 Gb/s')",
        latency_source=_NCCL_TUNING, aliases=("fdr", "infiniband-fdr"),
        notes="the 2017 parameter-server cluster's InfiniBand (whatif --ps-cluster); it ran TCP "
              "over it (IPoIB), far below the RDMA rate"),
    Network(
        name="ib-edr", kind="network", bandwidth_Bps=100e9 / 8, latency_s=9.6e-6,
        efficiency=IB_EFFICIENCY,
        source="InfiniBand Trade Association roadmap: EDR 4x = 100 Gb/s data rate",
        latency_source=_NCCL_TUNING, aliases=("edr", "infiniband-edr")),
    Network(
        name="ib-hdr", kind="network", bandwidth_Bps=200e9 / 8, latency_s=9.6e-6,
        efficiency=IB_EFFICIENCY,
        source="InfiniBand Trade Association roadmap: HDR 4x = 200 Gb/s data rate",
        latency_source=_NCCL_TUNING + "; the adapter alone: ConnectX-6 'sub-600ns latency' "
                       "(docs.nvidia.com/networking/display/ConnectX6EN/Introduction)",
        aliases=("hdr", "infiniband-hdr")),
    Network(
        name="ib-ndr", kind="network", bandwidth_Bps=400e9 / 8, latency_s=9.6e-6,
        efficiency=IB_EFFICIENCY,
        source="InfiniBand Trade Association roadmap: NDR 4x = 400 Gb/s data rate",
        latency_source=_NCCL_TUNING, aliases=("ndr", "infiniband-ndr")),
    Network(
        name="nvlink2", kind="intra", bandwidth_Bps=300e9 / 2, latency_s=3.4e-6,
        efficiency=NVLINK_EFFICIENCY,
        source="NVIDIA Tesla V100 datasheet: NVLink 300 GB/s per GPU (both directions added)",
        latency_source=_NCCL_TUNING, aliases=("nvlink-v100",)),
    Network(
        name="nvlink3", kind="intra", bandwidth_Bps=600e9 / 2, latency_s=3.4e-6,
        efficiency=NVLINK_EFFICIENCY,
        source="NVIDIA A100 datasheet: NVLink 600 GB/s per GPU (both directions added)",
        latency_source=_NCCL_TUNING, aliases=("nvlink-a100",)),
    Network(
        name="nvlink4", kind="intra", bandwidth_Bps=900e9 / 2, latency_s=3.4e-6,
        efficiency=NVLINK_EFFICIENCY,
        source="NVIDIA H100 datasheet and nvidia.com/en-us/data-center/nvlink: fourth-generation "
               "NVLink, 900 GB/s per GPU (both directions added; H100 and H200 SXM)",
        latency_source=_NCCL_TUNING, aliases=("nvlink-h100", "nvlink-h200", "nvlink")),
    Network(
        name="nvlink5", kind="intra", bandwidth_Bps=1800e9 / 2, latency_s=3.4e-6,
        efficiency=NVLINK_EFFICIENCY,
        source="nvidia.com/en-us/data-center/nvlink: fifth-generation NVLink, 1.8 TB/s per GPU "
               "(both directions added; Blackwell)",
        latency_source=_NCCL_TUNING, aliases=("nvlink-b200",)),
    Network(
        name="pcie3", kind="intra", bandwidth_Bps=8e9 * 16 * 128 / 130 / 8, latency_s=5.7e-6,
        efficiency=PCIE_EFFICIENCY,
        source="PCI-SIG PCI Express Base Specification 3.0: 8 GT/s per lane, 128b/130b; x16 = "
               "15.75 GB/s per direction",
        latency_source=_NCCL_TUNING, aliases=("pcie-gen3",),
        notes="the tf_cnn_benchmarks study's Quadro RTX 8000s without their NVLink bridges"),
    Network(
        name="pcie4", kind="intra", bandwidth_Bps=16e9 * 16 * 128 / 130 / 8, latency_s=5.7e-6,
        efficiency=PCIE_EFFICIENCY,
        source="PCI-SIG PCI Express Base Specification 4.0: 16 GT/s per lane, 128b/130b; x16 = "
               "31.5 GB/s per direction",
        latency_source=_NCCL_TUNING, aliases=("pcie-gen4",)),
    Network(
        name="pcie5", kind="intra", bandwidth_Bps=32e9 * 16 * 128 / 130 / 8, latency_s=5.7e-6,
        efficiency=PCIE_EFFICIENCY,
        source="PCI-SIG PCI Express Base Specification 5.0: 32 GT/s per lane, 128b/130b; x16 = "
               "63 GB/s per direction",
        latency_source=_NCCL_TUNING, aliases=("pcie-gen5", "pcie")),
)

_BY_NAME = {n.name: n for n in NETWORKS} | {a: n for n in NETWORKS for a in n.aliases}


def find_network(name: str) -> Network | None:
    return _BY_NAME.get(name.strip().lower())

"""What NCCL chose for a collective (algorithm, protocol), read from NCCL's own tuning log. Pure.

With ``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING``, rank 0 of a communicator writes one line per
collective it enqueues, naming the algorithm and protocol its tuner picked for that size
(``src/enqueue.cc``). The line changed over NCCL's releases; these forms are read:

- 2.24 and later (after NCCL's ``host:pid:tid [dev] NCCL INFO`` prefix)::

    AllReduce: 1048576 Bytes -> Algo RING proto LL128 channel{Lo..Hi}={0..15}

- 2.23: ``AllReduce: 262144 Bytes -> Algo 0 proto 1 time 54.707825``; 2.20 to 2.22 the same
  without the collective's name (``262144 Bytes -> Algo 0 proto 1 time 54.707825``). The numbers
  are NCCL's ``NCCL_ALGO_*`` and ``NCCL_PROTO_*`` constants (``nccl_common.h``) of those releases.
- 2.27 and later, symmetric-memory kernels:
  ``AllReduce [Symmetric]: 1048576 Bytes -> Kernel AllReduce_AGxLL_R nchannels 16 nthreads 512``;
  2.29 and later, copy-engine collectives:
  ``AllGather [Copy Engine]: 1048576 Bytes -> cudaMemcpy``. Neither names a ring, a tree or
  NVLS, so their bus bandwidth is not known to be comparable (:func:`busbw_comparable` is None).

Anything else is not a choice: a size NCCL wrote no such line for stays ``unknown``, never a
guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Sequence

#: NCCL_ALGO_* of 2.20-2.23 by number (PAT, 6, from 2.23).
ALGORITHM_IDS = ("TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT")
#: NCCL_PROTO_* by number.
PROTOCOL_IDS = ("LL", "LL128", "SIMPLE")

#: Algorithms whose busbw reads as nccl-tests defines it: data moved over point-to-point links
#: (doc/PERFORMANCE.md: "independent of the algorithm used (ring, tree, or other) as long as
#: they use point-to-point operations").
POINT_TO_POINT = frozenset({"RING", "TREE", "PAT"})
#: Algorithms that reduce in the switch (NVLink SHARP) or the network (CollNet/SHARP): their
#: busbw can exceed the link's rate and is not comparable with a ring's.
IN_NETWORK = frozenset({"NVLS", "NVLS_TREE", "COLLNET_DIRECT", "COLLNET_CHAIN"})

#: NCCL's name of each collective dlbench times (``ncclFuncToString``).
NCCL_FUNC = {"all_reduce": "AllReduce", "all_gather": "AllGather",
             "reduce_scatter": "ReduceScatter", "broadcast": "Broadcast",
             "all_to_all": "AlltoAll"}

UNKNOWN = "unknown"

# "NCCL INFO " then the message; the message forms of the module docstring.
_ALGO = re.compile(r"NCCL INFO (?:(?P<func>[A-Za-z]+): )?(?P<bytes>\d+) Bytes -> "
                   r"Algo (?P<algo>\S+) proto (?P<proto>\S+)")
_SYMMETRIC = re.compile(r"NCCL INFO (?P<func>[A-Za-z]+) \[Symmetric\]: (?P<bytes>\d+) Bytes -> "
                        r"Kernel (?P<kernel>\S+)")
_COPY_ENGINE = re.compile(r"NCCL INFO (?P<func>[A-Za-z]+) \[Copy Engine\]: (?P<bytes>\d+) Bytes"
                          r" -> cudaMemcpy")


@dataclass(frozen=True)
class NcclChoice:
    """One tuning line: the collective (None where the release did not name it), its size in
    bytes as NCCL counts it (one rank's count x element size), the algorithm and protocol."""

    func: str | None
    nbytes: int
    algorithm: str
    protocol: str


def _named(text: str, names: Sequence[str]) -> str:
    """A name, or NCCL's number of one (2.20-2.23), as NCCL spells the name today."""
    if text.isdigit():
        i = int(text)
        return names[i] if i < len(names) else UNKNOWN
    return text.upper()


def parse_line(line: str) -> NcclChoice | None:
    """The choice one log line states, or None for any other line."""
    m = _ALGO.search(line)
    if m:
        return NcclChoice(m["func"], int(m["bytes"]), _named(m["algo"], ALGORITHM_IDS),
                          _named(m["proto"], PROTOCOL_IDS))
    m = _SYMMETRIC.search(line)
    if m:
        return NcclChoice(m["func"], int(m["bytes"]), f"SYMMETRIC {m['kernel']}", UNKNOWN)
    m = _COPY_ENGINE.search(line)
    if m:
        return NcclChoice(m["func"], int(m["bytes"]), "COPY_ENGINE", UNKNOWN)
    return None


def parse_lines(lines: Iterable[str]) -> list[NcclChoice]:
    """Every choice in a log, in order."""
    return [c for c in map(parse_line, lines) if c is not None]


@dataclass(frozen=True)
class Chosen:
    """What NCCL chose for one collective at one size: ``algorithm`` and ``protocol`` (``+``
    between several where its calls differed), or ``unknown`` with ``note`` saying why."""

    algorithm: str = UNKNOWN
    protocol: str = UNKNOWN
    note: str | None = None


def chosen_for(op: str, choices: Sequence[NcclChoice]) -> Chosen:
    """The choice NCCL made for the calls of one op at one size, from the lines its calls
    wrote (only lines of that collective, or lines that name none, count)."""
    func = NCCL_FUNC.get(op)
    mine = [c for c in choices if c.func is None or c.func == func]
    if not mine:
        return Chosen(note=f"NCCL wrote no tuning line for {func or op} at this size")
    algos = list(dict.fromkeys(c.algorithm for c in mine))
    protos = list(dict.fromkeys(c.protocol for c in mine))
    note = None if len(algos) == len(protos) == 1 else \
        f"NCCL chose differently across the {len(mine)} calls of this size"
    return Chosen("+".join(algos), "+".join(protos), note)


def busbw_comparable(algorithm: str | None) -> bool | None:
    """Whether a busbw measured with ``algorithm`` compares with a ring's (and with the link's
    rate): True for ring, tree and PAT; False where NVLS or CollNet ran (any part of a ``+``
    list); None where the algorithm is unknown or names neither (symmetric or copy-engine
    kernels)."""
    if not algorithm or algorithm == UNKNOWN:
        return None
    parts = algorithm.split("+")
    if any(p in IN_NETWORK for p in parts):
        return False
    return True if all(p in POINT_TO_POINT for p in parts) else None


def version_text(version: object) -> str | None:
    """``torch.cuda.nccl.version()`` as ``"2.28.9"`` (a tuple, with a suffix where it has one;
    an integer code from old torch releases is decoded)."""
    if version is None:
        return None
    if isinstance(version, (tuple, list)):
        text = ".".join(str(p) for p in version[:3])
        return text + (str(version[3]) if len(version) > 3 and version[3] else "")
    if isinstance(version, int):
        major, rest = divmod(version, 10000) if version >= 10000 else divmod(version, 1000)
        return f"{major}.{rest // 100}.{rest % 100}"
    return str(version)

"""NCCL's own C API, called directly (``api="nccl"``, ``dlbench comm --api nccl``): what the
library and the fabric do without torch.distributed in between.

nccl-tests calls ``ncclAllReduce`` and its kin itself; a PyTorch program calls them through
``ProcessGroupNCCL``, which adds its own work to every call (work objects, events for its
watchdog, stream bookkeeping). ``api="torch"`` (the default) times what a PyTorch program gets;
``api="nccl"`` takes torch.distributed out of the measurement, so that a gap between dlbench and
nccl-tests can be placed: inside torch.distributed, or not (on two H100s in graph timing the two
read the same, docs/results/2026-11-2x-h100.md).

This module binds the few entry points a benchmark needs with :mod:`ctypes`, from the
``libnccl.so.2`` the process already loaded with torch (the same library, the same version,
as ``ProcessGroupNCCL`` uses). One communicator per rank, created from a unique id that rank 0
makes and sends to the others over the job's process group; buffers are torch tensors, the
stream torch's current one, so CUDA-graph capture (``torch.cuda.graph``) captures these calls
as it captures torch's. all_to_all is NCCL's grouped send/recv, as nccl-tests' alltoall.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any, Callable

import torch

#: ``ncclDataType_t`` (nccl.h): the values every NCCL 2.x release keeps.
DATA_TYPES = {torch.int8: 0, torch.uint8: 1, torch.int32: 2, torch.int64: 4,
              torch.float16: 6, torch.float32: 7, torch.float64: 8, torch.bfloat16: 9}
#: ``ncclRedOp_t``: ncclSum.
SUM = 0
UNIQUE_ID_BYTES = 128  # NCCL_UNIQUE_ID_BYTES


class NcclError(RuntimeError):
    """An NCCL call that did not return ncclSuccess, with NCCL's own words for it."""


class _UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * UNIQUE_ID_BYTES)]


_vp, _size, _int = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
#: name -> argument types; every function returns ncclResult_t (an int, 0 on success).
_SIGNATURES: dict[str, list[Any]] = {
    "ncclGetVersion": [ctypes.POINTER(_int)],
    "ncclGetUniqueId": [ctypes.POINTER(_UniqueId)],
    "ncclCommInitRank": [ctypes.POINTER(_vp), _int, _UniqueId, _int],
    "ncclCommDestroy": [_vp],
    "ncclAllReduce": [_vp, _vp, _size, _int, _int, _vp, _vp],
    "ncclBroadcast": [_vp, _vp, _size, _int, _int, _vp, _vp],
    "ncclAllGather": [_vp, _vp, _size, _int, _vp, _vp],
    "ncclReduceScatter": [_vp, _vp, _size, _int, _int, _vp, _vp],
    "ncclSend": [_vp, _size, _int, _int, _vp, _vp],
    "ncclRecv": [_vp, _size, _int, _int, _vp, _vp],
    "ncclGroupStart": [],
    "ncclGroupEnd": [],
}


def library(name: str | None = None) -> ctypes.CDLL:
    """NCCL's shared library with the signatures above set: ``name``, else the
    ``libnccl.so.2`` torch loaded (a process that imported torch with CUDA has it mapped)."""
    candidates = [name] if name else ["libnccl.so.2", ctypes.util.find_library("nccl")]
    errors = []
    for candidate in filter(None, candidates):
        try:
            lib = ctypes.CDLL(candidate)
        except OSError as exc:
            errors.append(str(exc))
            continue
        for fn, argtypes in _SIGNATURES.items():
            f = getattr(lib, fn)
            f.argtypes, f.restype = argtypes, ctypes.c_int
        lib.ncclGetErrorString.argtypes, lib.ncclGetErrorString.restype = [_int], ctypes.c_char_p
        return lib
    raise NcclError("NCCL's library (libnccl.so.2) could not be loaded: "
                    + ("; ".join(errors) or "not found")
                    + '. api="nccl" calls the NCCL that torch uses: a CUDA build of torch has it')


def version(lib: ctypes.CDLL) -> int:
    """NCCL's version code (``ncclGetVersion``: 22809 for 2.28.9)."""
    v = _int()
    _check(lib, lib.ncclGetVersion(ctypes.byref(v)), "ncclGetVersion")
    return v.value


def _check(lib: ctypes.CDLL, result: int, call: str) -> None:
    if result != 0:
        raise NcclError(f"{call}: {lib.ncclGetErrorString(result).decode()} (ncclResult {result})")


class Communicator:
    """One rank's NCCL communicator over ``world`` ranks, on ``device``.

    ``share_id`` sends rank 0's unique id to every rank and returns it (the job's process group
    does it: :meth:`over_process_group`)."""

    def __init__(self, rank: int, world: int, device: torch.device,
                 share_id: Callable[[bytes], bytes], lib: ctypes.CDLL | None = None) -> None:
        self.lib = lib or library()
        self.rank, self.world, self.device = rank, world, device
        uid = _UniqueId()
        if rank == 0:
            _check(self.lib, self.lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
        raw = share_id(bytes(uid.internal) if rank == 0 else b"")
        ctypes.memmove(uid.internal, raw, UNIQUE_ID_BYTES)
        self.comm = _vp()
        with torch.cuda.device(device):
            _check(self.lib, self.lib.ncclCommInitRank(ctypes.byref(self.comm), world, uid, rank),
                   "ncclCommInitRank")

    @classmethod
    def over_process_group(cls, rank: int, world: int, device: torch.device) -> "Communicator":
        """A communicator whose unique id travels over torch.distributed's default group."""
        import torch.distributed as dist

        def share(raw: bytes) -> bytes:
            box = [raw]
            dist.broadcast_object_list(box, src=0, device=device)
            return box[0]
        return cls(rank, world, device, share)

    def _stream(self) -> ctypes.c_void_p:
        return _vp(torch.cuda.current_stream(self.device).cuda_stream)

    def __call__(self, op: str, inp: torch.Tensor, out: torch.Tensor) -> None:
        """``op`` (a :data:`dlbench.measure.bandwidth.COMM_OPS` name) from ``inp`` into ``out``
        on the current stream: in place where ``inp`` is ``out`` (or, for all_gather and
        reduce_scatter, NCCL's in-place part of it), else out of place, as nccl-tests calls
        them."""
        lib, dtype, s = self.lib, DATA_TYPES[inp.dtype], self._stream()
        if op == "all_reduce":
            r = lib.ncclAllReduce(inp.data_ptr(), out.data_ptr(), out.numel(), dtype, SUM,
                                  self.comm, s)
        elif op == "broadcast":
            r = lib.ncclBroadcast(inp.data_ptr(), out.data_ptr(), out.numel(), dtype, 0,
                                  self.comm, s)
        elif op == "all_gather":
            r = lib.ncclAllGather(inp.data_ptr(), out.data_ptr(), inp.numel(), dtype, self.comm, s)
        elif op == "reduce_scatter":
            r = lib.ncclReduceScatter(inp.data_ptr(), out.data_ptr(), out.numel(), dtype, SUM,
                                      self.comm, s)
        elif op == "all_to_all":
            r = self._all_to_all(inp, out, dtype, s)
        else:
            raise ValueError(f"unknown collective {op!r}")
        _check(lib, r, f"nccl {op}")

    def _all_to_all(self, inp: torch.Tensor, out: torch.Tensor, dtype: int,
                    s: ctypes.c_void_p) -> int:
        lib, chunk = self.lib, inp.numel() // self.world
        step = chunk * inp.element_size()
        _check(lib, lib.ncclGroupStart(), "ncclGroupStart")
        for peer in range(self.world):
            _check(lib, lib.ncclSend(inp.data_ptr() + peer * step, chunk, dtype, peer,
                                     self.comm, s), "ncclSend")
            _check(lib, lib.ncclRecv(out.data_ptr() + peer * step, chunk, dtype, peer,
                                     self.comm, s), "ncclRecv")
        return lib.ncclGroupEnd()

    def close(self) -> None:
        if self.comm:
            _check(self.lib, self.lib.ncclCommDestroy(self.comm), "ncclCommDestroy")
            self.comm = _vp()

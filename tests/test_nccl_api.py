"""NCCL's own API through ctypes (``dlbench comm --api nccl``): the binding against the library
and header torch ships. A communicator needs GPUs; tests/test_comm.py runs one on two."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from dlbench.workloads import nccl_api


def _library():
    try:
        return nccl_api.library()
    except nccl_api.NcclError as exc:
        pytest.skip(f"no NCCL library here: {exc}")


def _header() -> str:
    import nvidia.nccl  # noqa: F401 - the pip package torch's CUDA builds depend on
    for root in nvidia.nccl.__path__:
        h = Path(root) / "include" / "nccl.h"
        if h.exists():
            return h.read_text()
    pytest.skip("no nccl.h here")


def test_the_library_is_the_one_torch_runs():
    lib = _library()
    code = nccl_api.version(lib)
    major, minor, patch = torch.cuda.nccl.version()
    # NCCL_VERSION_CODE since 2.9: major*10000 + minor*100 + patch
    assert code == major * 10000 + minor * 100 + patch


def test_the_type_and_op_codes_are_ncclhs():
    pytest.importorskip("nvidia.nccl")
    text = _header()
    enum = dict((name, int(v)) for name, v in re.findall(r"\b(nccl\w+)\s*=\s*(\d+)", text))
    names = {torch.int8: "ncclInt8", torch.uint8: "ncclUint8", torch.int32: "ncclInt32",
             torch.int64: "ncclInt64", torch.float16: "ncclFloat16",
             torch.float32: "ncclFloat32", torch.float64: "ncclFloat64",
             torch.bfloat16: "ncclBfloat16"}
    assert {t: enum[n] for t, n in names.items()} == nccl_api.DATA_TYPES
    assert enum["ncclSum"] == nccl_api.SUM
    assert re.search(r"#define NCCL_UNIQUE_ID_BYTES (\d+)", text).group(1) == str(
        nccl_api.UNIQUE_ID_BYTES)


def test_a_failed_call_says_what_nccl_said():
    lib = _library()
    with pytest.raises(nccl_api.NcclError, match=r"^ncclGetUniqueId: .+ \(ncclResult \d+\)$"):
        nccl_api._check(lib, lib.ncclGetUniqueId(None), "ncclGetUniqueId")  # no place to write


def test_a_missing_library_says_what_to_do():
    with pytest.raises(nccl_api.NcclError, match="could not be loaded.*CUDA build of torch"):
        nccl_api.library("libnccl-that-does-not-exist.so.9")

"""``benchmarks/beside_nccl_tests.py`` (and its shell script's refusals): each dlbench run set
beside the first like nccl-tests run after it, on the committed host-D campaign, whose page
quotes the same ratios (tests/test_comm_stream_page.py)."""

from __future__ import annotations

import gzip
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from fakes import cli
from fakes.pages import H

ROOT = Path(__file__).resolve().parents[1]
HOST_D = ROOT / "results" / H.H200_2_STREAM_D


@pytest.fixture(scope="module")
def beside():
    return cli.script("beside_nccl_tests")


@pytest.fixture
def outdir(tmp_path):
    """Host D's folder as the shell script leaves one: the store unzipped beside nccl-tests'
    output and order.txt."""
    for f in HOST_D.glob("*.txt"):
        shutil.copy(f, tmp_path / f.name)
    with gzip.open(HOST_D / "dlbench.db.gz", "rb") as src, \
            open(tmp_path / "dlbench.db", "wb") as dst:
        shutil.copyfileobj(src, dst)
    return tmp_path


def test_each_run_beside_the_first_like_run_after_it(beside, outdir, capsys):
    assert beside.main([str(outdir)]) == 0
    text = (outdir / "beside.md").read_text()
    assert capsys.readouterr().out.strip() == text.strip()
    heads = re.findall(r"^### run (\w+): (\w+), (\w+), .*beside (\S+) ", text, re.M)
    paired = {(run, op): f for run, op, _, f in heads}
    # the page's rounds are this rule's pairs
    for run, f in H.STREAM_D_NCCL + H.STREAM_D_TORCH + H.STREAM_D_BF16:
        assert paired[(run, "all_reduce")] == f
    for f in H.STREAM_D_OPS_FILES:
        op = f.removeprefix("nccl-mpi-G20-").removesuffix(".txt").replace("alltoall", "all_to_all")
        assert paired[(H.STREAM_D_OPS_RUN, op)] == f
    _, eager, _, per_iter = H.STREAM_D_EAGER_NCCL
    assert paired[(eager, "all_reduce")] == per_iter  # eager beside -I, never beside -G
    # the first eager run came before any -I run: beside the first one after it
    assert paired[("ef816b0e6f84", "all_reduce")] == "nccl-mpi-I1-1.txt"
    assert len(heads) == 12 and {d for _, _, d, _ in heads} == {"float32", "bfloat16"}
    # the like-for-like round 2's range, as the page quotes it across both rounds
    block = text.split(f"### run {H.STREAM_D_NCCL[1][0]}")[1].split("###")[0]
    assert "ratios 0.978 to 1.021" in block and "| 16 MiB |" in block
    assert "| 512 KiB |" not in block  # from 1 MiB by default
    # torch's out-of-place rows are said to be in-place calls
    torch_block = text.split(f"### run {H.STREAM_D_TORCH[0][0]}")[1].split("###")[0]
    assert "in-place calls on a second buffer" in torch_block
    assert "in-place calls" not in block


def test_a_lower_start_and_a_bad_order_file(beside, outdir, capsys):
    assert beside.main([str(outdir), "--from", "256KiB"]) == 0
    assert "| 256 KiB |" in (outdir / "beside.md").read_text()
    (outdir / "order.txt").write_text("dlbench\n")
    with pytest.raises(ValueError, match="order.txt line 1: expected 'dlbench RUN_ID'"):
        beside.main([str(outdir)])


def test_the_script_refuses_without_nccl_tests(tmp_path):
    done = subprocess.run(["bash", str(ROOT / "benchmarks/beside_nccl_tests.sh"),
                           str(tmp_path / "out"), str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "no all_reduce_perf in" in done.stderr
    assert not (tmp_path / "out").exists()  # refused before anything was made
    done = subprocess.run(["bash", str(ROOT / "benchmarks/beside_nccl_tests.sh"), str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "usage:" in done.stderr


def test_the_committed_side_by_side_is_what_the_script_renders(beside, tmp_path, capsys):
    """The two-H100 folder was written by the shell script itself: its beside.md is what the
    store and nccl-tests' files render today."""
    folder = ROOT / "results" / H.H100_2_STREAM
    for f in folder.glob("*.txt"):
        shutil.copy(f, tmp_path / f.name)
    with gzip.open(folder / "dlbench.db.gz", "rb") as src, \
            open(tmp_path / "dlbench.db", "wb") as dst:
        shutil.copyfileobj(src, dst)
    assert beside.main([str(tmp_path)]) == 0
    assert (tmp_path / "beside.md").read_text() == (folder / "beside.md").read_text()

"""Bad input, tried as a user types it: a documented exit code, one line on stderr that names the
flag, no traceback and nothing written. Also: text is printed as text (never rich markup), and a
CIFAR batch is read with a restricted unpickler."""

import io
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SRC = str(Path(__file__).resolve().parents[1] / "src")
USAGE = 2  # dlbench.commands.common.EXIT_USAGE


def dlbench(*args, cwd, timeout=120):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "dlbench", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=cwd)


CPU = ["-m", "tiny_cnn", "--device", "cpu"]
RDZV = ["--rdzv-endpoint", "localhost:29599"]

#: (the command line, the flag its one line of error must name)
BAD = [
    # compare
    (["compare", "a", "b", "--threshold", "-1"], "--threshold"),
    (["compare", "a", "b", "--threshold", "nan"], "--threshold"),
    (["compare", "a", "b", "--threshold", "inf"], "--threshold"),
    (["compare", "a", "b", "--alpha", "5"], "--alpha"),
    (["compare", "a", "b", "--alpha", "0"], "--alpha"),
    (["compare", "a", "b", "--alpha", "nan"], "--alpha"),
    (["compare", "a", "b", "--alpha", "1"], "--alpha"),
    (["compare", "a", "b", "--alpha", "-0.1"], "--alpha"),
    # whatif
    (["whatif", "-m", "resnet50", "-b", "64", "--step-ms", "inf"], "--step-ms"),
    (["whatif", "-m", "resnet50", "-b", "64", "--step-ms", "nan"], "--step-ms"),
    (["whatif", "-m", "resnet50", "-b", "64", "--step-ms", "-5"], "--step-ms"),
    (["whatif", "-m", "resnet50", "-b", "64", "--step-ms", "0"], "--step-ms"),
    (["whatif", "-m", "resnet50", "-b", "64", "--throughput", "-1"], "--throughput"),
    (["whatif", "-m", "resnet50", "-b", "0", "--step-ms", "300"], "--batch-size"),
    (["whatif", "-m", "resnet50", "--nodes", "0"], "--nodes"),
    (["whatif", "-m", "resnet50", "--nodes", "1,-2"], "--nodes"),
    (["whatif", "-m", "resnet50", "--gpus-per-node", "0"], "--gpus-per-node"),
    (["whatif", "-m", "resnet50", "--nics", "0"], "--nics"),
    (["whatif", "-m", "resnet50", "--ps-shards", "0"], "--ps-shards"),
    (["whatif", "-m", "resnet50", "--grad-mb", "nan"], "--grad-mb"),
    (["whatif", "-m", "resnet50", "--bytes-per-param", "0"], "--bytes-per-param"),
    (["whatif", "-m", "resnet50", "--backward-fraction", "1.5"], "--backward-fraction"),
    (["whatif", "-m", "resnet50", "--backward-fraction", "nan"], "--backward-fraction"),
    # maxbatch
    (["maxbatch", *CPU, "--start", "64", "--max", "8"], "--start"),
    (["maxbatch", *CPU, "--start", "0"], "--start"),
    (["maxbatch", *CPU, "--max", "-1"], "--max"),
    (["maxbatch", *CPU, "--tolerance", "-0.1"], "--tolerance"),
    (["maxbatch", *CPU, "--tolerance", "nan"], "--tolerance"),
    (["maxbatch", *CPU, "--warmup", "-1"], "--warmup"),
    (["maxbatch", *CPU, "--min-time", "nan"], "--min-time"),
    (["maxbatch", *CPU, "--max-time", "inf"], "--max-time"),
    (["maxbatch", *CPU, "--target-ci", "0"], "--target-ci"),
    (["maxbatch", *CPU, "--min-steps", "1"], "--min-steps"),
    # monitor, telemetry
    (["monitor", "--duration", "-5"], "--duration"),
    (["monitor", "--duration", "nan"], "--duration"),
    (["monitor", "--interval", "0"], "--interval"),
    (["monitor", "--interval", "inf"], "--interval"),
    (["monitor", "--gpu", "x"], "--gpu"),
    (["monitor", "--gpu", "0,-1"], "--gpu"),
    # scale
    (["scale", *CPU, "--nnodes", "2", "--node-rank", "2", *RDZV], "--node-rank"),
    (["scale", *CPU, "--nnodes", "2", "--node-rank", "7", *RDZV], "--node-rank"),
    (["scale", *CPU, "--node-rank", "-1"], "--node-rank"),
    (["scale", *CPU, "--nnodes", "0"], "--nnodes"),
    (["scale", *CPU, "--gpus", "0"], "--gpus"),
    (["scale", *CPU, "--timeout", "0"], "--timeout"),
    (["scale", *CPU, "--timeout", "nan"], "--timeout"),
    (["scale", *CPU, "--pg-timeout", "-1"], "--pg-timeout"),
    (["scale", *CPU, "--bucket-mb", "0"], "--bucket-mb"),
    (["scale", *CPU, "-b", "-4"], "--batch-size"),
    (["scale", *CPU, "--max-steps", "0"], "--max-steps"),
    # train
    (["train", "--dataset", "mnist5k", *CPU, "--target", "1.5"], "--target"),
    (["train", "--dataset", "mnist5k", *CPU, "--target", "nan"], "--target"),
    (["train", "--dataset", "mnist5k", *CPU, "--target", "0"], "--target"),
    (["train", "--dataset", "mnist5k", *CPU, "--target", "0.9", "--seeds", "0"], "--seeds"),
    (["train", "--dataset", "mnist5k", *CPU, "--target", "0.9", "--max-epochs", "0"],
     "--max-epochs"),
    (["train", "--dataset", "mnist5k", *CPU, "--target", "0.9", "--max-epochs", "-3"],
     "--max-epochs"),
    (["train", "--dataset", "mnist5k", *CPU, "--target", "0.9", "--gpus", "0"], "--gpus"),
    (["train", "--dataset", "mnist5k", *CPU, "--target", "0.9", "-b", "0"], "--batch-size"),
    (["train", "--dataset", "mnist5k", *CPU, "--target", "0.9", "--workers", "-1"],
     "--workers"),
    (["train", "--dataset", "mnist5k", *CPU, "--target", "0.9", "--lr", "0"], "--lr"),
    (["train", "--dataset", "mnist5k", *CPU, "--target", "0.9", "--lr", "inf"], "--lr"),
    (["train", "--dataset", "mnist5k", *CPU, "--target", "0.9", "--weight-decay", "-1"],
     "--weight-decay"),
    (["train", "--dataset", "mnist5k", *CPU, "--target", "0.9", "--warmup-epochs", "nan"],
     "--warmup-epochs"),
    (["train", "--dataset", "mnist5k", *CPU, "--target", "0.9", "--timeout", "-1"],
     "--timeout"),
    (["train", "--dataset", "mnist5k", *CPU, "--target", "0.9", "--throughput-steps", "-1"],
     "--throughput-steps"),
    (["train", "--dataset", "mnist5k", *CPU, "--target", "0.9", "--image-size", "0"],
     "--image-size"),
    (["train", "--dataset", "mnist5k", *CPU, "--target", "0.9", "--seed", "-1"], "--seed"),
    # throughput
    (["throughput", *CPU, "--min-time", "-1"], "--min-time"),
    (["throughput", *CPU, "--max-time", "nan"], "--max-time"),
    (["throughput", *CPU, "--warmup", "-1"], "--warmup"),
    (["throughput", *CPU, "--warmup-time", "inf"], "--warmup-time"),
    (["throughput", *CPU, "--max-steps", "0"], "--max-steps"),
    (["throughput", *CPU, "--target-ci", "1.5"], "--target-ci"),
    (["throughput", *CPU, "--telemetry-interval", "-1"], "--telemetry-interval"),
    (["throughput", *CPU, "--profile", "-1"], "--profile"),
    (["throughput", *CPU, "--seq-len", "0"], "--seq-len"),
    (["throughput", *CPU, "--seed", "-1"], "--seed"),
    (["throughput", *CPU, "-b", "0"], "--batch-size"),
    # comm
    (["comm", "--device", "cpu", "--factor", "1"], "--factor"),
    (["comm", "--device", "cpu", "--iters", "0"], "--iters"),
    (["comm", "--device", "cpu", "--gpus", "0"], "--gpus"),
    (["comm", "--device", "cpu", "--warmup", "-1"], "--warmup"),
    (["comm", "--device", "cpu", "--timeout", "inf"], "--timeout"),
    (["comm", "--device", "cpu", "--nnodes", "2", "--node-rank", "3", *RDZV], "--node-rank"),
    # net (checked before its privilege check)
    (["net", "-m", "tiny_mlp", "--hosts", "1"], "--hosts"),
    (["net", "-m", "tiny_mlp", "--steps", "0"], "--steps"),
    (["net", "-m", "tiny_mlp", "--compute-steps", "0"], "--compute-steps"),
    (["net", "-m", "tiny_mlp", "--bucket-mb", "nan"], "--bucket-mb"),
    # tune
    (["tune", *CPU, "--margin", "-0.1"], "--margin"),
    (["tune", *CPU, "--margin", "nan"], "--margin"),
    (["tune", *CPU, "--max-time", "0"], "--max-time"),
    (["tune", *CPU, "-b", "0"], "--batch-size"),
]


def test_the_table_is_distinct_and_large_enough():
    assert len({tuple(a) for a, _ in BAD}) == len(BAD) >= 40


@pytest.mark.parametrize("argv,flag", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_a_bad_number_is_a_one_line_usage_error(tmp_path, argv, flag):
    p = dlbench(*argv, cwd=tmp_path)
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == USAGE, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert flag in lines[0], lines[0]
    assert p.stdout == ""
    assert list(tmp_path.iterdir()) == []  # nothing ran, nothing written (no dlbench.db)


# -- the same rules, fuzzed through the parser --------------------------------------------------
def _parse_exit(argv) -> int:
    """What the parser alone makes of ``argv``: 0 if accepted, else its exit code; any other
    exception than argparse's exit is a bug (it would be a traceback)."""
    from dlbench.cli import build_parser
    err = io.StringIO()
    old, sys.stderr = sys.stderr, err
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:
        assert len(err.getvalue().strip().splitlines()) == 1, err.getvalue()
        return exc.code
    finally:
        sys.stderr = old
    return 0


def test_fuzzed_numbers_end_in_a_documented_exit_code():
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr),
                        st.integers(-2 ** 70, 2 ** 70).map(str),
                        st.sampled_from(["nan", "-inf", "1e999", "0x10", "1_0", " 3 ", "", "-"]))
    flags = st.sampled_from([
        ["compare", "a", "b", "--threshold"], ["compare", "a", "b", "--alpha"],
        ["whatif", "--step-ms"], ["whatif", "--nodes"], ["whatif", "--backward-fraction"],
        ["maxbatch", "-m", "x", "--start"], ["maxbatch", "-m", "x", "--tolerance"],
        ["monitor", "--duration"], ["monitor", "--interval"],
        ["scale", "-m", "x", "--node-rank"], ["scale", "-m", "x", "--timeout"],
        ["train", "--dataset", "d", "-m", "x", "--target"],
        ["throughput", "-m", "x", "--min-time"], ["comm", "--factor"], ["tune", "-m", "x",
                                                                          "--margin"]])

    @hypothesis.settings(max_examples=300, deadline=None, derandomize=True)
    @hypothesis.given(flags, numbers)
    def check(prefix, value):
        assert _parse_exit([*prefix[:-1], f"{prefix[-1]}={value}"]) in (0, USAGE)

    check()


def test_in_range_numbers_are_accepted():
    from dlbench.cli import build_parser
    a = build_parser().parse_args(["compare", "a", "b", "--alpha", "0.01", "--threshold", "0"])
    assert (a.alpha, a.threshold) == (0.01, 0.0)
    a = build_parser().parse_args(["whatif", "--step-ms", "310,1e3", "--nodes", "1,2"])
    assert a.step_ms == [[310.0, 1000.0]] and a.nodes == [[1, 2]]
    a = build_parser().parse_args(["scale", "-m", "x", "--nnodes", "2", "--node-rank", "1"])
    assert (a.nnodes, a.node_rank) == (2, 1)
    a = build_parser().parse_args(["throughput", "-m", "x", "--telemetry-interval", "0"])
    assert a.telemetry_interval == 0


# -- text is text, not markup ---------------------------------------------------------------------
def test_table_text_is_printed_verbatim():
    from rich.console import Console

    from dlbench.report import terminal
    from dlbench.report.table import Table

    con = Console(file=io.StringIO(), width=200, color_system=None)
    terminal.print_table(Table("[bold]t", ("[b]col", "x"), (("[/x]", "1"), ("a[/]b", "2")),
                               ("note [/dim] [red]",)), con)
    out = con.file.getvalue()
    for text in ("[bold]t", "[b]col", "[/x]", "a[/]b", "note [/dim] [red]"):
        assert text in out, (text, out)


def test_progress_labels_are_printed_verbatim():
    from rich.console import Console

    from dlbench.report import terminal

    class Cfg:
        label = "model [/x] b8"

    class Rec:
        config, error_type, error, unit = Cfg(), "RuntimeError", "at [/__w/pytorch/x.cpp:1]", "x"

        def summary(self):
            return None

    con = Console(file=io.StringIO(), width=200, color_system=None)
    p = terminal.RichProgress(con)
    p.begin(2)
    p.start(Cfg())
    p.done(Rec())
    p.skipped(Cfg())
    p.end()
    out = con.file.getvalue()
    assert "model [/x] b8" in out and "[/__w/pytorch/x.cpp:1]" in out


def test_search_progress_lines_are_text():
    from dlbench.commands.common import SearchPrinter
    lines = []

    class P:
        batch, outcome, wall_s, fits, allocated_peak_bytes = 8, "oom [/x]", None, False, None

    SearchPrinter(lines.append).probed(P())
    from rich.console import Console
    con = Console(file=io.StringIO(), width=200, color_system=None)
    for line in lines:
        con.print(line)
    assert "oom [/x]" in con.file.getvalue()


# -- CIFAR pickles ------------------------------------------------------------------------------
class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _cifar_folder(root: Path, batch: dict, name: str = "data_batch_1") -> Path:
    from fakes.datasets import write_cifar
    write_cifar(root, per_batch=4, n_eval=4)
    folder = root / "cifar-10-batches-py"
    with open(folder / name, "wb") as f:
        pickle.dump(batch, f, protocol=2)
    return folder


def test_a_crafted_cifar_batch_cannot_run_code(tmp_path):
    from dlbench.data import load_dataset
    from dlbench.data.cifar import CifarFormatError
    marker = tmp_path / "pwned"
    folder = _cifar_folder(tmp_path, {"data": _Evil(marker), "labels": [0]})
    with pytest.raises(CifarFormatError) as e:
        load_dataset("cifar10", tmp_path)
    assert not marker.exists()
    assert str(folder / "data_batch_1") in str(e.value) and "system" in str(e.value)


def test_the_cli_refuses_a_crafted_batch_in_one_line(tmp_path):
    marker = tmp_path / "pwned"
    _cifar_folder(tmp_path / "d", {"data": _Evil(marker), "labels": [0]}, "test_batch")
    p = dlbench("train", "--dataset", "cifar10", "--data-dir", str(tmp_path / "d"), "-m",
                "tiny_cnn", "--target", "0.5", "--device", "cpu", "--no-mllog",
                "--db", str(tmp_path / "x.db"), cwd=tmp_path, timeout=300)
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == USAGE, p.stderr
    assert "test_batch" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not marker.exists() and not (tmp_path / "x.db").exists()


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_a_well_formed_batch_still_reads(tmp_path, protocol):
    from dlbench.data.cifar import _batch
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, size=(6, 3072), dtype=np.uint8)
    labels = [int(x) for x in rng.integers(0, 10, size=6)]
    path = tmp_path / "data_batch_1"
    with open(path, "wb") as f:  # as the real batches: bytes keys, a uint8 array, a list
        pickle.dump({b"batch_label": b"training batch 1 of 5", b"labels": labels, b"data": data,
                     b"filenames": [b"a.png"] * 6}, f, protocol=protocol)
    x, y = _batch(path)
    np.testing.assert_array_equal(x, data.reshape(-1, 3, 32, 32))
    assert y.tolist() == labels


def test_train_help_says_cifar_is_pickles(tmp_path):
    p = dlbench("train", "--help", cwd=tmp_path)
    assert p.returncode == 0
    text = " ".join(p.stdout.split())
    assert "pickle" in text and "restricted unpickler" in text

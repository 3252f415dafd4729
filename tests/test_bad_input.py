"""Bad input, tried as a user types it: a documented exit code, one line on stderr that names the
flag, no traceback and nothing written. Also: text is printed as text (never rich markup), and a
CIFAR batch is read with a restricted unpickler."""

import functools
import hashlib
import io
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fakes import cli
from fakes.cli import SRC

USAGE = 2  # dlbench.commands.common.EXIT_USAGE


def dlbench(*args, cwd, timeout=120):
    """The command in this process (tests/fakes/cli.py): its exit code, stdout and stderr as a
    child's; test_a_child_says_what_the_runner_says checks that against real children."""
    return cli.run(*args, cwd=cwd, timeout=timeout)


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
    every = {tuple(a) for a, _ in BAD} | {tuple(a) for a, _, _ in BAD_WITH_STORE}
    assert len(every) == len(BAD) + len(BAD_WITH_STORE) >= 100
    commands = {a[0] for a, _ in BAD} | {a[0] for a, _, _ in BAD_WITH_STORE}
    assert commands >= {"results", "report", "compare", "env", "models", "gpus", "roofline",
                        "telemetry", "monitor", "peak", "comm", "net", "tune", "train", "run",
                        "throughput", "maxbatch", "scale", "whatif"}, commands


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
@functools.cache
def _parser():
    """One parser for every example (building one takes longer than parsing with it)."""
    from dlbench.cli import build_parser
    return build_parser()


def _parse_exit(argv) -> int:
    """What the parser alone makes of ``argv``: 0 if accepted, else its exit code; any other
    exception than argparse's exit is a bug (it would be a traceback)."""
    err = io.StringIO()
    old, sys.stderr = sys.stderr, err
    try:
        _parser().parse_args(argv)
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


# -- bad input beside a store: it stays byte-identical -------------------------------------------
DB = ["--db", "S.db"]
TRAIN = ["-m", "tiny_mlp", "--target", "0.5", "--device", "cpu", "--no-mllog", *DB]
EXIT_CODES = {0, 1, 2, 3, 4, 5, 130}  # dlbench --help's epilog (commands.common.EXIT_CODES)

#: (the command line, run in a folder holding the store S.db, a text file garbage.txt, a
#: directory adir, an empty directory empty, a bad CSV bad.csv and idx files cut short in
#: idx/; the exit code; a text its one line of error must hold)
BAD_WITH_STORE = [
    (["bogus"], USAGE, "bogus"),
    (["--bogus", "env"], USAGE, "--bogus"),
    (["results"], USAGE, "ACTION"),
    (["results", "bogus", *DB], USAGE, "bogus"),
    (["results", "ls", *DB, "--limit", "-5"], USAGE, "--limit"),
    (["results", "ls", *DB, "--limit", "x"], USAGE, "--limit"),
    (["results", "ls", *DB, "--run", "nosuch"], USAGE, "nosuch"),
    (["results", "show", "nosuch", *DB], USAGE, "nosuch"),
    (["results", "show", "%", *DB], USAGE, "%"),
    (["results", "show", *DB, "--tag", "nosuch"], USAGE, "nosuch"),
    (["results", "export", *DB, "-o", "S.db"], USAGE, "S.db"),
    (["results", "export", *DB, "-o", "nodir/x.json"], USAGE, "nodir"),
    (["results", "export", *DB, "-o", "adir"], USAGE, "adir"),
    (["results", "export", *DB, "--run", "nosuch"], USAGE, "nosuch"),
    (["results", "export", *DB, "--format", "xml"], USAGE, "--format"),
    (["results", "merge", *DB, "S.db"], USAGE, "S.db"),
    (["results", "merge", *DB, "missing.db"], USAGE, "missing.db"),
    (["results", "merge", *DB, "garbage.txt"], USAGE, "garbage.txt"),
    (["results", "ls", "--db", "missing.db"], USAGE, "missing.db"),
    (["results", "ls", "--db", "garbage.txt"], USAGE, "garbage.txt"),
    (["results", "ls", "--db", "adir"], USAGE, "adir"),
    (["results", "check", "--db", "garbage.txt"], USAGE, "garbage.txt"),
    (["results", "check", "--db", "missing.db"], USAGE, "missing.db"),
    (["report", *DB, "-o", "S.db"], USAGE, "S.db"),
    (["report", *DB, "-o", "/dev/full"], USAGE, "/dev/full"),
    (["report", *DB, "-o", "adir"], USAGE, "adir"),
    (["report", *DB, "--run", "nosuch"], USAGE, "nosuch"),
    (["report", "--db", "missing.db"], USAGE, "missing.db"),
    (["report", *DB, "--tag", "nosuch"], USAGE, "--tag"),
    (["report", "--db", "garbage.txt"], USAGE, "garbage.txt"),
    (["compare", "nosuch1", "nosuch2", *DB], USAGE, "nosuch1"),
    (["compare", "run-a", "nosuch", *DB], USAGE, "nosuch"),
    (["compare", "run-a", "run-a", *DB, "--db-b", "missing.db"], USAGE, "missing.db"),
    (["compare", "run-a", "run-a", *DB, "--db-b", "garbage.txt"], USAGE, "garbage.txt"),
    (["compare", "run-a", *DB], USAGE, "B"),
    (["env", "--bogus"], USAGE, "--bogus"),
    (["env", "extra"], USAGE, "extra"),
    (["models", "--bogus"], USAGE, "--bogus"),
    (["models", "extra"], USAGE, "extra"),
    (["gpus", *DB, "-m", "nosuchmodel"], USAGE, "nosuchmodel"),
    (["gpus", *DB, "--mode", "x"], USAGE, "--mode"),
    (["gpus", *DB, "--predict", "abc"], USAGE, "--predict"),
    (["gpus", *DB, "--source", "bogus"], USAGE, "--source"),
    (["gpus", "--db", "garbage.txt"], USAGE, "garbage.txt"),
    (["gpus", *DB, "--x", "fp64"], USAGE, "--x"),
    (["roofline", *DB, "--run", "nosuch"], USAGE, "nosuch"),
    (["roofline", "--db", "garbage.txt"], USAGE, "garbage.txt"),
    (["telemetry", *DB, "nosuch"], USAGE, "nosuch"),
    (["telemetry", *DB, "--run", "nosuch"], USAGE, "nosuch"),
    (["telemetry", *DB, "--csv", "S.db"], USAGE, "--csv"),
    (["telemetry", *DB, "--csv", "adir"], USAGE, "--csv"),
    (["telemetry", "--db", "garbage.txt"], USAGE, "garbage.txt"),
    (["monitor", "--csv", "nodir/x.csv", "--duration", "1"], USAGE, "--csv"),
    (["monitor", "--csv", "S.db", "--duration", "1"], USAGE, "--csv"),
    (["monitor", "--csv", "adir", "--duration", "1"], USAGE, "--csv"),
    (["peak", "--precision", "bogus", *DB], USAGE, "bogus"),
    (["peak", "--verbs", "bogus", *DB], USAGE, "bogus"),
    (["peak", "--device", "bogus", *DB], USAGE, "--device"),
    (["peak", "--db", "garbage.txt", "--device", "cpu", "--quick"], USAGE, "garbage.txt"),
    (["comm", "--op", "bogus", "--device", "cpu"], USAGE, "bogus"),
    (["comm", "--min", "0", "--device", "cpu"], USAGE, "--min"),
    (["comm", "--min", "10", "--max", "1", "--device", "cpu"], USAGE, "--min"),
    (["comm", "--dtype", "x", "--device", "cpu"], USAGE, "--dtype"),
    (["comm", "--interconnect", "bogus", "--device", "cpu"], USAGE, "bogus"),
    (["comm", "--device", "bogus"], USAGE, "--device"),
    (["net", "--link", "bogus", "-m", "tiny_mlp"], USAGE, "bogus"),
    (["net", "--strategy", "bogus", "-m", "tiny_mlp"], USAGE, "bogus"),
    (["net", "-m", "nosuchmodel"], USAGE, "nosuchmodel"),
    (["net", "--seed", "-1", "-m", "tiny_mlp"], USAGE, "--seed"),
    (["tune", "-m", "nosuchmodel", "--device", "cpu", *DB], USAGE, "nosuchmodel"),
    (["tune", "-m", "tiny_cnn", "--levers", "bogus", "--device", "cpu", *DB], USAGE, "bogus"),
    (["tune", "-m", "tiny_cnn", "--precision", "bogus", "--device", "cpu", *DB], USAGE, "bogus"),
    (["tune", "-m", "tiny_cnn", "--device", "bogus", *DB], USAGE, "--device"),
    (["run", "--suite", "bogus", *DB], USAGE, "--suite"),
    (["run", "--db", "garbage.txt", "--suite", "smoke"], USAGE, "garbage.txt"),
    (["run", "--db", "adir", "--suite", "smoke"], USAGE, "adir"),
    (["throughput", "-m", "nosuchmodel", "--device", "cpu", *DB], USAGE, "nosuchmodel"),
    (["throughput", "-m", "tiny_cnn", "--precision", "bogus", "--device", "cpu", *DB], USAGE,
     "bogus"),
    (["throughput", "-m", "tiny_cnn", "--device", "cpu", "--db", "garbage.txt"], USAGE,
     "garbage.txt"),
    (["maxbatch", "-m", "nosuchmodel", "--device", "cpu", *DB], USAGE, "nosuchmodel"),
    (["scale", "-m", "nosuchmodel", "--device", "cpu", *DB], USAGE, "nosuchmodel"),
    (["scale", "-m", "tiny_cnn", "--strategy", "bogus", "--device", "cpu", *DB], USAGE, "bogus"),
    (["whatif", "-m", "nosuchmodel", *DB], USAGE, "nosuchmodel"),
    (["whatif", "-m", "nosuchmodel", "-b", "64", "--step-ms", "300"], USAGE, "nosuchmodel"),
    (["train", "--dataset", "bogus", *TRAIN], USAGE, "--dataset"),
    (["train", "--dataset", "mnist5k", "--data-dir", "garbage.txt", *TRAIN], USAGE,
     "--data-dir garbage.txt"),
    (["train", "--dataset", "mnist5k", "--data-dir", "bad.csv", *TRAIN], USAGE,
     "--data-dir bad.csv"),
    (["train", "--dataset", "mnist5k", "--data-dir", "empty", *TRAIN], USAGE, "--data-dir empty"),
    (["train", "--dataset", "mnist5k", "--data-dir", "nodir", *TRAIN], USAGE, "--data-dir nodir"),
    (["train", "--dataset", "fashion-mnist", "--data-dir", "garbage.txt", *TRAIN], USAGE,
     "--data-dir garbage.txt"),
    (["train", "--dataset", "fashion-mnist", "--data-dir", "empty", *TRAIN], USAGE,
     "--data-dir empty"),
    (["train", "--dataset", "fashion-mnist", "--data-dir", "idx", *TRAIN], USAGE,
     "train-images-idx3-ubyte"),
    (["train", "--dataset", "mnist", "--data-dir", "adir", *TRAIN], USAGE, "--data-dir adir"),
    (["train", "--dataset", "cifar10", "--data-dir", "garbage.txt", *TRAIN], USAGE,
     "--data-dir garbage.txt"),
    (["train", "--dataset", "cifar10", "--data-dir", "empty", *TRAIN], USAGE, "--data-dir empty"),
    (["train", "--dataset", "imagefolder", "--data-dir", "garbage.txt", *TRAIN], USAGE,
     "--data-dir garbage.txt"),
    (["train", "--dataset", "imagefolder", "--data-dir", "empty", *TRAIN], USAGE,
     "--data-dir empty"),
]


def _fill_store(db: Path) -> None:
    from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
    from dlbench.store import Store
    env = {"accelerator": "cpu", "cpu_model": "Test CPU", "packages": {"torch": "2.9.0"}}
    with Store(db) as s:
        s.start_run("run-a", "dlbench throughput", env, "k", "CPU")
        for b in (16, 32):
            s.add(ThroughputRecord(config=ThroughputConfig(model="resnet50", batch_size=b,
                                                           device="cpu"),
                                   env=env, step_times_s=(0.1, 0.11, 0.09), samples_per_step=b,
                                   unit="images", run_id="run-a"), "k")
        s.finish_run("run-a", "done")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def beside_a_store(tmp_path):
    _fill_store(tmp_path / "S.db")
    (tmp_path / "garbage.txt").write_text("hello\n")
    (tmp_path / "bad.csv").write_text("1,2,3\nx,y\n")
    (tmp_path / "adir").mkdir()
    (tmp_path / "empty").mkdir()
    idx = tmp_path / "idx"  # the four files there, but cut short or not idx at all
    idx.mkdir()
    (idx / "train-images-idx3-ubyte").write_bytes(b"\x00\x00\x08\x03\x00\x00")  # truncated
    (idx / "train-labels-idx1-ubyte").write_bytes(b"not an idx file")
    (idx / "t10k-images-idx3-ubyte.gz").write_bytes(b"not gzip")
    (idx / "t10k-labels-idx1-ubyte").write_bytes(b"\x00\x00\x08\x01\x00\x00\x00\x09\x01")
    return tmp_path


@pytest.mark.parametrize("argv,code,needle", BAD_WITH_STORE,
                         ids=[" ".join(a) for a, _, _ in BAD_WITH_STORE])
def test_bad_input_beside_a_store_is_one_line_and_leaves_it_as_it_was(beside_a_store, argv,
                                                                       code, needle):
    before = {p: _digest(beside_a_store / p) for p in ("S.db", "garbage.txt", "bad.csv")}
    p = dlbench(*argv, cwd=beside_a_store)
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == code and code in EXIT_CODES, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert needle in lines[0], lines[0]
    assert {f: _digest(beside_a_store / f) for f in before} == before
    assert not (beside_a_store / "dlbench.db").exists()


#: A few of the lines above, one per way an error is found: by argparse, by a command's own
#: checks, by the store, by a data reader, and one in a folder with nothing in it.
THROUGH_A_CHILD = [["bogus"], ["throughput", *CPU, "--min-time", "-1"],
                   ["results", "ls", "--db", "garbage.txt"],
                   ["train", "--dataset", "cifar10", "--data-dir", "empty", *TRAIN],
                   ["report", *DB, "--run", "nosuch"], ["whatif", "-m", "nosuchmodel", *DB]]


@pytest.mark.parametrize("argv", THROUGH_A_CHILD, ids=" ".join)
def test_a_child_says_what_the_runner_says(beside_a_store, argv):
    # The tables above run in this process (fakes.cli.run); a user's shell starts a fresh
    # interpreter, where an import-time warning or a traceback would reach stderr too.
    child = cli.spawn(*argv, cwd=beside_a_store)
    here = cli.run(*argv, cwd=beside_a_store)
    assert (child.returncode, child.stdout, child.stderr) == \
        (here.returncode, here.stdout, here.stderr)
    assert child.returncode == USAGE and len(child.stderr.strip().splitlines()) == 1


# -- one error path: --debug, an unexpected error, results check --------------------------------
def test_an_unexpected_error_is_one_line_naming_it_and_debug_adds_the_traceback(monkeypatch,
                                                                                capsys):
    from dlbench import cli
    from dlbench.commands.common import EXIT_INTERNAL

    def boom(args):
        raise ZeroDivisionError("a bug [/x]")
    monkeypatch.setattr("dlbench.commands.info.cmd_env", boom)  # register() reads it per parser
    monkeypatch.delenv("DLBENCH_DEBUG", raising=False)
    assert cli.main(["env"]) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "ZeroDivisionError: a bug [/x]" in err and "--debug" in err
    assert cli.main(["--debug", "env"]) == EXIT_INTERNAL
    assert "Traceback" in capsys.readouterr().err
    monkeypatch.setenv("DLBENCH_DEBUG", "1")
    assert cli.main(["env"]) == EXIT_INTERNAL
    assert "Traceback" in capsys.readouterr().err


def test_an_oserror_is_one_usage_line(monkeypatch, capsys):
    from dlbench import cli

    def full(args):
        raise OSError(28, "No space left on device", "out.csv")
    monkeypatch.setattr("dlbench.commands.info.cmd_env", full)
    monkeypatch.delenv("DLBENCH_DEBUG", raising=False)
    assert cli.main(["env"]) == USAGE
    err = capsys.readouterr().err
    assert err.strip().splitlines() == ["error: out.csv: No space left on device"], err


def test_help_documents_every_exit_code_and_debug(tmp_path):
    p = dlbench("--help", cwd=tmp_path)
    for text in ("--debug", "DLBENCH_DEBUG", "exit codes", "  1 ", "  2 ", "  3 ", "  4 ",
                 "  5 ", "  130 "):
        assert text in p.stdout, text


def test_results_check_reads_only_and_names_each_problem(beside_a_store):
    import json
    import sqlite3
    db = beside_a_store / "S.db"
    p = dlbench("results", "check", "--db", str(db), cwd=beside_a_store)
    assert p.returncode == 0 and "clean" in p.stdout, p.stdout + p.stderr
    con = sqlite3.connect(db)  # a test may write the file any way it likes
    good = con.execute("SELECT * FROM results LIMIT 1").fetchone()
    for rid, blob in (("bad-json", "{not json"), ("alien-kind", json.dumps({"kind": "alien"}))):
        con.execute("INSERT INTO results VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                    (rid, *good[1:-1], blob))
    con.execute("INSERT INTO runs (run_id, started_at, status, command, env_json) VALUES "
                "('run-killed', '2026-01-02T03:04:05', 'running', 'dlbench run', '{}')")
    con.commit()
    con.close()
    before = _digest(db)
    p = dlbench("results", "check", "--db", str(db), cwd=beside_a_store)
    assert p.returncode == 3, p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    for text in ("bad-json", "alien-kind", "unknown record kind", "run-killed",
                 "2026-01-02T03:04:05", "3 problem(s)"):
        assert text in p.stdout, (text, p.stdout)
    assert _digest(db) == before


def test_truncated_and_foreign_idx_files_are_named(tmp_path):
    from dlbench.data.idx import IdxFormatError, read_idx
    for data, says in ((b"\x00\x00\x08\x03\x00\x00", "truncated"), (b"junk", "magic"),
                       (b"\x00\x00\x0b\x01\x00\x00\x00\x02\x00\x01\x00", "truncated")):
        path = tmp_path / "f-idx3-ubyte"
        path.write_bytes(data)
        with pytest.raises(IdxFormatError, match=says) as e:
            read_idx(path)
        assert str(path) in str(e.value)
    gz = tmp_path / "f-idx3-ubyte.gz"
    gz.write_bytes(b"not gzip")
    with pytest.raises(IdxFormatError, match="cannot be read"):
        read_idx(gz)


def test_sigterm_in_any_command_is_one_line_and_exit_130(tmp_path):
    code = ("import os, signal, sys, time\n"
            "import dlbench.commands.info as info\n"
            "info.cmd_env = lambda args: (os.kill(os.getpid(), signal.SIGTERM), time.sleep(30))\n"
            "from dlbench.cli import main\n"
            "sys.exit(main(['env']))\n")
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=env, cwd=tmp_path)
    assert p.returncode == 130, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: interrupted"), p.stderr

"""Reading a campaign page's prose (its text without the generated tables) in the tests that
check the figures it quotes against their records, and :data:`H`, the script that renders the
generated tables (``tools/headline.py``), loaded once for every test that reads it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

import pytest
from fakes.cli import script

#: ``tools/headline.py`` as a module: the pages' generated tables and their reading of a
#: committed store (a maintainer's script, not in the package).
H = script("tools/headline.py")

_GENERATED = re.compile(r"<!-- headline:.*?<!-- /headline:[\w-]+ -->", re.S)


def prose(page: str) -> str:
    """The page without its generated tables, whitespace folded: the text a person wrote."""
    return " ".join(_GENERATED.sub("", page).split())


def assert_says(page: str, text: str) -> None:
    assert text in prose(page), f"the page no longer says {text!r}"


def stored_runs(folder: str, runs: Sequence[str], kind: str,
                workdir: Path) -> tuple[list[Any], list[Any]]:
    """The ``kind`` records of ``runs`` in the committed store of ``results/FOLDER`` (run
    order, then stored order), and the store's ``dlbench peak`` records (the roofs)."""
    store = H.open_store(Path(__file__).resolve().parents[2] / "results", folder, workdir)
    recs = [r for run in runs for r in store.results(run_id=run, kind=kind)]
    peaks = store.results(kind="peak")
    store.close()
    return recs, peaks


def store_fixture(folder: str):
    """A module-scoped fixture: the committed store of ``results/FOLDER``, opened from a
    temporary copy (``store = store_fixture(H.H100)`` in a page's test module)."""
    @pytest.fixture(scope="module")
    def store(tmp_path_factory):
        s = H.open_store(Path(__file__).resolve().parents[2] / "results", folder,
                         tmp_path_factory.mktemp("store"))
        yield s
        s.close()
    return store


def sigterm_run(store: Any, run_id: str, folder: Path, says: Any) -> tuple[Any, str]:
    """The checks every collectives page makes of its SIGTERM to a two-rank ``scale`` job: the
    run kept as interrupted with no result, its command as the page quotes it, dlbench's own
    line in ``sigterm.log``; returns the run and the device call's account (``sigterm.txt``)
    for the page's own figures."""
    run = next(r for r in store.runs() if r.run_id == run_id)
    assert (run.status, run.results, run.tag) == ("interrupted", 0, "sigterm")
    command = re.sub(r" --db \S+ --tag \S+", "", run.command)
    assert command == "dlbench scale -m resnet50 -b 64 --gpus 2 --precision bf16 --max-time 30"
    says(f"`{command}`: two NCCL ranks under torchrun")
    says(f"The store keeps the run, {run.run_id}, as `interrupted` with 0 results")
    quoted = "error: interrupted: 0 result(s) of this run are kept"
    log = (folder / "sigterm.log").read_text()
    assert quoted in log and f"(run {run.run_id})" in log
    says(f'"{quoted}"')
    text = (folder / "sigterm.txt").read_text()
    assert f"command: {run.command}\n" in text
    assert "SIGTERM to the dlbench process, 8 s after both ranks were on the GPUs" in text
    return run, text


def rate(r: Any) -> float:
    """A throughput record's figure in its unit (tokens, not sequences, for a language model)."""
    return r.summary().throughput * r.units_per_sample


def halfwidth(r: Any) -> str:
    """A record's ±95% interval as the pages write it (``±0.41%``)."""
    from dlbench.report.table import fmt_pct
    return "±" + fmt_pct(r.summary().rel_halfwidth)


def flags_but_one_process(r: Any) -> list[str]:
    """A one-process record's flags but ``one process``, which a page says once for many."""
    every = H.record_flags(r)
    assert "one process" in every
    return [f for f in every if f != "one process"]


def environment_rows(env: dict[str, Any]) -> list[str]:
    """The environment table's software rows as the GPU campaign pages write them (driver,
    CUDA runtime, cuDNN, NCCL, torch and its libraries, an Intel Xeon host), from a record's
    environment."""
    assert env["cpu_model"].startswith("Intel(R) Xeon(R)")
    p = env["packages"]
    return [f"| driver | {env['driver']} |",
            f"| CUDA runtime | {env['cuda_runtime']} |",
            f"| cuDNN | {env['cudnn'] // 10000}.{env['cudnn'] // 100 % 100} ({env['cudnn']}) |",
            f"| NCCL | {env['nccl']} |",
            f"| torch | {p['torch']} (torchvision {p['torchvision']}, timm {p['timm']}, "
            f"transformers {p['transformers']}) |",
            f"| host | Intel Xeon, {env['cpu_logical_cores']} threads; Python {env['python']}; "
            f"Linux {'.'.join(env['kernel'].split('.')[:2])} |"]


def resnet50_forward_flops(v1: bool) -> float:
    """ResNet-50's forward FLOPs at batch 2, counted on the meta device: torchvision's v1.5
    (stride on the 3x3 convolution of a downsampling block) or, with ``v1``, the stride moved
    to the first 1x1 convolution, as tf_cnn_benchmarks' v1 has it."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from dlbench.models import get_model
    spec = get_model("resnet50")
    with torch.device("meta"):
        model = spec.build().eval()
    if v1:
        for block in model.modules():
            if type(block).__name__ == "Bottleneck" and block.conv2.stride != (1, 1):
                block.conv1.stride, block.conv2.stride = block.conv2.stride, (1, 1)
    x, _ = spec.make_batch(2, "meta")
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(x)
    return counter.get_total_flops()

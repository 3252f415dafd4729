"""A config's error names its fields; the command line prints the flags that set them.

The configs are built from Python (``dlbench.measure_throughput``, ``ThroughputConfig``) as well
as from the command line: their checks speak of fields (``precision``, ``batch_size``), never of
flags a Python caller did not pass, and ``dlbench.commands.common.as_flags`` spells the fields as
flags when the command line prints the error, so its users read what they read before.
"""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

import pytest

import dlbench
from conftest import FAST_STOP
from fakes.cli import run as run_cli
from fakes.pages import assert_says
from dlbench.cli import build_parser
from dlbench.commands.common import FIELD_FLAGS, as_flags
from dlbench.config import ConfigError
from dlbench.records.scaling import ScalingConfig
from dlbench.records.throughput import ThroughputConfig
from dlbench.store import StoreError

SRC = Path(__file__).resolve().parents[1] / "src" / "dlbench"

#: The jobs and workloads that check a sweep or a config before or while it runs: their errors
#: reach Python callers, and a workload's become stored failure rows, as well as the command line.
RUN_MODULES = [*(SRC / "jobs" / f"{name}.py" for name in
                 ("plans", "train_runs", "net_runs", "generate_runs", "serve_runs", "sweep",
                  "runs")),
               *(SRC / "workloads" / f"{name}.py" for name in
                 ("throughput", "scaling", "tp", "checkpointing", "fp8", "fp8_inference",
                  "generate", "fusion", "gqa_fold", "size_guard", "maxbatch", "serve/client",
                  "serve/prompts", "collectives", "nccl_api"))]

#: The modules whose checks name fields: every record kind and its config, the shared config,
#: the stopping rule, the device checks every config passes before it runs, the interconnect
#: profiles a scaling config names, and the jobs and workloads above.
FIELD_MODULES = sorted([*SRC.glob("records/*.py"), SRC / "config.py", SRC / "measure/stopping.py",
                        SRC / "workloads/devices.py", SRC / "launch/interconnect.py",
                        *RUN_MODULES])

#: Flag strings that stay in those modules, each with why.
FLAGS_ALLOWED = {
    ("records/compat.py", "--seed004"): "old flag -> today's: data about flags, not a message",
    ("records/compat.py", "--ps-cluster"): "old flag -> today's: data about flags, not a message",
    ("records/train.py", "; try a smaller --lr or more --warmup-epochs)"):
        "a diverged training run's stored error; only 'dlbench train' starts one",
    ("records/train.py", "; raise --max-epochs or lower --target"):
        "a training run's stored error when it missed its target; only 'dlbench train' "
        "starts one",
    ("jobs/serve_runs.py", " -m dlbench.workloads.serve.stub --port "):
        "the stub server's own command line, which the sweep starts",
    ("jobs/serve_runs.py", " --ttft-ms "): "the stub server's own command line",
    ("jobs/serve_runs.py", " --itl-ms "): "the stub server's own command line",
    ("workloads/scaling.py", "turned off (--no-profile-comm)"):
        "why a record has no comm profile: no field count turns it off (NO_FLAG), the flag does",
    ("jobs/sweep.py", "a fatal device error left this process unable to measure; rerun with "
                      "--resume --isolate to go on in fresh processes"):
        "a sweep's outcome message, which only the command line prints; the Python API turns "
        "a stopped sweep into its record or KeyboardInterrupt, and nothing stores the message",
    ("jobs/sweep.py", "; rerun the same command with --resume to go on"):
        "the outcome message of an interrupted sweep: the command line prints it, to rerun the "
        "same command",
}

#: Fields an error may name that no flag sets (reached from Python alone).
NO_FLAG = {"comm_profile_steps": "--no-profile-comm turns it off; no count is typed",
           "confidence": "the stopping rule's level: no flag sets it"}

_FLAG = re.compile(r"(?<![\w-])--[a-z]")
_ERRORS = {"ConfigError", "StopRuleError", "UnsupportedError"}


def _strings(path: Path) -> list[str]:
    """The string literals of a module, its docstrings left out (they document both audiences)."""
    tree = ast.parse(path.read_text())
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}
    return [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
            and isinstance(node.value, str) and id(node) not in docs]


def _named_fields(path: Path) -> set[str]:
    """The field names a module's errors give literally: ``ConfigError(msg, "field",
    also=(...))`` and ``choice("field", ...)``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            continue
        args = []
        if node.func.id in _ERRORS:
            args = node.args[1:2] + [v for kw in node.keywords if kw.arg == "also"
                                     for v in getattr(kw.value, "elts", [])]
        elif node.func.id == "choice":
            args = node.args[:1]
        names |= {a.value for a in args if isinstance(a, ast.Constant)}
    return names


def test_no_flag_strings_in_the_layers_below_the_command_line():
    found = {(str(path.relative_to(SRC)), text) for path in FIELD_MODULES
             for text in _strings(path) if _FLAG.search(text)}
    assert found == set(FLAGS_ALLOWED), sorted(found ^ set(FLAGS_ALLOWED))


def test_the_scan_finds_a_flag_in_a_message_and_skips_docstrings(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('"""Set by --precision."""\n\n'
                      'def check(p):\n'
                      '    """--precision: checked."""\n'
                      '    raise ConfigError(f"{p} refused: use " "--precision bf16",\n'
                      '                      "precision")\n')
    assert [t for t in _strings(module) if _FLAG.search(t)] == [" refused: use --precision bf16"]
    assert _named_fields(module) == {"precision"}


def test_every_field_an_error_names_has_a_flag_or_a_reason():
    named = set().union(*(_named_fields(path) for path in FIELD_MODULES))
    assert {"precision", "batch_size", "min_steps", "cuda_graph", "strategy"} <= named
    assert named - set(FIELD_FLAGS) == set(NO_FLAG), named - set(FIELD_FLAGS)


def _options() -> set[str]:
    """Every option string the command line's parsers define (hidden old spellings too)."""
    found, parsers = set(), [build_parser()]
    while parsers:
        p = parsers.pop()
        for action in p._actions:
            found.update(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                parsers.extend(action.choices.values())
    return found


def test_every_flag_in_the_table_is_one_the_parsers_define():
    options = _options()
    for field, flags in FIELD_FLAGS.items():
        for flag in flags.split("/"):
            assert flag.split()[0] in options, (field, flag)


# -- as_flags: what the command line prints ------------------------------------------------------
@pytest.mark.parametrize("error, printed", [
    (ConfigError("batch_size must be >= 1, got 0", "batch_size"),
     "-b/--batch-size must be >= 1, got 0"),
    # advice as keyword arguments, anywhere: a value, a switch on, a switch off
    (ConfigError('precision fp16 with framework="jax": use precision="bf16"', "precision"),
     "--precision fp16 with --framework jax: use --precision bf16"),
    (ConfigError("cuda_graph=True, autotune=False with tp=2", "framework"),
     "--cuda-graph, --no-autotune with --tp 2"),
    # the leading field where it starts the message; the word elsewhere may be prose
    (ConfigError("offload is FSDP2's CPU offload of its shards; drop offload=True", "offload"),
     "--offload is FSDP2's CPU offload of its shards; drop --offload"),
    # other fields named bare only where the error lists them
    (ConfigError("gpus (4 in all) must be a multiple of nnodes (3)", "gpus", also=("nnodes",)),
     "--gpus (4 in all) must be a multiple of --nnodes (3)"),
    (ConfigError('cuda_graph with compile="max-autotune": that compile mode captures graphs',
                 "cuda_graph"),
     "--cuda-graph with --compile max-autotune: that compile mode captures graphs"),
    (ConfigError("timing graph needs a graph", "timing"), "--timing graph needs a graph"),
    # what a user typed is quoted, and stays as typed
    (ConfigError("mode must be one of train, eval; got 'mode'", "mode"),
     "--mode must be one of train, eval; got 'mode'"),
    # an error about no field, and a name no flag sets
    (ConfigError("a load point is concurrency=N or rate=R, one of them"),
     "a load point is --concurrency N or --rate R, one of them"),
    (ConfigError("confidence must be in [0.5, 1), got 2", "confidence"),
     "confidence must be in [0.5, 1), got 2"),
    (StoreError("x.db: not a dlbench store (precision=fp8)"),
     "x.db: not a dlbench store (precision=fp8)"),
])
def test_as_flags_spells_the_fields_an_error_names(error, printed):
    assert as_flags(error) == printed


# -- one error, two audiences -------------------------------------------------------------------
QUICK = dict(device="cpu", stop=FAST_STOP, warmup_steps=1, warmup_seconds=0.0)
CPU = ["--device", "cpu", "--db"]

#: (a Python call, what it raises, the same config on the command line, the line it prints)
BOTH = [
    (lambda: dlbench.measure_throughput("tiny_cnn", 2, precision="fp8", **QUICK),
     "precision fp8 is not implemented in dlbench yet; use bf16 or fp16",
     ["throughput", "-m", "tiny_cnn", "-b", "2", "--precision", "fp8"],
     "--precision fp8 is not implemented in dlbench yet; use bf16 or fp16"),
    (lambda: dlbench.measure_throughput("tiny_cnn", 2, precision="fp16", cuda_graph=True,
                                        **QUICK),
     'cuda_graph with fp16 training needs optimizer_impl="fused"',
     ["throughput", "-m", "tiny_cnn", "-b", "2", "--precision", "fp16", "--cuda-graph", "on"],
     "--cuda-graph with fp16 training needs --optimizer-impl fused"),
    (lambda: dlbench.measure_throughput("tiny_gpt", 2, attention="flash", **QUICK),
     'attention flash is a CUDA kernel; on the CPU use attention="math"',
     ["throughput", "-m", "tiny_gpt", "-b", "2", "--attention", "flash"],
     "--attention flash is a CUDA kernel; on the CPU use --attention math"),
    (lambda: dlbench.measure_throughput("tiny_cnn", 2, mode="eval", checkpointing=True, **QUICK),
     'checkpointing needs mode="train"',
     ["throughput", "-m", "tiny_cnn", "-b", "2", "--mode", "eval", "--checkpointing"],
     "--checkpointing needs --mode train"),
    (lambda: dlbench.StopRule(min_steps=10, max_steps=5),
     "max_steps (5) must be >= min_steps (10)",
     ["throughput", "-m", "tiny_cnn", "-b", "2", "--min-steps", "10", "--max-steps", "5"],
     "--max-steps (5) must be >= --min-steps (10)"),
    (lambda: ScalingConfig(base=ThroughputConfig(model="tiny_cnn", batch_size=2), gpus=2,
                           strategy="ddp", offload=True),
     "offload is FSDP2's CPU offload of its shards: it applies to strategy fsdp and fsdp+tp, "
     'not ddp; drop offload=True or use strategy="fsdp"',
     ["scale", "-m", "tiny_cnn", "--gpus", "2", "--strategy", "ddp", "--offload"],
     "--offload is FSDP2's CPU offload of its shards: it applies to --strategy fsdp and "
     "fsdp+tp, not ddp; drop --offload or use --strategy fsdp"),
]


@pytest.mark.parametrize("call, said", [(call, said) for call, said, _, _ in BOTH])
def test_python_reads_the_field(call, said):
    with pytest.raises(ConfigError) as err:
        call()
    text = str(err.value)
    assert text.startswith(said) and not _FLAG.search(text), text
    assert err.value.field and text.startswith(err.value.field)


@pytest.mark.parametrize("argv, printed", [(argv, printed) for _, _, argv, printed in BOTH])
def test_the_command_line_reads_the_flag(tmp_path, argv, printed):
    p = run_cli(*argv, *CPU, str(tmp_path / "x.db"))
    assert p.returncode == 2 and p.stdout == "", (p.returncode, p.stderr)
    [line] = p.stderr.strip().splitlines()
    assert line.startswith(f"error: {printed}"), line
    assert not (tmp_path / "x.db").exists()  # refused before anything ran


def test_docs_api_quotes_the_errors_as_python_reads_them():
    page = (SRC.parents[1] / "docs" / "api.md").read_text()
    with pytest.raises(ConfigError) as err:
        ThroughputConfig(model="tiny_cnn", batch_size=0)
    assert_says(page, f"`{err.value}`")
    with pytest.raises(ConfigError) as err:
        ThroughputConfig(model="tiny_cnn", batch_size=2, precision="fp16", cuda_graph=True)
    assert_says(page, f"`{str(err.value).split(':')[0]}`")
    said = BOTH[0][1]
    assert_says(page, f"`{said}`")
    assert_says(page, "`err.field` is the field's name")


# -- the jobs' and workloads' own checks --------------------------------------------------------
def _scaling(strategy: str, **base) -> ScalingConfig:
    return ScalingConfig(base=ThroughputConfig(model="tiny_cnn", batch_size=2, **base), gpus=2,
                         strategy=strategy)


def _gpu_counts():
    from dlbench.jobs import plans
    plans.check_gpu_counts([1, 3], gpu=True, visible=2)


def _tp_without_fsdp_tp():
    from dlbench.jobs import plans
    plans.with_levers([_scaling("ddp")], tp=2)


def _compile_loss_without_compile():
    from dlbench.jobs import plans
    plans.with_compiled_loss([ThroughputConfig(model="tiny_cnn", batch_size=2)], [True])


def _nodes_without_endpoint():
    from dlbench.jobs import plans
    plans.rendezvous(nnodes=2)


def _no_seeds():
    from dlbench.jobs import train_runs
    train_runs.train_setups(gpus=[1], batches=[8], seeds=0, seed=0, model="tiny_mlp",
                            loader=None, in_memory=True)


def _no_compute_steps():
    from dlbench.jobs.net_runs import net_plan
    net_plan("tiny_mlp", compute_steps=0)


def _graph_path_on_the_cpu():
    import torch

    from dlbench.records.generate import GenerateConfig
    from dlbench.workloads import generate
    generate.check_supported(GenerateConfig(model="test-llama", batch_size=1, prompt_len=4,
                                            output_len=3, path="graph", device="cpu"),
                             torch.device("cpu"))


def _data_parallel_on_the_cpu():
    from dlbench.workloads import scaling
    scaling.rank_device(_scaling("dp", device="cpu"), 0)


def _fp8_training_on_the_cpu():
    import torch

    from dlbench.workloads import fp8
    fp8.check_device(torch.device("cpu"))


def _fusing_a_model_without_siblings():
    from torch import nn

    from dlbench.workloads.fusion import fuse_projections
    fuse_projections(nn.Sequential(nn.Linear(4, 4)))


def _folding_a_model_without_groups():
    pytest.importorskip("transformers")
    import torch

    from dlbench.models.lm import get_lm
    from dlbench.workloads.gqa_fold import fold_gqa
    fold_gqa(get_lm("test-gpt2").build_on("cpu", torch.float32))


def _an_empty_tokenizer_name():
    from dlbench.jobs.serve_runs import named_tokenizer
    named_tokenizer("")


def _fp8_generation_on_the_cpu():
    import torch

    from dlbench.workloads import fp8_inference
    fp8_inference.check_ready(torch.device("cpu"))


#: (a job's or workload's check, what a Python caller reads, what the command line prints)
RUN_ERRORS = [
    (_gpu_counts, "gpus 3: this host has 2 visible GPU(s); give gpus=2 or fewer",
     "--gpus 3: this host has 2 visible GPU(s); give --gpus 2 or fewer"),
    (_tp_without_fsdp_tp,
     'tp sets fsdp+tp\'s TP degree: add strategy="fsdp+tp" (strategy="tp" splits over all gpus)',
     "--tp sets fsdp+tp's TP degree: add --strategy fsdp+tp (--strategy tp splits over all "
     "--gpus)"),
    (_compile_loss_without_compile,
     'compile_loss on needs a compiled training step: add compile="default" (or another mode) '
     'and keep mode="train", method="standard"',
     "--compile-loss on needs a compiled training step: add --compile default (or another "
     "mode) and keep --mode train, --method standard"),
    (_nodes_without_endpoint,
     'nnodes > 1 needs rdzv_endpoint="HOST:PORT" (or slurm=True with MASTER_ADDR set)',
     "--nnodes > 1 needs --rdzv-endpoint HOST:PORT (or --slurm with MASTER_ADDR set)"),
    (_no_seeds, "seeds must be >= 1, got 0", "--seeds must be >= 1, got 0"),
    (_no_compute_steps, "compute_steps must be >= 1, got 0", "--compute-steps must be >= 1, got 0"),
    (_graph_path_on_the_cpu,
     'path graph captures CUDA work: it needs a CUDA GPU; on the CPU use path="static" or '
     'path="compile"',
     "--path graph captures CUDA work: it needs a CUDA GPU; on the CPU use --path static or "
     "--path compile"),
    (_data_parallel_on_the_cpu,
     "strategy dp needs CUDA GPUs (nn.DataParallel splits a batch over devices); on the CPU "
     "use ddp or ps",
     "--strategy dp needs CUDA GPUs (nn.DataParallel splits a batch over devices); on the CPU "
     "use ddp or ps"),
    (_fp8_training_on_the_cpu,
     "fp8: fp8 matmuls need an H100/Ada-class GPU (compute capability 8.9 or newer: L4, L40S, "
     "RTX 4090, H100, H200, B200); this run is on the CPU: drop fp8=True",
     "--fp8: fp8 matmuls need an H100/Ada-class GPU (compute capability 8.9 or newer: L4, "
     "L40S, RTX 4090, H100, H200, B200); this run is on the CPU: drop --fp8"),
    (_fusing_a_model_without_siblings,
     "fuse: Sequential has no separate q/k/v or gate/up projections to fuse (Llama-family "
     "layouts have them); run without fuse=True",
     "--fuse: Sequential has no separate q/k/v or gate/up projections to fuse (Llama-family "
     "layouts have them); run without --fuse"),
    (_folding_a_model_without_groups,
     "fold_gqa: GPT2LMHeadModel has 4 query heads over 4 key/value heads, no grouped-query "
     "attention to fold",
     "--fold-gqa: GPT2LMHeadModel has 4 query heads over 4 key/value heads, no grouped-query "
     "attention to fold"),
    (_an_empty_tokenizer_name, "tokenizer: no tokenizer named", "--tokenizer: no tokenizer named"),
    (_fp8_generation_on_the_cpu,
     "precision fp8: fp8 matmuls need an H100/Ada-class GPU (compute capability 8.9 or newer: "
     'L4, L40S, RTX 4090, H100, H200, B200); this run is on the CPU: use precision="bf16" (or '
     "fp32 on the CPU)",
     "--precision fp8: fp8 matmuls need an H100/Ada-class GPU (compute capability 8.9 or "
     "newer: L4, L40S, RTX 4090, H100, H200, B200); this run is on the CPU: use --precision "
     "bf16 (or fp32 on the CPU)"),
]


@pytest.mark.parametrize("check, said, printed", RUN_ERRORS,
                         ids=[check.__name__.strip("_") for check, _, _ in RUN_ERRORS])
def test_a_job_or_workload_names_the_field_and_the_command_line_the_flag(check, said, printed,
                                                                         monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)  # else the GPU count names it
    with pytest.raises(ConfigError) as err:
        check()
    text = str(err.value)
    assert text == said and not _FLAG.search(text), text
    assert err.value.field and text.startswith(err.value.field)
    assert as_flags(err.value) == printed

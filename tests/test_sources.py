"""Models named by their source: timm:, torchvision:, hf: and FILE.py:FUNC, built for real on the
CPU (random weights, nothing downloaded), measured through the throughput workload and the
command line, and every way a name can be wrong as one clear error."""

from __future__ import annotations

import json
import os
import sqlite3
import textwrap
from pathlib import Path

import pytest
import torch

from conftest import FAST_STOP
from fakes import cli
from dlbench.measure.flops import count_flops
from dlbench.models import InputSpec, ModelSourceError, UnknownModelError, get_model
from dlbench.models.sources import first_logits, is_external
from dlbench.records.throughput import ThroughputConfig
from dlbench.report import tables
from dlbench.workloads.throughput import measure

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = str(ROOT / "examples" / "my_model.py")
TINY_GPT2 = "hf:gpt2?n_layer=2&n_embd=64&n_head=2"


def _measure(model: str, env: dict, batch: int = 2, size: int | None = None):
    cfg = ThroughputConfig(model=model, batch_size=batch, input_size=size, device="cpu",
                           warmup_steps=1, warmup_seconds=0.0, stop=FAST_STOP,
                           telemetry_interval_s=None)
    return measure(cfg, env)


def _write(tmp_path: Path, body: str, name: str = "model.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


# -- names that build and measure -------------------------------------------------------------
def test_timm_model_is_measured_with_its_flops(cpu_env):
    spec = get_model("timm:resnet18")
    assert (spec.name, spec.source, spec.kind, spec.unit) == ("timm:resnet18", "timm", "image", "images")
    assert (spec.input_size, spec.num_classes) == (224, 1000)  # from timm's pretrained config
    rec = _measure("timm:resnet18", cpu_env, size=32)
    assert rec.ok, rec.error
    assert rec.config.model == "timm:resnet18"   # the full name is what the record keeps
    assert rec.flops_per_sample == count_flops(spec, "train", 32) > 0
    assert rec.env["packages"]["timm"]          # the source's version is in the environment


def test_timm_and_torchvision_count_the_registry_models_flops():
    # One architecture from three sources: the same FLOPs, so their figures compare.
    assert (count_flops(get_model("timm:resnet50"), "eval")
            == count_flops(get_model("torchvision:resnet50"), "eval")
            == count_flops(get_model("resnet50"), "eval"))


def test_torchvision_model_with_auxiliary_outputs_gives_one_tensor(cpu_env):
    spec = get_model("torchvision:googlenet")  # returns a named tuple in training mode
    model = spec.build(64).train()
    out = model(torch.randn(2, 3, 64, 64))
    assert isinstance(out, torch.Tensor) and out.shape == (2, 1000)


def test_hf_config_with_overrides_is_measured_in_tokens(cpu_env):
    spec = get_model(TINY_GPT2)
    assert (spec.kind, spec.unit, spec.source, spec.num_classes) == ("text", "tokens", "transformers", 50257)
    inner = spec.build(16).model
    assert (inner.config.n_layer, inner.config.n_embd) == (2, 64)
    rec = _measure(TINY_GPT2, cpu_env, size=16)
    assert rec.ok, rec.error
    assert rec.config.model == TINY_GPT2
    assert rec.units_per_sample == 16 and rec.flops_per_sample > 0
    assert rec.env["packages"]["transformers"]
    assert os.environ.get("HF_HUB_OFFLINE") == "1"   # nothing could have been fetched


def test_hf_known_names_are_the_registry_models():
    # hf:gpt2 is GPT2Config() as the registry's gpt2 is: the same FLOPs and parameters.
    assert count_flops(get_model("hf:gpt2"), "eval", 32) == count_flops(get_model("gpt2"), "eval", 32)
    bert = get_model("hf:bert-base-uncased")
    assert (bert.unit, bert.input_size, bert.num_classes) == ("sequences", 512, 30522)
    assert get_model("hf:openai-community/gpt2").num_classes == 50257


def test_hf_local_config_directory(tmp_path):
    from transformers import GPT2Config
    GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100, n_positions=64).save_pretrained(tmp_path)
    spec = get_model(f"hf:{tmp_path}")
    assert (spec.kind, spec.num_classes, spec.input_size) == ("text", 100, 64)
    assert str(tmp_path) in spec.description
    logits = spec.build(128)(torch.randint(0, 100, (2, 128)))  # the position table grows
    assert logits.shape == (2, 128, 100)


def test_hf_image_classifier(cpu_env):
    name = "hf:vit?num_hidden_layers=1&hidden_size=32&num_attention_heads=2&intermediate_size=64&num_labels=10"
    spec = get_model(name)
    assert (spec.kind, spec.unit, spec.num_classes, spec.input_size) == ("image", "images", 10, 224)
    assert spec.build(32)(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_file_model_from_the_example(cpu_env):
    name = "examples/my_model.py:build"
    spec = get_model(EXAMPLE + ":build")
    assert (spec.kind, spec.unit, spec.input_size, spec.num_classes, spec.default_batch) == (
        "image", "images", 64, 100, 128)
    assert spec.source == "file" and "sha256" in spec.notes
    rec = _measure(EXAMPLE + ":build", cpu_env, batch=4, size=32)
    assert rec.ok, rec.error
    assert rec.flops_per_sample > 0
    assert is_external(name)


def test_file_model_with_a_dict_and_text_input(tmp_path, cpu_env):
    path = _write(tmp_path, """
        import torch
        from torch import nn

        class LM(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(50, 16)
                self.head = nn.Linear(16, 50)
            def forward(self, ids):
                return (self.head(self.emb(ids)),)   # a tuple: its first item is taken

        def make():
            return LM(), {"kind": "text", "input_size": 12, "num_classes": 50}
    """)
    spec = get_model(f"{path}:make")
    assert (spec.kind, spec.unit, spec.input_size, spec.default_batch) == ("text", "tokens", 12, 32)
    rec = _measure(f"{path}:make", cpu_env)
    assert rec.ok, rec.error
    assert rec.units_per_sample == 12


def test_a_forward_the_counter_cannot_trace_is_measured_with_flops_unknown(tmp_path, cpu_env):
    # The forward refuses to run under a dispatch mode, which is how FlopCounterMode runs it,
    # on the meta device and on the CPU alike: a stand-in for any untraceable forward.
    path = _write(tmp_path, """
        import torch
        from torch import nn
        from torch.utils._python_dispatch import _get_current_dispatch_mode
        from dlbench import InputSpec

        class Opaque(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(3 * 8 * 8, 4)
            def forward(self, x):
                if _get_current_dispatch_mode() is not None:
                    raise RuntimeError("this forward cannot be traced")
                return self.fc(x.flatten(1))

        def build():
            return Opaque(), InputSpec(kind="image", input_size=8, num_classes=4)
    """)
    rec = _measure(f"{path}:build", cpu_env)
    assert rec.ok, rec.error
    assert rec.summary().throughput > 0
    assert rec.flops_per_sample is None and rec.achieved_tflops() is None
    table = tables.throughput_table([rec])
    assert table.rows[0][table.columns.index("TFLOP/s")] == "-"
    assert any("FLOPs unknown" in note and str(path) in note for note in table.notes)


def test_resolved_names_round_trip_and_are_cached():
    spec = get_model(TINY_GPT2)
    assert get_model(spec.name) is spec       # a worker rebuilds it from the config's name
    assert get_model(f"  {TINY_GPT2} ") is spec


def test_first_logits():
    t = torch.zeros(2, 3)
    assert first_logits(t) is t
    assert first_logits((t, None)) is t
    assert first_logits({"logits": t}) is t
    with pytest.raises(TypeError, match="logits tensor"):
        first_logits("text")


def test_input_spec_is_checked():
    assert InputSpec(kind="text", input_size=8, num_classes=10).unit == "tokens"
    with pytest.raises(ValueError, match="kind"):
        InputSpec(kind="audio", input_size=8, num_classes=10)
    with pytest.raises(ValueError, match="input_size"):
        InputSpec(kind="image", input_size=0, num_classes=10)
    with pytest.raises(ValueError, match="image model counts images"):
        InputSpec(kind="image", input_size=8, num_classes=10, unit="tokens")


# -- names that are wrong: one clear line each ------------------------------------------------
def test_unknown_timm_name_suggests_close_ones():
    with pytest.raises(UnknownModelError, match=r'timm has no model "resnet181"; did you mean .*resnet18'):
        get_model("timm:resnet181")


def test_unknown_torchvision_name_suggests_close_ones():
    with pytest.raises(UnknownModelError, match="did you mean .*resnet50"):
        get_model("torchvision:resnet5O")


def test_hf_name_not_built_in_and_not_a_directory_says_offline():
    with pytest.raises(ModelSourceError) as err:
        get_model("hf:someone/private-model")
    message = str(err.value)
    assert "never downloads" in message and "offline" in message and "config.json" in message
    with pytest.raises(ModelSourceError, match="did you mean gpt2"):
        get_model("hf:gtp2")


def test_hf_unknown_config_field_and_bad_override():
    with pytest.raises(ModelSourceError, match="GPT2Config has no field 'n_layers'; did you mean n_layer"):
        get_model("hf:gpt2?n_layers=2")
    with pytest.raises(ModelSourceError, match="FIELD=VALUE"):
        get_model("hf:gpt2?n_layer")


def test_hf_directory_without_config(tmp_path):
    with pytest.raises(ModelSourceError, match="no config.json"):
        get_model(f"hf:{tmp_path}")


def test_missing_file():
    with pytest.raises(ModelSourceError, match="no such file nowhere/model.py"):
        get_model("nowhere/model.py:build")


def test_file_without_the_function_suggests_one():
    with pytest.raises(ModelSourceError, match="has no function 'buidl'; did you mean build"):
        get_model(EXAMPLE + ":buidl")
    with pytest.raises(ModelSourceError, match="name the function"):
        get_model(EXAMPLE)


@pytest.mark.parametrize("returns, message", [
    ("nn.Linear(2, 2)", "it returned Linear"),
    ("(nn.Linear(2, 2), 5)", "described by a int"),
    ("(42, {'kind': 'image', 'input_size': 8, 'num_classes': 2})", "not a torch.nn.Module"),
    ("(nn.Linear(2, 2), {'kind': 'image', 'size': 8, 'num_classes': 2})", "unknown InputSpec key"),
])
def test_factory_that_breaks_its_contract(tmp_path, returns, message):
    path = _write(tmp_path, f"""
        from torch import nn
        def build():
            return {returns}
    """)
    with pytest.raises(ModelSourceError, match=message) as err:
        get_model(f"{path}:build")
    assert "must return (model, dlbench.InputSpec" in str(err.value)


def test_file_that_fails_to_import(tmp_path):
    path = _write(tmp_path, "def build(:\n")
    with pytest.raises(ModelSourceError, match="failed to import: SyntaxError"):
        get_model(f"{path}:build")


def test_a_step_record_has_no_model_to_build():
    with pytest.raises(UnknownModelError, match="measure_step"):
        get_model("step:train_step")


# -- the command line ------------------------------------------------------------------------
@pytest.mark.slow
def test_cli_throughput_stores_a_file_model_and_an_hf_config(tmp_path):
    db = tmp_path / "r.db"
    p = cli.run("throughput", "-m", f"examples/my_model.py:build,{TINY_GPT2}", "-b", "2",
                "--input-size", "16", "--device", "cpu", "--warmup", "1", "--warmup-time", "0",
                "--min-steps", "5", "--min-time", "0.05", "--max-time", "1",
                "--telemetry-interval", "0", "--db", str(db), "--json", "-q", cwd=ROOT)
    assert p.returncode == 0, p.stderr
    with sqlite3.connect(db) as con:
        stored = [json.loads(blob) for (blob,) in con.execute("SELECT record_json FROM results")]
    models = [r["config"]["model"] for r in stored]
    assert models == ["examples/my_model.py:build", TINY_GPT2]
    assert all(r["status"] == "ok" and r["flops_per_sample"] for r in stored)


def test_cli_bad_source_name_is_one_line(tmp_path):
    p = cli.run("throughput", "-m", "hf:nope/nothing", "--device", "cpu",
                "--db", str(tmp_path / "r.db"), cwd=ROOT)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "never downloads" in lines[0]
    assert not (tmp_path / "r.db").exists()


def test_hf_directory_with_a_config_transformers_cannot_read(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "no-such-architecture"}')
    with pytest.raises(ModelSourceError, match="transformers cannot read"):
        get_model(f"hf:{tmp_path}")

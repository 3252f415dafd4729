"""dlbench generate --precision fp8: the errors that say what to do (the CPU, an older GPU, no
torchao), the bytes a decode step reads counted on the model's own fp8 tensors, the layers
quantized (not the head, not the embedding, fused weights as one), and on a GPU (skipped
without one) fp8 generation beside bf16's.

fp8 matmuls need an sm_89+ GPU, so on the CPU the quantization is torchao's weight-only fp8
config (``--fp8-recipe weight-only``): the same fp8 weight tensors (e4m3 data, one fp32 scale
per row) the dynamic recipe makes, without the fp8 matmul. torchao is in the test extra; the
tests that need it skip without it, and the choice of config class for each recipe is also
checked against a fake ``torchao.quantization`` of each naming (0.9 and later, before 0.9).
"""

from __future__ import annotations

import csv
import hashlib
import json
import sqlite3
import sys
import types
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from fakes.cli import run as run_cli
from fakes.generate_records import generate_record
from fakes.pages import H

import dlbench
from dlbench.config import ConfigError
from dlbench.jobs import generate_runs
from dlbench.measure import generation as gen
from dlbench.measure.stopping import StopRule
from dlbench.models.lm import get_lm, lm_shape, meta_shape, tensor_bytes
from dlbench.records import record_from_dict
from dlbench.records.generate import GenerateConfig
from dlbench.report.generate_figures import prefill_mfu
from dlbench.workloads import fp8
from dlbench.workloads import fp8_inference
from dlbench.workloads import generate as workload
from dlbench.workloads.devices import UnsupportedError
from dlbench.workloads.fusion import FusedWeight, fuse_projections

CPU = torch.device("cpu")
QUICK = StopRule(min_steps=3, min_seconds=0.0, max_seconds=2.0, target_rel_ci=0.2)
FAST = ["--min-requests", "3", "--min-time", "0", "--max-time", "2", "--target-ci", "0.2",
        "--warmup", "0", "--telemetry-interval", "0"]

# test-llama (configs.json): 2 layers, hidden 64, 4 heads of 16 over 2 KV heads, MLP 128,
# vocabulary 256, head untied. A layer's projections: q 64x64, k and v 32x64, o 64x64, gate
# and up 128x64, down 64x128: 36,864 weights over 512 output rows.
LINEAR_PARAMS = 2 * 36_864
LINEAR_ROWS = 2 * 512
NORM_PARAMS = 2 * 2 * 64 + 64
TABLE = 256 * 64  # the embedding table, and the head's
# fp8: a byte per linear weight and a 4-byte scale per row; norms and the head in bf16
FP8_READ_BYTES = LINEAR_PARAMS + 4 * LINEAR_ROWS + 2 * NORM_PARAMS + 2 * TABLE
BF16_READ_BYTES = 2 * (LINEAR_PARAMS + NORM_PARAMS + TABLE)


#: torchao's weight-only fp8 recipe (per-row scales), which quantizes on the CPU.
WO = "weight-only"


def weight_only() -> str:
    """The weight-only recipe, skipping the test without torchao."""
    pytest.importorskip("torchao.quantization")
    return WO


def llama_bf16(fuse: bool = False) -> nn.Module:
    torch.manual_seed(0)
    model = get_lm("test-llama").build_on(CPU, torch.bfloat16)
    if fuse:
        fuse_projections(model)
    return model


# -- the errors, before anything is built --------------------------------------------------------
def test_fp8_on_the_cpu_is_refused_in_one_line_before_the_store_opens(tmp_path):
    db = tmp_path / "g.db"
    p = run_cli("generate", "-m", "test-llama", "--precision", "bf16,fp8", "--device", "cpu",
                "--db", str(db))
    assert p.returncode == 2 and not db.exists()
    [line] = p.stderr.strip().splitlines()
    assert "--precision fp8: fp8 matmuls need an H100/Ada-class GPU (compute capability 8.9" in line
    assert "this run is on the CPU: use --precision bf16" in line


def test_fp8_without_torchao_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torchao", None)  # `import torchao` raises ImportError
    for name in [m for m in sys.modules if m.startswith("torchao.")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ConfigError, match=r"^precision fp8 needs torchao's float8 inference "
                                          r"\(torchao.quantization\): pip install torchao \(a "
                                          r"version matching your torch\)"):
        fp8_inference.check_installed()
    with pytest.raises(ConfigError, match="pip install torchao"):
        fp8_inference.quantize(llama_bf16())
    # the command on an sm_90 GPU (its device check passed) without torchao: exit 2, one line,
    # nothing built or stored
    monkeypatch.setattr(fp8, "check_device", lambda device, flag, instead: None)
    db = tmp_path / "g.db"
    p = run_cli("generate", "-m", "test-llama", "--precision", "fp8", "--db", str(db))
    assert p.returncode == 2 and not db.exists()
    assert "pip install torchao (a version matching your torch)" in p.stderr


def test_fp8_needs_an_sm89_gpu_and_says_what_to_use_instead(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d: "NVIDIA A100-SXM4-80GB")
    with pytest.raises(UnsupportedError, match='A100-SXM4-80GB is sm_80: use precision="bf16"'):
        fp8_inference.check_ready(torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d: (9, 0))
    pytest.importorskip("torchao.quantization")
    fp8_inference.check_ready(torch.device("cuda", 0))  # an H100 with torchao: ready
    # a run asked for from Python gets the same refusal, as a row
    c = GenerateConfig(model="test-llama", batch_size=1, precision="fp8", device="cpu",
                       stop=QUICK, telemetry_interval_s=None)
    with pytest.raises(UnsupportedError, match='on the CPU: use precision="bf16"'):
        workload.measure(c, env={})


def test_help_names_fp8_and_what_it_needs():
    p = run_cli("generate", "--help")
    out = " ".join(p.stdout.split())
    assert "bf16, fp16, fp32, fp8" in out
    assert "compute capability 8.9+" in out and "pip install torchao" in out
    assert "LM head, embedding, attention and KV cache stay bf16" in out


# -- the bytes a decode step reads ---------------------------------------------------------------
def test_tensor_bytes_counts_fp8_data_and_scales_not_the_logical_dtype():
    """A hand-built model whose linear weights are plain float8_e4m3fn tensors with fp32
    scales beside them, and a tensor subclass that holds both (as torchao's does): each is
    counted at what it stores."""

    class Scaled(torch.Tensor):  # a weight that stores fp8 data and a scale per row
        @staticmethod
        def __new__(cls, data, scale):
            return torch.Tensor._make_wrapper_subclass(cls, data.shape, dtype=torch.bfloat16)

        def __init__(self, data, scale):
            self.data_, self.scale = data, scale

        def __tensor_flatten__(self):
            return ["data_", "scale"], None

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            raise NotImplementedError(func)  # only held and counted here, never computed with

    data = torch.zeros(64, 32, dtype=torch.float8_e4m3fn)
    scale = torch.ones(64, 1, dtype=torch.float32)
    assert tensor_bytes(data) == 64 * 32 and tensor_bytes(scale) == 64 * 4
    w = Scaled(data, scale)
    assert w.element_size() == 2                              # what a naive count would take
    assert tensor_bytes(w) == 64 * 32 + 64 * 4
    mixed = nn.Module()
    mixed.fp8 = nn.Parameter(data, requires_grad=False)
    mixed.scale = nn.Parameter(scale, requires_grad=False)
    mixed.bf16 = nn.Parameter(torch.zeros(16, 32, dtype=torch.bfloat16), requires_grad=False)
    assert sum(tensor_bytes(p) for p in mixed.parameters()) == 2048 + 256 + 1024


def test_quantize_takes_the_blocks_linear_layers_not_the_head_nor_the_embedding():
    model = llama_bf16()
    names = fp8_inference.quantize(model, weight_only())
    assert len(names) == 14 and all(".layers." in n for n in names)  # 2 blocks x 7
    assert type(model.lm_head.weight) is nn.Parameter                  # plain bf16 tensors
    assert model.lm_head.weight.dtype == torch.bfloat16
    assert type(model.model.embed_tokens.weight) is nn.Parameter
    q = model.model.layers[0].self_attn.q_proj.weight
    inner = {n: getattr(q, n) for n in q.__tensor_flatten__()[0]}
    assert {t.dtype for t in inner.values()} == {torch.float8_e4m3fn, torch.float32}


def test_the_recipe_is_torchaos_dynamic_fp8_with_per_row_scales():
    quant = pytest.importorskip("torchao.quantization")
    quantize_, config = fp8_inference.recipe()
    assert quantize_ is quant.quantize_
    assert isinstance(config, quant.Float8DynamicActivationFloat8WeightConfig)
    assert [type(g) for g in config.granularity] == [quant.PerRow, quant.PerRow]
    assert config.weight_dtype == config.activation_dtype == torch.float8_e4m3fn
    assert config.set_inductor_config is False  # inductor's globals left as they are


def test_the_weight_only_recipe_is_torchaos_float8_weight_only_with_per_row_scales():
    quant = pytest.importorskip("torchao.quantization")
    quantize_, config = fp8_inference.recipe("weight-only")
    assert quantize_ is quant.quantize_
    assert type(config) is quant.Float8WeightOnlyConfig
    assert isinstance(config.granularity, quant.PerRow)  # a scale per output channel
    assert config.weight_dtype == torch.float8_e4m3fn
    assert config.set_inductor_config is False
    # the default, as before the option: the dynamic recipe
    assert type(fp8_inference.recipe()[1]) is quant.Float8DynamicActivationFloat8WeightConfig
    assert type(fp8_inference.recipe("dynamic")[1]) is \
        quant.Float8DynamicActivationFloat8WeightConfig


# -- the recipe's torchao names, against a fake torchao.quantization ----------------------------
class FakePerRow:
    pass


@dataclass
class FakeWeightOnly:
    """torchao 0.18's Float8WeightOnlyConfig fields."""

    weight_dtype: Any = None
    set_inductor_config: bool = True
    version: int = 2
    granularity: Any = None


@dataclass
class FakeDynamic:
    activation_dtype: Any = None
    weight_dtype: Any = None
    granularity: Any = None
    set_inductor_config: bool = True


def fake_float8_weight_only(weight_dtype=None):
    """torchao < 0.9: a function, per-row scales and no granularity to pass."""
    return ("float8_weight_only", weight_dtype)


def fake_float8_dynamic(activation_dtype=None, weight_dtype=None, granularity=None):
    return ("float8_dynamic_activation_float8_weight", weight_dtype, granularity)


def fake_torchao(monkeypatch, **names: Any) -> types.ModuleType:
    """A ``torchao.quantization`` holding ``quantize_`` (which records its calls), ``PerRow``
    and ``names``, in place of any installed torchao."""
    quant = types.ModuleType("torchao.quantization")
    quant.calls = []
    quant.quantize_ = lambda model, config, filter_fn=None: quant.calls.append(
        (model, config, filter_fn))
    quant.PerRow = FakePerRow
    for name, value in names.items():
        setattr(quant, name, value)
    pkg = types.ModuleType("torchao")
    pkg.quantization = quant
    for name in [m for m in sys.modules if m == "torchao" or m.startswith("torchao.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "torchao", pkg)
    monkeypatch.setitem(sys.modules, "torchao.quantization", quant)
    return quant


def test_the_recipes_under_torchaos_config_classes(monkeypatch):
    """torchao 0.9 and later: Float8WeightOnlyConfig for weight-only, with per-row scales, e4m3
    weights and inductor's globals left alone; Float8DynamicActivationFloat8WeightConfig for
    dynamic."""
    quant = fake_torchao(monkeypatch, Float8WeightOnlyConfig=FakeWeightOnly,
                         Float8DynamicActivationFloat8WeightConfig=FakeDynamic)
    quantize_, config = fp8_inference.recipe("weight-only")
    assert quantize_ is quant.quantize_
    assert type(config) is FakeWeightOnly and isinstance(config.granularity, FakePerRow)
    assert config.weight_dtype == torch.float8_e4m3fn and config.set_inductor_config is False
    _, config = fp8_inference.recipe("dynamic")
    assert type(config) is FakeDynamic and isinstance(config.granularity, FakePerRow)
    # quantize() applies the recipe it is given, to the layers of the filter
    model = llama_bf16()
    names = fp8_inference.quantize(model, "weight-only")
    [(m, config, keep)] = quant.calls
    assert m is model and type(config) is FakeWeightOnly
    assert [n for n, mod in model.named_modules() if keep(mod, n)] == names and len(names) == 14
    fp8_inference.quantize(model)
    assert type(quant.calls[-1][1]) is FakeDynamic  # the default: dynamic


def test_the_recipes_under_torchaos_older_function_names(monkeypatch):
    """torchao before 0.9: float8_weight_only (no granularity argument: its scales are per row)
    and float8_dynamic_activation_float8_weight."""
    fake_torchao(monkeypatch, float8_weight_only=fake_float8_weight_only,
                 float8_dynamic_activation_float8_weight=fake_float8_dynamic)
    assert fp8_inference.recipe("weight-only")[1] == ("float8_weight_only",
                                                      torch.float8_e4m3fn)
    name, dtype, granularity = fp8_inference.recipe("dynamic")[1]
    assert name == "float8_dynamic_activation_float8_weight"
    assert isinstance(granularity, FakePerRow)


def test_a_torchao_without_the_recipe_or_an_unknown_recipe_says_what_to_do(monkeypatch):
    fake_torchao(monkeypatch, Float8DynamicActivationFloat8WeightConfig=FakeDynamic)
    with pytest.raises(ConfigError, match=r"pip install torchao .*Float8WeightOnlyConfig|"
                                          r"pip install torchao .*float8_weight_only"):
        fp8_inference.recipe("weight-only")
    with pytest.raises(ConfigError, match="^fp8_recipe must be one of dynamic, weight-only; "
                                          "got 'static'"):
        fp8_inference.recipe("static")


class Mixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(32, 64)        # fp8
        self.odd = nn.Linear(64, 40)       # 40 % 16: kept in bf16
        self.down = nn.Linear(40, 32)      # 40 % 16: kept in bf16
        self.head = nn.Linear(32, 16)      # the output layer: kept in bf16


def test_quantize_leaves_layers_whose_dims_do_not_divide_by_16_and_refuses_none():
    model = Mixed()
    keep = fp8_inference.layer_filter(model)
    assert [n for n, m in model.named_modules() if keep(m, n)] == ["up"]
    with pytest.raises(UnsupportedError, match="no linear layer to quantize"):
        # GPT-2's blocks are Conv1D: nothing but its head is a linear layer
        fp8_inference.quantize(get_lm("test-gpt2").build_on(CPU, torch.bfloat16))


def test_the_roof_counts_fp8_weights_at_one_byte_plus_their_scales():
    bf16 = lm_shape(llama_bf16(), count_bytes=True)
    assert bf16.decode_weight_bytes == BF16_READ_BYTES and bf16.embedding_row_bytes == 128
    # the count on the tensors equals the shape's formula where the model is plain bf16
    plain = meta_shape(get_lm("test-llama"))
    assert gen.weight_bytes_per_step(bf16, "bf16", 4) == \
        gen.weight_bytes_per_step(plain, "bf16", 4) == BF16_READ_BYTES + 4 * 128
    model = llama_bf16()
    fp8_inference.quantize(model, weight_only())
    shape = lm_shape(model, count_bytes=True)
    assert shape.decode_weight_bytes == FP8_READ_BYTES == 111_232
    assert shape.embedding_row_bytes == 128                # the embedding stays bf16
    assert gen.weight_bytes_per_step(shape, "fp8", 4) == FP8_READ_BYTES + 4 * 128
    # the formula from parameter counts (records without the count) misses the scales and
    # takes the norms at a byte
    assert gen.weight_bytes_per_step(plain, "fp8", 4) == \
        FP8_READ_BYTES - 4 * LINEAR_ROWS - NORM_PARAMS + 4 * 128
    # the KV cache stays bf16
    assert gen.kv_bytes_per_token(shape, "fp8") == gen.kv_bytes_per_token(shape, "bf16")


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t


def test_fused_then_quantized_holds_the_same_fp8_weights_as_quantized_parts():
    """--fuse before fp8: each fused weight is quantized as one (one fp8 matmul per group), and
    per-row scales make its rows exactly the parts' quantized rows."""
    parts, fused = llama_bf16(), llama_bf16(fuse=True)
    fp8_inference.quantize(parts, weight_only())
    names = fp8_inference.quantize(fused, weight_only())
    assert sorted(n.rsplit(".", 1)[-1] for n in names) == \
        ["down_proj"] * 2 + ["gate_up_fused"] * 2 + ["o_proj"] * 2 + ["qkv_fused"] * 2
    attn, a = fused.model.layers[0].self_attn, parts.model.layers[0].self_attn
    assert isinstance(attn.qkv_fused, FusedWeight)
    for field in ("qdata", "scale"):
        want = torch.cat([_bits(getattr(p.weight, field)) for p in (a.q_proj, a.k_proj, a.v_proj)])
        assert torch.equal(_bits(getattr(attn.qkv_fused.weight, field)), want)
    assert lm_shape(fused, count_bytes=True).decode_weight_bytes == FP8_READ_BYTES
    # and the fused, quantized model computes what the quantized parts do
    ids = torch.randint(0, 256, (2, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(fused(ids).logits, parts(ids).logits, rtol=0.02, atol=0.02)


@pytest.fixture
def fp8_on_this_cpu(monkeypatch):
    """The command's fp8 path on the CPU: the device check passed, as on an H100, and
    torchao's weight-only fp8 config in place of the dynamic one (whose fp8 matmul the CPU
    lacks). Everything else is the real path: the command, the plan, the quantization of the
    built model, the measured window, the store, the tables and the export."""
    real = fp8_inference.recipe
    wo = real(weight_only())
    monkeypatch.setattr(fp8, "check_device", lambda device, flag, instead: None)
    monkeypatch.setattr(fp8_inference, "recipe", lambda kind="dynamic": wo)


def test_an_fp8_run_is_stored_shown_and_exported_as_fp8(tmp_path, fp8_on_this_cpu):
    db = str(tmp_path / "g.db")
    p = run_cli("generate", "-m", "test-llama", "-b", "2", "--precision", "bf16,fp8",
                "--prompt-len", "8", "--output-len", "4", "--path", "static", "--fuse",
                "--device", "cpu", "--db", db, "--json", *FAST)
    assert p.returncode == 0, p.stderr
    bf16, q = json.loads(p.stdout)
    assert q["status"] == "ok" and q["config"]["precision"] == "fp8"
    assert "test-llama b2 fp8 8+4 static+fuse" in p.stderr      # the line as it finished
    assert "fast only under --path compile" not in p.stderr     # the note is weight-only's
    assert q["shape"]["decode_weight_bytes"] == FP8_READ_BYTES
    assert bf16["shape"]["decode_weight_bytes"] == BF16_READ_BYTES
    # every parameter as held: the read bytes and the embedding table in bf16
    assert q["memory"]["weights_bytes"] == FP8_READ_BYTES + 2 * TABLE
    shown = run_cli("results", "show", "latest", "--db", db)
    assert shown.returncode == 0
    assert any("fp8" in line and "static+fuse" in line for line in shown.stdout.splitlines())
    out = tmp_path / "g.csv"
    assert run_cli("results", "export", "--db", db, "--kind", "generate", "--format", "csv",
                   "-o", str(out)).returncode == 0
    rows = list(csv.DictReader(out.open()))
    assert [r["precision"] for r in rows] == ["bf16", "fp8"]
    kv = gen.kv_bytes_per_token(meta_shape(get_lm("test-llama")), "bf16") * 2 * (
        gen.mean_context(8, 4) + 1)  # the KV cache stays bf16
    assert float(rows[1]["decode_bytes_per_step"]) == FP8_READ_BYTES + 2 * 128 + kv
    assert float(rows[0]["decode_bytes_per_step"]) - float(rows[1]["decode_bytes_per_step"]) \
        == BF16_READ_BYTES - FP8_READ_BYTES


def test_weight_only_outside_compile_says_it_is_fast_only_compiled(tmp_path, fp8_on_this_cpu):
    p = run_cli("generate", "-m", "test-llama", "--precision", "fp8", "--fp8-recipe",
                "weight-only", "--prompt-len", "8", "--output-len", "4", "--path", "static",
                "--device", "cpu", "--db", str(tmp_path / "g.db"), *FAST)
    assert p.returncode == 0, p.stderr
    assert ("note: --fp8-recipe weight-only is fast only under --path compile; on static its "
            "layers run uncompiled") in " ".join(p.stderr.split())


# -- --fp8-recipe: the config, its label and identity, the command -------------------------------
def fp8_config(**kw: Any) -> GenerateConfig:
    return GenerateConfig(**{**dict(model="test-llama", batch_size=1, precision="fp8",
                                    path="compile"), **kw})


def test_the_recipe_is_in_the_label_and_the_identity_and_the_default_keeps_old_keys():
    dyn, wo = fp8_config(), fp8_config(fp8_recipe="weight-only")
    assert dyn.fp8_recipe == "dynamic"
    assert dyn.label == "test-llama b1 fp8 128+128 compile"
    assert wo.label == "test-llama b1 fp8-wo 128+128 compile"
    assert (dyn.precision_label, wo.precision_label) == ("fp8", "fp8-wo")
    assert fp8_config(precision="bf16").precision_label == "bf16"
    # weight-only's matmuls run in bf16: its prefill MFU is against bf16's peak
    assert (dyn.matmul_precision, wo.matmul_precision) == ("fp8", "bf16")
    assert dyn.key() != wo.key() and dyn.pair_key() != wo.pair_key()
    assert fp8_config(fp8_recipe="weight-only", path="eager").pair_key() == wo.pair_key()
    assert GenerateConfig.from_dict(wo.to_dict()) == wo
    # a config stored before the option has no fp8_recipe: it reads as dynamic, with the key
    # it was stored under (the default is left out of the identity, as fuse and fold_gqa are)
    before = dyn.to_dict()
    del before["fp8_recipe"]
    assert GenerateConfig.from_dict(before) == dyn
    ident = {k: v for k, v in before.items()
             if k not in GenerateConfig._NOT_IDENTITY + ("fuse", "fold_gqa")}
    assert dyn.key() == hashlib.sha256(
        b"generate" + json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def test_committed_fp8_records_keep_their_stored_keys(tmp_path):
    """The four-H100 campaign's store holds dynamic fp8 (and bf16) generate records made before
    --fp8-recipe: each reads back as dynamic, under the key it was stored with (--resume)."""
    store = H.open_store(Path(__file__).resolve().parents[1] / "results",
                         "pt2.11-cu130-4x-h100", tmp_path)
    rows = sqlite3.connect(store.path).execute(
        "SELECT config_key, record_json FROM results WHERE kind = 'generate'").fetchall()
    store.close()
    configs = [(key, record_from_dict(json.loads(doc)).config) for key, doc in rows]
    assert any(c.precision == "fp8" for _, c in configs)
    for key, c in configs:
        assert c.fp8_recipe == "dynamic" and c.key() == key


def test_a_recipe_but_dynamic_needs_precision_fp8(tmp_path):
    with pytest.raises(ConfigError, match="fp8_recipe weight-only applies to precision fp8 "
                                          "only, not bf16"):
        fp8_config(precision="bf16", fp8_recipe="weight-only")
    with pytest.raises(ConfigError, match="^fp8_recipe must be one of"):
        fp8_config(fp8_recipe="static")
    # the command: one line, exit 2, before anything is built or stored
    db = tmp_path / "g.db"
    for precision, said in ((["--precision", "bf16"], "bf16"), ([], "fp32"),
                            (["--precision", "bf16,fp16"], "bf16, fp16")):
        p = run_cli("generate", "-m", "test-llama", *precision, "--fp8-recipe", "weight-only",
                    "--device", "cpu", "--db", str(db))
        assert p.returncode == 2 and not db.exists()
        [line] = p.stderr.strip().splitlines()
        assert (f"--fp8-recipe weight-only applies to --precision fp8 only; the precisions here "
                f"are {said}") in line
    p = run_cli("generate", "-m", "test-llama", "--fp8-recipe", "static", "--db", str(db))
    assert p.returncode == 2 and "invalid choice: 'static'" in p.stderr
    # from Python, the same refusal
    with pytest.raises(ConfigError, match="^fp8_recipe weight-only applies to precision fp8 "
                                          "only"):
        dlbench.measure_generation("test-llama", device="cpu", precision="bf16",
                                   fp8_recipe="weight-only")


def test_the_plan_gives_the_recipe_to_the_fp8_configs_only():
    configs, _ = generate_runs.plan(["test-llama"], [1], [8], [4], ["bf16", "fp8"],
                                    ["eager", "static"], device="cpu", fp8_recipe="weight-only")
    assert [(c.precision_label, c.path, c.fp8_recipe) for c in configs] == [
        ("bf16", "eager", "dynamic"), ("bf16", "static", "dynamic"),
        ("fp8-wo", "eager", "weight-only"), ("fp8-wo", "static", "weight-only")]
    default, _ = generate_runs.plan(["test-llama"], [1], [8], [4], ["fp8"], ["eager"],
                                    device="cpu")
    assert [c.fp8_recipe for c in default] == ["dynamic"]


def test_help_names_the_recipes():
    out = " ".join(run_cli("generate", "--help").stdout.split())
    assert "--fp8-recipe {dynamic,weight-only}" in out
    assert "Float8WeightOnlyConfig" in out and "fp8-wo" in out


def test_a_weight_only_run_is_its_own_row_stored_shown_and_exported(tmp_path, monkeypatch):
    """--fp8-recipe weight-only through the real path on the CPU (torchao's weight-only fp8
    quantizes there; only the device check is passed, as on an H100): labelled fp8-wo, the
    weights at a byte as the dynamic recipe's, a config of its own beside the dynamic one."""
    weight_only()
    monkeypatch.setattr(fp8, "check_device", lambda device, flag, instead: None)
    db = str(tmp_path / "g.db")
    args = ("generate", "-m", "test-llama", "-b", "2", "--prompt-len", "8", "--output-len", "4",
            "--path", "static", "--fuse", "--device", "cpu", "--db", db, *FAST)
    p = run_cli(*args, "--precision", "bf16,fp8", "--fp8-recipe", "weight-only", "--json")
    assert p.returncode == 0, p.stderr
    bf16, wo = json.loads(p.stdout)
    assert (bf16["config"]["fp8_recipe"], wo["config"]["fp8_recipe"]) == ("dynamic",
                                                                          "weight-only")
    assert wo["status"] == "ok" and "test-llama b2 fp8-wo 8+4 static+fuse" in p.stderr
    assert wo["shape"]["decode_weight_bytes"] == FP8_READ_BYTES  # a byte a weight, + scales
    shown = run_cli("results", "show", "latest", "--db", db)
    assert shown.returncode == 0
    assert any("fp8-wo" in line and "static+fuse" in line for line in shown.stdout.splitlines())
    # the dynamic recipe (torchao's weight-only config in its place: the CPU has no fp8
    # matmul) is another config, not skipped by --resume; the weight-only one is
    real = fp8_inference.recipe
    monkeypatch.setattr(fp8_inference, "recipe", lambda kind="dynamic": real(WO))
    p = run_cli(*args, "--precision", "fp8", "--resume")
    assert p.returncode == 0, p.stderr
    assert "test-llama b2 fp8 8+4 static+fuse" in p.stderr and "skipped" not in p.stderr
    p = run_cli(*args, "--precision", "bf16,fp8", "--fp8-recipe", "weight-only", "--resume")
    assert p.returncode == 0 and "2 skipped by --resume" in p.stderr
    out = tmp_path / "g.csv"
    assert run_cli("results", "export", "--db", db, "--kind", "generate", "--format", "csv",
                   "-o", str(out)).returncode == 0
    got = [(r["precision"], r["fp8_recipe"]) for r in csv.DictReader(out.open())]
    assert got == [("bf16", "dynamic"), ("fp8", "weight-only"), ("fp8", "dynamic")]


def test_weight_only_prefill_mfu_is_against_the_bf16_peak_and_its_roof_at_a_byte():
    """A made-up H100 record in bf16, fp8 and weight-only fp8 with the same times: the
    weight-only prefill MFU is bf16's (its matmuls run in bf16), the dynamic one half of it
    (the fp8 dense peak is twice bf16's); both fp8 recipes read the weights at a byte."""
    bf16, dyn = generate_record(precision="bf16"), generate_record(precision="fp8")
    wo = replace(dyn, config=replace(dyn.config, fp8_recipe="weight-only"))
    m_bf16, m_dyn, m_wo = (prefill_mfu(r).datasheet for r in (bf16, dyn, wo))
    assert m_bf16 and m_wo == m_bf16
    assert m_dyn == pytest.approx(m_bf16 / 2)
    assert wo.decode_bytes_per_step() == dyn.decode_bytes_per_step() < \
        bf16.decode_bytes_per_step()


# -- on a GPU with fp8 tensor cores (skipped without one) -----------------------------------------
def _fp8_gpu() -> torch.device:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    pytest.importorskip("torchao.quantization")
    device = torch.device("cuda", 0)
    if torch.cuda.get_device_capability(device) < fp8.MIN_CAPABILITY:
        pytest.skip("fp8 matmuls need sm_89 or newer")
    return device


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", ["dynamic", "weight-only"])
def test_fp8_logits_and_tokens_are_close_to_bf16s(recipe):
    """The same weights in bf16 and quantized by each recipe (dynamic: fp8 matmuls;
    weight-only: fp8 weights in bf16 matmuls): the prefill's logits agree to fp8's rounding,
    and most sequences' first tokens are the same. Random weights make close logits, so a flip
    now and then is fp8's rounding; a wrong scale or a transposed weight would agree on about 1
    in 512 (on the CPU, torchao's weight-only fp8 of this model gives cosine 0.998 and agrees on
    88-94% of first tokens)."""
    device = _fp8_gpu()
    torch.manual_seed(0)
    spec = get_lm("hf:llama?hidden_size=256&intermediate_size=512&num_hidden_layers=2&"
                  "num_attention_heads=4&num_key_value_heads=2&vocab_size=512")
    bf16 = spec.build_on(device, torch.bfloat16)
    q = spec.build_on(device, torch.bfloat16)
    q.load_state_dict(bf16.state_dict())
    assert len(fp8_inference.quantize(q, recipe)) == 14
    assert type(q.model.layers[0].mlp.up_proj.weight) is not nn.Parameter  # torchao's fp8
    ids = torch.randint(0, 512, (16, 32), device=device)
    with torch.no_grad():
        a, b = bf16(ids).logits.float(), q(ids).logits.float()
    cos = torch.nn.functional.cosine_similarity(a.flatten(1), b.flatten(1)).min().item()
    assert cos > 0.99, cos
    kw = dict(attention_mask=torch.ones_like(ids), max_new_tokens=4, min_new_tokens=4,
              do_sample=False, eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        ta = bf16.generate(input_ids=ids, **kw)[:, 32:]
        tb = q.generate(input_ids=ids, **kw)[:, 32:]
    assert (ta[:, 0] == tb[:, 0]).float().mean().item() >= 0.5


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", ["dynamic", "weight-only"])
@pytest.mark.parametrize("path, fuse, fold", [("eager", False, False),
                                              ("static", True, False),
                                              ("graph", True, True),
                                              ("compile", True, True)])
def test_fp8_generates_on_every_path(path, fuse, fold, recipe):
    """fp8, either recipe, with the static cache, the CUDA graph, torch.compile, --fuse and
    --fold-gqa: a record, fp8 weights at a byte, fewer bytes per step than bf16's."""
    _fp8_gpu()
    c = GenerateConfig(model="test-llama", batch_size=2, prompt_len=16, output_len=6,
                       precision="fp8", path=path, fuse=fuse, fold_gqa=fold, device="cuda",
                       stop=QUICK, warmup_requests=0, telemetry_interval_s=None,
                       fp8_recipe=recipe)
    r = workload.measure(c, env={})
    assert r.ok, r.error
    assert r.shape["decode_weight_bytes"] == FP8_READ_BYTES
    assert r.decode_bytes_per_step() < gen.decode_bytes_per_step(
        meta_shape(get_lm("test-llama")), "bf16", 2, 16, 6)

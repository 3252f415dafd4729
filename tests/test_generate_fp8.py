"""dlbench generate --precision fp8: the errors that say what to do (the CPU, an older GPU, no
torchao), the bytes a decode step reads counted on the model's own fp8 tensors, the layers
quantized (not the head, not the embedding, fused weights as one), and on a GPU (skipped
without one) fp8 generation beside bf16's.

fp8 matmuls need an sm_89+ GPU, so on the CPU the quantization is torchao's weight-only fp8
config: the same fp8 weight tensors (e4m3 data, one fp32 scale per row) the dynamic recipe
makes, without the fp8 matmul. torchao is in the test extra; the tests that need it skip
without it.
"""

from __future__ import annotations

import csv
import json
import sys

import pytest
import torch
from torch import nn

from fakes.cli import run as run_cli

from dlbench.config import ConfigError
from dlbench.measure import generation as gen
from dlbench.measure.stopping import StopRule
from dlbench.models.lm import get_lm, lm_shape, meta_shape, tensor_bytes
from dlbench.records.generate import GenerateConfig
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


def weight_only():
    """torchao's weight-only fp8 config (per-row scales), which quantizes on the CPU."""
    quant = pytest.importorskip("torchao.quantization")
    return quant.Float8WeightOnlyConfig(granularity=quant.PerRow())


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
    with pytest.raises(ConfigError, match=r"--precision fp8 needs torchao's float8 inference "
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
    with pytest.raises(UnsupportedError, match="A100-SXM4-80GB is sm_80: use --precision bf16"):
        fp8_inference.check_ready(torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d: (9, 0))
    pytest.importorskip("torchao.quantization")
    fp8_inference.check_ready(torch.device("cuda", 0))  # an H100 with torchao: ready
    # a run asked for from Python gets the same refusal, as a row
    c = GenerateConfig(model="test-llama", batch_size=1, precision="fp8", device="cpu",
                       stop=QUICK, telemetry_interval_s=None)
    with pytest.raises(UnsupportedError, match="on the CPU: use --precision bf16"):
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
    config = weight_only()
    real = fp8_inference.recipe
    monkeypatch.setattr(fp8, "check_device", lambda device, flag, instead: None)
    monkeypatch.setattr(fp8_inference, "recipe", lambda: (real()[0], config))


def test_an_fp8_run_is_stored_shown_and_exported_as_fp8(tmp_path, fp8_on_this_cpu):
    db = str(tmp_path / "g.db")
    p = run_cli("generate", "-m", "test-llama", "-b", "2", "--precision", "bf16,fp8",
                "--prompt-len", "8", "--output-len", "4", "--path", "static", "--fuse",
                "--device", "cpu", "--db", db, "--json", *FAST)
    assert p.returncode == 0, p.stderr
    bf16, q = json.loads(p.stdout)
    assert q["status"] == "ok" and q["config"]["precision"] == "fp8"
    assert "test-llama b2 fp8 8+4 static+fuse" in p.stderr      # the line as it finished
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
def test_fp8_logits_and_tokens_are_close_to_bf16s():
    """The same weights in bf16 and quantized by the dynamic recipe (fp8 matmuls): the prefill's
    logits agree to fp8's rounding, and most sequences' first tokens are the same. Random
    weights make close logits, so a flip now and then is fp8's rounding; a wrong scale or a
    transposed weight would agree on about 1 in 512 (on the CPU, torchao's weight-only fp8 of
    this model gives cosine 0.998 and agrees on 88-94% of first tokens)."""
    device = _fp8_gpu()
    torch.manual_seed(0)
    spec = get_lm("hf:llama?hidden_size=256&intermediate_size=512&num_hidden_layers=2&"
                  "num_attention_heads=4&num_key_value_heads=2&vocab_size=512")
    bf16 = spec.build_on(device, torch.bfloat16)
    q = spec.build_on(device, torch.bfloat16)
    q.load_state_dict(bf16.state_dict())
    assert len(fp8_inference.quantize(q)) == 14
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
@pytest.mark.parametrize("path, fuse, fold", [("eager", False, False),
                                              ("static", True, False),
                                              ("graph", True, True),
                                              ("compile", True, True)])
def test_fp8_generates_on_every_path(path, fuse, fold):
    """fp8 with the static cache, the CUDA graph, torch.compile, --fuse and --fold-gqa: a
    record, fp8 weights at a byte, fewer bytes per step than bf16's."""
    _fp8_gpu()
    c = GenerateConfig(model="test-llama", batch_size=2, prompt_len=16, output_len=6,
                       precision="fp8", path=path, fuse=fuse, fold_gqa=fold, device="cuda",
                       stop=QUICK, warmup_requests=0, telemetry_interval_s=None)
    r = workload.measure(c, env={})
    assert r.ok, r.error
    assert r.shape["decode_weight_bytes"] == FP8_READ_BYTES
    assert r.decode_bytes_per_step() < gen.decode_bytes_per_step(
        meta_shape(get_lm("test-llama")), "bf16", 2, 16, 6)

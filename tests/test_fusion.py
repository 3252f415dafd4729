"""Fused projections (dlbench.workloads.fusion) and ``dlbench generate --fuse``."""

from __future__ import annotations

import sqlite3

import pytest
import torch

from fakes import cli
from dlbench.config import ConfigError
from dlbench.models.lm import get_lm
from dlbench.records.generate import GenerateConfig
from dlbench.workloads import generate as workload
from dlbench.workloads.devices import UnsupportedError
from dlbench.workloads.fusion import fuse_projections



def _linear_calls(model: torch.nn.Module, x: torch.Tensor) -> int:
    """Linear layers in the graph dynamo traces of one forward."""
    seen: list[int] = []

    def backend(gm, _):
        seen.append(sum(1 for n in gm.graph.nodes if "linear" in str(n.target)))
        return gm
    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(lambda: model(input_ids=x).logits, fullgraph=True, backend=backend)()
    torch._dynamo.reset()
    return seen[0]


def test_fused_model_computes_what_the_model_did_in_fewer_matmuls():
    torch.manual_seed(0)
    model = get_lm("test-llama").build_on("cpu", torch.float32).eval()
    x = torch.randint(0, 256, (2, 9))
    params = sum(p.numel() for p in model.parameters())
    with torch.no_grad():
        want = model(input_ids=x).logits
    before = _linear_calls(model, x)
    assert fuse_projections(model) == 4  # two layers: q/k/v and gate/up each
    with torch.no_grad():
        got = model(input_ids=x).logits
    assert torch.allclose(got, want, atol=1e-5)
    # 7 linear layers a layer and the head, then 4 a layer: one matmul for q/k/v, one for
    # gate/up; the weights are the same numbers, moved, not copied
    assert (before, _linear_calls(model, x)) == (15, 9)
    assert sum(p.numel() for p in model.parameters()) == params


def test_a_sibling_called_out_of_order_still_computes_its_own_rows():
    torch.manual_seed(0)
    model = get_lm("test-llama").build_on("cpu", torch.float32)
    attn = model.model.layers[0].self_attn
    x = torch.randn(1, 3, attn.q_proj.in_features)
    want = [attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)]
    fuse_projections(model)
    in_order = attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)
    assert attn.qkv_fused.last_output is None  # the product is dropped after the last sibling
    got_v, got_q, got_k = attn.v_proj(x), attn.q_proj(x), attn.k_proj(x)
    for g, o, w in zip((got_q, got_k, got_v), in_order, want):
        assert torch.allclose(g, w, atol=1e-6) and torch.allclose(o, w, atol=1e-6)


def test_a_model_without_sibling_projections_is_refused():
    model = get_lm("test-gpt2").build_on("cpu", torch.float32)
    with pytest.raises(UnsupportedError, match=r"^fuse: GPT2LMHeadModel has no separate .*; "
                                               r"run without fuse=True$"):
        fuse_projections(model)


def test_fuse_is_part_of_the_identity_only_when_on():
    base = dict(model="test-llama", batch_size=1, prompt_len=8, output_len=4,
                precision="fp32", device="cpu")
    plain = GenerateConfig(path="compile", **base)
    fused = GenerateConfig(path="compile", fuse=True, **base)
    eager = GenerateConfig(path="eager", **base)
    # a record made before --fuse existed keeps its key: the field is absent from it
    assert "fuse" not in str(plain.key()) and plain.key() == GenerateConfig.from_dict(
        {k: v for k, v in plain.to_dict().items() if k != "fuse"}).key()
    assert fused.key() != plain.key()
    assert fused.pair_key() == plain.pair_key() == eager.pair_key()
    assert fused.label == "test-llama b1 fp32 8+4 compile+fuse"
    with pytest.raises(ConfigError, match="^fuse applies to"):
        GenerateConfig(path="eager", fuse=True, **base)


def test_a_fused_static_loop_generates_the_same_tokens():
    torch.manual_seed(0)
    lm = get_lm("test-llama").build_on("cpu", torch.float32)
    prompt = torch.randint(0, 256, (2, 7))
    want = lm.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt),
                       max_new_tokens=5, min_new_tokens=5, do_sample=False,
                       eos_token_id=None, pad_token_id=0)[:, 7:]
    fuse_projections(lm)
    c = GenerateConfig(model="test-llama", batch_size=2, prompt_len=7, output_len=5,
                       precision="fp32", path="static", device="cpu", fuse=True)
    loop = workload.StaticLoop(c, lm, prompt, torch.device("cpu"))
    with torch.no_grad():
        loop.prefill()
        got = [loop.token.clone()]
        for _ in range(4):
            loop.decode()
            got.append(loop.token.clone())
    assert torch.equal(torch.cat(got, dim=1), want)


def test_generate_fuse_command(tmp_path):
    db = str(tmp_path / "g.db")
    fast = ["--min-requests", "3", "--min-time", "0", "--max-time", "0.2", "--warmup", "0",
            "--telemetry-interval", "0", "--prompt-len", "8", "--output-len", "4"]
    p = cli.run("generate", "-m", "test-llama,test-gpt2", "--path", "eager,static", "--fuse",
                "--db", db, *fast)
    assert p.returncode != 0  # gpt-2's fused c_attn cannot be fused again: a failed row
    rows = sqlite3.connect(db).execute(
        "SELECT label, status FROM results ORDER BY rowid").fetchall()
    assert rows == [("test-llama b1 fp32 8+4 eager", "ok"),
                    ("test-llama b1 fp32 8+4 static+fuse", "ok"),
                    ("test-gpt2 b1 fp32 8+4 eager", "ok"),
                    ("test-gpt2 b1 fp32 8+4 static+fuse", "error")]
    assert "run without fuse=True" in p.stderr  # a stored row's error, as Python reads it

"""Folded grouped-query decode attention (dlbench.workloads.gqa_fold) and ``--fold-gqa``."""

from __future__ import annotations

import sqlite3

import pytest
import torch
from transformers import AttentionInterface, StaticCache

from fakes import cli
from dlbench.config import ConfigError
from dlbench.models.lm import get_lm
from dlbench.records.generate import GenerateConfig
from dlbench.workloads import generate as workload
from dlbench.workloads import gqa_fold
from dlbench.workloads.devices import UnsupportedError
from dlbench.workloads.fusion import fuse_projections



def _logits(model, prompt: torch.Tensor, steps: int) -> torch.Tensor:
    """The last position's logits of a prefill and ``steps`` greedy decode steps over a static
    cache longer than the request (so the mask hides positions not yet written)."""
    b, p = prompt.shape
    cache = StaticCache(config=model.config, max_cache_len=p + steps + 4)
    out = model(input_ids=prompt, position_ids=torch.arange(p)[None], past_key_values=cache,
                use_cache=True)
    logits = [out.logits[:, -1]]
    for i in range(steps):
        token = logits[-1].argmax(-1, keepdim=True)
        out = model(input_ids=token, position_ids=torch.tensor([[p + i]]),
                    past_key_values=cache, use_cache=True)
        logits.append(out.logits[:, -1])
    return torch.stack(logits)


def test_folded_decode_computes_what_repeated_keys_and_values_did():
    torch.manual_seed(0)
    model = get_lm("test-llama").build_on("cpu", torch.float32).eval()
    assert model.config.num_attention_heads == 2 * model.config.num_key_value_heads
    prompt = torch.randint(0, 256, (3, 7))
    calls: list[tuple[int, ...]] = []
    fold = gqa_fold.folded_sdpa

    def spy(module, query, *args, **kwargs):
        calls.append(tuple(query.shape))
        return fold(module, query, *args, **kwargs)
    with torch.no_grad():
        want = _logits(model, prompt, 5)
        assert gqa_fold.fold_gqa(model) == 2
        assert model.config._attn_implementation == gqa_fold.NAME
        try:  # the registered function is looked up by name at every call: a spy around it
            AttentionInterface.register(gqa_fold.NAME, spy)
            got = _logits(model, prompt, 5)
        finally:
            AttentionInterface.register(gqa_fold.NAME, fold)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # every layer's attention went through it: the prefill (7 positions) and 5 decode steps
    assert calls.count((3, 4, 7, 16)) == 2 and calls.count((3, 4, 1, 16)) == 2 * 5


def test_a_model_without_groups_is_refused():
    model = get_lm("test-gpt2").build_on("cpu", torch.float32)
    with pytest.raises(UnsupportedError, match="no grouped-query attention"):
        gqa_fold.fold_gqa(model)


def test_fold_is_part_of_the_identity_only_when_on():
    base = dict(model="test-llama", batch_size=1, prompt_len=8, output_len=4,
                precision="fp32", device="cpu")
    plain = GenerateConfig(path="compile", fuse=True, **base)
    folded = GenerateConfig(path="compile", fuse=True, fold_gqa=True, **base)
    # a record made before --fold-gqa existed keeps its key: the field is absent from it
    assert plain.key() == GenerateConfig.from_dict(
        {k: v for k, v in plain.to_dict().items() if k != "fold_gqa"}).key()
    assert folded.key() != plain.key() and folded.pair_key() == plain.pair_key()
    assert folded.label == "test-llama b1 fp32 8+4 compile+fuse+fold"
    assert GenerateConfig(path="static", fold_gqa=True, **base).path_label == "static+fold"
    with pytest.raises(ConfigError, match="^fold_gqa applies to"):
        GenerateConfig(path="eager", fold_gqa=True, **base)


def test_a_fused_and_folded_static_loop_generates_the_same_tokens():
    torch.manual_seed(0)
    lm = get_lm("test-llama").build_on("cpu", torch.float32)
    prompt = torch.randint(0, 256, (2, 7))
    want = lm.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt),
                       max_new_tokens=5, min_new_tokens=5, do_sample=False,
                       eos_token_id=None, pad_token_id=0)[:, 7:]
    fuse_projections(lm)
    gqa_fold.fold_gqa(lm)
    c = GenerateConfig(model="test-llama", batch_size=2, prompt_len=7, output_len=5,
                       precision="fp32", path="static", device="cpu", fuse=True, fold_gqa=True)
    loop = workload.StaticLoop(c, lm, prompt, torch.device("cpu"))
    for _ in range(2):  # a second request over the rewound cache
        with torch.no_grad():
            loop.prefill()
            got = [loop.token.clone()]
            for _ in range(4):
                loop.decode()
                got.append(loop.token.clone())
        assert torch.equal(torch.cat(got, dim=1), want)


def test_generate_fold_command(tmp_path):
    db = str(tmp_path / "g.db")
    fast = ["--min-requests", "3", "--min-time", "0", "--max-time", "0.2", "--warmup", "0",
            "--telemetry-interval", "0", "--prompt-len", "8", "--output-len", "4"]
    p = cli.run("generate", "-m", "test-llama,test-gpt2", "--path", "eager,static", "--fold-gqa",
                "--db", db, *fast)
    assert p.returncode != 0  # gpt-2 has as many key/value heads as query heads: a failed row
    rows = sqlite3.connect(db).execute(
        "SELECT label, status FROM results ORDER BY rowid").fetchall()
    assert rows == [("test-llama b1 fp32 8+4 eager", "ok"),
                    ("test-llama b1 fp32 8+4 static+fold", "ok"),
                    ("test-gpt2 b1 fp32 8+4 eager", "ok"),
                    ("test-gpt2 b1 fp32 8+4 static+fold", "error")]
    assert "no grouped-query attention" in p.stderr

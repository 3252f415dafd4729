"""dlbench generate: the arithmetic on known numbers, the model sources, the decode loop's
tokens against transformers' own generate(), the token timing on a fake clock, the record, and
the command run as a user runs it (a subprocess, a real SQLite file)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from fakes.cli import run as run_cli

from dlbench.measure import generation as gen
from dlbench.measure.stopping import StopRule
from dlbench.measure.timer import TokenTimer
from dlbench.models.errors import ModelSourceError, UnknownModelError
from dlbench.models.lm import get_lm, lm_names, meta_shape
from dlbench.records import record_from_dict
from dlbench.records.generate import GenerateConfig, GenerateRecord
from dlbench.workloads import generate as workload

QUICK = StopRule(min_steps=3, min_seconds=0.0, max_seconds=2.0, target_rel_ci=0.2)
FAST = ["--min-requests", "3", "--min-time", "0", "--max-time", "2", "--target-ci", "0.2",
        "--warmup", "0", "--telemetry-interval", "0"]

# llama-3.1-8b's shape (its config.json), the numbers every figure below is checked on.
LLAMA8B = SimpleNamespace(params=8_030_261_248, embedding_params=525_336_576,
                          lm_head_params=525_336_576, layers=32, hidden=4096, heads=32,
                          kv_heads=8, head_dim=128, vocab=128_256, tied=False)


def cfg(**kw) -> GenerateConfig:
    base = dict(model="test-llama", batch_size=2, prompt_len=8, output_len=5, precision="fp32",
                device="cpu", stop=QUICK, warmup_requests=0, telemetry_interval_s=None)
    base.update(kw)
    return GenerateConfig(**base)


# -- the arithmetic ------------------------------------------------------------------------------
def test_kv_cache_of_llama_8b_is_128_kib_per_token_in_bf16():
    # 2 (K and V) x 32 layers x 8 KV heads x 128 dims x 2 bytes
    assert gen.kv_bytes_per_token(LLAMA8B, "bf16") == 131_072
    assert gen.kv_cache_bytes(LLAMA8B, "bf16", 4, 256) == 4 * 256 * 131_072


def test_a_decode_step_reads_every_weight_but_the_embedding_table():
    # untied: the input table is a lookup (batch rows), the head is read in full
    expected = (8_030_261_248 - 525_336_576) * 2 + 1 * 4096 * 2
    assert gen.weight_bytes_per_step(LLAMA8B, "bf16", 1) == expected
    tied = SimpleNamespace(**{**vars(LLAMA8B), "tied": True, "params": 7_504_924_672,
                              "lm_head_params": 0})
    # tied: the table is read in full by the head
    assert gen.weight_bytes_per_step(tied, "bf16", 1) == (7_504_924_672 * 2 + 4096 * 2)


def test_decode_bytes_add_the_mean_context_and_the_new_position():
    # 128 prompt tokens, 128 output: decode steps k = 1..127 attend to 128 + k positions
    assert gen.mean_context(128, 128) == pytest.approx(128 + 64)
    got = gen.decode_bytes_per_step(LLAMA8B, "bf16", 8, 128, 128)
    weights = gen.weight_bytes_per_step(LLAMA8B, "bf16", 8)
    assert got == pytest.approx(weights + 8 * 131_072 * (192 + 1))


def test_prefill_flops_count_linear_layers_causal_attention_and_one_head_per_sequence():
    tiny = SimpleNamespace(params=1000, embedding_params=100, lm_head_params=100, layers=2,
                           hidden=10, heads=2, kv_heads=1, head_dim=5, vocab=10, tied=False)
    linear = 2 * (1000 - 100 - 100)          # per token
    attention = 2 * 2 * 2 * 2 * 5 * (4 * 5 / 2)  # QK^T and AV, 4 tokens, causal
    head = 2 * 10 * 10                        # the last position's logits
    assert gen.prefill_flops(tiny, 3, 4) == 3 * (linear * 4 + attention + head)


def test_largest_batch_fits_weights_twice_the_kv_cache_and_the_prefill():
    memory = 80 * 2**30
    b = gen.largest_batch(LLAMA8B, "bf16", 128, 128, memory, intermediate=14336)
    per_seq = (2 * gen.kv_cache_bytes(LLAMA8B, "bf16", 1, 256)
               + gen.prefill_activation_bytes(LLAMA8B, "bf16", 128, 14336))
    weights = LLAMA8B.params * 2
    assert weights + b * per_seq <= 0.9 * memory < weights + (b + 1) * per_seq
    assert gen.largest_batch(LLAMA8B, "bf16", 128, 128, 8 * 2**30) == 0  # not even the weights


def test_latency_percentiles():
    lat = gen.latency([0.001 * i for i in range(1, 101)])
    assert lat.mean_s == pytest.approx(0.0505) and lat.n == 100
    assert lat.median_s == pytest.approx(0.0505) and lat.p99_s > lat.p90_s > lat.median_s
    assert gen.latency([]) is None


# -- the models ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name, billions", [("llama-3.1-8b", 8.03), ("llama-3.2-1b", 1.24),
                                            ("llama-3.2-3b", 3.21), ("qwen2.5-7b", 7.62),
                                            ("mistral-7b", 7.25), ("gpt2", 0.124),
                                            ("gpt2-xl", 1.56)])
def test_shipped_configs_have_their_published_sizes(name, billions):
    shape = meta_shape(get_lm(name))
    assert shape.params / 1e9 == pytest.approx(billions, rel=0.005)


def test_shipped_names_and_their_sources():
    names = lm_names()
    assert {"gpt2", "gpt2-xl", "llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "qwen2.5-7b",
            "mistral-7b"} <= set(names)
    assert "test-llama" not in names and "test-llama" in lm_names(include_tests=True)
    assert "huggingface.co/meta-llama/Llama-3.1-8B" in get_lm("llama-3.1-8b").description


def test_unknown_model_names_close_matches():
    with pytest.raises(UnknownModelError, match="did you mean llama-3.1-8b"):
        get_lm("llama-3.1-8")


def test_hf_config_with_fields_changed():
    spec = get_lm("hf:llama?num_hidden_layers=1&hidden_size=32&intermediate_size=64"
                  "&num_attention_heads=2&num_key_value_heads=1&vocab_size=128&head_dim=16")
    shape = meta_shape(spec)
    assert (shape.layers, shape.hidden, shape.kv_heads, shape.vocab) == (1, 32, 1, 128)
    with pytest.raises(ModelSourceError, match="no field"):
        get_lm("hf:llama?num_hiden_layers=1")


def test_hf_directory_with_weights_loads_them(tmp_path):
    model = get_lm("test-llama").build_on("cpu", torch.float32)
    model.save_pretrained(tmp_path)
    spec = get_lm(f"hf:{tmp_path}")
    assert spec.weights_dir == str(tmp_path) and "trained weights" in spec.description
    loaded = spec.build_on("cpu", torch.float32)
    for a, b in zip(model.state_dict().values(), loaded.state_dict().values()):
        assert torch.equal(a, b)


def test_factory_in_a_file(tmp_path):
    f = tmp_path / "my_lm.py"
    f.write_text("from dlbench.models.lm import get_lm\nimport torch\n"
                 "def build():\n    return get_lm('test-gpt2').build_on('cpu', torch.float32)\n"
                 "def not_a_model():\n    return 3\n")
    r = workload.measure(cfg(model=f"{f}:build", path="static"), env={})
    assert r.ok and r.shape["layers"] == 2
    with pytest.raises(ModelSourceError, match="causal LM"):
        workload.measure(cfg(model=f"{f}:not_a_model"), env={})


# -- the decode loop -----------------------------------------------------------------------------
@pytest.mark.parametrize("model", ["test-llama", "test-gpt2"])
def test_static_loop_generates_what_generate_does(model):
    """dlbench's own loop (static cache, argmax on the device) must produce the very tokens
    transformers' generate() does, request after request (the cache is rewound, not zeroed)."""
    torch.manual_seed(0)
    lm = get_lm(model).build_on("cpu", torch.float32)
    prompt = torch.randint(0, 256, (3, 7))
    c = cfg(model=model, batch_size=3, prompt_len=7, output_len=6, path="static")
    want = lm.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt),
                       max_new_tokens=6, min_new_tokens=6, do_sample=False, eos_token_id=None,
                       pad_token_id=0)[:, 7:]
    loop = workload.StaticLoop(c, lm, prompt, torch.device("cpu"))
    for _ in range(2):
        with torch.no_grad():
            loop.prefill()
            got = [loop.token.clone()]
            for _ in range(5):
                loop.decode()
                got.append(loop.token.clone())
        assert torch.equal(torch.cat(got, dim=1), want)


def test_token_timer_on_a_fake_clock():
    ticks = iter([0.0, 1.0, 1.5, 2.5, 10.0, 10.25, 11.0])
    t = TokenTimer(torch.device("cpu"), clock=lambda: next(ticks))
    t.begin(); t.mark(); t.mark(); t.mark()
    t.begin(); t.mark(); t.mark()
    assert t.read() == [[1.0, 0.5, 1.0], [0.25, 0.75]]
    t.clear()
    assert t.read() == []


@pytest.mark.parametrize("path", ["eager", "static"])
def test_a_record_splits_each_request_into_its_tokens(path):
    r = workload.measure(cfg(path=path), env={})
    assert r.ok, r.error
    n = len(r.step_times_s)
    assert n >= 3 and len(r.ttft_s) == n and len(r.decode_s) == n
    assert all(len(d) == 4 for d in r.decode_s)  # output_len 5: the prefill's token + 4 steps
    shares = []
    for total, first, steps in zip(r.step_times_s, r.ttft_s, r.decode_s):
        # the marks lie inside the request: generate()'s own last bookkeeping and the window's
        # lap are all that lie outside them
        assert first + sum(steps) <= total * 1.001
        shares.append((first + sum(steps)) / total)
    # ... and cover nearly all of it (the median: a loaded machine may preempt any one request)
    assert sorted(shares)[len(shares) // 2] > 0.9
    s = r.summary()
    assert s.samples == n * 2 * 5 and r.output_tokens_per_s() == pytest.approx(s.throughput)
    assert r.total_tokens_per_s() == pytest.approx(s.throughput * (8 + 5) / 5)
    assert r.tpot().n == 4 * n and r.ttft().n == n
    assert r.shape["layers"] == 2 and r.memory["weights_bytes"] == 106_816 * 4
    assert r.memory["kv_cache_bytes"] > 0
    back = record_from_dict(json.loads(json.dumps(r.to_dict())))
    assert isinstance(back, GenerateRecord) and back.decode_s == r.decode_s
    assert back.tpot() == r.tpot() and back.config == r.config


def test_graph_path_needs_a_gpu():
    with pytest.raises(workload.UnsupportedError, match="CUDA GPU"):
        workload.measure(cfg(path="graph"), env={})


#: The xdist group of the two tests that compile test-llama's decode step with inductor on the
#: CPU (this one and test_fidelity_generate's compile case): on one worker, one after the other,
#: the second finds in inductor's on-disk cache what the first built with it empty (the CPU
#: checks, the precompiled header, the compiled graph: most of half a minute), instead of both
#: building it at once.
INDUCTOR_CPU = "inductor-cpu"


@pytest.mark.slow
@pytest.mark.xdist_group(INDUCTOR_CPU)
def test_compiled_path_on_the_cpu():
    # test_fidelity_generate's shape (batch 1, 4+4): the same decode graph, compiled once
    r = workload.measure(cfg(path="compile", batch_size=1, prompt_len=4, output_len=4), env={})
    assert r.ok, r.error
    assert r.first_step_s > max(r.step_times_s)  # compilation is in the first request


def test_config_identity_and_checks():
    a, b = cfg(path="eager"), cfg(path="compile")
    assert a.key() != b.key() and a.pair_key() == b.pair_key()
    assert cfg(stop=StopRule(min_steps=5)).key() == a.key()  # how long: not what
    assert a.label == "test-llama b2 fp32 8+5 eager"
    from dlbench.config import ConfigError
    with pytest.raises(ConfigError, match="^output_len must be"):
        cfg(output_len=1)
    with pytest.raises(ConfigError, match="^path must be one of"):
        cfg(path="fast")
    with pytest.raises(ConfigError, match="^precision must be one of"):
        cfg(precision="tf32")


# -- the command ---------------------------------------------------------------------------------
def dlbench(*args, timeout=300):
    return run_cli(*args, timeout=timeout)


def test_generate_command_stores_a_sweep_and_shows_it(tmp_path):
    db = str(tmp_path / "g.db")
    p = dlbench("generate", "-m", "test-llama", "-b", "1,2", "--prompt-len", "8",
                "--output-len", "4", "--path", "eager,static", "--db", db, *FAST)
    assert p.returncode == 0, p.stderr
    assert "output tok/s" in p.stderr and "TTFT" in p.stderr
    rows = sqlite3.connect(db).execute(
        "SELECT kind, status, label FROM results ORDER BY rowid").fetchall()
    assert [r[2] for r in rows] == ["test-llama b1 fp32 8+4 eager", "test-llama b1 fp32 8+4 static",
                                    "test-llama b2 fp32 8+4 eager", "test-llama b2 fp32 8+4 static"]
    assert {(r[0], r[1]) for r in rows} == {("generate", "ok")}
    shown = dlbench("results", "show", "latest", "--db", db)
    assert shown.returncode == 0 and "test-llama" in shown.stdout
    again = dlbench("generate", "-m", "test-llama", "-b", "1,2", "--prompt-len", "8",
                    "--output-len", "4", "--path", "eager,static", "--db", db, "--resume", *FAST)
    assert again.returncode == 0 and "4 skipped by --resume" in again.stderr


def test_generate_command_errors_say_what_to_do(tmp_path):
    db = str(tmp_path / "g.db")
    p = dlbench("generate", "-m", "llama-3.1-8", "--db", db)
    assert p.returncode == 2 and "did you mean llama-3.1-8b" in p.stderr
    assert not Path(db).exists()
    p = dlbench("generate", "--db", db)
    assert p.returncode == 2 and "--list-models" in p.stderr
    p = dlbench("generate", "-m", "test-llama", "--precision", "tf32", "--db", db)
    assert p.returncode == 2 and "takes bf16, fp16, fp32, fp8" in p.stderr
    # a path the CPU cannot run is a failure row, and the sweep goes on
    p = dlbench("generate", "-m", "test-llama", "--path", "graph,static", "--prompt-len", "4",
                "--output-len", "3", "--db", db, "--device", "cpu", *FAST)
    assert p.returncode == 3, p.stderr
    rows = sqlite3.connect(db).execute("SELECT status, error_type FROM results").fetchall()
    assert rows == [("error", "unsupported"), ("ok", None)]


@pytest.mark.slow
def test_generate_in_fresh_processes(tmp_path):
    db = str(tmp_path / "g.db")
    p = dlbench("generate", "-m", "test-gpt2", "--prompt-len", "4", "--output-len", "3",
                "--repeat", "2", "--db", db, "--json", *FAST)
    assert p.returncode == 0, p.stderr
    records = [record_from_dict(d) for d in json.loads(p.stdout)]
    assert [r.repeat_index for r in records] == [0, 1]
    assert all(isinstance(r, GenerateRecord) and r.ok for r in records)
    assert records[0].repeat_group == records[1].repeat_group


def test_list_models():
    p = dlbench("generate", "--list-models")
    assert p.returncode == 0
    assert "llama-3.1-8b" in p.stdout and "8.03 B parameters" in p.stdout
    assert "test-llama" not in p.stdout


def test_measure_generation_from_python(tmp_path):
    import dlbench
    db = tmp_path / "api.db"
    r = dlbench.measure_generation("test-llama", 2, prompt_len=8, output_len=4, device="cpu",
                                   path="static", stop=QUICK, db=db, tag="api",
                                   telemetry_interval_s=None)
    assert isinstance(r, GenerateRecord) and r.ok and r.config.precision == "fp32"
    [stored] = dlbench.load(db, kind="generate", tag="api")
    assert stored.id == r.id and stored.decode_s == r.decode_s
    with pytest.raises(dlbench.api.MeasurementError, match="unsupported"):
        dlbench.measure_generation("test-llama", device="cpu", path="graph", stop=QUICK)

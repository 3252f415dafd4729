"""Model registry, model builds (meta device), FLOP counts, and tiny models run for real on the CPU."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
import torch

import dlbench.models as models_pkg
from dlbench.measure import flops
from dlbench.measure.flops import count_flops, params_count
from dlbench.models import ModelSpec, UnknownModelError, get_model, list_models, model_names

SEED = ["resnet50", "resnet152", "inception_v3", "inception_v4", "vgg16", "nasnet", "densenet161",
        "cnn10"]
MODERN = ["vit_b_16", "bert-base", "gpt2", "llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b"]
TEST = ["tiny_cnn", "tiny_mlp", "tiny_gpt", "tiny_gpt2", "tiny_llama", "test_oom", "test_nan"]

# name -> (default batch, eval GFLOPs per sample at the default size). The FLOPs are the
# published multiply-adds x 2 (torchvision and timm model cards) for the image models, and
# 2 x matmul weights x tokens + attention for the language models.
EXPECTED = {
    "resnet50": (1024, 8.18),
    "resnet152": (512, 23.0),
    "inception_v3": (512, 11.4),
    "inception_v4": (512, 24.5),
    "vgg16": (512, 30.9),
    "nasnet": (64, 47.6),
    "densenet161": (256, 15.5),
    # Counted by hand: 2 x the multiply-adds of nine 3x3 convolutions, three each at 32, 16
    # and 8 px with 64, 128 and 256 channels (the dense layer adds 5 kFLOPs).
    "cnn10": (256, 0.532),
    "vit_b_16": (512, 35.1),
    "bert-base": (128, 121.2),
    "gpt2": (32, 291.6),
    # Sequence 2048, full attention counted (as torchtitan's 6N + 12LHT, its forward third):
    # 2 x (params - embedding) x T + 2 x hidden x vocab x T (tied head) + 4 x L x heads x
    # head_dim x T^2 for llama-3.2-1b = 3,986 + 1,076 + 550 GFLOPs.
    "llama-3.2-1b": (4, 5611.4),
    "llama-3.2-3b": (1, 14601.8),
    "llama-3.1-8b": (1, 32938.1),
}


# --- registry ---------------------------------------------------------------------------------

def test_list_order_and_test_models_hidden() -> None:
    assert model_names() == SEED + MODERN
    assert model_names(include_test=True) == SEED + MODERN + TEST
    assert all(not s.test_only for s in list_models())
    assert all(get_model(n).test_only for n in TEST)


@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("ResNet50", "resnet50"),
        ("RESNET-152", "resnet152"),
        ("bert-base", "bert-base"),
        ("bert_base", "bert-base"),
        ("BERT", "bert-base"),
        ("vit-b-16", "vit_b_16"),
        ("vit_b16", "vit_b_16"),
        ("inception3", "inception_v3"),
        ("inceptionv3", "inception_v3"),
        ("Inception-V4", "inception_v4"),
        ("nasnetalarge", "nasnet"),
        ("GPT-2", "gpt2"),
        (" gpt2 ", "gpt2"),
        ("tiny-cnn", "tiny_cnn"),
    ],
)
def test_aliases_and_case(alias: str, name: str) -> None:
    assert get_model(alias).name == name


def test_unknown_model_names_close_matches() -> None:
    with pytest.raises(UnknownModelError) as info:
        get_model("resnet5")
    message = str(info.value)
    assert "resnet50" in message
    assert 'run "dlbench models" to list them' in message
    assert isinstance(info.value, KeyError)  # callers may catch it as a KeyError


def test_unknown_model_without_close_match() -> None:
    with pytest.raises(UnknownModelError, match="dlbench models"):
        get_model("zzzzzz")


def test_unknown_registry_name_points_to_the_sources() -> None:
    with pytest.raises(UnknownModelError, match="timm:, torchvision:, hf: and your own models"):
        get_model("convnext_tiny")


@pytest.mark.parametrize("name, source", [
    ("timm:convnext_tiny", "timm"),
    ("torchvision:efficientnet_b0", "torchvision"),
    ("hf:bert-base-uncased", "transformers"),
])
def test_get_model_dispatches_on_the_source_prefix(name: str, source: str) -> None:
    spec = get_model(name)
    assert (spec.name, spec.source, spec.test_only) == (name, source, False)
    assert name not in model_names(include_test=True)  # not added to the registry's list


@pytest.mark.parametrize("name", list(EXPECTED))
def test_spec_fields(name: str) -> None:
    spec = get_model(name)
    assert spec.default_batch == EXPECTED[name][0]
    assert spec.description and "\n" not in spec.description
    if spec.kind == "image":
        assert (spec.unit, spec.num_classes) == ("images", 10 if name == "cnn10" else 1000)
    llm = 2048 if name.startswith("llama") else None
    assert spec.input_size == llm or {"inception_v3": 299, "inception_v4": 299, "nasnet": 331,
                                      "bert-base": 512, "gpt2": 1024, "cnn10": 32}.get(name, 224)


def test_text_specs() -> None:
    bert, gpt2 = get_model("bert-base"), get_model("gpt2")
    assert (bert.kind, bert.unit, bert.num_classes) == ("text", "sequences", 30522)
    assert (gpt2.kind, gpt2.unit, gpt2.num_classes) == ("text", "tokens", 50257)
    assert gpt2.units_per_sample() == 1024 and bert.units_per_sample() == 1


def test_nasnet_notes_say_seed_model_differs() -> None:
    notes = get_model("nasnet").notes
    assert "NASNet-A mobile" in notes and "224" in notes and "tf_cnn_benchmarks" in notes


def test_heavy_libraries_are_imported_lazily() -> None:
    """No module-level import of torchvision, timm or transformers (each takes seconds to import).

    Checked on the source rather than in a fresh interpreter: that would cost a torch import.
    """
    heavy = {"torchvision", "timm", "transformers"}
    files = [*Path(models_pkg.__file__).parent.rglob("*.py"), Path(flops.__file__)]
    for file in files:
        for node in ast.parse(file.read_text()).body:  # top-level statements only
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert not {n.split(".")[0] for n in names} & heavy, f"{file.name}: {names}"
    assert len(files) >= 6  # the walk found the package (base, registry, zoo modules, flops)


def test_missing_library_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "timm", None)  # makes `import timm` raise ImportError
    with pytest.raises(ImportError, match="pip install timm"):
        get_model("inception_v4").build()


# --- real models on the meta device -------------------------------------------------------------

# Meta-device kernels still cost Python time per op: the deepest CNNs (hundreds to thousands
# of ops per step) take 5-10 s each to build, run and count on two cores.
_SLOW_TO_COUNT = {"nasnet", "densenet161", "resnet152", "inception_v4"}


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n in _SLOW_TO_COUNT else n for n in EXPECTED],
)
def test_builds_on_meta_and_flops_are_sane(name: str) -> None:
    spec = get_model(name)
    with torch.device("meta"):
        model = spec.build()
    x, _ = spec.make_batch(2, "meta")
    with torch.no_grad():  # training-mode forward (where Inception adds its aux head), no graph
        out = model.train()(x)
    assert type(out) is torch.Tensor  # plain tensor, not a named tuple or a model output
    expected_shape = (2, spec.num_classes) if spec.kind == "image" else (2, spec.input_size,
                                                                         spec.num_classes)
    assert tuple(out.shape) == expected_shape

    evaluated, trained = count_flops(spec, "eval"), count_flops(spec, "train")
    assert evaluated == pytest.approx(EXPECTED[name][1] * 1e9, rel=0.01)
    # Backward costs about twice the forward (less where the input needs no gradient).
    assert 2.9 * evaluated < trained < 3.05 * evaluated


def test_resnet50_flops_match_published() -> None:
    spec = get_model("resnet50")
    evaluated = count_flops(spec, "eval")
    assert evaluated == pytest.approx(8.18e9, rel=0.05)  # 4.09 GMACs per 224 px image
    assert 2.5 * evaluated < count_flops(spec, "train") < 3.5 * evaluated


def test_gpt2_flops_match_formula() -> None:
    """Per sequence: 2 x matmul weights x T forward, plus QK^T and AV (4 x T^2 x d per layer)."""
    t, d, layers, vocab = 1024, 768, 12, 50257
    matmul_weights = layers * 12 * d * d + d * vocab  # qkv + proj + 2 MLP, and the tied LM head
    forward = 2 * matmul_weights * t + layers * 4 * t * t * d
    spec = get_model("gpt2")
    assert count_flops(spec, "eval") == forward
    assert count_flops(spec, "train") == 3 * forward


def test_grouped_conv_backward_counted_once() -> None:
    """A depthwise conv's backward (input and weight gradients) costs twice its forward."""
    conv = torch.nn.Conv2d(64, 64, 3, padding=1, groups=64, bias=False, device="meta")
    x = torch.randn(2, 64, 28, 28, device="meta", requires_grad=True)
    mode = torch.utils.flop_counter.FlopCounterMode(display=False,
                                                    custom_mapping=flops._FLOP_OVERRIDES)
    with mode:
        y = conv(x)
    forward = mode.get_total_flops()
    with mode:
        y.sum().backward()
    assert forward == 2 * 2 * 28 * 28 * 64 * 9
    assert mode.get_total_flops() == 2 * forward  # the mode restarts its count on entry


def test_sequence_length_is_an_option() -> None:
    bert, gpt2 = get_model("bert-base"), get_model("gpt2")
    with torch.device("meta"):
        short, long = bert.build(input_size=128), gpt2.build(input_size=2048)
    assert tuple(short(bert.make_batch(2, "meta", 128)[0]).shape) == (2, 128, 30522)
    assert tuple(long(gpt2.make_batch(1, "meta", 2048)[0]).shape) == (1, 2048, 50257)
    # Linear layers scale with T, attention with T^2: a quarter of the tokens costs a bit less
    # than a quarter of the FLOPs.
    ratio = count_flops(bert, "eval", 128) / count_flops(bert, "eval")
    assert 0.2 < ratio < 0.25


def test_maskless_sdpa_matches_eager_attention() -> None:
    """The attention used by the language models gives eager attention's logits (causal for GPT-2)."""
    transformers = pytest.importorskip("transformers")
    from dlbench.models.zoo import text

    impl = text._attention_implementation()
    small = {
        "BertForMaskedLM": transformers.BertConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            vocab_size=64, use_cache=False),
        "GPT2LMHeadModel": transformers.GPT2Config(
            n_embd=32, n_layer=2, n_head=2, vocab_size=64, bos_token_id=0, eos_token_id=0,
            use_cache=False),
    }
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(0))
    for cls_name, config in small.items():
        cls = getattr(transformers, cls_name)
        torch.manual_seed(0)
        config._attn_implementation = "eager"
        reference = cls(config).eval()
        config._attn_implementation = impl
        tested = cls(config).eval()
        tested.load_state_dict(reference.state_dict())
        torch.testing.assert_close(tested(input_ids=ids).logits, reference(input_ids=ids).logits)


def test_params_count() -> None:
    assert params_count(get_model("resnet50")) == 25_557_032
    assert params_count(get_model("gpt2")) == 124_439_808  # tied embeddings counted once


def test_count_flops_is_cached_and_checks_mode() -> None:
    spec = get_model("vgg16")
    first = count_flops(spec, "eval")
    hits = flops._count_flops_cached.cache_info().hits
    assert count_flops(spec, "eval", spec.input_size) == first  # None and the default share a key
    assert flops._count_flops_cached.cache_info().hits == hits + 1
    with pytest.raises(ValueError):
        count_flops(spec, "inference")  # type: ignore[arg-type]


# --- tiny models, for real on the CPU ------------------------------------------------------------

def _train_step(spec: ModelSpec, batch: int) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    model = spec.build()
    x, y = spec.make_batch(batch, "cpu", generator=gen)
    out = model(x)
    loss = spec.loss(out, y)
    loss.backward()
    return model, out, loss


@pytest.mark.parametrize("name", ["tiny_cnn", "tiny_mlp", "tiny_gpt", "tiny_gpt2", "test_oom"])
def test_tiny_models_train_on_cpu(name: str) -> None:
    spec = get_model(name)
    model, out, loss = _train_step(spec, spec.default_batch)
    per_sample = (spec.num_classes,) if spec.kind == "image" else (spec.input_size, spec.num_classes)
    assert tuple(out.shape) == (spec.default_batch, *per_sample)
    assert torch.isfinite(loss)
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)
    assert count_flops(spec, "train") > count_flops(spec, "eval") > 0


def test_tiny_cnn_is_a_few_thousand_params() -> None:
    assert 1_000 < params_count(get_model("tiny_cnn")) < 10_000


def test_tiny_gpt_is_causal() -> None:
    spec = get_model("tiny_gpt")
    model = spec.build().eval()
    ids, _ = spec.make_batch(1, "cpu", generator=torch.Generator().manual_seed(0))
    changed = ids.clone()
    changed[0, -1] = (ids[0, -1] + 1) % spec.num_classes
    with torch.no_grad():
        a, b = model(ids), model(changed)
    torch.testing.assert_close(a[:, :-1], b[:, :-1])  # earlier positions never see the last token
    assert not torch.allclose(a[:, -1], b[:, -1])


def test_pad_vocabulary_pads_a_transformers_lm_and_keeps_its_embeddings_tied() -> None:
    from dlbench.models.zoo.text import pad_vocabulary
    spec = get_model("tiny_gpt2")                    # vocabulary 100
    model = spec.build()
    inner = model.model
    before = inner.get_input_embeddings().weight.detach().clone()
    assert pad_vocabulary(model) == 128
    assert inner.config.vocab_size == 128
    assert inner.get_input_embeddings().weight is inner.get_output_embeddings().weight
    assert torch.equal(inner.get_input_embeddings().weight[:100], before)  # old rows kept
    x, y = spec.make_batch(2, "cpu", generator=torch.Generator().manual_seed(0))
    out = model(x)
    assert out.shape == (2, spec.input_size, 128) and torch.isfinite(spec.loss(out, y))
    assert pad_vocabulary(model) == 128              # a multiple already: nothing to do
    assert pad_vocabulary(model, multiple=48) == 144
    with pytest.raises(TypeError, match="cannot pad the vocabulary of a TinyGPT"):
        pad_vocabulary(get_model("tiny_gpt").build())


@pytest.mark.parametrize(("cls", "config", "vocab", "padded"), [
    ("GPT2LMHeadModel", dict(name="GPT2Config", n_layer=1, n_embd=16, n_head=2), 50257, 50304),
    ("BertForMaskedLM", dict(name="BertConfig", num_hidden_layers=1, hidden_size=16,
                             num_attention_heads=2, intermediate_size=32), 30522, 30528),
])
def test_pad_vocabulary_of_the_registry_language_models(cls, config, vocab, padded) -> None:
    # The real vocabularies on one-layer models of width 16: what gpt2 and bert-base become.
    import transformers

    from dlbench.models.zoo.text import LogitsOnly, _config, pad_vocabulary
    config = dict(config)
    model = LogitsOnly(getattr(transformers, cls)(_config(config.pop("name"), **config)))
    assert model.model.config.vocab_size == vocab
    assert pad_vocabulary(model) == padded
    head = model.model.get_output_embeddings()
    assert head.weight is model.model.get_input_embeddings().weight
    assert head.bias is None or head.bias.shape == (padded,)     # BERT's output bias
    assert model(torch.zeros(1, 4, dtype=torch.long)).shape == (1, 4, padded)


def test_test_nan_gives_nan_loss() -> None:
    _, _, loss = _train_step(get_model("test_nan"), 4)
    assert torch.isnan(loss)


def test_test_oom_raises_above_32() -> None:
    spec = get_model("test_oom")
    model = spec.build()
    assert model(spec.make_batch(32, "cpu")[0]).shape == (32, 10)
    with pytest.raises(torch.OutOfMemoryError, match="simulated"):
        model(spec.make_batch(33, "cpu")[0])
    assert issubclass(torch.OutOfMemoryError, torch.cuda.OutOfMemoryError)


def _spec(factory) -> ModelSpec:
    return ModelSpec(name="t", source="test", kind="image", unit="images", input_size=8,
                     num_classes=3, default_batch=2, description="", factory=factory)


def test_build_on_initialises_the_weights_on_the_device_itself() -> None:
    seen = []

    def factory(size: int) -> torch.nn.Module:
        seen.append(torch.empty(0).device.type)  # the default device while the module is built
        return torch.nn.Linear(size, 3)

    model = _spec(factory).build_on("meta")
    assert seen == ["meta"]  # built there, not on the CPU and copied
    assert next(model.parameters()).device.type == "meta"


def test_build_on_falls_back_to_a_cpu_build_for_a_module_that_insists_on_the_cpu() -> None:
    def factory(size: int) -> torch.nn.Module:
        lin = torch.nn.Linear(size, 3)
        lin.weight.detach().numpy()  # as a module that reads its weights in numpy: CPU only
        return lin

    model = _spec(factory).build_on("meta")
    assert next(model.parameters()).device.type == "meta"

"""Dropout is equal in both frameworks' steps (dlbench.frameworks.dropout): in training both
drop at the PyTorch model's config rates, in inference neither does. Checked by behaviour: two
steps with the same input and parameters (``--method fwd-bwd``: no optimizer update) give
different outputs where a step drops and equal ones where it does not."""

import pytest

from dlbench.frameworks import dropout
from dlbench.models import get_model

jnp = pytest.importorskip("jax.numpy", reason="the jax extra is not installed")
pytest.importorskip("flax", reason="the jax extra is not installed")
pytest.importorskip("optax", reason="the jax extra is not installed")

from dlbench.frameworks.jax import step as jstep  # noqa: E402
from dlbench.frameworks.jax.models import JAX_MODELS  # noqa: E402

SEQ, VOCAB = 16, 100


def _torch_two_steps(model, x, mode: str) -> tuple[float, float]:
    """Two steps of dlbench's PyTorch step (fwd-bwd in training) on one input, the model in
    the mode dlbench's measurement puts it in."""
    import torch

    from dlbench.measure.stopping import StopRule
    from dlbench.records.throughput import ThroughputConfig
    from dlbench.workloads.throughput import build_step
    cfg = ThroughputConfig(model="tiny_gpt2", batch_size=x.shape[0], mode=mode, method="fwd-bwd",
                           device="cpu", stop=StopRule())
    model.train(cfg.mode == "train")  # as dlbench.workloads.throughput.measure does
    step = build_step(cfg, get_model("tiny_gpt2"), model, x, x, torch.device("cpu"))
    return tuple(float(step().detach().float().sum()) for _ in range(2))


def _jax_two_steps(module, mode: str) -> tuple[float, float]:
    """Two steps of dlbench's jitted JAX step (fwd-bwd in training) on one input: the
    parameters stay, the step count (the dropout key's source) moves on."""
    built = jstep.build(module, "text", mode, "fwd-bwd", "sgd", 2, SEQ, VOCAB, 0)
    state, first = built.fn(built.state, built.x, built.y)
    state, second = built.fn(state, built.x, built.y)
    return float(first.astype(jnp.float32).sum()), float(second.astype(jnp.float32).sum())


def _torch_tiny_gpt2_attention_only():
    """transformers' GPT-2 (tiny) with its embedding and residual dropout off: only the
    attention probabilities are dropped, inside SDPA, at GPT2Config's attn_pdrop."""
    from torch import nn
    model = get_model("tiny_gpt2").build(SEQ)
    for name, m in model.named_modules():
        if isinstance(m, nn.Dropout) and not name.endswith("attn_dropout"):
            m.p = 0.0
    assert model.model.config.attn_pdrop == dropout.RATES["gpt2"]["attention"]
    return model


def _jax_gpt2_attention_only():
    """The registry's GPT-2 twin, tiny, with its embedding and residual dropout off: only its
    attention-probability dropout is left, at the rate the registry gives it."""
    return JAX_MODELS["gpt2"].build(jnp.float32, SEQ, VOCAB).clone(
        positions=SEQ, dim=32, depth=2, heads=2, dropout=0.0, embd_dropout=0.0)


@pytest.mark.slow
def test_gpt2_attention_probabilities_are_dropped_in_both_training_steps():
    import torch
    torch.manual_seed(0)
    x = torch.randint(0, VOCAB, (2, SEQ))
    pt = _torch_tiny_gpt2_attention_only()
    a, b = _torch_two_steps(pt, x, "train")
    assert a != b  # PyTorch's SDPA drops attention probabilities in training
    a, b = _jax_two_steps(_jax_gpt2_attention_only(), "train")
    assert a != b  # and so does the JAX twin's step


def test_neither_inference_step_drops():
    import torch
    x = torch.randint(0, VOCAB, (2, SEQ))
    a, b = _torch_two_steps(_torch_tiny_gpt2_attention_only(), x, "eval")
    assert a == b
    a, b = _jax_two_steps(_jax_gpt2_attention_only(), "eval")
    assert a == b


def test_without_dropout_both_training_steps_repeat_themselves():
    """The control: tiny_gpt (no dropout in either framework) gives equal outputs twice."""
    a, b = _jax_two_steps(JAX_MODELS["tiny_gpt"].build(jnp.float32, SEQ, VOCAB), "train")
    assert a == b


def _torch_rates(name: str) -> dict[str, float]:
    """Where the PyTorch model drops in training, read off the model as built (on the meta
    device: nothing allocated): transformers' config rates; torchvision's dropout modules, by
    the part of the model that holds them, and nn.MultiheadAttention's rate."""
    import torch
    from torch import nn
    with torch.device("meta"):
        model = get_model(name).build(get_model(name).input_size)
    config = getattr(getattr(model, "model", None), "config", None)
    if config is not None and hasattr(config, "attn_pdrop"):
        rates = {"embedding": config.embd_pdrop, "residual": config.resid_pdrop,
                 "attention": config.attn_pdrop}
        return {k: v for k, v in rates.items() if v}
    found: dict[str, float] = {}
    for qual, m in model.named_modules():
        p = m.p if isinstance(m, nn.Dropout) else (
            m.dropout if isinstance(m, nn.MultiheadAttention) else 0.0)
        if p:
            where = "attention" if isinstance(m, nn.MultiheadAttention) else qual.split(".")[0]
            assert found.setdefault(where, p) == p
    return found


def _jax_rates(name: str) -> dict[str, float]:
    """The twin's dropout fields as the registry builds it (ViT, the CNNs: none)."""
    m = JAX_MODELS[name].build(jnp.float32, get_model(name).input_size,
                               get_model(name).num_classes)
    fields = {"dropout": "residual" if name.startswith("gpt") else "classifier",
              "embd_dropout": "embedding", "attn_dropout": "attention"}
    return {where: getattr(m, f) for f, where in fields.items() if getattr(m, f, 0.0)}


@pytest.mark.parametrize("name", sorted(JAX_MODELS))
def test_every_twin_drops_at_its_pytorch_models_rates(name):
    assert name in dropout.RATES
    assert _torch_rates(name) == dropout.RATES[name]
    assert _jax_rates(name) == dropout.RATES[name]


def test_the_rule_drops_only_in_training():
    assert dropout.applied("gpt2", "train") == {"embedding": 0.1, "residual": 0.1,
                                                "attention": 0.1}
    assert dropout.applied("gpt2", "eval") == {}
    assert dropout.describe(dropout.applied("vgg16", "train")) == "classifier 0.5"
    assert dropout.describe({}) == "none"

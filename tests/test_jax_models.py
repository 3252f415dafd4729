"""The JAX models are the PyTorch models: the same parameter count, layer for layer, so the
FLOPs counted on the PyTorch model hold for the JAX one. Shapes only (jax.eval_shape, and the
PyTorch model built on the meta device): nothing is allocated or initialised, so the full-size
models cost little beyond their imports."""

import pytest
import torch

jnp = pytest.importorskip("jax.numpy", reason="the jax extra is not installed")
pytest.importorskip("flax", reason="the jax extra is not installed")

from dlbench.frameworks.jax.models import (  # noqa: E402
    JAX_MODELS, JAX_TRAIN_MODELS, get_jax_model, param_count)
from dlbench.models import get_model  # noqa: E402


def _torch_params(module) -> int:
    return sum(p.numel() for p in module.parameters())


def _example(kind: str, size: int):
    return jnp.zeros((1, size, size, 3)) if kind == "image" else jnp.zeros((1, size), jnp.int32)


@pytest.mark.parametrize("name", ["tiny_cnn", "tiny_gpt", "resnet50", "vgg16", "vit_b_16", "gpt2"])
def test_same_parameter_count_as_the_pytorch_model(name):
    jm, spec = JAX_MODELS[name], get_model(name)
    module = jm.build(jnp.float32, spec.input_size, spec.num_classes)
    with torch.device("meta"):  # the same parameters, without initialising 100M+ of them
        torch_model = spec.build()
    assert param_count(module, _example(jm.kind, spec.input_size)) == _torch_params(torch_model)


@pytest.mark.parametrize("name", ["cnn10", "cnn10_small"])
def test_train_models_match_dlbench_train(name):
    from dlbench.training.models import build_model
    module = JAX_TRAIN_MODELS[name](jnp.float32, 10)
    assert param_count(module, jnp.zeros((1, 28, 28, 1))) == _torch_params(
        build_model(name, 1, 10, 28))


def test_a_model_without_a_jax_twin_is_a_config_error():
    from dlbench.config import ConfigError
    with pytest.raises(ConfigError, match="no JAX version.*resnet50"):
        get_jax_model("resnet152")

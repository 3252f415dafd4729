"""The model registry: names, aliases, defaults, and lookup with did-you-mean errors."""

from __future__ import annotations

import difflib
from functools import partial

from dlbench.models import sources
from dlbench.models.base import ModelSpec, UnknownModelError
from dlbench.models.zoo import cifar, text, tiny, vision

# default_batch: per GPU in the default GPU suite (bf16, channels_last, SGD with momentum), sized
# to fill an 80 GB H100: peak allocated memory measured there (torch 2.11, eager, bf16) is about
# 40-65% of the card at these sizes, and about half that at half the batch. Suites scale the
# batch down in proportion on cards with less memory (see dlbench.suites.gpu_batch).

def _shipped_lm(name: str, input_size: int):
    """A decoder LM of the architectures dlbench ships for generation (``models/lm``, each
    copied from its published config), built for a training step."""
    from dlbench.models.lm import shipped  # the configs, as data: read when a model is built
    entry = shipped()[name]
    return text.causal_lm(entry.model_type, entry.config, input_size)


#: Models of the reference articles (docs/articles.md): the tf_cnn_benchmarks study's CNNs in its
#: order, the ms-per-batch article's DenseNet-161, the CIFAR-10 frameworks study's cnn10.
SEED_MODELS: tuple[ModelSpec, ...] = (
    ModelSpec(
        name="resnet50", source="torchvision", kind="image", unit="images", input_size=224,
        num_classes=1000, default_batch=1024,
        description="ResNet-50 v1.5 (torchvision), 25.6M params",
        factory=partial(vision.torchvision_model, "resnet50"),
        notes="v1.5 puts the downsampling stride on the 3x3 conv; tf_cnn_benchmarks' resnet50 "
              "was v1 (stride on the first 1x1), about 6% fewer FLOPs.",
    ),
    ModelSpec(
        name="resnet152", source="torchvision", kind="image", unit="images", input_size=224,
        num_classes=1000, default_batch=512,
        description="ResNet-152 v1.5 (torchvision), 60.2M params",
        factory=partial(vision.torchvision_model, "resnet152"),
        notes="v1.5 (stride on the 3x3 conv), as for resnet50.",
    ),
    ModelSpec(
        name="inception_v3", source="torchvision", kind="image", unit="images", input_size=299,
        num_classes=1000, default_batch=512,
        description="Inception v3 (torchvision, no auxiliary head), 23.8M params",
        factory=vision.inception_v3,
        notes="Built with aux_logits=False so the forward returns one tensor; the auxiliary "
              "classifier (3.3M params) is not trained.",
    ),
    ModelSpec(
        name="inception_v4", source="timm", kind="image", unit="images", input_size=299,
        num_classes=1000, default_batch=512,
        description="Inception v4 (timm), 42.7M params",
        factory=partial(vision.timm_model, "inception_v4"),
    ),
    ModelSpec(
        name="vgg16", source="torchvision", kind="image", unit="images", input_size=224,
        num_classes=1000, default_batch=512,
        description="VGG-16 (torchvision, no batch norm), 138.4M params",
        factory=partial(vision.torchvision_model, "vgg16"),
    ),
    ModelSpec(
        name="nasnet", source="timm", kind="image", unit="images", input_size=331,
        num_classes=1000, default_batch=64,
        description="NASNet-A large (timm nasnetalarge, 331 px), 88.8M params",
        factory=partial(vision.timm_model, "nasnetalarge"),
        notes="This is NASNet-A large at 331 px. tf_cnn_benchmarks' \"nasnet\" in the seed "
              "article was NASNet-A mobile at 224 px (5.3M params, about 0.56 GMACs), so "
              "figures are not comparable like for like.",
    ),
    ModelSpec(
        name="densenet161", source="torchvision", kind="image", unit="images", input_size=224,
        num_classes=1000, default_batch=256,
        description="DenseNet-161 (torchvision), 28.7M params",
        factory=partial(vision.torchvision_model, "densenet161"),
    ),
    ModelSpec(
        name="cnn10", source="dlbench", kind="image", unit="images", input_size=32,
        num_classes=10, default_batch=256,
        description="the CIFAR-10 framework study's 10-layer CNN (9 conv + 1 dense), 1.9M params",
        factory=cifar.cnn10,
        notes="Built for CIFAR-10's 3 x 32 x 32 images; the CIFAR-10 frameworks study gives its "
              "layout only by reference, so this is our reconstruction (dlbench train uses the "
              "same network, sized by the dataset).",
    ),
)

#: Current architectures: a vision transformer, an encoder LM and a decoder LM.
MODERN_MODELS: tuple[ModelSpec, ...] = (
    ModelSpec(
        name="vit_b_16", source="torchvision", kind="image", unit="images", input_size=224,
        num_classes=1000, default_batch=512,
        description="ViT-B/16 (torchvision), 86.6M params",
        factory=partial(vision.vit, "vit_b_16"),
        notes="The input size must be a multiple of the 16-pixel patch.",
    ),
    ModelSpec(
        name="bert-base", source="transformers", kind="text", unit="sequences", input_size=512,
        num_classes=30522, default_batch=128,
        description="BERT-base masked LM (transformers, BertConfig defaults), 109.5M params",
        factory=text.bert_base,
        notes="Input size is the sequence length. Masked-LM head only (no next-sentence head); "
              "logits and loss at every position; SDPA attention, no padding mask.",
    ),
    ModelSpec(
        name="gpt2", source="transformers", kind="text", unit="tokens", input_size=1024,
        num_classes=50257, default_batch=32,
        description="GPT-2 small causal LM (transformers, GPT2Config defaults), 124.4M params",
        factory=text.gpt2,
        notes="Input size is the sequence length. Causal SDPA attention (is_causal), no KV cache.",
    ),
    *(ModelSpec(
        name=name, source="transformers", kind="text", unit="tokens", input_size=2048,
        num_classes=128256, default_batch=batch,
        description=f"{title} causal LM (transformers, the published config's shapes), {size}",
        factory=partial(_shipped_lm, name),
        notes="Input size is the sequence length (2048 by default). The architecture config "
              "dlbench generate builds (dlbench generate --list-models names its source); "
              "causal SDPA attention, no KV cache.",
    ) for name, title, size, batch in (
        # Batches that fit an 80 GB GPU with AdamW in bf16 autocast (fp32 weights, gradients
        # and two moments: 16 bytes a parameter); the 8B model needs FSDP over several GPUs.
        ("llama-3.2-1b", "Llama 3.2 1B", "1.24B params", 4),
        ("llama-3.2-3b", "Llama 3.2 3B", "3.21B params", 1),
        ("llama-3.1-8b", "Llama 3.1 8B", "8.03B params", 1))),
)

#: Tiny and fault-injecting models for the test suite; hidden from ``dlbench models``.
TEST_MODELS: tuple[ModelSpec, ...] = (
    ModelSpec(
        name="tiny_cnn", source="dlbench", kind="image", unit="images", input_size=32,
        num_classes=10, default_batch=32, description="3-conv CNN for tests, 6.4k params",
        factory=tiny.tiny_cnn, test_only=True,
    ),
    ModelSpec(
        name="tiny_mlp", source="dlbench", kind="image", unit="images", input_size=16,
        num_classes=10, default_batch=32, description="2-layer MLP on 16 px images for tests",
        factory=tiny.tiny_mlp, test_only=True,
    ),
    ModelSpec(
        name="tiny_gpt", source="dlbench", kind="text", unit="tokens", input_size=32,
        num_classes=128, default_batch=8,
        description="2-layer causal transformer for tests (vocab 128, 32 tokens)",
        factory=tiny.tiny_gpt, test_only=True,
    ),
    ModelSpec(
        name="tiny_gpt2", source="transformers", kind="text", unit="tokens", input_size=32,
        num_classes=100, default_batch=8,
        description="2-layer GPT-2 (transformers) for tests, vocab 100: not a multiple of 64",
        factory=text.tiny_gpt2, test_only=True,
    ),
    ModelSpec(
        name="tiny_llama", source="transformers", kind="text", unit="tokens", input_size=32,
        num_classes=256, default_batch=8,
        description="2-layer Llama (transformers; dlbench generate's test-llama) for tests",
        factory=partial(_shipped_lm, "test-llama"), test_only=True,
    ),
    ModelSpec(
        name="test_oom", source="dlbench", kind="image", unit="images", input_size=32,
        num_classes=10, default_batch=16,
        description=f"tiny_cnn that raises torch.OutOfMemoryError above batch {tiny.OOM_BATCH_LIMIT}",
        factory=tiny.oom_cnn, test_only=True,
    ),
    ModelSpec(
        name="test_nan", source="dlbench", kind="image", unit="images", input_size=32,
        num_classes=10, default_batch=16, description="tiny_cnn whose logits are NaN (NaN loss)",
        factory=tiny.nan_cnn, test_only=True,
    ),
)

_ALL: tuple[ModelSpec, ...] = SEED_MODELS + MODERN_MODELS + TEST_MODELS

# Other spellings users type, written already normalised (see ``_normalise``).
_ALIASES: dict[str, str] = {
    "resnet_50": "resnet50",
    "resnet_152": "resnet152",
    "inception3": "inception_v3",
    "inceptionv3": "inception_v3",
    "inception4": "inception_v4",
    "inceptionv4": "inception_v4",
    "vgg_16": "vgg16",
    "nasnetalarge": "nasnet",
    "nasnet_large": "nasnet",
    "nasnet_a_large": "nasnet",
    "densenet_161": "densenet161",
    "vit_b16": "vit_b_16",
    "vit_base": "vit_b_16",
    "vit_base_patch16_224": "vit_b_16",
    "bert": "bert-base",
    "bert_base_uncased": "bert-base",
    "gpt_2": "gpt2",
    "gpt2_small": "gpt2",
    "gpt2_124m": "gpt2",
}


def _normalise(name: str) -> str:
    # Case and '-' versus '_' are never meaningful in model names.
    return name.strip().lower().replace("-", "_")


_LOOKUP: dict[str, ModelSpec] = {_normalise(spec.name): spec for spec in _ALL}
_LOOKUP.update({alias: _LOOKUP[_normalise(target)] for alias, target in _ALIASES.items()})


def get_model(name: str) -> ModelSpec:
    """The spec registered under ``name``: case-insensitive, ``-`` and ``_`` alike, aliases allowed;
    or a model named by its source (``timm:NAME``, ``torchvision:NAME``, ``hf:NAME_OR_DIR``,
    ``path/to/file.py:factory``: :mod:`dlbench.models.sources`), whose spec keeps that name.

    Raises:
        UnknownModelError: no such model; the message lists the closest registered names.
    """
    if sources.is_external(name):
        return sources.external_model(name)
    spec = _LOOKUP.get(_normalise(name))
    if spec is not None:
        return spec
    close = difflib.get_close_matches(_normalise(name), _LOOKUP, n=5, cutoff=0.6)
    # Aliases can point to the same model: name each model once, under its registered name.
    suggestions = list(dict.fromkeys(_LOOKUP[c].name for c in close))[:3]
    hint = f"did you mean {', '.join(suggestions)}? " if suggestions else ""
    raise UnknownModelError(f'unknown model "{name}"; {hint}run "dlbench models" to list them '
                            '(and to see how to name timm:, torchvision:, hf: and your own models)')


def list_models(include_test: bool = False) -> list[ModelSpec]:
    """Registered models in a stable order: seed models, then modern ones, then (optionally) test ones."""
    return [spec for spec in _ALL if include_test or not spec.test_only]


def model_names(include_test: bool = False) -> list[str]:
    """Registered names, in ``list_models`` order."""
    return [spec.name for spec in list_models(include_test)]

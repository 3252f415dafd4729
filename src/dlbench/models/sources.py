"""Models from outside the registry, named by their source: ``timm:NAME``, ``torchvision:NAME``,
``hf:NAME_OR_DIR`` and ``path/to/file.py:factory``.

Each becomes a :class:`ModelSpec` like the registry's, named by the full string the user gave,
so every command that takes ``-m`` takes them unchanged and a worker process (``--isolate``,
torchrun) rebuilds the same model from the name in its config. Everything is built with random
weights and nothing is ever downloaded: timm and torchvision are asked for no weights, and a
Hugging Face model is built from a config class of transformers (``hf:gpt2`` is
``GPT2Config()``) or from a local directory holding ``config.json``, with ``HF_HUB_OFFLINE`` set.

Spelling:
    ``timm:convnext_tiny``             any name of ``timm.list_models()``
    ``torchvision:efficientnet_b0``    any classification model of ``torchvision.models``
    ``hf:gpt2``, ``hf:bert-base-uncased``, ``hf:llama``
                                       a few hub names whose config is a class's defaults (or a
                                       known change of them), or any transformers model type
    ``hf:path/to/dir``                 a directory with a ``config.json``
    ``hf:gpt2?n_layer=2&n_embd=256``   config fields changed (``&`` between them; quote it in a shell)
    ``examples/my_model.py:build``     ``build()`` returns ``(model, dlbench.InputSpec(...))``
                                       or ``(model, {...})`` with InputSpec's keys
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import hashlib
import importlib.util
import inspect
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import torch
from torch import nn

from dlbench.models.base import ModelSpec
from dlbench.models.errors import ModelSourceError, UnknownModelError
from dlbench.models.input_spec import InputSpec
from dlbench.models.zoo import require, text

#: How to name a model from outside the registry (``dlbench models`` prints these).
SOURCES_HELP = (
    ("timm:NAME", "any timm model, random weights (timm:convnext_tiny)"),
    ("torchvision:NAME", "any torchvision classifier, random weights (torchvision:efficientnet_b0)"),
    ("hf:NAME", "a transformers model built from its config, never downloaded: a model type "
                "(hf:llama) or a known hub name (hf:gpt2, hf:bert-base-uncased); change fields "
                "with 'hf:gpt2?n_layer=2&n_embd=256'"),
    ("hf:DIR", "a local directory holding a config.json"),
    ("FILE.py:FUNC", "FUNC() returns (model, dlbench.InputSpec(...)); see examples/my_model.py"),
)

#: Batches where the user gives none: an external model's memory is unknown, so these stay small.
DEFAULT_BATCH = {"image": 64, "text": 8}

#: The longest default sequence of an ``hf:`` text model (``--seq-len`` asks for another).
MAX_DEFAULT_SEQ = 1024

#: The model field of a step callable's record (``dlbench.measure_step``): nothing to build.
STEP_PREFIX = "step:"

_PREFIXES = ("timm:", "torchvision:", "hf:", STEP_PREFIX)
_FILE = re.compile(r"^(?P<path>.+\.py):(?P<func>[A-Za-z_]\w*)$")


def is_external(name: str) -> bool:
    """Whether ``name`` names a model by its source rather than by registry name."""
    name = name.strip()
    return name.startswith(_PREFIXES) or name.endswith(".py") or bool(_FILE.match(name))


def external_model(name: str) -> ModelSpec:
    """The spec of an external model name; see the module docstring for the spellings.

    Raises:
        UnknownModelError: the source does not know the name (with close matches).
        ModelSourceError: the file, its factory or what it returned is wrong, or the name would
            need the network.
    """
    return _resolve(name.strip())


@functools.lru_cache(maxsize=None)
def _resolve(name: str) -> ModelSpec:
    if name.startswith("timm:"):
        return _timm(name, name[len("timm:"):])
    if name.startswith("torchvision:"):
        return _torchvision(name, name[len("torchvision:"):])
    if name.startswith("hf:"):
        return _hf(name, name[len("hf:"):])
    if name.startswith(STEP_PREFIX):
        raise UnknownModelError(f'"{name}" is a step callable measured with '
                                "dlbench.measure_step: there is no model to build")
    m = _FILE.match(name)
    if m is None:
        raise ModelSourceError(f'"{name}": name the function that builds the model, e.g. '
                               f'{name}:build')
    return _file(name, m["path"], m["func"])


class Logits(nn.Module):
    """``module(x)`` returning one logits tensor, whatever the wrapped model returns: a tensor,
    a tuple or list (its first item: torchvision's Inception and GoogLeNet add auxiliary
    outputs in training), or an object or dict with ``logits``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return first_logits(self.model(x))


class PixelLogits(nn.Module):
    """A transformers image classifier called on ``pixel_values`` alone, returning its logits."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values=pixel_values).logits


def first_logits(out: Any) -> torch.Tensor:
    """The logits tensor of a model's output (see :class:`Logits`)."""
    if isinstance(out, torch.Tensor):
        return out
    logits = out.get("logits") if isinstance(out, Mapping) else getattr(out, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    raise TypeError(f"the model returned {type(out).__name__}; dlbench needs a logits tensor "
                    "(or a tuple whose first item, or an output whose .logits, is one)")


def _unknown(name: str, known: list[str], source: str, listing: str) -> UnknownModelError:
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    return UnknownModelError(f'{source} has no model "{name}"; {hint}{listing}')


def _version(module: str) -> str:
    return str(getattr(sys.modules.get(module), "__version__", "?"))


# -- timm --------------------------------------------------------------------------------------
def _timm(full: str, arch: str) -> ModelSpec:
    timm = require("timm")
    if not timm.is_model(arch):
        raise _unknown(arch, timm.list_models(), "timm",
                       "timm.list_models('*PATTERN*') lists them")
    cfg = timm.models.get_pretrained_cfg(arch)
    size = int((getattr(cfg, "input_size", None) or (3, 224, 224))[-1])
    classes = int(getattr(cfg, "num_classes", None) or 1000)

    def build(input_size: int) -> nn.Module:
        if input_size != size:
            # Vision transformers size their position table by img_size; CNNs take no such
            # argument and any input size (adaptive pooling).
            try:
                return timm.create_model(arch, pretrained=False, img_size=input_size)
            except TypeError:
                pass
        return timm.create_model(arch, pretrained=False)

    return ModelSpec(name=full, source="timm", kind="image", unit="images", input_size=size,
                     num_classes=classes, default_batch=DEFAULT_BATCH["image"],
                     description=f"{arch} (timm {_version('timm')}, random weights)",
                     factory=build)


# -- torchvision -------------------------------------------------------------------------------
def _torchvision(full: str, arch: str) -> ModelSpec:
    tv = require("torchvision.models", "torchvision")
    known = tv.list_models(module=tv)  # the classifiers: detection and segmentation return dicts
    if arch not in known:
        raise _unknown(arch, known, "torchvision (classification)",
                       "torchvision.models.list_models(module=torchvision.models) lists them")
    size = 224
    try:  # the size its weights were trained at, read from their metadata (nothing fetched)
        size = int(tv.get_model_weights(arch).DEFAULT.transforms.keywords.get("crop_size", 224))
    except (AttributeError, ValueError, TypeError):
        pass

    def build(input_size: int) -> nn.Module:
        kwargs: dict[str, Any] = {}
        if arch.startswith("vit_") and input_size != size:
            kwargs["image_size"] = input_size  # ViT's position table follows the input size
        return Logits(tv.get_model(arch, weights=None, **kwargs))

    return ModelSpec(name=full, source="torchvision", kind="image", unit="images",
                     input_size=size, num_classes=1000, default_batch=DEFAULT_BATCH["image"],
                     description=f"{arch} (torchvision {_version('torchvision')}, random weights)",
                     factory=build)


# -- Hugging Face transformers -----------------------------------------------------------------
#: Hub names whose config is a config class's defaults, or a known change of them (from each
#: model's config.json on the hub), so that they build offline.
HUB_NAMES: dict[str, tuple[str, dict[str, Any]]] = {
    "gpt2": ("gpt2", {}),
    "gpt2-medium": ("gpt2", dict(n_embd=1024, n_layer=24, n_head=16)),
    "gpt2-large": ("gpt2", dict(n_embd=1280, n_layer=36, n_head=20)),
    "gpt2-xl": ("gpt2", dict(n_embd=1600, n_layer=48, n_head=25)),
    "bert-base-uncased": ("bert", {}),
    "bert-base-cased": ("bert", dict(vocab_size=28996)),
    "bert-large-uncased": ("bert", dict(hidden_size=1024, num_hidden_layers=24,
                                        num_attention_heads=16, intermediate_size=4096)),
    "distilbert-base-uncased": ("distilbert", {}),
}
# The same models under their organisations' names on the hub.
_HUB_ORGS = ("openai-community/", "google-bert/", "distilbert/")


def hf_config(full: str, ref: str) -> tuple[Any, str]:
    """The transformers config ``hf:REF`` names, with its ``?FIELD=VALUE`` changes, and a few
    words on where it came from; nothing is fetched. Shared by every command that builds an
    ``hf:`` model (throughput's wrapped model, generation's causal LM)."""
    # Nothing may be fetched: set before transformers (and huggingface_hub) read it.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    ref, _, query = ref.partition("?")
    overrides = _parse_overrides(full, query)
    transformers = require("transformers")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES  # heavy: transformers

    if ref and Path(ref).is_dir():
        if not (Path(ref) / "config.json").is_file():
            raise ModelSourceError(f'{full}: {ref} has no config.json; save the model\'s config '
                                   'there (config.save_pretrained(DIR))')
        _refuse_remote_code(full, Path(ref))
        try:
            base = transformers.AutoConfig.from_pretrained(ref, local_files_only=True,
                                                           trust_remote_code=False)
        except (ValueError, OSError, KeyError) as exc:  # a model type this transformers lacks
            raise ModelSourceError(f"{full}: transformers cannot read {ref}/config.json: "
                                   f"{str(exc).splitlines()[0]}") from None
        what = f"config from {ref}"
    else:
        key = ref
        for org in _HUB_ORGS:
            key = key.removeprefix(org)
        if key in HUB_NAMES:
            model_type, known = HUB_NAMES[key]
        elif key in CONFIG_MAPPING_NAMES:
            model_type, known = key, {}
        else:
            names = sorted(HUB_NAMES) + sorted(CONFIG_MAPPING_NAMES)
            close = difflib.get_close_matches(key, names, n=3, cutoff=0.6)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise ModelSourceError(
                f'{full}: "{ref}" is neither a transformers model type{hint}, a known hub name '
                f'({", ".join(HUB_NAMES)}), nor a local directory. dlbench builds models offline '
                "and never downloads one: save its config.json into a directory and name that "
                "(hf:path/to/dir)")
        try:
            base = transformers.AutoConfig.for_model(model_type, **known)
        except (ValueError, TypeError) as exc:  # a composite config that needs its parts
            raise ModelSourceError(f"{full}: transformers cannot build a default "
                                   f"{model_type} config: {str(exc).splitlines()[0]}") from None
        what = f"{type(base).__name__} defaults" + (" with the hub model's sizes" if known else "")
    config = _with_overrides(full, base, overrides)
    _check_sizes(full, config)
    return config, what


#: Sizes every model needs at least one of (transformers' names; a config's own spelling,
#: GPT-2's n_layer, reaches them through its attribute_map).
SIZE_FIELDS = ("num_hidden_layers", "num_attention_heads", "num_key_value_heads", "hidden_size",
               "intermediate_size", "vocab_size", "max_position_embeddings", "image_size",
               "patch_size", "num_channels")


def _check_sizes(full: str, config: Any) -> None:
    """Refuse, before anything is built, a size that no model can have (zero, negative, a
    fraction): transformers would build it, or try to, and a -1 layer count would be measured."""
    spelled = getattr(config, "attribute_map", {})  # {"num_hidden_layers": "n_layer"}
    for field in SIZE_FIELDS:
        value = getattr(config, field, None)
        if value is None or isinstance(value, (list, tuple, dict)):
            continue
        name = spelled.get(field, field)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ModelSourceError(f"{full}: {name}={value!r}: a model size must be a whole "
                                   "number of 1 or more")


def _refuse_remote_code(full: str, directory: Path) -> None:
    """Refuse a directory whose config.json names Python code of its own (``auto_map``).

    transformers would ask, at a prompt in the middle of a run, whether to run that code
    (``trust_remote_code``); dlbench never runs a model directory's code, so the model is
    refused before transformers reads the config, with no prompt and nothing imported."""
    try:
        with open(directory / "config.json", encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, ValueError) as exc:
        raise ModelSourceError(f"{full}: cannot read {directory}/config.json: "
                               f"{str(exc).splitlines()[0]}") from None
    auto_map = raw.get("auto_map") if isinstance(raw, dict) else None
    if not auto_map:
        return
    files = set()  # "configuration_x.XConfig", "repo--modeling_x.XModel", [tokenizer, None]
    for value in (auto_map.values() if isinstance(auto_map, dict) else ()):
        for ref in (value if isinstance(value, (list, tuple)) else [value]):
            if isinstance(ref, str) and "." in ref:
                files.add(ref.split("--")[-1].rsplit(".", 1)[0] + ".py")
    code = ", ".join(sorted(files)) or "Python files of its own"
    model_type = raw.get("model_type")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES  # heavy
    hint = (f"; to measure transformers' own {model_type!r} model instead, remove \"auto_map\" "
            "from config.json" if model_type in CONFIG_MAPPING_NAMES else "")
    raise ModelSourceError(
        f"{full}: {directory}/config.json needs code of its own (\"auto_map\" names {code}), "
        "and dlbench never runs a model directory's code (it loads with "
        f"trust_remote_code=False){hint}")


def _hf(full: str, ref: str) -> ModelSpec:
    config, what = hf_config(full, ref)
    transformers = require("transformers")
    if getattr(config, "is_encoder_decoder", False):
        raise ModelSourceError(f"{full}: an encoder-decoder model; dlbench measures models "
                               "called on one input (decoder, encoder or image classifier)")
    head, kind, unit = _hf_head(full, config.model_type)
    if kind == "text":
        positions = getattr(config, "max_position_embeddings", None)
        size = min(positions or MAX_DEFAULT_SEQ, MAX_DEFAULT_SEQ)
        classes = int(config.vocab_size)
    else:
        size = int(getattr(config, "image_size", 224) or 224)
        classes = int(config.num_labels)

    def build(input_size: int, layers: int | None = None) -> nn.Module:
        cfg = config.__class__.from_dict(config.to_dict())  # a copy: the spec's stays as resolved
        if layers is not None:  # a shorter stack, only ever built on meta to count (param_count)
            cfg.num_hidden_layers = layers
        if kind == "text":
            cfg.use_cache = False
            if input_size > (getattr(cfg, "max_position_embeddings", None) or input_size):
                cfg.max_position_embeddings = input_size  # a position table long enough
        elif hasattr(cfg, "image_size"):
            cfg.image_size = input_size
        cls = getattr(transformers, _AUTO[unit])  # picks ``head`` for this config
        try:
            # transformers' SDPA without the per-step mask building (see zoo.text)
            model = cls.from_config(cfg, attn_implementation=text._attention_implementation(),
                                    trust_remote_code=False)
        except (ValueError, ImportError):  # an architecture without SDPA support: its default
            model = cls.from_config(cfg, trust_remote_code=False)
        return text.LogitsOnly(model) if kind == "text" else PixelLogits(model)

    return ModelSpec(name=full, source="transformers", kind=kind, unit=unit, input_size=size,
                     num_classes=classes, default_batch=DEFAULT_BATCH[kind],
                     description=f"{head} ({what}; transformers {transformers.__version__}, "
                                 "random weights)",
                     factory=build, param_count=functools.partial(_hf_param_count, config, build),
                     notes="Input size is the sequence length." if kind == "text" else "")


#: Up to this many layers an ``hf:`` model is counted by building all of it on meta (about a
#: millisecond a layer); a deeper stack is counted from its first few layers (extrapolate).
COUNT_ALL_LAYERS = 96


def _hf_param_count(config: Any, build: Callable[..., nn.Module], input_size: int) -> Any:
    """The parameters of an ``hf:`` model at ``input_size`` (see ModelSpec.count_params): the
    whole model on meta, or, for a deeper stack than :data:`COUNT_ALL_LAYERS`, a lower bound from
    exact counts of its first one to four layers."""
    from dlbench.models.size import count_on_meta, extrapolate

    layers = getattr(config, "num_hidden_layers", None)
    if isinstance(layers, int) and not isinstance(layers, bool) and layers > COUNT_ALL_LAYERS:
        few = [1, 2, 3, 4]
        counts = [count_on_meta(functools.partial(build, input_size, n)) for n in few]
        if all(c is not None for c in counts):
            return extrapolate(counts, few, layers)
    return count_on_meta(functools.partial(build, input_size))


_AUTO = {"sequences": "AutoModelForMaskedLM", "tokens": "AutoModelForCausalLM",
         "images": "AutoModelForImageClassification"}


def _hf_head(full: str, model_type: str) -> tuple[str, str, str]:
    """The task head of a model type: masked LM for encoders (counted per sequence), causal LM
    for decoders (per token), else an image classifier."""
    from transformers.models.auto import modeling_auto as auto  # heavy: transformers

    # Encoders are in both the masked- and causal-LM tables (BERT has a causal head too): the
    # masked one is what they are trained with. Decoders are in the causal table only.
    if model_type in auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES[model_type], "text", "sequences"
    if model_type in auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type], "text", "tokens"
    if model_type in auto.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES:
        return auto.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES[model_type], "image", "images"
    raise ModelSourceError(f"{full}: model type {model_type!r} has no language-model or "
                           "image-classification head in transformers; dlbench cannot measure it")


def _parse_overrides(full: str, query: str) -> dict[str, Any]:
    """``n_layer=2&n_embd=256`` -> {"n_layer": 2, "n_embd": 256}: ints, floats, true/false,
    else the text."""
    out: dict[str, Any] = {}
    for part in filter(None, query.split("&")):
        key, eq, raw = part.partition("=")
        if not eq or not key.strip():
            raise ModelSourceError(f"{full}: {part!r} is not FIELD=VALUE "
                                   "(e.g. hf:gpt2?n_layer=2&n_embd=256)")
        out[key.strip()] = _value(raw.strip())
    return out


def _value(raw: str) -> Any:
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    return raw


def _with_overrides(full: str, config: Any, overrides: Mapping[str, Any]) -> Any:
    known = set(config.to_dict()) | set(getattr(config, "attribute_map", {}))
    for key, value in overrides.items():
        if key not in known and not hasattr(config, key):  # num_labels is a property
            close = difflib.get_close_matches(key, sorted(known), n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise ModelSourceError(f"{full}: {type(config).__name__} has no field {key!r}{hint}")
        try:
            setattr(config, key, value)
        except Exception as exc:  # noqa: BLE001 - a strict config's validation (a float size)
            raise ModelSourceError(f"{full}: {key}={value!r}: {type(config).__name__} refuses "
                                   f"it: {' '.join(str(exc).split())[:300]}") from None
    return config


# -- a factory in the user's own file ----------------------------------------------------------
def _file(full: str, path: str, func: str) -> ModelSpec:
    factory = load_factory(full, path, func)
    takes_size = _takes_input_size(factory)
    # The factory is called once here to learn the input it describes: on the meta device,
    # where building costs no memory and no time; on the CPU where meta cannot build it.
    with _model_code(full, "while dlbench read the input it describes"):
        try:
            with torch.device("meta"):
                _, spec = _call(full, factory, None, takes_size)
        except ModelSourceError:
            raise
        except Exception:
            _, spec = _call(full, factory, None, takes_size)

    def build(input_size: int) -> nn.Module:
        model, _ = _call(full, factory, input_size, takes_size)
        return Logits(model)

    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]
    return ModelSpec(name=full, source="file", kind=spec.kind, unit=spec.unit,
                     input_size=spec.input_size, num_classes=spec.num_classes,
                     default_batch=spec.default_batch,
                     description=spec.description or f"{func}() of {path}",
                     factory=build, notes=f"{path} sha256 {digest}")


def load_factory(full: str, path: str, func: str) -> Callable[..., Any]:
    """``FUNC`` of the user's ``FILE.py`` (imported once), or an error naming close matches."""
    file = Path(path)
    if not file.is_file():
        raise ModelSourceError(f"{full}: no such file {path} (relative to {os.getcwd()})")
    module = _load_module(file.resolve())
    factory = getattr(module, func, None)
    if not callable(factory):
        names = [n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
                 and getattr(v, "__module__", None) == module.__name__]
        close = difflib.get_close_matches(func, names, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else (
            f"; it defines {', '.join(names)}" if names else "")
        raise ModelSourceError(f"{full}: {path} has no function {func!r}{hint}")
    return factory


@functools.lru_cache(maxsize=None)
def _load_module(file: Path) -> Any:
    # A name of its own per file, registered so that dataclasses and pickling inside it work.
    name = "dlbench_user_model_" + hashlib.sha1(str(file).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        with _model_code(str(file), "while it was imported"):
            spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        if isinstance(exc, ModelSourceError):
            raise
        raise ModelSourceError(f"{file} failed to import: {type(exc).__name__}: {exc}") from exc
    except BaseException:
        del sys.modules[name]
        raise
    return module


@contextlib.contextmanager
def _model_code(what: str, when: str) -> Iterator[None]:
    """A model's own code run in dlbench's process (its file imported, its factory asked what it
    takes): a ``sys.exit`` there, or a BaseException of its own, is the model's error (one line,
    exit 2), never dlbench ending with the model's exit code. Ctrl-C stays Ctrl-C."""
    try:
        yield
    except (Exception, KeyboardInterrupt, GeneratorExit):
        raise
    except SystemExit as exc:
        raise ModelSourceError(f"{what}: its code called sys.exit({exc.code!r}) {when}; "
                               "a model's file and factory must return, not exit") from None
    except BaseException as exc:
        raise ModelSourceError(f"{what}: its code raised {type(exc).__name__}"
                               f"({str(exc)[:200]!r}) (a BaseException, not an Exception) "
                               f"{when}") from None


def _takes_input_size(factory: Callable[..., Any]) -> bool:
    try:
        return "input_size" in inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False


def _call(full: str, factory: Callable[..., Any], input_size: int | None,
          takes_size: bool) -> tuple[nn.Module, InputSpec]:
    out = factory(input_size=input_size) if takes_size else factory()
    contract = ("must return (model, dlbench.InputSpec(kind=..., input_size=..., "
                "num_classes=...)) or (model, dict with those keys)")
    if not (isinstance(out, tuple) and len(out) == 2):
        raise ModelSourceError(f"{full} {contract}; it returned {type(out).__name__}")
    model, described = out
    if not isinstance(model, nn.Module):
        raise ModelSourceError(f"{full} {contract}; its model is a {type(model).__name__}, "
                               "not a torch.nn.Module")
    try:
        if isinstance(described, InputSpec):
            spec = described
        elif isinstance(described, Mapping):
            spec = InputSpec.from_mapping(described)
        else:
            raise ValueError(f"the input is described by a {type(described).__name__}")
    except (ValueError, TypeError) as exc:
        raise ModelSourceError(f"{full} {contract}: {exc}") from None
    return model, spec

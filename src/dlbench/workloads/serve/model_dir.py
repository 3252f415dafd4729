"""A model directory any serving engine can load, made here: a shipped architecture config
(``dlbench generate --list-models``: ``llama-3.2-1b``, ``test-llama``...) with random weights,
saved as safetensors, and a tokenizer of the config's vocabulary size made up on the spot (no
download, no license). A served model with random weights does the work a trained one does
when every length is fixed, which ``dlbench serve`` asks for.

The tokenizer is word-level: token ``i`` is the word ``w<i>`` (``<unk>``, ``<s>`` and ``</s>``
first), so a prompt of N words is N tokens, and a chat template joins the messages. Its speed is
not a BPE tokenizer's: a server's tokenization time differs from the real model's (a small part
of TTFT at these lengths).

``python -m dlbench.workloads.serve.model_dir llama-3.2-1b OUT_DIR [--dtype bf16]`` writes one
(2.5 GB for the 1B model in bf16; seconds on a GPU host).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from dlbench.models.lm import get_lm

#: Special tokens, their ids first in the vocabulary.
SPECIAL = ("<unk>", "<s>", "</s>")
CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def word_tokenizer(vocab_size: int):
    """A word-level fast tokenizer of ``vocab_size`` tokens: ``<unk>``, ``<s>``, ``</s>``, then
    ``w3`` ... ``w<vocab_size - 1>``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # heavy: tokenizers
    from transformers import PreTrainedTokenizerFast  # heavy: transformers

    vocab = {t: i for i, t in enumerate(SPECIAL)}
    vocab.update({f"w{i}": i for i in range(len(SPECIAL), vocab_size)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def write(name: str, out: str | os.PathLike, dtype: str = "bf16", device: str = "cpu",
          seed: int = 0) -> Path:
    """Write model ``name`` (a shipped architecture, random weights) and its tokenizer to
    ``out``; returns the directory."""
    import torch  # heavy: to build the weights

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    spec = get_lm(name)
    cfg = spec.config
    cfg.bos_token_id, cfg.eos_token_id, cfg.pad_token_id = 1, 2, 2
    torch.manual_seed(seed)
    model = spec.build_on(torch.device(device), getattr(torch, DTYPES[dtype]))
    model.generation_config.bos_token_id, model.generation_config.eos_token_id = 1, 2
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    word_tokenizer(cfg.vocab_size).save_pretrained(path)
    (path / "dlbench-model.json").write_text(json.dumps(
        {"architecture": name, "weights": "random", "seed": seed, "dtype": dtype,
         "tokenizer": "word-level, made by dlbench.workloads.serve.model_dir"}, indent=1) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dlbench.workloads.serve.model_dir",
                                 description="Write a random-weights model directory with a "
                                             "made-up tokenizer, for serving benchmarks.")
    ap.add_argument("model", help="a shipped architecture (dlbench generate --list-models)")
    ap.add_argument("out", help="the directory to write")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--device", default="cpu",
                    help="where the weights are made (cuda: faster for a large model)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    path = write(a.model, a.out, a.dtype, a.device, a.seed)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

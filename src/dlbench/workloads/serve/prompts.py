"""Synthetic prompts of a given token length, different for every request (so no server can
answer one from a prefix cache filled by another); ``dlbench serve`` draws them afresh for every
load point and run.

With the model's tokenizer (found on this machine: a local directory or the Hugging Face cache;
nothing is downloaded) a prompt is random ordinary tokens, decoded to text and adjusted until
the text encodes to exactly ``prompt_len`` tokens, as vLLM's random dataset does. Without one,
a prompt is ``prompt_len`` common English words (a word is about a token for the usual
tokenizers) and the server's usage fields say how many tokens it counted.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Short common words, each one token (with its leading space) for GPT-2, Llama 3 and Qwen's
#: tokenizers alike.
WORDS = tuple(dict.fromkeys("""the of and to in is was for on that with as by at from his it an
were are which this be or has had not but first one their its new after who they have her she
two been other when there all during into school time may years more most only over city some
world would where later up such used many can state about national out known university united
then made year three under war also well part since while people these team both film four
group game back five music each series through than old just long way life name work day number
home play high between house came found still end area day over end set own run line side show
city road land water light river field power land north south east west""".split()))

#: Attempts at matching a prompt's length exactly before the closest is kept.
ADJUST_TRIES = 10


@dataclass(frozen=True)
class Prompt:
    text: str
    tokens: int | None  # as the tokenizer counts it; None without one


def load_tokenizer(name: str | None) -> tuple[Any | None, str]:
    """The tokenizer ``name`` names (a directory or a cached hub name), from this machine only,
    and a line saying what was found; (None, why) when there is none here."""
    if not name:
        return None, "no tokenizer named"
    if name.startswith((".", "/", "~")) and not Path(name).expanduser().is_dir():
        return None, f"no tokenizer at {name}: no such directory"
    try:
        from transformers import AutoTokenizer  # heavy: transformers, only to count tokens
    except ImportError:
        return None, "transformers is not installed"
    try:
        # local_files_only: nothing is fetched (and the environment is left alone: a server
        # launched after this may need to download its model)
        tok = AutoTokenizer.from_pretrained(str(Path(name).expanduser()) if name.startswith("~")
                                            else name, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - not on this machine, or not a tokenizer
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return None, f"no tokenizer {name!r} on this machine ({first[:120]})"
    return tok, f"tokenizer {name}"


def _ordinary_ids(tok: Any) -> list[int]:
    special = set(getattr(tok, "all_special_ids", []) or [])
    n = len(tok)
    return [i for i in range(n) if i not in special]


def _encode(tok: Any, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False)


def _exact(tok: Any, ids: list[int], n: int, rng: random.Random,
           pool: list[int]) -> tuple[str, int]:
    """Text of ``n`` tokens (or the closest found): decoding random ids and encoding the text
    back seldom gives the same ids (merges across token boundaries), so cut or extend and try
    again."""
    best: tuple[str, int] | None = None
    for _ in range(ADJUST_TRIES):
        text = tok.decode(ids, skip_special_tokens=True)
        got = _encode(tok, text)
        if best is None or abs(len(got) - n) < abs(best[1] - n):
            best = (text, len(got))
        if len(got) == n:
            return text, n
        ids = got[:n] if len(got) > n else got + rng.choices(pool, k=n - len(got))
    assert best is not None
    return best


def synthetic(count: int, prompt_len: int, seed: int | str = 0, tokenizer: Any | None = None
              ) -> list[Prompt]:
    """``count`` prompts of ``prompt_len`` tokens (exactly, where ``tokenizer`` can make them so;
    else ``prompt_len`` words), drawn from ``seed``."""
    rng = random.Random(f"dlbench-serve-{seed}")
    if tokenizer is None:
        return [Prompt(" ".join(rng.choices(WORDS, k=prompt_len)), None) for _ in range(count)]
    pool = _ordinary_ids(tokenizer)
    out = []
    for _ in range(count):
        text, n = _exact(tokenizer, rng.choices(pool, k=prompt_len), prompt_len, rng, pool)
        out.append(Prompt(text, n))
    return out


def count_tokens(tokenizer: Any | None, text: str) -> int | None:
    """Tokens of generated ``text`` (for a server that sends no usage); None without one."""
    if tokenizer is None:
        return None
    return len(_encode(tokenizer, text))

"""The OpenAI-compatible streaming protocol as dlbench speaks it: request bodies and the reading
of each streamed event. Pure functions, no I/O.

A body asks for ``output_len`` tokens (``max_tokens``) and, where the server takes it, for no
fewer (:data:`dlbench.records.serve.FIXED_LENGTH`), streamed, with the usage in the last event
(``stream_options.include_usage``: vLLM, SGLang and ``transformers serve`` send prompt and
completion token counts there).

An event is read as a completion event (``choices[0].text``), a chat event
(``choices[0].delta.content``, or ``reasoning_content`` / ``reasoning`` for a reasoning model),
a usage event, ``[DONE]``, or an error event (``{"error": ...}``, which vLLM sends mid-stream);
anything else that is not JSON is a malformed event, a failure of the request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

#: The paths of the two APIs under the endpoint's base URL.
PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}

#: The fixed-length modes ``auto`` tries, in order.
AUTO_ORDER = ("ignore-eos", "generation-config", "none")

#: The body fields each fixed-length mode adds: a server that refuses a request naming one of
#: them (HTTP 400 or 422, the field in its message) does not take that mode.
MODE_FIELDS = {"ignore-eos": ("ignore_eos", "min_tokens"),
               "generation-config": ("generation_config",), "none": ()}


def api_url(base: str, api: str) -> str:
    """The URL of ``api`` under ``base`` (``http://host:port``, with or without ``/v1``)."""
    base = base.rstrip("/")
    if base.endswith("/v1"):
        base = base[:-3]
    return base + PATHS[api]


def body(api: str, model: str, prompt: str, output_len: int, mode: str,
         extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON body of one streamed request."""
    b: dict[str, Any] = {"model": model, "stream": True, "max_tokens": output_len,
                         "stream_options": {"include_usage": True}}
    if api == "chat":
        b["messages"] = [{"role": "user", "content": prompt}]
    else:
        b["prompt"] = prompt
    if mode == "ignore-eos":
        b["ignore_eos"] = True
        b["min_tokens"] = output_len
    elif mode == "generation-config":
        b["generation_config"] = json.dumps({"max_new_tokens": output_len,
                                             "min_new_tokens": output_len, "do_sample": False})
    if extra:
        b.update(extra)
    return b


def refuses_mode(status: int, text: str, mode: str) -> bool:
    """Whether an HTTP error answer refuses ``mode``'s fields: a 400 or 422 whose message names
    one of them (``transformers serve``: ``Unexpected fields in the request: {'ignore_eos'}``)."""
    return status in (400, 422) and any(f in text for f in MODE_FIELDS.get(mode, ()))


class MalformedEvent(ValueError):
    """An event that is neither JSON nor ``[DONE]``, or JSON of the wrong shape."""


class StreamError(RuntimeError):
    """The server reported an error inside the stream."""


@dataclass(frozen=True)
class Reading:
    """What one event says: the text it carries ("" for none), the finish reason, the token
    counts of a usage event, and whether it is ``[DONE]``."""

    text: str = ""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    done: bool = False


DONE = Reading(done=True)


def _short(data: str, n: int = 60) -> str:
    return data if len(data) <= n else data[:n] + "..."


def read_event(data: str) -> Reading:
    """One event's ``data``. Raises :class:`MalformedEvent` or :class:`StreamError`."""
    if data.strip() == "[DONE]":
        return DONE
    try:
        obj = json.loads(data)
    except ValueError:
        raise MalformedEvent(f"malformed event, not JSON: {_short(data)!r}") from None
    if not isinstance(obj, dict):
        raise MalformedEvent(f"malformed event, not a JSON object: {_short(data)!r}")
    if obj.get("error") is not None:
        err = obj["error"]
        msg = err.get("message") if isinstance(err, dict) else err
        raise StreamError(f"server error in the stream: {_short(str(msg), 120)}")
    text, finish = "", None
    choices = obj.get("choices")
    if choices:
        if not isinstance(choices, list) or not isinstance(choices[0], dict):
            raise MalformedEvent(f"malformed event, 'choices' is not a list of objects: "
                                 f"{_short(data)!r}")
        c = choices[0]
        finish = c.get("finish_reason")
        if "delta" in c:
            d = c.get("delta") or {}
            text = d.get("content") or d.get("reasoning_content") or d.get("reasoning") or ""
        else:
            text = c.get("text") or ""
        if not isinstance(text, str):
            raise MalformedEvent(f"malformed event, its text is not a string: {_short(data)!r}")
    usage = obj.get("usage")
    pt = ct = None
    if isinstance(usage, dict):
        pt, ct = _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))
    return Reading(text, finish, pt, ct)


def _count(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None

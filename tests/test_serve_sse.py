"""The event stream and the protocol, pure: server-sent events however the bytes are cut, and
what each event of /v1/completions and /v1/chat/completions says; request bodies per
fixed-length mode."""

from __future__ import annotations

import json

import pytest

from dlbench.workloads.serve import protocol
from dlbench.workloads.serve.sse import Event, MalformedStream, SseParser

STREAM = (b": ping\r\n\r\n"
          b"data: {\"choices\":[{\"text\":\" a\"}]}\r\n\r\n"
          b"event: message\ndata: line one\ndata: line two\n\n"
          b"data:no-space\r\r"
          b"id: 7\nretry: 10\n\n"
          b"data: [DONE]")  # no blank line at the end: many servers stop right there
WANT = [Event('{"choices":[{"text":" a"}]}'), Event("line one\nline two", "message"),
        Event("no-space"), Event("[DONE]")]


def _parse(chunks):
    p = SseParser()
    out = []
    for c in chunks:
        out += p.feed(c)
    return out + p.close()


def test_events_whole():
    assert _parse([STREAM]) == WANT


@pytest.mark.parametrize("cut", range(1, len(STREAM)))
def test_events_cut_anywhere(cut):
    """A read may end anywhere: inside a line, between CR and LF, inside a UTF-8 character."""
    assert _parse([STREAM[:cut], STREAM[cut:]]) == WANT


def test_events_one_byte_at_a_time_with_unicode():
    data = "data: {\"text\": \"héllo ✓\"}\n\n".encode()
    assert _parse([bytes([b]) for b in data]) == [Event('{"text": "héllo ✓"}')]


def test_not_utf8_is_a_malformed_stream():
    with pytest.raises(MalformedStream, match="not UTF-8"):
        _parse([b"data: \xff\xfe\n\n"])


def test_completion_chat_usage_done_events():
    r = protocol.read_event('{"choices":[{"index":0,"text":" tok","finish_reason":null}]}')
    assert r.text == " tok" and r.finish_reason is None and not r.done
    r = protocol.read_event('{"choices":[{"delta":{"role":"assistant"}}]}')
    assert r.text == ""                                  # a role-only chat event: no token
    r = protocol.read_event('{"choices":[{"delta":{"reasoning_content":"hmm"}}]}')
    assert r.text == "hmm"
    r = protocol.read_event('{"choices":[{"delta":{},"finish_reason":"length"}],'
                            '"usage":{"prompt_tokens":12,"completion_tokens":5}}')
    assert r.finish_reason == "length" and (r.prompt_tokens, r.completion_tokens) == (12, 5)
    assert protocol.read_event(" [DONE] ").done


@pytest.mark.parametrize("data,match", [
    ("{not json", "malformed event, not JSON: '{not json'"),
    ("[1, 2]", "not a JSON object"),
    ('{"choices": ["x"]}', "not a list of objects"),
    ('{"choices": [{"text": 5}]}', "not a string"),
])
def test_malformed_events_say_so_in_one_line(data, match):
    with pytest.raises(protocol.MalformedEvent, match=match):
        protocol.read_event(data)


def test_an_error_event_is_the_servers_error():
    with pytest.raises(protocol.StreamError, match="server error in the stream: out of memory"):
        protocol.read_event('{"error": {"message": "out of memory", "code": 500}}')


def test_bodies_per_api_and_fixed_length_mode():
    b = protocol.body("completions", "m", "hi there", 64, "ignore-eos")
    assert b == {"model": "m", "stream": True, "max_tokens": 64, "prompt": "hi there",
                 "stream_options": {"include_usage": True}, "ignore_eos": True,
                 "min_tokens": 64}
    b = protocol.body("chat", "m", "hi", 8, "generation-config", {"temperature": 0})
    assert b["messages"] == [{"role": "user", "content": "hi"}] and b["temperature"] == 0
    assert json.loads(b["generation_config"]) == {"max_new_tokens": 8, "min_new_tokens": 8,
                                                  "do_sample": False}
    b = protocol.body("completions", "m", "x", 8, "none")
    assert "ignore_eos" not in b and "generation_config" not in b


def test_a_refusal_names_the_fields_of_the_mode():
    text = "{\"detail\":\"Unexpected fields in the request: {'min_tokens', 'ignore_eos'}\"}"
    assert protocol.refuses_mode(422, text, "ignore-eos")
    assert not protocol.refuses_mode(500, text, "ignore-eos")
    assert not protocol.refuses_mode(422, text, "generation-config")


@pytest.mark.parametrize("base", ["http://h:8000", "http://h:8000/", "http://h:8000/v1",
                                  "http://h:8000/v1/"])
def test_api_urls(base):
    assert protocol.api_url(base, "chat") == "http://h:8000/v1/chat/completions"
    assert protocol.api_url(base, "completions") == "http://h:8000/v1/completions"

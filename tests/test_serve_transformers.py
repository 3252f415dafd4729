"""``dlbench serve --launch`` against a real ``transformers serve`` (continuous batching) on the
CPU: a tiny Llama with random weights and a made-up word-level tokenizer written by the test
(nothing downloaded), launched, probed for its fixed-length fields, measured at two loads and
both APIs, and stopped. Needs transformers' serving extra (fastapi, uvicorn, openai):
``pip install -c constraints.txt 'transformers[serving]'``; skipped without it."""

from __future__ import annotations

import importlib.util
import shlex
import sys

import pytest

pytest.importorskip("aiohttp")

from dlbench.cli import main  # noqa: E402
from dlbench.jobs.serve_runs import free_port  # noqa: E402
from dlbench.launch import forking  # noqa: E402
from dlbench.store import Store  # noqa: E402
from dlbench.workloads.serve import model_dir  # noqa: E402

SERVING = ("fastapi", "uvicorn", "openai")


@pytest.mark.slow
def test_dlbench_serve_launches_transformers_serve_measures_and_stops_it(tmp_path, capsys):
    missing = [m for m in SERVING if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"transformers serve needs its serving extra ({', '.join(missing)} "
                    "missing): pip install -c constraints.txt 'transformers[serving]'")
    model = model_dir.write("test-llama", tmp_path / "model", dtype="fp32")
    port = free_port()
    # A KV cache of 64 blocks and 256 tokens a batch: enough for 4 requests of 16+8 tokens.
    # Left to size itself, the cache takes most of the host's free memory (about 20 GB of a
    # 23 GB machine), and the kernel kills the server when another test needs some too.
    # The server a process of its own, forked by the test session's fork server where it runs
    # one (tests/conftest.py), which imported transformers once.
    python = shlex.join([sys.executable, *forking.python_args(
        "-c", "from transformers.cli.transformers import main; main()")])
    serve = (f"{python} serve {model} --port {port} --device cpu --dtype float32 "
             "--continuous-batching --cb-num-blocks 64 --cb-max-batch-tokens 256")
    db = tmp_path / "s.db"
    code = main(["serve", "--launch", serve, "--endpoint", f"http://127.0.0.1:{port}",
                 "-m", str(model), "--api", "completions,chat", "--concurrency", "1,4",
                 "--num-requests", "8", "--prompt-len", "16", "--output-len", "8",
                 "--warmup", "1", "--launch-timeout", "120", "--db", str(db)])
    out = capsys.readouterr()
    assert code == 0, out.err
    with Store(db) as s:
        recs = s.results(kind="serve")
    assert [r.config.label.split(" ", 1)[1] for r in recs] == [
        "completions c1 16+8", "completions c4 16+8", "chat c1 16+8", "chat c4 16+8"]
    for r in recs:
        assert r.ok and r.completed() == 8, r.failure_reasons()
        # transformers serve refuses ignore_eos/min_tokens and takes generation_config: every
        # output is as long as asked, by its own usage count
        assert r.server["fixed_length"] == "generation-config"
        assert r.output_tokens == (8,) * 8 and r.token_count["output"] == "usage"
        assert r.token_count["prompt"] == "tokenizer" and r.token_count["prompt_counted"] == 16
        assert r.ttft().p50_s > 0 and r.tpot() is not None
        assert "transformers.cli.transformers" in r.server["launch"]
    assert recs[0].prompt_tokens == (16,) * 8  # the server counted the prompt as we did
    assert "Serving from" in out.out and "Traceback" not in out.err

"""What ``dlbench serve`` runs: the load points of a sweep, the server it starts (``--launch``,
``--stub``), and the sweep into the store, one record per load point. Nothing here prints.

The points are checked at the door (:func:`plan`, before any server starts); the model's name,
when not given, is the first the server lists (``/v1/models``) once it answers; the tokenizer
the prompts are counted with is the one named, else the model's where this machine has it.
"""

from __future__ import annotations

import contextlib
import json
import math
import socket
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Sequence

from dlbench.config import ConfigError
from dlbench.jobs.sweep import Progress, SweepOutcome, run_sweep
from dlbench.launch import server as launch_server
from dlbench.measure.serving import Slo
from dlbench.records.base import ErrorType
from dlbench.records.serve import ServeConfig, ServeRecord
from dlbench.store import Store
from dlbench.workloads.serve import load, prompts

#: Requests of a point when neither --num-requests nor --duration is given: ten per request in
#: flight, or 30 s of arrivals, and at least this many.
MIN_DEFAULT_REQUESTS = 50


def default_requests(concurrency: int | None, rate: float | None) -> int:
    """``--num-requests``'s default for a point: 10 x concurrency, or 30 s of arrivals at the
    rate; at least :data:`MIN_DEFAULT_REQUESTS`."""
    n = 10 * concurrency if concurrency is not None else math.ceil(30 * (rate or 0))
    return max(MIN_DEFAULT_REQUESTS, n)


def plan(*, model: str, apis: Sequence[str], concurrencies: Sequence[int],
         rates: Sequence[float], prompt_lens: Sequence[int], output_lens: Sequence[int],
         num_requests: int | None = None, duration_s: float | None = None,
         burstiness: float = 1.0, slo: Slo = Slo(), **fields: Any) -> list[ServeConfig]:
    """Every load point: for each API and pair of lengths, the concurrencies in increasing
    order, then the rates (a curve from light load to saturation). ``fields`` are any other
    :class:`ServeConfig` fields (warm-up, seed, timeouts, endpoint...)."""
    if not concurrencies and not rates:
        concurrencies = [1]
    out = []
    for api in apis:
        for p in prompt_lens:
            for o in output_lens:
                loads = [(c, None) for c in sorted(set(concurrencies))] + \
                        [(None, r) for r in sorted(set(rates))]
                for c, r in loads:
                    n = num_requests if num_requests is not None or duration_s is not None \
                        else default_requests(c, r)
                    out.append(ServeConfig(
                        model=model, api=api, concurrency=c, rate=r, burstiness=burstiness,
                        prompt_len=p, output_len=o, num_requests=n, duration_s=duration_s,
                        slo_ttft_s=slo.ttft_s, slo_tpot_s=slo.tpot_s, slo_e2e_s=slo.e2e_s,
                        **fields))
    return out


def listed_models(endpoint: str, timeout_s: float = 10.0) -> tuple[list[str], str | None]:
    """The model ids ``endpoint/v1/models`` lists, and why there are none where there are none."""
    base = endpoint.rstrip("/")
    base = base[:-3] if base.endswith("/v1") else base
    try:
        with urllib.request.urlopen(base + "/v1/models", timeout=timeout_s) as resp:
            data = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return [], f"{base}/v1/models answered HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        why = getattr(exc, "reason", None) or exc
        return [], f"cannot reach {base}/v1/models ({why})"
    except ValueError:
        return [], f"{base}/v1/models did not answer JSON"
    ids = [m.get("id") for m in (data.get("data") or []) if isinstance(m, dict) and m.get("id")]
    return ids, None if ids else f"{base}/v1/models lists no model"


def free_port() -> int:
    """A TCP port of this host that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Stub:
    """``--stub``: dlbench's own stub server, started as a server command would be."""

    ttft_ms: float = 0.0
    itl_ms: float = 0.0

    def command(self, port: int) -> str:
        return (f"{sys.executable} -m dlbench.workloads.serve.stub --port {port} "
                f"--ttft-ms {self.ttft_ms:g} --itl-ms {self.itl_ms:g}")


class ServeRunner:
    """The sweep's launcher: each load point measured in this process against the target; a
    point whose server has died is a failure record saying so."""

    name = "serve"
    survives_fatal = True

    def __init__(self, target: load.Target, tokenizer: Any = None,
                 server: launch_server.ServerProcess | None = None) -> None:
        self.target, self.tokenizer, self.server = target, tokenizer, server

    def run(self, cfg: ServeConfig, env: dict) -> ServeRecord:
        if self.server is not None and self.server.exit_code() is not None:
            tail = self.server.tail()
            return ServeRecord(config=cfg, env=env, status="error",
                               error_type=ErrorType.CRASHED,
                               error=f"the launched server exited with code "
                                     f"{self.server.exit_code()}" + (f": {tail}" if tail else ""),
                               server={**self.target.info, "endpoint": self.target.endpoint})
        try:
            return load.measure(cfg, env, self.target, self.tokenizer)
        except Exception as exc:  # noqa: BLE001 - failures are data: the sweep goes on
            first = " ".join(str(exc).split())[:300]
            return ServeRecord(config=cfg, env=env, status="error",
                               error_type=ErrorType.EXCEPTION,
                               error=f"{type(exc).__name__}: {first}",
                               server={**self.target.info, "endpoint": self.target.endpoint})


def named_tokenizer(name: str) -> Any:
    """The tokenizer a user named (``--tokenizer``), from this machine; a :class:`ConfigError`
    saying why where there is none (checked before any server starts)."""
    tok, said = prompts.load_tokenizer(name)
    if tok is None:
        raise ConfigError(f"tokenizer: {said}", "tokenizer")
    return tok


@dataclass
class Served:
    """What a serve run did besides its records: the model it asked for, how tokens were
    counted, how the server was started."""

    model: str
    tokenizer: str
    server: dict[str, Any]


@contextlib.contextmanager
def _server(endpoint: str, launch: str | None, stub: Stub | None, launch_timeout_s: float,
            launch_log: str | None) -> Iterator[tuple[str, launch_server.ServerProcess | None,
                                                     dict[str, Any]]]:
    if stub is not None:
        port = free_port()
        endpoint = f"http://127.0.0.1:{port}"
        launch = stub.command(port)
    if launch is None:
        yield endpoint, None, {}
        return
    with launch_server.launched(launch, endpoint, launch_timeout_s, launch_log) as srv:
        info: dict[str, Any] = dict(srv.info())
        if stub is not None:
            info["stub"] = {"ttft_ms": stub.ttft_ms, "itl_ms": stub.itl_ms}
        yield endpoint, srv, info


def run_serve(configs: Sequence[ServeConfig], db: str, command: str, env: dict, *,
              launch: str | None = None, stub: Stub | None = None,
              launch_timeout_s: float = launch_server.HEALTH_TIMEOUT_S,
              launch_log: str | None = None, tokenizer: str | None = None,
              tokenizer_obj: Any = None, tag: str | None = None, resume: bool = False,
              repeat: int = 1,
              progress: Progress | None = None,
              on_ready: Callable[[str, str, dict[str, Any]], None] | None = None
              ) -> tuple[SweepOutcome, Served]:
    """Start the server (``launch`` or ``stub``) if asked, find the model's name where the
    configs have none, then measure ``configs`` into ``db`` (each ``repeat`` times in a row, a
    repeat group); the server is stopped however this ends. The configs' endpoint is the one
    they name (``--stub``: the stub's). ``tokenizer`` names the tokenizer that counts the
    prompts (``tokenizer_obj``: it, loaded already). ``on_ready(endpoint, model, server info)``
    is called once the server answers."""
    if not configs:
        raise ConfigError("no load point to measure")
    endpoint = configs[0].endpoint
    named = tokenizer_obj if tokenizer_obj is not None or tokenizer is None else \
        named_tokenizer(tokenizer)
    said = f"tokenizer {tokenizer}"
    with _server(endpoint, launch, stub, launch_timeout_s, launch_log) as (url, srv, info):
        model = configs[0].model
        if not model:
            ids, why = listed_models(url)
            if not ids:
                raise ConfigError(f"model is needed: {why}", "model")
            model = ids[0]
            info["models"] = ids[:8]
        if on_ready is not None:
            on_ready(url, model, info)
        if named is not None:
            tok = named
        elif stub is not None:
            tok, said = None, "words (dlbench's stub has no tokenizer)"
        else:  # the model's own, where this machine has it; else words and the usage fields
            tok, said = prompts.load_tokenizer(model)
            if tok is None:
                said = f"words ({said})"
        configs = [replace(c, model=c.model or model, endpoint=url,
                           tokenizer=(tokenizer or model) if tok is not None else None)
                   for c in configs]
        target = load.Target(url, model, info=info)
        with Store(db) as store:
            outcome = run_sweep(configs, store, ServeRunner(target, tok, srv), env,
                                command=command, suite=None, tag=tag, resume=resume,
                                progress=progress, repeat=repeat)
    return outcome, Served(model, said, info)

"""``generate`` records with known numbers, for the tests of their views (tables, charts, CSV,
compare): real :class:`GenerateRecord` objects whose raw times, shape and telemetry are chosen
so that every figure is a round number.

The default record (bf16, batch 4, prompt 8, output 4, 5 requests, on an H100 SXM):

- a request: TTFT 20 ms, then 3 decode steps of 1 ms: 23 ms, 16 output tokens:
  output tok/s = 16 / 0.023 = 695.65; total tok/s = 4 x 12 / 0.023 = 2,086.96;
- decode bytes per step (:mod:`dlbench.measure.generation`): weights 1e9 params x 2 B + the
  batch's 4 embedding rows (4 x 1000 x 2 B) = 2,000,008,000; KV cache 2 x 2 layers x 2 heads x
  125 x 2 B = 2,000 B a position, over 4 sequences x (mean context 10 + the new one) = 88,000;
  2,000,096,000 B / 1 ms = 2,000.096 GB/s, 59.70% of the H100's datasheet 3,350 GB/s;
- prefill FLOPs: 4 x (2 x 0.99e9 x 8 + 4 x 2 x 8 x 125 x 36 + 2 x 10,000 x 1,000)
  = 63,441,152,000 over 20 ms = 3.172 TFLOP/s (0.32% of the bf16 dense 989.5);
- energy: 400 W over a 1 s window of 80 output tokens = 5 J a token; idle 100 W: net 3.75 J.
"""

from __future__ import annotations

from typing import Any

from dlbench.measure.stopping import StopRule
from dlbench.records.generate import GenerateConfig, GenerateRecord
from dlbench.telemetry.summary import finish

GIB = 1024 ** 3
H100 = {"accelerator": "cuda", "gpu_count": 1,
        "gpus": [{"name": "NVIDIA H100 80GB HBM3",
                  "uuid": "GPU-00000000-0000-0000-0000-000000000001"}],
        "driver": "580.65", "cuda_runtime": "12.8", "packages": {"torch": "2.9.0"},
        "cpu_model": "Test CPU", "hostname": "gpu-host"}
CPU = {"accelerator": "cpu", "cpu_model": "Test CPU", "cpu_logical_cores": 2,
       "packages": {"torch": "2.9.0"}, "hostname": "cpu-host"}

#: 1e9 parameters outside the embedding; an untied head of 10,000 x 1,000.
SHAPE = {"params": 1_010_000_000, "embedding_params": 10_000_000, "lm_head_params": 10_000_000,
         "layers": 2, "hidden": 1000, "heads": 8, "kv_heads": 2, "head_dim": 125,
         "vocab": 10_000, "tied": False}
STOP = StopRule(min_steps=3, min_seconds=0.0, max_seconds=60.0)


def gpu_telemetry(power_w: float = 400.0, idle_w: float = 100.0,
                  samples: float = 80) -> dict[str, Any]:
    """An idle baseline at ``idle_w`` from 0 to 0.5 s, the window at ``power_w`` from 1 to 2 s
    (power samples only: the energy is integrated power, ``power_w`` J)."""
    ts = [0.0, 0.5, 1.0, 1.5, 2.0]
    n = len(ts)
    series = {"t_s": ts, "power_w": [idle_w, idle_w, power_w, power_w, power_w],
              "energy_mj": [None] * n, "util_gpu_pct": [0, 0, 99, 99, 99],
              "util_mem_pct": [0, 0, 80, 80, 80], "mem_used_bytes": [GIB] * n,
              "temp_c": [40, 40, 60, 61, 62], "sm_clock_mhz": [1980] * n,
              "mem_clock_mhz": [2619] * n, "throttle_reasons": [0] * n,
              "pcie_tx_kbs": [None] * n, "pcie_rx_kbs": [None] * n,
              "nvlink_tx_kib": [None] * n, "nvlink_rx_kib": [None] * n}
    raw = {"marks": {"idle_start": 0.0, "idle_end": 0.5, "window_start": 1.0, "window_end": 2.0},
           "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "series": series}],
           "host": None}
    return finish(raw, samples=samples)


def _spread(t: float, n: int, rel: float) -> tuple[float, ...]:
    """``n`` times of mean ``t`` (n even), alternately ``rel`` above and below it."""
    return tuple(t * (1 + rel * (-1) ** i) for i in range(n))


def generate_record(batch: int = 4, path: str = "eager", *, ttft_s: float = 0.02,
                    tpot_s: float = 0.001, requests: int = 5, prompt_len: int = 8,
                    output_len: int = 4, precision: str = "bf16", model: str = "made-up-lm",
                    env: dict | None = None, spread: float = 0.0, telemetry: Any = "default",
                    run_id: str = "run-gen", **kw: Any) -> GenerateRecord:
    """A finished generate record: every request ``ttft_s`` then ``output_len - 1`` decode steps
    of ``tpot_s`` (with ``spread``: every step alternately that much slower and faster, the
    requests too). ``telemetry`` "default" is :func:`gpu_telemetry` on a GPU, none on a CPU."""
    env = H100 if env is None else env
    cfg = GenerateConfig(model=model, batch_size=batch, prompt_len=prompt_len,
                         output_len=output_len, precision=precision, path=path,
                         device="cpu" if env.get("accelerator") != "cuda" else "auto",
                         stop=STOP)
    steps = output_len - 1
    decode = tuple(_spread(tpot_s, steps * requests, spread)[i * steps:(i + 1) * steps]
                   for i in range(requests))
    ttft = _spread(ttft_s, requests, spread)
    tokens = batch * output_len
    if telemetry == "default":
        telemetry = gpu_telemetry(samples=requests * tokens) if env.get("accelerator") == "cuda" \
            else None
    memory = {"allocated_peak_bytes": 3 * GIB, "reserved_peak_bytes": 4 * GIB,
              "device_total_bytes": 80 * GIB, "weights_bytes": 2 * GIB,
              "kv_cache_bytes": GIB // 4}
    fields = dict(config=cfg, env=env, step_times_s=tuple(a + sum(d) for a, d in zip(ttft, decode)),
                  ttft_s=ttft, decode_s=decode, warmup_times_s=(0.03,), first_step_s=1.5,
                  build_s=2.0, window_wall_s=0.2, stop_reason="converged",
                  samples_per_step=tokens, shape=dict(SHAPE), memory=memory,
                  telemetry=telemetry, run_id=run_id)
    fields.update(kw)
    return GenerateRecord(**fields)


def failed_generate(batch: int = 64, path: str = "eager", env: dict | None = None,
                    run_id: str = "run-gen") -> GenerateRecord:
    """An out-of-memory generate record."""
    cfg = GenerateConfig(model="made-up-lm", batch_size=batch, prompt_len=8, output_len=4,
                         precision="bf16", path=path, stop=STOP)
    return GenerateRecord(config=cfg, env=H100 if env is None else env, status="error",
                          error_type="oom", error="CUDA out of memory. Tried to allocate 2 GiB",
                          run_id=run_id)

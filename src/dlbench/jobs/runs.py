"""What the device-benchmark commands run, from configs to records in the store: throughput
sweeps (plain and tuned), scaling sweeps, tuning searches, peak points and collectives.

Each function opens the store, runs, stores every record the moment it exists, and returns the
outcome; progress goes to the callbacks it is given. Nothing here prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import torch

from dlbench.config import PRECISIONS, ConfigError
from dlbench.jobs import launchers
from dlbench.jobs.plans import default_batch, preflight, tuned_precision
from dlbench.jobs.stored_run import StoredRun
from dlbench.jobs.sweep import Progress, SweepOutcome, run_sweep
from dlbench.launch.interconnect import PROFILE_ENV
from dlbench.launch.torchrun import TorchrunLauncher
from dlbench.measure.bandwidth import COMM_OPS
from dlbench.models import get_model
from dlbench.records.collective import CommConfig
from dlbench.records.throughput import ThroughputConfig
from dlbench.store import Store
from dlbench.tuning.levers import LEVERS
from dlbench.tuning.plan import plan as tuned_plan
from dlbench.tuning.search import MARGIN, LeverSearch
from dlbench.workloads.collectives import parse_size, sizes_between
from dlbench.workloads.devices import resolve_device
from dlbench.workloads.peak import default_plan, measure_point, plan_points, supported_precisions


def launcher_for(isolate: bool):
    """Benchmarks in this process, or each in a fresh one (``--isolate``: survives fatal CUDA
    errors, at a few seconds of start-up per benchmark, outside the timing)."""
    return launchers.isolated() if isolate else launchers.inline()


# -- throughput ---------------------------------------------------------------------------------
def tuned_configs(configs: Sequence[ThroughputConfig], env: dict, db: str,
                  keep: Sequence[str] = (), quick_compile: bool = False
                  ) -> tuple[list[ThroughputConfig], list[str]]:
    """Tuned mode: each config followed by its tuned counterpart (checked like the plain ones),
    and one note per config on where its recipe came from."""
    configs, notes = tuned_plan(configs, env, db, keep, quick_compile=quick_compile)
    preflight(configs)
    return configs, notes


def run_throughput(configs: Sequence[ThroughputConfig], db: str, command: str, env: dict, *,
                   isolate: bool = False, suite: str | None = None, tag: str | None = None,
                   resume: bool = False, progress: Progress | None = None,
                   repeat: int = 1) -> SweepOutcome:
    """A throughput sweep into ``db``, in this process or (``isolate``) one process each;
    ``repeat`` N > 1 runs each config in N fresh processes (``--repeat``), so it isolates."""
    with Store(db) as store:
        return run_sweep(configs, store, launcher_for(isolate or repeat > 1), env,
                         command=command, suite=suite, tag=tag, resume=resume,
                         progress=progress, repeat=repeat)


# -- scaling ------------------------------------------------------------------------------------
def torchrun_launcher(timeout_s: float = 900.0, pg_timeout_s: float = 120.0) -> TorchrunLauncher:
    """Each run a fresh torchrun job on this host: what measures a scaling config outside a
    sweep (the batch a largest-batch search under a strategy found)."""
    return launchers.torchrun(timeout_s=timeout_s, pg_timeout_s=pg_timeout_s)


def run_scaling(configs: Sequence, db: str, command: str, env: dict, rendezvous, *,
                timeout_s: float = 900.0, pg_timeout_s: float = 120.0, tag: str | None = None,
                resume: bool = False, progress: Progress | None = None,
                repeat: int = 1) -> SweepOutcome:
    """A scaling sweep: each config a fresh torchrun job (on every host of ``rendezvous``);
    ``repeat`` N > 1 runs each config as N fresh jobs, one repeat group (``--repeat``)."""
    launcher = launchers.torchrun(timeout_s=timeout_s, pg_timeout_s=pg_timeout_s,
                                  rendezvous=rendezvous,
                                  on_status=getattr(progress, "status", None))
    if configs and all(c.base.framework == "jax" for c in configs):
        # One process drives the local devices (jax.sharding): no job to start.
        from dlbench.frameworks.jax.data_parallel import JaxDataParallelLauncher  # heavy: jax
        launcher = JaxDataParallelLauncher()
    with Store(db) as store:
        return run_sweep(configs, store, launcher, env, command=command, tag=tag,
                         resume=resume, progress=progress, repeat=repeat)


# -- tune ---------------------------------------------------------------------------------------
class _Chain:
    """Several models' lever searches as one sweep: routes each record to the search that
    asked for it (the next config of a search depends on the last one's figure). A config
    this run measured already is answered with its record here, not measured again."""

    def __init__(self, searches: list) -> None:
        self.searches = searches
        self.active = None
        self.seen: dict[str, object] = {}

    def __len__(self) -> int:
        return sum(len(s) for s in self.searches)

    def __iter__(self) -> Iterator[ThroughputConfig]:
        for search in self.searches:
            self.active = search
            for cfg in search:
                if cfg.key() in self.seen:
                    search.observe(self.seen[cfg.key()])
                else:
                    yield cfg

    def observe(self, record) -> None:
        self.seen[record.config.key()] = record
        self.active.observe(record)


#: The suite name of ``dlbench tune`` runs: tuned mode reads their winners back by it.
TUNE_SUITE = "tune"


def run_tune(searches: list, db: str, command: str, env: dict, *, tag: str | None = None,
             progress: Progress | None = None) -> SweepOutcome:
    """Every model's lever search (:class:`dlbench.tuning.search.LeverSearch`) as one run of
    suite ``tune``; each search ends with its trials and best config."""
    preflight([s.base for s in searches])
    chain = _Chain(searches)
    with Store(db) as store:
        return run_sweep(chain, store, launchers.inline(), env, command=command, suite=TUNE_SUITE,
                         tag=tag, progress=progress, on_record=chain.observe)


def tune_searches(models: Sequence[str], *, batch: int | None, precision: str | None,
                  device: str, levers: Sequence | None, margin: float | None, facts,
                  **fields) -> list:
    """One lever search per model, from the plain eager config: the given batch (else the
    model's default for this device) and precision (else bf16 on a GPU that has it, fp16 on
    one without, fp32 on the CPU); every lever of the table unless ``levers`` names some; a
    lever is kept where it gains more than ``margin`` (default ``tuning.search.MARGIN``).
    ``fields`` are the other config fields."""
    kind = resolve_device(device).type
    size = default_batch(facts, kind == "cuda")
    out = []
    for name in models:
        spec = get_model(name)
        base = ThroughputConfig(model=spec.name, batch_size=batch or size(spec.name),
                                precision=precision or tuned_precision(facts, kind == "cuda"),
                                device=device, **fields)
        out.append(LeverSearch(base, spec, kind, list(levers or LEVERS),
                               MARGIN if margin is None else margin))
    return out


# -- peak ---------------------------------------------------------------------------------------
PEAK_VERBS = ("matmul", "memory", "transfer", "p2p")


@dataclass(frozen=True)
class PeakPoints:
    """The points of a peak run on one device, and the shapes and sizes they use."""

    device: object                 # torch.device
    points: list                   # PeakConfig, in order
    sizes: object                  # dlbench.workloads.peak.PeakPlan


def peak_points(device: str, precisions: Sequence[str], verbs: Sequence[str],
                quick: bool = False) -> PeakPoints:
    """The points to measure: the asked precisions (default: every one the device has) for each
    verb (default: all)."""
    dev = resolve_device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    for p in precisions:
        if p not in PRECISIONS:
            raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}; got {p!r}",
                              "precision")
    for v in verbs:
        if v not in PEAK_VERBS:
            raise ConfigError(f"verbs must be one of {', '.join(PEAK_VERBS)}; got {v!r}",
                              "verbs")
    support = supported_precisions(dev)
    precisions = list(precisions) or [p for p in PRECISIONS if support.get(p) is None]
    sizes = default_plan(dev, quick=quick)
    points = plan_points(dev, precisions, sizes, tuple(verbs or PEAK_VERBS))
    return PeakPoints(device=dev, points=points, sizes=sizes)


def run_peak(plan: PeakPoints, db: str, command: str, env: dict, *, tag: str | None = None,
             on_record: Callable | None = None) -> StoredRun:
    """Measure every point, storing each as it comes; Ctrl-C ends the run as interrupted and
    keeps what was measured."""
    with Store(db) as store:
        run = StoredRun(store, command, env, suite="peak", tag=tag, on_record=on_record)
        try:
            with run:
                for cfg in plan.points:
                    run.add(measure_point(cfg, env, plan.sizes))
        except KeyboardInterrupt:
            pass  # the run is closed as interrupted; its records are the result
    return run


# -- comm ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CommPlan:
    """A collective-bandwidth run: ops x sizes per interconnect profile, ``ranks`` per host."""

    ops: list[str]
    sizes: list[int]
    profiles: list[str]
    ranks: int
    backend: str
    extra: dict = field(default_factory=dict)   # dtype, iters, warmup, timing, ..., probe

    @property
    def timing(self) -> str:
        return self.extra.get("timing", "eager")


#: Iterations in one timed sample of the batched and graph modes, unless iters_per_sample.
ITERS_PER_SAMPLE = 10


def comm_plan(ops: Sequence[str], profiles: Sequence[str], min_size: str, max_size: str,
              factor: int, *, device: str = "auto", backend: str = "auto",
              ranks: int | None = None, dtype: str = "float32", iters: int = 20,
              warmup: int = 5, timing: str = "auto", iters_per_sample: int | None = None,
              probe: bool = True, api: str = "torch", buffers: str = "torch",
              rotate: bool = True) -> CommPlan:
    """Ops (default: all), profiles (default: ``default``) and sizes checked; NCCL on GPUs,
    gloo on the CPU; every GPU (2 processes on a CPU) unless ``ranks`` says otherwise.

    ``timing`` ``auto`` is the mode nearest the fabric the backend allows: ``graph`` on NCCL
    (no launch cost, as nccl-tests' ``-G``), ``eager`` on gloo (whose calls are synchronous
    host work: a batch would time the same thing). ``probe``: read NCCL's choice of algorithm
    and protocol per size first (NCCL only). ``api``: whose collectives are timed
    (:data:`dlbench.records.collective.APIS`); ``buffers``: where their buffers come from
    (:data:`dlbench.records.collective.BUFFERS`); ``rotate``: each call of a sample on the next
    copy of its buffers, as nccl-tests (:class:`dlbench.records.collective.CommConfig`)."""
    ops = list(ops) or list(COMM_OPS)
    for op in ops:
        if op not in COMM_OPS:
            raise ConfigError(f"op must be among {', '.join(COMM_OPS)}; got {op!r}", "op")
    profiles = list(profiles) or ["default"]
    for prof in profiles:
        if prof not in PROFILE_ENV:
            raise ConfigError(f"interconnect must be among {', '.join(PROFILE_ENV)}; "
                              f"got {prof!r}", "interconnect")
    try:
        sizes = sizes_between(parse_size(min_size), parse_size(max_size), factor)
    except ValueError as exc:
        raise ConfigError(f"sizes: {exc}", also=("min_size", "max_size", "factor")) from None
    cuda = device != "cpu" and torch.cuda.is_available()
    backend = backend if backend != "auto" else ("nccl" if cuda else "gloo")
    if backend == "nccl" and not cuda:
        raise ConfigError('backend nccl needs CUDA GPUs; use backend="gloo"', "backend")
    ranks = ranks or (torch.cuda.device_count() if cuda else 2)
    if timing == "auto":
        timing = "graph" if backend == "nccl" else "eager"
    if iters_per_sample is None:
        iters_per_sample = 1 if timing == "eager" else ITERS_PER_SAMPLE
    # The config's own checks (eager takes one iteration a sample, graph needs NCCL), before
    # any process starts.
    CommConfig(op=ops[0], size_bytes=sizes[0], ranks=ranks, backend=backend, timing=timing,
               iters_per_sample=iters_per_sample, iters=iters, warmup=warmup, api=api,
               buffers=buffers, rotate=rotate)
    return CommPlan(ops, sizes, profiles, ranks, backend,
                    dict(dtype=dtype, iters=iters, warmup=warmup, timing=timing,
                         iters_per_sample=iters_per_sample, probe=probe and backend == "nccl",
                         api=api, buffers=buffers, rotate=rotate))


def run_comm(plan: CommPlan, db: str, command: str, env: dict, rendezvous, *,
             timeout_s: float = 600.0, pg_timeout_s: float = 120.0, tag: str | None = None,
             on_profile: Callable[[str], None] | None = None) -> StoredRun:
    """Every profile's job (every op x size in one torchrun job), each record stored as it
    comes; Ctrl-C ends the run as interrupted and keeps what was measured."""
    launcher = launchers.torchrun(timeout_s=timeout_s, pg_timeout_s=pg_timeout_s,
                                  rendezvous=rendezvous)
    with Store(db) as store:
        run = StoredRun(store, command, env, tag=tag)
        try:
            with run:
                for prof in plan.profiles:
                    if on_profile is not None:
                        on_profile(prof)
                    for r in launcher.run_comm(plan.ops, plan.sizes, plan.ranks, env,
                                               backend=plan.backend, interconnect=prof,
                                               **plan.extra):
                        run.add(r)
        except KeyboardInterrupt:
            pass  # the run is closed as interrupted; its records are the result
    return run

import os

import pytest

from dlbench.measure.stopping import StopRule

# Short windows for CPU tests: the tiny models step in about a millisecond.
FAST_STOP = StopRule(min_steps=5, min_seconds=0.05, max_seconds=1.0, target_rel_ci=0.05)


@pytest.fixture(scope="session")
def llama_job(tmp_path_factory):
    """``llama_job(strategy, gpus, checkpointing=None, **scaling)``: tiny_llama trained by a real
    torchrun job of gloo ranks for 3 AdamW steps (2 sequences a rank, no warm-up), as rank 0's
    parameters and the job's record. A layout runs once a session: test_distributed, test_tp,
    test_sharded_levers and test_exposed_comm compare their layouts with the same DDP and FSDP
    jobs (the tests that use it share an xdist group, :data:`LLAMA_JOBS`, so one worker runs
    each job)."""
    import torch

    from dlbench.jobs import launchers
    from dlbench.records.scaling import ScalingConfig
    from dlbench.records.throughput import ThroughputConfig

    done = {}

    def run(strategy: str, gpus: int, checkpointing: str | None = None, **scaling):
        base = ThroughputConfig(
            model="tiny_llama", batch_size=2, device="cpu", warmup_steps=0, warmup_seconds=0,
            optimizer="adamw", stop=StopRule(min_steps=3, max_steps=3, min_seconds=0,
                                             max_seconds=60),
            checkpointing=checkpointing is not None, checkpoint_policy=checkpointing or "full")
        cfg = ScalingConfig(base=base, gpus=gpus, strategy=strategy, **scaling)
        if cfg.key() not in done:
            out = tmp_path_factory.mktemp("llama") / "params.pt"
            rec = launchers.torchrun(timeout_s=180).run(cfg, {}, params_out=str(out))
            assert rec.ok, rec.error
            done[cfg.key()] = (torch.load(out), rec)
        return done[cfg.key()]
    return run


@pytest.fixture
def cpu_env():
    """A small real environment record (no topology), captured once per test."""
    from dlbench.env import capture_environment
    return capture_environment(include_topology=False)


def pytest_configure(config):
    # One intra-op thread: tiny models gain nothing from more, and on a shared 2-core machine
    # OpenMP's spinning threads fight any other process for the cores.
    import torch
    torch.set_num_threads(1)
    if not hasattr(config, "workerinput"):  # the first process: xdist's workers inherit it
        _share_jax_compilations(config)


#: JAX's persistent compilation cache, for every program however short its compile (JAX keeps
#: only those over a second by default: on the CPU the tiny models' steps compile in less).
JAX_CACHE_ENV = {"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                 "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1"}


def _share_jax_compilations(config) -> None:
    """One JAX compilation cache for the session, its processes and their children.

    XLA compiles every program of a JAX process, eager operations included, and on the CPU that
    is most of a tiny model's test: seconds, against milliseconds of steps. The tests build the
    same few models in many processes (the suite's workers, ``dlbench`` children, ranks), so
    the second compilation of a program is read back from the cache instead. The cache is
    keyed by the program and the compiler, so a cached executable is what a compilation would
    give; it starts empty each session and is removed at its end. Set here, in the process that
    starts pytest-xdist's workers, so that they and every child inherit it."""
    import shutil
    import tempfile
    cache = tempfile.mkdtemp(prefix="dlbench-tests-jax-cache-")
    os.environ.update(JAX_COMPILATION_CACHE_DIR=cache, **JAX_CACHE_ENV)
    config.add_cleanup(lambda: shutil.rmtree(cache, ignore_errors=True))


#: The xdist group of the tests that use :func:`llama_job`.
LLAMA_JOBS = "tiny-llama-jobs"


@pytest.hookimpl(wrapper=True)  # around the others: pytest-xdist reads the groups within
def pytest_collection_modifyitems(config, items):
    for item in items:
        if "llama_job" in item.fixturenames:
            item.add_marker(pytest.mark.xdist_group(LLAMA_JOBS))
        _group_by_module_fixture(item)
    _skip_gpu_tests_without_cuda(items)
    result = yield
    if hasattr(config, "workerinput"):  # every worker orders its collection the same way
        items[:] = _slow_first(items)
    return result


def _skip_gpu_tests_without_cuda(items) -> None:
    """GPU tests are skipped, not faked, where there is no CUDA."""
    import torch
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _slow_first(items: list) -> list:
    """The tests in the order pytest-xdist hands them out (``--no-loadscope-reorder``): first
    the units (an xdist group, or a test alone) that hold the most ``slow`` tests, then the
    rest as collected. Two workers start on the long jobs and end on short tests, so that
    neither waits long for the other at the end (a slow test handed out last would)."""
    from collections import Counter

    def unit(item) -> str:
        group = item.get_closest_marker("xdist_group")
        return str(group.args[0] if group.args else group.kwargs["name"]) if group else \
            item.nodeid
    slow = Counter(unit(item) for item in items if item.get_closest_marker("slow"))
    return sorted(items, key=lambda item: -slow[unit(item)])  # stable: ties as collected


def _group_by_module_fixture(item) -> None:
    """Under ``-n N --dist loadgroup`` tests go to the workers one by one, except those of an
    ``xdist_group``, which run on one worker. A test that uses a module-scoped fixture of its
    own file (a store, a trained model, a measured run, built once) joins its file's group, so
    that the fixture is built once, not once per worker."""
    if item.get_closest_marker("xdist_group"):
        return
    path = item.nodeid.split("::")[0]
    for defs in item._fixtureinfo.name2fixturedefs.values():
        if any(d.scope != "function" and d.baseid == path for d in defs):
            item.add_marker(pytest.mark.xdist_group(path))
            return

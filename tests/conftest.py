import pytest

from dlbench.measure.stopping import StopRule

# Short windows for CPU tests: the tiny models step in about a millisecond.
FAST_STOP = StopRule(min_steps=5, min_seconds=0.05, max_seconds=1.0, target_rel_ci=0.05)


@pytest.fixture(scope="session")
def llama_job(tmp_path_factory):
    """``llama_job(strategy, gpus, checkpointing=None, **scaling)``: tiny_llama trained by a real
    torchrun job of gloo ranks for 3 AdamW steps (2 sequences a rank, no warm-up), as rank 0's
    parameters and the job's record. A layout runs once a session: test_distributed, test_tp
    and test_sharded_levers compare their layouts with the same DDP and FSDP jobs (one xdist
    group keeps them on one worker)."""
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


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups (--dist loadgroup)
def pytest_collection_modifyitems(config, items):
    for item in items:
        _group_by_module_fixture(item)
    # GPU tests are skipped, not faked, where there is no CUDA.
    import torch
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


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

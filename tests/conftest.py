import pytest

from dlbench.measure.stopping import StopRule

# Short windows for CPU tests: the tiny models step in about a millisecond.
FAST_STOP = StopRule(min_steps=5, min_seconds=0.05, max_seconds=1.0, target_rel_ci=0.05)


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


def pytest_collection_modifyitems(config, items):
    # GPU tests are skipped, not faked, where there is no CUDA.
    import torch
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)

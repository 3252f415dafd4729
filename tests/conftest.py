import gc
import os
import signal
from pathlib import Path

import pytest

from dlbench.measure.stopping import StopRule

# Short windows for CPU tests: the tiny models step in about a millisecond, so 0.3 s is hundreds
# of steps; on a loaded 2-core machine a window seldom reaches its 5% interval and runs to its
# longest, which is then most of a test's time. No test reads a figure of these windows.
FAST_STOP = StopRule(min_steps=5, min_seconds=0.05, max_seconds=0.3, target_rel_ci=0.05)


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
        # (its environment; and the fork server's socket, which it hands each of them)
        _interruptible()
        _temporary_files_in_memory()
        _compile_dlbench_once()
        _share_jax_compilations(config)
        _compile_xla_quickly()
        _compile_inductor_quickly()
        _start_fork_server(config)
    else:  # the session's one, started by the first process (pytest_configure_node)
        config.stash[_FORK_SERVER] = config.workerinput["dlbench_fork_server"]
        _rewrite_test_modules_in_turn(config)


def _interruptible() -> None:
    """Ctrl-C (SIGINT) handled in this process, so that every process the tests start can get it.

    A shell without job control starts a command run with ``&`` with SIGINT ignored, and an
    ignored signal stays ignored across fork and exec: run so, every dlbench the tests start
    would ignore the SIGINT that the tests about Ctrl-C send it (Python installs its handler
    only where SIGINT is not ignored at start-up). A handled signal is reset to the default in
    a new program, which then installs its own, as one started from a terminal does."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


#: Where the session's temporary files go when TMPDIR does not say: a memory file system with
#: at least this much room, where programs may be run from (inductor loads what it compiles).
MEMORY_TMP, MEMORY_TMP_MIN_BYTES = Path("/dev/shm"), 4 << 30


def _temporary_files_in_memory() -> None:
    """The session's temporary files (``tmp_path``, the stores the tests unpack, every
    process's temporary folders) on a memory file system, where the machine has one.

    The tests unpack the committed stores of the pages they check again and again, and pytest
    keeps the last three sessions' files: on a disk that is a gigabyte written back a run,
    whose I/O every new interpreter's imports then wait behind (the runs' "written" and "I/O
    stall", before and after: docs/architecture.md, "The test suite's time"). Nothing changes
    where TMPDIR is set, or where ``/dev/shm`` is small (a container's 64 MB), not a
    directory, or mounted noexec."""
    import tempfile
    if os.environ.get("TMPDIR") or not MEMORY_TMP.is_dir() or not os.access(MEMORY_TMP, os.W_OK):
        return
    room = os.statvfs(MEMORY_TMP)
    if room.f_bavail * room.f_frsize < MEMORY_TMP_MIN_BYTES or room.f_flag & os.ST_NOEXEC:
        return
    # inductor's cache outlives the session (it is reused by the next): where it always was
    import getpass
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(
        tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}"))
    os.environ["TMPDIR"] = str(MEMORY_TMP)  # the workers, the fork server and every child
    tempfile.tempdir = None                   # this process: gettempdir() reads it again
    os.environ[_IN_MEMORY] = "1"


_IN_MEMORY = "DLBENCH_TESTS_TMP_IN_MEMORY"


@pytest.fixture(scope="session", autouse=True)
def _leave_no_memory_behind(tmp_path_factory, request):
    """A process's temporary files in memory go when all of its tests passed (pytest keeps the
    last three sessions' otherwise: gigabytes of memory); a failure keeps them for a look.

    Not pytest's tmp_path_retention_policy "failed": it removes a passed test's folder at once,
    and the next test of that name gets the same path, where a cache keyed by path (a model
    file's module) would hand it the earlier test's."""
    yield
    if os.environ.get(_IN_MEMORY) and request.session.testsfailed == 0:
        import shutil
        shutil.rmtree(tmp_path_factory.getbasetemp(), ignore_errors=True)


def _compile_dlbench_once() -> None:
    """dlbench's modules (and the fakes the tests' processes import) compiled to bytecode once,
    before any test starts a process.

    Hundreds of tests start fresh interpreters (dlbench's CLI, torchrun's ranks, isolated
    workers). Where PYTHONDONTWRITEBYTECODE is set (as on the machines these tests were timed
    on) no import writes a ``.pyc``, so each of those processes compiled every dlbench module it
    imported from source again; a process still reads a ``.pyc`` that exists. Writing them here
    (compileall writes whatever that variable says) costs about a second and saved about a tenth
    of the wall time of the process-starting test files on two cores. ``__pycache__`` is
    git-ignored."""
    import compileall
    root = Path(__file__).resolve().parents[1]
    for folder in (root / "src" / "dlbench", root / "tests" / "fakes"):
        compileall.compile_dir(folder, quiet=1)


def _rewrite_test_modules_in_turn(config) -> None:
    """The test modules' rewritten asserts written once for the workers, each doing its share.

    pytest rewrites every ``assert`` of a test module when it imports it (thousands here: about
    seven CPU-seconds) and keeps the result in ``__pycache__`` for the next import, unless
    PYTHONDONTWRITEBYTECODE is set (as on the machines these tests were timed on), when every
    worker of every run rewrote all of them again. Before collecting, each worker rewrites the
    modules from its own starting point on (the second from the middle), skipping those
    already written, so that the workers share the work; then collection reads what they
    wrote. A module whose cache is missing or stale is rewritten by collection as before.
    pytest's own functions, so it writes what it would read; where a pytest has none of them,
    nothing is done here."""
    if config.getoption("assertmode") != "rewrite":
        return
    try:
        from _pytest.assertion.rewrite import (PYC_TAIL, _read_pyc, _rewrite_test, _write_pyc,
                                               assertstate_key, get_cache_dir)
    except ImportError:
        return
    modules = sorted(Path(__file__).parent.glob("test_*.py"))
    worker = int(config.workerinput.get("workerid", "gw0")[2:] or 0)
    start = len(modules) * worker // max(1, int(config.workerinput.get("workercount", 1)))
    state = config.stash[assertstate_key]
    for module in modules[start:] + modules[:start]:
        cache = get_cache_dir(module)
        pyc = cache / (module.name[:-3] + PYC_TAIL)
        if _read_pyc(module, pyc) is not None:
            continue
        try:
            stat, code = _rewrite_test(module, config)
        except SyntaxError:  # collection reports it, with the module's name
            continue
        cache.mkdir(exist_ok=True)
        _write_pyc(state, code, stat, pyc)


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


#: XLA's CPU code generated without LLVM's optimisations (what ``-O0`` is to a C compiler).
XLA_TEST_FLAGS = ("--xla_backend_optimization_level=0",
                  "--xla_llvm_disable_expensive_passes=true")


def _compile_xla_quickly() -> None:
    """The tests' JAX programs compiled in a quarter of the time.

    On the CPU, XLA spends seconds optimising each program of a tiny model, most of a JAX
    test's time, to make steps of milliseconds faster. The tests check what the programs
    compute and what dlbench does with them (windows, sharding, records), which optimisation
    does not change; only how fast the steps run does, and no test asserts a speed. Set here,
    in the process that starts pytest-xdist's workers, so that they and every child inherit it;
    a test that sets ``XLA_FLAGS`` of its own (a device count) adds to these."""
    flags = os.environ.get("XLA_FLAGS", "").split()
    os.environ["XLA_FLAGS"] = " ".join(flags + [f for f in XLA_TEST_FLAGS if f not in flags])


#: Inductor's CPU kernels without SIMD: ``True``/``False`` stand for its check of each vector ISA.
INDUCTOR_TEST_ENV = {"TORCHINDUCTOR_VEC_ISA_OK": "0"}


def _compile_inductor_quickly() -> None:
    """The suite's torch.compile on the CPU in half the CPU time.

    Before its first CPU kernel inductor checks each vector instruction set the CPU claims by
    compiling and loading a program for it, then writes its kernels with the widest; a cold
    compile of the tiny Llama's decode step spent about 21 CPU-seconds in the C++ compiler, half
    of it on those checks and the wider kernels. With the checks answered "no" it writes scalar
    kernels: what the compiled step computes, and what dlbench does with it (one compile a
    process, its guards, the records), are the same; only how fast its steps run differs, and no
    test asserts a speed. Set here, before the fork server and the workers start, so that they
    and every child inherit it."""
    for name, value in INDUCTOR_TEST_ENV.items():
        os.environ.setdefault(name, value)


#: The marker of the tests about real processes (signals, stray ranks, what a new interpreter
#: imports): every process dlbench starts for them (torchrun's agent and ranks, the zygote) is
#: a new interpreter, as outside the tests.
REAL_PROCESSES = "real_processes"
_FORK_SERVER = pytest.StashKey[str]()


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's: what a worker is handed at its start
def pytest_configure_node(node):
    node.workerinput["dlbench_fork_server"] = node.config.stash[_FORK_SERVER]


def _start_fork_server(config) -> None:
    """A fork server for the processes the tests start (:mod:`dlbench.launch.forking`), one for
    the session: xdist's workers share it, and so its imports.

    A torchrun job starts an agent and a process per rank, and each new interpreter spends
    1.5 CPU-seconds importing torch, 4-5 more for a transformers model: for the tiny models
    most of a job's cost, and the suite runs many jobs. Forked from a process that imported
    them once, the agent and ranks start in milliseconds; so does the zygote of ``--isolate``,
    and the scripts and ranks a test starts through ``forking.python_args``. Every other step of
    a job (the launcher, torchrun, the rendezvous, the process group, the files and exit codes)
    is what it is outside the tests; the tests marked :data:`REAL_PROCESSES` start new
    interpreters."""
    import shutil
    import subprocess
    import tempfile

    from dlbench.launch import forkserver
    folder = tempfile.mkdtemp(prefix="dlbench-tests-fork-")  # a short path: a socket's limit
    path = os.path.join(folder, "socket")
    with open(os.path.join(folder, "server.log"), "wb") as log:
        proc, listener = forkserver.start(path, log.fileno())
    listener.close()  # the server holds it
    config.stash[_FORK_SERVER] = path

    def stop() -> None:
        proc.stdin.close()  # the server ends at the end of its input
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(folder, ignore_errors=True)
    config.add_cleanup(stop)


@pytest.hookimpl(tryfirst=True)  # before the test's fixtures, which may start jobs
def pytest_runtest_setup(item):
    from dlbench.launch import forking
    server = item.config.stash.get(_FORK_SERVER, None)
    if server and not item.get_closest_marker(REAL_PROCESSES):
        os.environ[forking.ENV] = server
    else:
        os.environ.pop(forking.ENV, None)


def pytest_collection_finish(session):
    _collect_and_freeze()


@pytest.hookimpl(trylast=True)  # after the runner's teardown, which ends the module's fixtures
def pytest_runtest_teardown(item, nextitem):
    if nextitem is None or nextitem.path != item.path:
        _collect_and_freeze()


def _collect_and_freeze() -> None:
    """What is alive now is left out of every later garbage collection of this process.

    A worker imports torch, transformers, JAX and the tests' modules: millions of objects that
    live as long as it does, and which each full collection walked (a third of a second each,
    dozens of them a session, and five more at its end). After the collection of the
    tests and after each test file the garbage is collected, so that none is kept, then what
    is left (modules, caches, the session's fixtures) is frozen (:func:`gc.freeze`); the
    collections that follow walk only what the tests make after it."""
    gc.collect()
    gc.freeze()


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

"""``dlbench serve`` from the command line: a sweep against dlbench's stub (started as a server
command), the tables, --json, the store; servers started with --launch and stopped however the
run ends (its end, a failed start, SIGTERM, SIGKILL), nothing left behind; bad input as one
line and exit 2, an unreachable endpoint as a counted failure and exit 3, never a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("aiohttp")

from dlbench.cli import main  # noqa: E402
from dlbench.jobs import serve_runs  # noqa: E402
from dlbench.launch import server as launch_server  # noqa: E402
from dlbench.records.serve import ServeConfig  # noqa: E402
from dlbench.store import Store  # noqa: E402
from dlbench.workloads.serve.load import Target  # noqa: E402
from dlbench.workloads.serve.stub import StubServer, StubSpec  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
QUICK = ["--num-requests", "6", "--output-len", "4", "--prompt-len", "8", "--warmup", "1",
         "--telemetry-interval", "0"]
STUB = f"{sys.executable} -m dlbench.workloads.serve.stub"


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def _dlbench(*args: str, cwd: Path, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.Popen([sys.executable, "-m", "dlbench", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def test_a_sweep_against_the_stub_prints_stores_and_says_the_clients_overhead(tmp_path,
                                                                             capsys):
    db = str(tmp_path / "s.db")
    assert main(["serve", "--stub", "--concurrency", "1,3", "--rate", "40", *QUICK,
                 "--db", db]) == 0
    out = capsys.readouterr()
    assert "Serving from" in out.out and "the client's own overhead" in out.out
    assert "latency percentiles with 95% intervals" in out.out
    assert "Traceback" not in out.err and "model stub" in out.err
    with Store(db) as s:
        recs = s.results(kind="serve")
    assert [r.config.load_label for r in recs] == ["c1", "c3", "40 req/s"]
    for r in recs:
        assert r.ok and r.completed() == 6 and r.server["stub"] == {"ttft_ms": 0.0,
                                                                    "itl_ms": 0.0}
        assert "dlbench.workloads.serve.stub" in r.server["launch"]
        assert r.run_id and r.env.get("hostname")


def test_json_holds_the_records_and_their_figures(tmp_path, capsys):
    assert main(["serve", "--stub", *QUICK, "--db", str(tmp_path / "s.db"), "--json"]) == 0
    docs = json.loads(capsys.readouterr().out)
    assert [d["kind"] for d in docs] == ["serve"]
    d = docs[0]
    assert len(d["ttft_s"]) == 6 and d["figures"]["completed"] == 6
    assert d["figures"]["output_tokens_per_s"] > 0 and d["figures"]["ttft_median_ms"] > 0


def test_the_model_defaults_to_the_first_the_server_lists(tmp_path, capsys):
    with StubServer(StubSpec(model="served-name")) as port:
        assert main(["serve", "--endpoint", f"http://127.0.0.1:{port}/v1", *QUICK,
                     "--db", str(tmp_path / "s.db"), "-q"]) == 0
    with Store(tmp_path / "s.db") as s:
        [r] = s.results()
    assert r.config.model == "served-name" and r.server["models"] == ["served-name"]


def _closed_port() -> int:
    return serve_runs.free_port()


def test_an_unreachable_endpoint_is_a_counted_failure_exit_3(tmp_path, capsys):
    port = _closed_port()
    code = main(["serve", "--endpoint", f"http://127.0.0.1:{port}", "-m", "x",
                 "--concurrency", "1,2", *QUICK, "--db", str(tmp_path / "s.db")])
    err = capsys.readouterr().err
    assert code == 3 and "Traceback" not in err
    assert f"cannot connect to 127.0.0.1:{port}" in err
    with Store(tmp_path / "s.db") as s:
        assert [r.status for r in s.results()] == ["error", "error"]


def test_no_model_and_no_server_to_ask_is_a_usage_error(tmp_path, capsys):
    code = main(["serve", "--endpoint", f"http://127.0.0.1:{_closed_port()}", *QUICK,
                 "--db", str(tmp_path / "s.db")])
    err = capsys.readouterr().err
    assert code == 2 and "--model is needed: cannot reach" in err and len(err.splitlines()) <= 2


@pytest.mark.parametrize("argv,says", [
    (["--slo", "fast"], "--slo"),
    (["--num-requests", "5", "--duration", "1"], "not both"),
    (["--stub", "--launch", "x"], "one"),
    (["--rate", "0"], "--rate"),
    (["--concurrency", "0"], "--concurrency"),
    (["--extra-body", "[1]"], "--extra-body"),
    (["--api", "embeddings"], "--api"),
    (["--output-len", "1"], "--output-len"),
    (["--tokenizer", "/nonexistent/tokenizer"], "--tokenizer: no tokenizer at /nonexistent"),
    (["--stub-itl-ms", "5"], "add --stub"),
])
def test_bad_input_is_one_line_and_exit_2(argv, says, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        code = main(["serve", "-m", "x", *argv, "--db", str(tmp_path / "s.db")])
        raise SystemExit(code)
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and says in err and len(err.splitlines()) == 1, err


def test_a_server_command_that_exits_is_a_clear_error(tmp_path, capsys):
    code = main(["serve", "--launch", "echo loading the model; exit 3", "-m", "x", *QUICK,
                 "--db", str(tmp_path / "s.db")])
    err = capsys.readouterr().err
    assert code == 2 and "exited with code 3 before it answered" in err
    assert "loading the model" in err and "Traceback" not in err


def test_a_server_that_never_answers_times_out_and_is_stopped(tmp_path, capsys):
    pidfile = tmp_path / "pid"
    code = main(["serve", "--launch", f"echo $$ > {pidfile}; echo warming up; exec sleep 60",
                 "--launch-timeout", "1", "-m", "x", *QUICK, "--db", str(tmp_path / "s.db")])
    err = capsys.readouterr().err
    assert code == 2 and "did not answer" in err and "within 1 s" in err and "warming up" in err
    assert _gone(int(pidfile.read_text()))


def test_a_launched_server_and_what_it_started_are_stopped_at_the_end(tmp_path):
    port = serve_runs.free_port()
    child = tmp_path / "child"
    launch = (f"sleep 300 & echo $! > {child}; exec {STUB} --port {port}")
    with launch_server.launched(launch, f"http://127.0.0.1:{port}", 30) as srv:
        assert srv.ready_s is not None and srv.health.endswith("/health")
        pid = srv.proc.pid
        assert _alive(int(child.read_text()))
    assert _gone(pid) and _gone(int(child.read_text()))
    assert not srv.log_path.exists()  # a temporary log goes with its server


@pytest.mark.slow
@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 130), (signal.SIGKILL, -9)])
def test_a_run_stopped_by_a_signal_leaves_no_server_behind(sig, code, tmp_path):
    """SIGTERM: dlbench ends as on Ctrl-C (exit 130) and stops its server; SIGKILL: the kernel
    sends the server SIGTERM (PR_SET_PDEATHSIG)."""
    port = serve_runs.free_port()
    pidfile = tmp_path / "pid"
    launch = f"echo $$ > {pidfile}; exec {STUB} --port {port} --itl-ms 50"
    p = _dlbench("serve", "--launch", launch, "--endpoint", f"http://127.0.0.1:{port}",
                 "--concurrency", "2", "--num-requests", "200", "--output-len", "50",
                 "--db", str(tmp_path / "s.db"), cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while not pidfile.exists() or not pidfile.read_text().strip():
            assert time.monotonic() < deadline and p.poll() is None
            time.sleep(0.1)
        server = int(pidfile.read_text())
        time.sleep(3)  # into the measured window
        p.send_signal(sig)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == code, err
    if sig == signal.SIGTERM:
        assert "interrupted" in err and "Traceback" not in err
    assert _gone(server)


def test_a_point_whose_server_died_is_a_failure_saying_so():
    proc = subprocess.Popen(["sh", "-c", "echo out of memory; exit 137"],
                            stdout=subprocess.DEVNULL)
    proc.wait()
    srv = launch_server.ServerProcess("x", "http://127.0.0.1:1", proc, Path("/nonexistent"),
                                      True)
    runner = serve_runs.ServeRunner(Target("http://127.0.0.1:1", "x"), server=srv)
    rec = runner.run(ServeConfig(model="x", concurrency=1, telemetry_interval_s=None), {})
    assert not rec.ok and rec.error_type == "crashed"
    assert rec.error == "the launched server exited with code 137"


def test_the_python_api_returns_the_records(tmp_path):
    import dlbench
    recs = dlbench.measure_serving(stub=True, concurrency=[1, 2], rate=50.0, num_requests=4,
                                   prompt_len=4, output_len=4, warmup_requests=0,
                                   telemetry_interval_s=None, db=tmp_path / "s.db")
    assert [r.config.load_label for r in recs] == ["c1", "c2", "50 req/s"]
    assert all(r.ok and r.completed() == 4 and r.kind == "serve" for r in recs)
    assert [r.id for r in dlbench.load(tmp_path / "s.db", kind="serve")] == [r.id for r in recs]

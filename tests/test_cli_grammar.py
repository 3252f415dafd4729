"""One grammar for the command line: every subcommand's parser is walked and the flags they
share are checked to mean the same thing (same destination, same value parser, lists or single
values of the same values), on/off options parse on/off, every command that prints results
takes --json and -q (and, run on a tiny store, prints JSON that parses with --json and less with
-q), and every --help lists the exit codes. CPU only.
"""

from __future__ import annotations

import argparse
import collections
import io
import json
import sys
from contextlib import redirect_stdout

import pytest

from dlbench.cli import build_parser, main
from dlbench.commands.common import on_off

# Deliberate differences of one flag's values between commands, each with its reason. A new
# difference fails the test until it is made to agree or listed here.
ALLOWED = {
    ("-b", "--batch-size"): (
        {"_batch_or_auto", "batch_size", "integer"},
        "a batch size everywhere; 'default' where the command has a default batch, 'auto' (the "
        "largest that fits) only where it can find it (throughput searches, generate sizes the "
        "KV cache); train and whatif take a number"),
    ("--suite",): (
        {"suite", "str"},
        "run takes a suite to run; 'results ls' filters stored runs, whose suite also names "
        "tune and peak runs"),
    ("--api",): (
        {"api", "str"},
        "which API the measured calls go through: serve, the server's HTTP API; comm, "
        "torch.distributed's collectives or NCCL's own"),
}
# Flags that are on/off settings: they parse on/off (and lists of them) wherever they appear.
ON_OFF = ("--channels-last", "--cuda-graph", "--compile-loss", "--augment")
# Commands that measure and store results: --json (the records) and -q (no progress).
MEASURE = ("run", "throughput", "scale", "maxbatch", "comm", "net", "train", "peak", "tune",
           "generate", "serve")
# Commands that print stored results or figures: --json (the figures as data) and -q (less).
PRINT = ("results ls", "results show", "compare", "gpus", "whatif", "env", "models", "telemetry",
         "roofline", "report", "monitor")
# The commands that print no results, each with its reason; every other takes --json and -q.
NO_RESULTS = {
    "results export": "writes records in the format --format names (json or csv), to -o or stdout",
    "results check": "prints the store's problems, not results; its exit code is the answer",
    "results merge": "copies results between stores; prints one line per source on stderr",
}


def _walk(p: argparse.ArgumentParser, name: str = ""):
    subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    for a in subs:
        for n, sp in a.choices.items():
            yield from _walk(sp, f"{name} {n}".strip())
    if not subs:
        yield name, p


PARSERS = dict(_walk(build_parser()))


def _element(a: argparse.Action) -> str:
    t = getattr(a.type, "element", a.type)  # a csv list: its element parser
    if t is None or t is str:
        return "str"
    return getattr(t, "__name__", str(t))


def _shown(p: argparse.ArgumentParser):
    for a in p._actions:
        if a.help != argparse.SUPPRESS and a.option_strings:
            yield a


def test_shared_flags_mean_the_same_everywhere():
    by_flag: dict[str, set] = collections.defaultdict(set)
    where: dict[tuple, list] = collections.defaultdict(list)
    for name, p in PARSERS.items():
        for a in _shown(p):
            if isinstance(a, (argparse._HelpAction, argparse._VersionAction)):
                continue
            for o in a.option_strings:
                sig = (a.dest, _element(a), type(a).__name__ in ("_StoreTrueAction",
                                                                  "_StoreFalseAction"))
                by_flag[o].add(sig)
                where[(o, sig)].append(name)
    bad = []
    for flag, sigs in by_flag.items():
        if len(sigs) == 1:
            continue
        allowed = next((v[0] for k, v in ALLOWED.items() if flag in k), None)
        dests = {s[0] for s in sigs}
        kinds = {s[2] for s in sigs}
        elements = {s[1] for s in sigs}
        if len(dests) == 1 and len(kinds) == 1 and allowed and elements <= allowed:
            continue
        bad.append(f"{flag}: " + "; ".join(f"{s} in {where[(flag, s)]}" for s in sigs))
    assert not bad, "flags that mean different things:\n" + "\n".join(bad)


def test_on_off_options_parse_on_and_off_everywhere():
    found = 0
    for name, p in PARSERS.items():
        for a in _shown(p):
            if set(a.option_strings) & set(ON_OFF):
                found += 1
                assert getattr(a.type, "element", a.type) is on_off, (name, a.option_strings)
    assert found >= 6  # throughput, scale, maxbatch channels-last; cuda-graph; ...


def test_every_command_is_listed_once():
    listed = [*MEASURE, *PRINT, *NO_RESULTS]
    assert sorted(listed) == sorted(PARSERS), "a new command: put it in MEASURE, PRINT or NO_RESULTS"


@pytest.mark.parametrize("name", MEASURE + PRINT)
def test_commands_that_print_results_take_json_and_q_and_say_what_they_do(name):
    by_flag = {o: a for a in PARSERS[name]._actions for o in a.option_strings}
    assert "--json" in by_flag and {"-q", "--quiet"} <= set(by_flag), name
    for flag in ("--json", "-q"):  # each command says what its JSON holds and -q leaves out
        text = by_flag[flag].help or ""
        assert len(text) > 10 and text != argparse.SUPPRESS, (name, flag)


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_every_help_lists_the_exit_codes_and_prints_percent_signs_once(name):
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit):
        build_parser().parse_args([*name.split(), "--help"])
    text = out.getvalue()
    assert "exit codes" in text, name
    assert "%%" not in text, name


def test_old_spellings_are_hidden_aliases():
    p = build_parser()
    a = p.parse_args(["comm", "--gpus", "3", "--min", "1K", "--max", "2K"])
    b = p.parse_args(["comm", "--ranks", "3", "--min-bytes", "1K", "--max-bytes", "2K"])
    assert (a.gpus, a.min, a.max) == (b.gpus, b.min, b.max) == (3, "1K", "2K")
    help_text = PARSERS["comm"].format_help()
    assert "--ranks" in help_text and "--gpus GPUS" not in help_text
    # maxbatch's bare --channels-last / --compile (its old form) still mean on / default
    m = p.parse_args(["maxbatch", "-m", "x", "--channels-last", "--compile"])
    assert m.channels_last == [[True]] and m.compile == [["default"]]


def test_auto_batch_means_one_thing():
    p = build_parser()
    assert p.parse_args(["throughput", "-m", "x", "-b", "auto"]).batch_size == [["auto"]]
    with pytest.raises(SystemExit):
        p.parse_args(["scale", "-m", "x", "-b", "auto"])
    assert p.parse_args(["scale", "-m", "x", "-b", "default"]).batch_size == [[None]]


def test_version():
    from dlbench import __version__
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit) as e:
        build_parser().parse_args(["--version"])
    assert e.value.code == 0 and out.getvalue().strip() == f"dlbench {__version__}"


# -- --json parses and -q prints less, on a tiny store -------------------------------------------
H100_ENV = {"accelerator": "cuda", "gpu_count": 1, "gpus": [{"name": "NVIDIA H100 80GB HBM3"}]}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Two runs: a matmul ceiling and a throughput result of tiny_cnn with its counted FLOPs."""
    from dlbench.measure.flops import count_flops
    from dlbench.models import get_model
    from dlbench.records.peak import PeakConfig, PeakRecord
    from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
    from dlbench.store import Store

    db = tmp_path_factory.mktemp("grammar") / "tiny.db"
    cfg = ThroughputConfig(model="tiny_cnn", batch_size=8, mode="eval", precision="fp32")
    tput = ThroughputRecord(config=cfg, env=H100_ENV, step_times_s=(0.001,) * 5,
                            samples_per_step=8, flops_per_sample=count_flops(
                                get_model("tiny_cnn"), "eval"),
                            stop_reason="converged", run_id="t1")
    peak = PeakRecord(config=PeakConfig("matmul", precision="fp32", shape=(8, 8, 8),
                                        device="cuda:0"),
                      env=H100_ENV, times_s=(1.0,), work=50e12, run_id="p1")
    with Store(db) as s:
        for run, rec in (("p1", peak), ("t1", tput)):
            s.start_run(run, "test", H100_ENV, "k", "H100")
            s.add(rec, "k")
    return str(db)


def _run(argv: list[str], capsys) -> str:
    capsys.readouterr()
    assert main(argv) == 0, argv
    return capsys.readouterr().out


# Each command with arguments that print results (DB: the tiny store).
PRINTING = {
    "results ls": ["results", "ls", "--db", "DB"],
    "results ls --results": ["results", "ls", "--results", "--db", "DB"],
    "results show": ["results", "show", "t1", "--db", "DB"],
    "results show RESULT": ["results", "show", "RESULT", "--db", "DB"],
    "roofline": ["roofline", "--db", "DB", "--no-plot"],
    "gpus": ["gpus", "--db", "DB"],
    "gpus --specs": ["gpus", "--specs"],
    "whatif": ["whatif", "-m", "resnet50", "-b", "64", "--step-ms", "100", "--nodes", "1,2",
               "--network", "100gbe", "--db", "DB"],
    "whatif --networks": ["whatif", "--networks"],
    "env": ["env"],
}


def _argv(key: str, store: str) -> list[str]:
    from dlbench.store import Store
    with Store(store) as s:
        rid = s.results(run_id="t1")[0].id
    return [store if a == "DB" else rid if a == "RESULT" else a for a in PRINTING[key]]


@pytest.mark.parametrize("key", sorted(PRINTING))
def test_quiet_prints_less_and_json_parses(key, store, capsys):
    argv = _argv(key, store)
    full = _run(argv, capsys)
    quiet = _run([*argv, "-q"], capsys)
    assert quiet.strip() and len(quiet) < len(full), (key, quiet)
    json.loads(_run([*argv, "--json"], capsys))


def test_results_ls_quiet_prints_the_ids_alone(store, capsys):
    assert _run(["results", "ls", "--db", store, "-q"], capsys).split() == ["t1", "p1"]
    ids = _run(["results", "ls", "--results", "--db", store, "-q"], capsys).split()
    assert len(ids) == 2 and all(len(i) == 12 for i in ids)


def test_models_quiet_prints_the_names_alone(capsys):
    from dlbench.models import list_models
    names = _run(["models", "--all", "-q"], capsys).split()
    assert names == [s.name for s in list_models(include_test=True)]
    assert len(_run(["models", "--all", "--no-flops"], capsys)) > len("\n".join(names))


def test_roofline_json_holds_the_mfu_figures(store, capsys, tmp_path):
    pytest.importorskip("matplotlib")
    out = json.loads(_run(["roofline", "--db", store, "--json", "-o", str(tmp_path / "r")],
                          capsys))
    assert [d["device"] for d in out] == ["NVIDIA H100 80GB HBM3"]
    (row,) = out[0]["results"]
    assert row["model"] == "tiny_cnn" and row["achieved_tflops"] > 0
    assert 0 < row["mfu_measured"] < 1 and row["bound"] in ("memory", "compute")
    assert out[0]["roofs"]["compute_tflops"]["fp32"] == pytest.approx(50.0)
    assert out[0]["plot"] == [str(tmp_path / "r.png"), str(tmp_path / "r.svg")]


def test_report_json_prints_the_records_and_writes_a_file_only_with_o(store, capsys, tmp_path,
                                                                     monkeypatch):
    monkeypatch.chdir(tmp_path)
    recs = json.loads(_run(["report", "--db", store, "--json"], capsys))
    assert sorted(r["run_id"] for r in recs) == ["p1", "t1"]
    assert not (tmp_path / "report.html").exists()
    recs = json.loads(_run(["report", "--db", store, "--json", "--run", "t1", "-q", "--markdown",
                            "-o", "r.md"], capsys))
    assert [r["kind"] for r in recs] == ["throughput"] and (tmp_path / "r.md").stat().st_size
    assert capsys.readouterr().err == ""  # -q: no 'wrote' line


def _fake_gpu(monkeypatch):
    try:
        from tests.fakes.fake_nvml import FakeGpu, make_fake_pynvml
    except ModuleNotFoundError:
        from fakes.fake_nvml import FakeGpu, make_fake_pynvml  # type: ignore[no-redef]
    monkeypatch.setitem(sys.modules, "pynvml", make_fake_pynvml([FakeGpu()]))


def test_monitor_json_is_a_json_line_per_sample(monkeypatch, capsys):
    _fake_gpu(monkeypatch)
    out = _run(["monitor", "--json", "--interval", "0.05", "--duration", "0.12"], capsys)
    rows = [json.loads(line) for line in out.splitlines()]
    assert len(rows) >= 2 and all(r["gpu"] == 0 and "power_w" in r for r in rows)


def test_monitor_quiet_writes_the_csv_alone_and_needs_it(monkeypatch, capsys, tmp_path):
    _fake_gpu(monkeypatch)
    out = tmp_path / "m.csv"
    assert _run(["monitor", "-q", "--csv", str(out), "--interval", "0.05", "--duration", "0.12"],
                capsys) == ""
    assert len(out.read_text().splitlines()) >= 3  # header and samples
    assert main(["monitor", "-q", "--duration", "0.1"]) == 2
    assert "--csv" in capsys.readouterr().err

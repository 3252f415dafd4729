"""One grammar for the command line: every subcommand's parser is walked and the flags they
share are checked to mean the same thing (same destination, same value parser, lists or single
values of the same values), on/off options parse on/off, the commands that print results take
--json (and those that measure, -q), and every --help lists the exit codes. CPU only, no torch.
"""

from __future__ import annotations

import argparse
import collections
import io
from contextlib import redirect_stdout

import pytest

from dlbench.cli import build_parser
from dlbench.commands.common import on_off

# Deliberate differences of one flag's values between commands, each with its reason. A new
# difference fails the test until it is made to agree or listed here.
ALLOWED = {
    ("-b", "--batch-size"): (
        {"_batch_or_auto", "batch_size", "integer"},
        "a batch size everywhere; 'default' where the command has a default batch, 'auto' (the "
        "largest that fits) only where it can search for it (throughput); train and whatif "
        "take a number"),
    ("--suite",): (
        {"suite", "str"},
        "run takes a suite to run; 'results ls' filters stored runs, whose suite also names "
        "tune and peak runs"),
}
# Flags that are on/off settings: they parse on/off (and lists of them) wherever they appear.
ON_OFF = ("--channels-last", "--cuda-graph", "--compile-loss", "--augment")
# Commands that measure and store results: --json (the records) and -q (no progress).
MEASURE = ("run", "throughput", "scale", "maxbatch", "comm", "net", "train", "peak", "tune")
# Commands that print stored results or figures: --json.
PRINT = ("results ls", "results show", "compare", "gpus", "whatif", "env", "models", "telemetry")


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


def test_commands_that_print_results_take_json_and_measuring_ones_q():
    for name in MEASURE + PRINT:
        flags = {o for a in PARSERS[name]._actions for o in a.option_strings}
        assert "--json" in flags, name
        if name in MEASURE:
            assert {"-q", "--quiet"} <= flags, name


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

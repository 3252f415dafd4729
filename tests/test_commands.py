"""The command layer: thin (no command imports another, heavy imports only where start-up
needs them, each with its reason), names a user understands, and the old names still accepted
without being shown. In-process: argparse and the module source, nothing is measured."""

import argparse
import ast
import json
import re
from pathlib import Path

import pytest

from dlbench.cli import build_parser

COMMANDS = Path(__file__).resolve().parents[1] / "src" / "dlbench" / "commands"


def _modules():
    return sorted(p for p in COMMANDS.glob("*.py") if p.name != "__init__.py")


def _imports(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            yield node, node.module, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield node, a.name, []


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.name)
def test_no_command_module_imports_another_but_common(path):
    tree = ast.parse(path.read_text())
    for _, module, names in _imports(tree):
        if module == "dlbench.commands":
            assert names == [] or set(names) <= {"common"}, f"{path.name} imports {names}"
        elif module.startswith("dlbench.commands."):
            assert module == "dlbench.commands.common", f"{path.name} imports {module}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.name)
def test_function_level_imports_say_why(path):
    """Imports inside a function are for start-up time only (torch, matplotlib): each says so
    on its line; everything else is imported at the top of the module."""
    text = path.read_text()
    lines = text.splitlines()
    tree = ast.parse(text)
    top = {id(n) for n in tree.body}
    for node, module, _ in _imports(tree):
        if id(node) in top or module == "__future__":
            continue
        line = lines[node.end_lineno - 1]
        assert re.search(r"#\s*heavy: \S", line), \
            f"{path.name}:{node.lineno} imports {module} in a function without '# heavy: why'"


#: Modules that import torch or matplotlib by design: a command imports them in the function
#: that needs them, so `dlbench --help` does not pay for them.
HEAVY = ("torch", "matplotlib", "dlbench.models", "dlbench.training", "dlbench.tuning",
         "dlbench.measure.flops", "dlbench.measure.roofline", "dlbench.report.html",
         "dlbench.report.plots", "dlbench.report.tuned_tables", "dlbench.jobs.plans",
         "dlbench.jobs.runs", "dlbench.jobs.maxbatch_search",
         "dlbench.jobs.train_runs", "dlbench.jobs.net_runs", "dlbench.whatif.scenarios")


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.name)
def test_heavy_modules_are_not_imported_at_the_top(path):
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for _, module, names in _imports(node):
                full = [module] + [f"{module}.{n}" for n in names]
                heavy = [m for m in full for h in HEAVY if m == h or m.startswith(h + ".")]
                assert not heavy, f"{path.name}:{node.lineno} imports {heavy[0]} at the top"


def _helps(parser: argparse.ArgumentParser, name: str = "dlbench"):
    yield name, parser.format_help()
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub, p in a.choices.items():
                yield from _helps(p, f"{name} {sub}")


def test_no_help_text_speaks_of_seed_articles_by_number():
    for name, text in _helps(build_parser()):
        found = re.search(r"(?i)seeds?[ -]?0\d\d", text)
        assert not found, f"'{name} --help' says {found.group(0)!r}"


def parse(*argv):
    return build_parser().parse_args(list(argv))


@pytest.mark.parametrize("argv,field,new", [
    (["run", "--suite", "classic-cnn"], "suite", "classic-cnn"),
    (["run", "--suite", "ms-per-batch"], "suite", "ms-per-batch"),
    (["results", "show", "--view", "classic-cnn"], "view", "classic-cnn"),
    (["results", "show", "--view", "ms-per-batch"], "view", "ms-per-batch"),
    (["gpus", "--source", "tf-cnn-benchmarks"], "source", "tf-cnn-benchmarks"),
    (["gpus", "--source", "ms-per-batch"], "source", "ms-per-batch"),
    (["gpus", "--source", "cifar10-frameworks"], "source", "cifar10-frameworks"),
    (["throughput", "-m", "x", "--method", "fwd-bwd"], "method", "fwd-bwd"),
    (["whatif", "--ps-cluster"], "ps_cluster", True),
])
def test_new_names_parse(argv, field, new):
    assert getattr(parse(*argv), field) == new


@pytest.mark.parametrize("argv,field,new,help_argv", [
    (["run", "--suite", "seed000"], "suite", "classic-cnn", ["run"]),
    (["run", "--suite", "seed002"], "suite", "ms-per-batch", ["run"]),
    (["results", "show", "--view", "seed000"], "view", "classic-cnn", ["results", "show"]),
    (["results", "show", "--view", "seed002"], "view", "ms-per-batch", ["results", "show"]),
    (["gpus", "--source", "seed000"], "source", "tf-cnn-benchmarks", ["gpus"]),
    (["gpus", "--source", "seed002"], "source", "ms-per-batch", ["gpus"]),
    (["gpus", "--source", "seed003"], "source", "cifar10-frameworks", ["gpus"]),
    (["throughput", "-m", "x", "--method", "seed002"], "method", "fwd-bwd", ["throughput"]),
    (["whatif", "--seed004"], "ps_cluster", True, ["whatif"]),
])
def test_old_names_are_hidden_aliases(argv, field, new, help_argv, capsys):
    assert getattr(parse(*argv), field) == new          # accepted, under the new name
    with pytest.raises(SystemExit):
        parse(*help_argv, "--help")
    shown = capsys.readouterr().out
    old = next(a for a in argv if a.startswith(("seed", "--seed")))
    assert old not in shown                              # and never shown


@pytest.mark.parametrize("argv", [["run", "--suite", "nope"], ["results", "show", "--view", "x"],
                                  ["gpus", "--source", "seed001"],
                                  ["throughput", "-m", "x", "--method", "y"]])
def test_unknown_names_are_usage_errors_that_list_the_new_names(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        parse(*argv)
    assert exc.value.code == 2
    listed = re.search(r"choose from ([^(\n]*)", capsys.readouterr().err)
    assert listed and "seed" not in listed.group(1)


def test_list_suites_shows_the_new_names_only(capsys):
    from dlbench.cli import main
    assert main(["run", "--list-suites"]) == 0
    out = capsys.readouterr().out
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    assert names == ["default", "cpu", "classic-cnn", "ms-per-batch", "smoke"]
    assert "seed" not in out


def test_gpus_source_by_new_and_old_name_prints_the_same_rows(capsys):
    from dlbench.cli import main
    assert main(["gpus", "--source", "ms-per-batch"]) == 0
    new = capsys.readouterr().out
    assert main(["gpus", "--source", "seed002"]) == 0
    assert capsys.readouterr().out == new and "vgg16" in new


def test_results_filter_by_suite_takes_old_and_new_names(tmp_path, capsys):
    """A store written before the renaming has runs of suite 'seed000': '--suite classic-cnn'
    finds them, and the suite column shows the name of today."""
    from dlbench.cli import main
    from dlbench.store import Store
    db = str(tmp_path / "old.db")
    with Store(db) as store:
        store.start_run("r-old", "dlbench run", {}, "k", "cpu", "seed000")
        store.start_run("r-new", "dlbench run", {}, "k", "cpu", "classic-cnn")
        store.start_run("r-cpu", "dlbench run", {}, "k", "cpu", "cpu")
    for name in ("classic-cnn", "seed000"):
        assert main(["results", "ls", "--db", db, "--suite", name, "--json"]) == 0
        got = {r["run_id"] for r in json.loads(capsys.readouterr().out)}
        assert got == {"r-old", "r-new"}
    assert main(["results", "ls", "--db", db]) == 0
    out = capsys.readouterr().out
    assert out.count("classic-cnn") == 2 and "seed000" not in out

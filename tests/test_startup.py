"""``dlbench --help`` loads no torch: help is the first thing a user types, and importing torch
costs about a second. Each check runs in a fresh interpreter (this process has torch loaded).
No timing is asserted (it flakes on a busy machine); the module list is what decides it.

A Ctrl-C during start-up (the commands' modules loading, torch importing, the plan and the
store) ends the command with one line and exit 130, before any run is opened, wherever it
lands."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[1] / "src")

# Subcommands whose --help needs torch today, each with why; when one is fixed this test fails
# until its line goes.
HEAVY_HELP = {
    "tune": "its epilog lists the levers; dlbench.tuning.levers imports dlbench.models.base",
}


def python(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env)


def test_dlbench_help_imports_no_torch():
    p = python(
        "import contextlib, io, runpy, sys\n"
        "sys.argv = ['dlbench', '--help']\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    try:\n"
        "        runpy.run_module('dlbench', run_name='__main__')\n"
        "    except SystemExit:\n"
        "        pass\n"
        "assert 'usage: dlbench' in out.getvalue(), out.getvalue()\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"


# One interpreter for every subcommand: an import finder refuses torch and notes which help
# asked for it, so one command that loads it cannot hide another.
WALK = r"""
import argparse, contextlib, io, json, sys

asked = []


class RefuseTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            asked.append(name)
            raise ImportError("torch refused while printing help")


sys.meta_path.insert(0, RefuseTorch())
from dlbench.cli import build_parser


def subcommands(parser, prefix=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield prefix + (name,)
                yield from subcommands(sub, prefix + (name,))


seen, heavy = [], {}
for path in dict.fromkeys(subcommands(build_parser())):
    asked.clear()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            build_parser().parse_args([*path, "--help"])
        except SystemExit:
            pass
        except ImportError:
            pass
    seen.append(" ".join(path))
    if asked:
        heavy[" ".join(path)] = asked[0]
print(json.dumps({"seen": seen, "heavy": heavy, "loaded": "torch" in sys.modules}))
"""


def test_every_subcommand_help_imports_no_torch():
    p = python(WALK)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert {"run", "throughput", "results", "results ls", "gpus"} <= set(out["seen"])
    assert not out["loaded"]
    assert set(out["heavy"]) == set(HEAVY_HELP), out["heavy"]


# -- a Ctrl-C during start-up ---------------------------------------------------------------------
# Each case is a Ctrl-C at a set moment of start-up, placed by an import finder: at the first
# import of MODULE it does HOW, as the real interruptions were seen doing at random moments.
INTERRUPT = r"""
import os, signal, sys, time

MODULE = {module!r}


def lost():  # a real SIGINT whose KeyboardInterrupt C code swallows (torch's numpy start-up)
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(10)
    except KeyboardInterrupt:
        pass


class Interrupt:
    done = False

    def find_spec(self, name, path=None, target=None):
        if name == MODULE and not Interrupt.done:
            Interrupt.done = True
            {how}
        return None


sys.meta_path.insert(0, Interrupt())
"""
HOWS = {
    # the interrupt is lost inside an import; the command must not go on to measure
    "lost": "lost()",
    # ... and the import then fails (numpy: "cannot load module more than once per process")
    "lost, then an ImportError": "lost(); raise ImportError('cannot load module more than "
                                 "once per process')",
    # a KeyboardInterrupt that leaves an exec() of a string (dataclasses make methods so)
    "inside exec()": "exec('raise KeyboardInterrupt')",
}
THROUGHPUT = ["throughput", "-m", "tiny_mlp", "--device", "cpu", "-b", "2", "-q",
              "--min-steps", "5", "--min-time", "0.05", "--max-time", "1"]


def _interrupted(tmp_path, module: str, how: str, via_m: bool = False):
    """``dlbench throughput`` interrupted at the first import of ``module``."""
    db = tmp_path / "s.db"
    code = INTERRUPT.format(module=module, how=HOWS[how])
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if via_m:  # `python -m dlbench`, the finder placed by a sitecustomize
        (tmp_path / "sitecustomize.py").write_text(code)
        env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), SRC, env.get("PYTHONPATH", "")])
        argv = [sys.executable, "-m", "dlbench", *THROUGHPUT, "--db", str(db)]
    else:
        env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
        argv = [sys.executable, "-c", code + "\nfrom dlbench.cli import main\n"
                "sys.exit(main(sys.argv[1:]))", *THROUGHPUT, "--db", str(db)]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    return p, db


def _runs_and_results(db) -> tuple[int, int]:
    import sqlite3
    if not db.exists():
        return 0, 0
    con = sqlite3.connect(db)
    try:
        return tuple(con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                     for t in ("runs", "results"))
    finally:
        con.close()


@pytest.mark.parametrize("module,how,via_m", [
    ("torch", "lost", False),
    ("torch", "lost, then an ImportError", False),
    ("dlbench.commands.bench", "inside exec()", False),   # while the parser is built
    ("dlbench.jobs.plans", "inside exec()", True),        # `python -m dlbench`
], ids=["lost-in-an-import", "lost-then-import-error", "building-the-parser", "python-m"])
def test_a_ctrl_c_during_start_up_is_one_line_and_exit_130(tmp_path, module, how, via_m):
    p, db = _interrupted(tmp_path, module, how, via_m)
    assert p.returncode == 130, (p.returncode, p.stderr[-3000:])
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: interrupted"), p.stderr[-3000:]
    assert _runs_and_results(db) == (0, 0)   # before the first config: no run, no result


# -- the first moments: the console script and `python -m dlbench` --------------------------------
ROOT = Path(__file__).resolve().parents[1]
HOWS["raised"] = "raise KeyboardInterrupt"


def console_script(tmp_path: Path) -> Path:
    """The ``dlbench`` script pip writes for pyproject's entry point (its template, verbatim):
    it imports the entry's module, then calls it."""
    import tomllib
    entry = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["dlbench"]
    module, func = entry.split(":")
    script = tmp_path / "dlbench"
    script.write_text(f"#!{sys.executable}\n# -*- coding: utf-8 -*-\nimport re\nimport sys\n"
                      f"from {module} import {func}\nif __name__ == '__main__':\n"
                      "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
                      f"    sys.exit({func}())\n")
    return script


@pytest.mark.parametrize("how", ["raised", "lost"])
@pytest.mark.parametrize("via", ["console-script", "python-m"])
def test_a_ctrl_c_while_the_entry_imports_dlbench_is_one_line_and_130(tmp_path, via, how):
    """At the first import of dlbench.cli (the commands' modules, most of start-up): the console
    script imported it before any dlbench code could catch an interrupt (a traceback), and an
    interrupt lost there went unnoticed (the command ran on)."""
    db = tmp_path / "s.db"
    (tmp_path / "sitecustomize.py").write_text(INTERRUPT.format(module="dlbench.cli",
                                                                how=HOWS[how]))
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(tmp_path), SRC, os.environ.get("PYTHONPATH", "")]))
    entry = ([str(console_script(tmp_path))] if via == "console-script" else ["-m", "dlbench"])
    p = subprocess.run([sys.executable, *entry, *THROUGHPUT, "--db", str(db)], env=env,
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 130, (p.returncode, p.stderr[-3000:])
    assert p.stderr == "error: interrupted while dlbench started\n", p.stderr[-3000:]
    assert not db.exists()


def _site_packages_path() -> str:
    """This interpreter's import path without the working directory: what ``python -S`` is
    given, so that the site module (and the .pth files of this machine's environment, which
    import what they like) takes no part in start-up."""
    return os.pathsep.join([SRC, *(p for p in sys.path if p and Path(p).is_dir()
                                   and Path(p).resolve() != Path.cwd().resolve())])


@pytest.mark.parametrize("via", ["console-script", "python-m"])
def test_a_ctrl_c_in_the_first_tenth_of_a_second(tmp_path, via):
    """SIGINT 0, 20, 50 and 100 ms after ``dlbench run`` starts. Whatever the machine's load
    makes of those moments, each lands in one of three places, and each ends as it must there:

    - before Python has installed its own handler: the process ends by the signal, silently
      (a shell reports 130);
    - in the interpreter's own start-up, before dlbench's first line (the io module, runpy
      finding ``dlbench.__main__``, the console script's own import line): Python's own report,
      in which no file of dlbench appears;
    - in dlbench: one line, ``error: interrupted ...``, exit 130, nothing stored.

    A traceback through dlbench's code, or a command that goes on, fails it."""
    entry = ([str(console_script(tmp_path))] if via == "console-script" else ["-m", "dlbench"])
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=_site_packages_path())
    seen = []
    for delay in (0.0, 0.02, 0.05, 0.1):
        db = tmp_path / f"s-{delay}.db"
        p = subprocess.Popen([sys.executable, "-S", *entry, "run", "--suite", "smoke",
                              "--db", str(db)], env=env, cwd=tmp_path,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(delay)
        p.send_signal(signal.SIGINT)
        err = p.communicate(timeout=120)[1]
        lines = err.strip().splitlines()
        if p.returncode == -signal.SIGINT and not err:
            seen.append("before Python's handler")
        elif p.returncode == 130 and len(lines) == 1 and lines[0].startswith("error: interrupted"):
            seen.append("in dlbench")
            assert not db.exists() or _runs_and_results(db)[1] == 0
        else:
            assert "KeyboardInterrupt" in err and p.returncode != 0, (delay, p.returncode, err)
            assert SRC not in err, (delay, p.returncode, err)  # no frame of dlbench's
            seen.append("in the interpreter's start-up")
    assert len(seen) == 4, seen

"""``dlbench --help`` loads no torch: help is the first thing a user types, and importing torch
costs about a second. Each check runs in a fresh interpreter (this process has torch loaded).
No timing is asserted (it flakes on a busy machine); the module list is what decides it."""

import json
import os
import subprocess
import sys
from pathlib import Path

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

"""dlbench's rules checker: an MLPerf log of ``dlbench train`` held to its benchmark's rules.

The rules (``rules/benchmarks.json``, read through :mod:`dlbench.training.recipe`) fix each
benchmark's target accuracy, epoch cap and hyperparameters per global batch; the log states
them, and this checker compares, taking the target from the rules, never from the log. A log
passes when:

- it names a benchmark the rules define, states its target and every hyperparameter the rules
  define, each as the rules give it at the logged global batch;
- it is well formed: one init before one run; epochs numbered 1, 2, ... each followed by its
  evaluation (no epoch left unevaluated); one seed, one global batch;
- no more epochs than the rules' cap, and the run stopped with ``success`` after its last
  evaluation, which reached the rules' target (MLPerf stops at the first evaluation that does).

Pure Python over the log's text, so it runs where the ``mlperf-logging`` package is absent;
where it is installed, :func:`dlbench.training.mlperf.check_log` runs MLPerf's own checker beside
it, with ``rules/dlbench_train.yaml`` (generated from the same rules: :func:`mlperf_rules_yaml`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from dlbench.training import recipe

#: Keys a log must hold exactly once.
ONCE = ("submission_benchmark", "init_start", "init_stop", "run_start", "run_stop", "seed",
        "global_batch_size", "train_samples", "eval_samples", "target_accuracy")


@dataclass(frozen=True)
class RulesVerdict:
    passed: bool
    benchmark: str | None
    reasons: tuple[str, ...]          # why it failed; empty when it passed

    def summary(self) -> str:
        if self.passed:
            return f"dlbench rules: {self.benchmark}: SUCCESS"
        return f"dlbench rules: {self.benchmark or 'unknown benchmark'}: FAILED: " + \
            "; ".join(self.reasons)


def parse(text: str) -> list[dict[str, Any]]:
    """The ``:::MLLOG`` events of a log, in order (other lines are skipped)."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if ":::MLLOG" not in line:
            continue
        try:
            ev = json.loads(line.split(":::MLLOG", 1)[1])
        except json.JSONDecodeError as exc:
            raise ValueError(f"line {n} is not an MLLOG event: {exc}") from None
        if not isinstance(ev, dict) or "key" not in ev:
            raise ValueError(f"line {n} is not an MLLOG event: no key")
        ev.setdefault("metadata", {})
        out.append(ev)
    return out


def check_text(text: str, rules_path: str | None = None) -> RulesVerdict:
    """Check one log's text against the rules."""
    try:
        events = parse(text)
    except ValueError as exc:
        return RulesVerdict(False, None, (str(exc),))
    bad: list[str] = []
    first: dict[str, dict] = {}
    for ev in events:
        first.setdefault(ev["key"], ev)
    counts: dict[str, int] = {}
    for ev in events:
        counts[ev["key"]] = counts.get(ev["key"], 0) + 1
    for key in ONCE:
        if counts.get(key, 0) != 1:
            bad.append(f"{key} appears {counts.get(key, 0)} times, not once")
    name = first.get("submission_benchmark", {}).get("value")
    bench = recipe.benchmarks(rules_path).get(name) if isinstance(name, str) else None
    if bench is None:
        bad.append(f"benchmark {name!r} is not defined by the rules (they define "
                   f"{', '.join(sorted(recipe.benchmarks(rules_path)))})")
        return RulesVerdict(False, name, tuple(bad))

    batch = first.get("global_batch_size", {}).get("value")
    if not (isinstance(batch, int) and batch >= 1):
        bad.append(f"global_batch_size {batch!r} is not a positive integer")
        batch = 1
    target = first.get("target_accuracy", {}).get("value")
    if not (isinstance(target, (int, float)) and math.isclose(target, bench.target_accuracy,
                                                             rel_tol=1e-9)):
        bad.append(f"target_accuracy {target!r} is not the rules' {bench.target_accuracy:g}")
    for key, spec in bench.hyperparameters.items():
        if counts.get(key, 0) != 1:
            bad.append(f"{key} appears {counts.get(key, 0)} times, not once")
            continue
        value = first[key].get("value")
        if not recipe.allows(spec, value, batch):
            want = recipe.resolve(spec, batch)
            bad.append(f"{key} {value!r} is not the rules' "
                       f"{want if want is not None else spec} at global batch {batch}")

    bad += _structure(events, bench)
    return RulesVerdict(not bad, name, tuple(bad))


def _structure(events: list[dict], bench: recipe.Benchmark) -> list[str]:
    """Order, epochs and evaluations, the cap and the end, against the rules' target."""
    bad: list[str] = []
    pos = {}
    for i, ev in enumerate(events):
        pos.setdefault(ev["key"], i)
    order = ("init_start", "init_stop", "run_start", "run_stop")
    if all(k in pos for k in order) and not (
            pos["init_start"] < pos["init_stop"] < pos["run_start"] < pos["run_stop"]):
        bad.append("init_start, init_stop, run_start and run_stop are out of order")
    epoch = 0
    evaluated: list[int] = []
    last_acc: float | None = None
    in_epoch = in_eval = False
    for ev in events:
        key, meta = ev["key"], ev.get("metadata") or {}
        num = meta.get("epoch_num")
        if key == "epoch_start":
            if in_epoch or in_eval:
                bad.append(f"epoch {num} starts inside an epoch or an evaluation")
            if num != epoch + 1:
                bad.append(f"epoch_start {num} follows epoch {epoch}")
            elif evaluated[-1:] != [epoch] and epoch > 0:
                bad.append(f"epoch {epoch} was not evaluated before epoch {num}")
            epoch, in_epoch = (num if isinstance(num, int) else epoch + 1), True
        elif key == "epoch_stop":
            if not in_epoch or num != epoch:
                bad.append(f"epoch_stop {num} does not close epoch {epoch}")
            in_epoch = False
        elif key == "eval_start":
            if in_epoch or num != epoch:
                bad.append(f"eval_start {num} is not after epoch {epoch}")
            in_eval = True
        elif key == "eval_accuracy":
            v = ev.get("value")
            if not in_eval or num != epoch or not isinstance(v, (int, float)) \
                    or not 0 <= v <= 1:
                bad.append(f"eval_accuracy {v!r} of epoch {num} is out of place or range")
            else:
                if evaluated[-1:] != [epoch]:
                    evaluated.append(epoch)
                last_acc = float(v)
        elif key == "eval_stop":
            in_eval = False
    if epoch == 0:
        bad.append("no epoch was trained")
    if evaluated != list(range(1, epoch + 1)):
        missing = sorted(set(range(1, epoch + 1)) - set(evaluated))
        if missing:
            bad.append(f"epochs {', '.join(map(str, missing))} were not evaluated")
    if epoch > bench.max_epochs:
        bad.append(f"{epoch} epochs, over the rules' cap of {bench.max_epochs}")
    stop = [ev for ev in events if ev["key"] == "run_stop"]
    start = [ev for ev in events if ev["key"] == "run_start"]
    if stop:
        status = (stop[-1].get("metadata") or {}).get("status")
        if status != "success":
            bad.append(f"run_stop status is {status!r}, not 'success'")
        if start and stop[-1].get("time_ms", 0) < start[0].get("time_ms", 0):
            bad.append("run_stop is dated before run_start")
        if in_epoch or in_eval:
            bad.append("run_stop inside an epoch or an evaluation")
    if last_acc is None or last_acc < bench.target_accuracy:
        bad.append(f"the last evaluation ({last_acc if last_acc is not None else 'none'}) is "
                   f"below the rules' target {bench.target_accuracy:g}")
    return bad


# -- MLPerf's checker -------------------------------------------------------------------------
def mlperf_rules_yaml(rules_path: str | None = None) -> str:
    """The rules file for MLPerf's compliance checker (``rules/dlbench_train.yaml``): the same
    rules as :func:`check_text`, in MLPerf's rule format, the benchmark table embedded. The
    shipped file is this text (a test keeps them equal)."""
    table = {name: {"target": b.target_accuracy, "max_epochs": b.max_epochs,
                    "hp": dict(b.hyperparameters)}
             for name, b in sorted(recipe.benchmarks(rules_path).items())}
    hp_keys = sorted({k for b in table.values() for k in b["hp"]})
    lines = [_YAML_HEAD.rstrip("\n"),
             "- BEGIN:",
             "    CODE: |",
             # MLPerf's checker prints the state s as JSON beside every failed CHECK, so s holds
             # plain data only (a function or a set in it crashes the checker with a TypeError
             # instead of a FAILED verdict): the benchmark table and the helpers are globals.
             "        global benchmarks, resolve, allows, is_number",
             f"        benchmarks = {table!r}",
             _HELPERS.rstrip("\n"),
             "        s.update({",
             "            'bench': None, 'batch': None, 'seen': [],",
             "            'init_started': False, 'init_stopped': False, 'run_started': False,",
             "            'run_stopped': False, 'in_epoch': False, 'in_eval': False,",
             "            'epoch': 0, 'evals': 0, 'last_accuracy': None, 'status': None,",
             "            'run_start_ms': None, 'run_stop_ms': None, 'last_eval_stop_ms': None,",
             "        })",
             "",
             _YAML_KEYS.rstrip("\n")]
    for key in hp_keys:
        lines += ["",
                  "- KEY:",
                  f"    NAME:  {key}",
                  "    REQ:   EXACTLY_ONE",
                  f"    CHECK: \" s['bench'] is not None and ('{key}' not in s['bench']['hp'] or "
                  f"allows(s['bench']['hp']['{key}'], v['value'], s['batch'])) \"",
                  f"    POST:  \" s['seen'].append('{key}') \""]
    lines += ["", _YAML_END.rstrip("\n"), ""]
    return "\n".join(lines)


def rules_version(yaml_path: str | None = None) -> str:
    """Which rules a verdict was reached under: dlbench's version (its own checker's code) and a
    short SHA-256 of the rules YAML's bytes (the benchmark table and MLPerf's rule file, which
    embeds it). A stored verdict carries it, so a later reader can tell whether it was reached
    under today's rules."""
    import hashlib
    from importlib import resources

    from dlbench import __version__

    path = yaml_path or str(resources.files("dlbench.training") / "rules" / "dlbench_train.yaml")
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:12]
    return f"dlbench {__version__}, rules sha256:{digest}"


# recipe.resolve and recipe.allows, for the YAML: a spec's value at the logged global batch
# (None: any value of a range or list), and whether a logged value meets it. Defined in BEGIN
# as globals of MLPerf's checker (see mlperf_rules_yaml).
_HELPERS = """\
        def resolve(sp, b):
            if not isinstance(sp, dict):
                return sp
            if 'linear_in_global_batch' in sp:
                r = sp['linear_in_global_batch']
                return r['value'] * b / r['per']
            if 'sqrt_in_global_batch' in sp:
                r = sp['sqrt_in_global_batch']
                return r['value'] * math.sqrt(b / r['per'])
            if 'by_global_batch' in sp:
                table = sorted((int(k), x) for k, x in sp['by_global_batch'].items())
                below = [x for k, x in table if k <= b]
                return below[-1] if below else table[0][1]
            return None
        def allows(sp, x, b):
            if isinstance(sp, dict) and 'range' in sp:
                return is_number(x) and sp['range'][0] <= x <= sp['range'][1]
            if isinstance(sp, dict) and 'one_of' in sp:
                return x in sp['one_of']
            w = resolve(sp, b)
            if w is None or b is None:
                return False
            if isinstance(w, (bool, str)) or isinstance(x, bool):
                return type(x) is type(w) and x == w
            return is_number(x) and math.isclose(x, w, rel_tol=1e-6, abs_tol=1e-12)
        def is_number(x):
            return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
"""

_YAML_HEAD = """\
# dlbench's rules for the MLPerf logs that `dlbench train` writes, in the format of MLPerf's own
# rule files. GENERATED from rules/benchmarks.json by
# dlbench.training.compliance.mlperf_rules_yaml(): edit the JSON, then regenerate this file
#   python -c "from dlbench.training.compliance import mlperf_rules_yaml as y; print(y(), end='')" \\
#       > src/dlbench/training/rules/dlbench_train.yaml
# Check a log with MLPerf's checker:
#   python -m mlperf_logging.compliance_checker --usage training --ruleset 6.1.0 \\
#       --config PATH/TO/dlbench_train.yaml RUN.log
# The checker reads every ':::MLLOG' line in order; for each KEY below it evaluates CHECK with
# v = the line's {value, metadata} and s = the state set up in BEGIN, then runs POST; REQ counts
# the key's occurrences; END checks the whole run. Keys not listed here are allowed. s holds
# plain data only, since the checker prints it as JSON beside a failed CHECK; the benchmark
# table and the helper functions are globals defined in BEGIN.
#
# A log passes when it names a benchmark of the table below, states the benchmark's target and
# every hyperparameter it defines, each as the table gives it at the logged global batch, is
# well formed (one init before one run, epochs numbered 1, 2, ... each followed by its
# evaluation, one seed and batch size), trains no more epochs than the cap, and stopped with
# 'success' after a last evaluation that reached the table's target (not the log's).
"""

_YAML_KEYS = """\
- KEY:
    NAME:  submission_benchmark
    REQ:   EXACTLY_ONE
    CHECK: " v['value'] in benchmarks "
    POST:  " s['bench'] = benchmarks[v['value']] "

- KEY:
    NAME:  submission_platform
    REQ:   EXACTLY_ONE
    CHECK: " v['value'] != '' "

- KEY:
    NAME:  init_start
    REQ:   EXACTLY_ONE
    CHECK:
        - " not s['init_stopped'] "
        - " not s['run_started'] "
    POST:  " s['init_started'] = True "

- KEY:
    NAME:  init_stop
    REQ:   EXACTLY_ONE
    CHECK:
        - " s['init_started'] "
        - " not s['run_started'] "
    POST:  " s['init_stopped'] = True "

- KEY:
    NAME:  seed
    REQ:   EXACTLY_ONE
    CHECK: " is_integer(v['value']) "

- KEY:
    NAME:  global_batch_size
    REQ:   EXACTLY_ONE
    CHECK: " is_integer(v['value']) and v['value'] >= 1 "
    POST:  " s['batch'] = v['value'] "

- KEY:
    NAME:  train_samples
    REQ:   EXACTLY_ONE
    CHECK: " is_integer(v['value']) and v['value'] >= 1 "

- KEY:
    NAME:  eval_samples
    REQ:   EXACTLY_ONE
    CHECK: " is_integer(v['value']) and v['value'] >= 1 "

- KEY:
    NAME:  target_accuracy
    REQ:   EXACTLY_ONE
    CHECK: " s['bench'] is not None and math.isclose(v['value'], s['bench']['target'], rel_tol=1e-9) "

- KEY:
    NAME:  run_start
    REQ:   EXACTLY_ONE
    CHECK: " s['init_stopped'] "
    POST:  " s['run_started'] = True; s['run_start_ms'] = ll.timestamp "

- KEY:
    NAME:  epoch_start
    REQ:   AT_LEAST_ONE
    CHECK:
        - " s['run_started'] and not s['run_stopped'] "
        - " not s['in_epoch'] and not s['in_eval'] "
        - " v['metadata']['epoch_num'] == s['epoch'] + 1 "
        - " s['evals'] == s['epoch'] "
        - " v['metadata']['epoch_num'] <= s['bench']['max_epochs'] "
    POST:  " s['in_epoch'] = True; s['epoch'] = v['metadata']['epoch_num'] "

- KEY:
    NAME:  epoch_stop
    REQ:   AT_LEAST_ONE
    CHECK:
        - " s['in_epoch'] "
        - " v['metadata']['epoch_num'] == s['epoch'] "
        - " v['metadata']['samples_count'] >= 1 "
    POST:  " s['in_epoch'] = False "

- KEY:
    NAME:  eval_start
    REQ:   AT_LEAST_ONE
    CHECK:
        - " s['run_started'] and not s['run_stopped'] "
        - " not s['in_epoch'] and not s['in_eval'] "
        - " v['metadata']['epoch_num'] == s['epoch'] "
    POST:  " s['in_eval'] = True "

- KEY:
    NAME:  eval_accuracy
    REQ:   AT_LEAST_ONE
    CHECK:
        - " s['in_eval'] "
        - " v['metadata']['epoch_num'] == s['epoch'] "
        - " 0 <= v['value'] <= 1 "
    POST:  " s['last_accuracy'] = v['value']; s['evals'] += 1 "

- KEY:
    NAME:  eval_stop
    REQ:   AT_LEAST_ONE
    CHECK:
        - " s['in_eval'] "
        - " v['metadata']['epoch_num'] == s['epoch'] "
    POST:  " s['in_eval'] = False; s['last_eval_stop_ms'] = ll.timestamp "

- KEY:
    NAME:  run_stop
    REQ:   EXACTLY_ONE
    CHECK:
        - " s['run_started'] "
        - " not s['in_epoch'] and not s['in_eval'] "
        - " v['metadata']['status'] in ['success', 'aborted'] "
        - " ll.timestamp >= s['run_start_ms'] "
    POST:  " s['run_stopped'] = True; s['status'] = v['metadata']['status']; s['run_stop_ms'] = ll.timestamp "
"""

_YAML_END = """\
- END:
    CHECK:
        - " s['run_stopped'] "
        - " s['status'] == 'success' "
        - " s['bench'] is not None and set(s['bench']['hp']) <= set(s['seen']) "
        - " s['evals'] >= 1 and s['evals'] == s['epoch'] and s['last_accuracy'] is not None "
        - " s['last_accuracy'] >= s['bench']['target'] "
        - " s['last_eval_stop_ms'] is not None and s['run_stop_ms'] >= s['last_eval_stop_ms'] "
"""

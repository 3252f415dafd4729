"""The quick paths a large export takes give exactly what the plain ones gave: the JSON encoder
(``json.dumps(o, indent=1)``, byte for byte), the records' ``asdict`` (``dataclasses.asdict``,
value for value), the summaries kept for the last records asked about, and a CSV row and a JSON
document of every kind of record, written the plain way beside (benchmarks/store_scale.py
times them; docs/reliability.md#large-stores has the figures)."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from collections import OrderedDict, namedtuple
from enum import IntEnum

import pytest

from dlbench.measure import stats
from dlbench.records import RECORD_TYPES
from dlbench.records import base as records_base
from dlbench.report import export
from dlbench.store import Store

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies



class Level(IntEnum):
    HIGH = 3


Pair = namedtuple("Pair", "a b")

SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
    st.text(), st.sampled_from([Level.HIGH, "a,\n b", "\u2028\x00\"\\", -0.0, 2 ** 70]))
KEYS = st.one_of(st.text(), st.integers(), st.floats(), st.booleans(), st.none(),
                 st.sampled_from([Level.HIGH]))
JSONISH = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner), st.lists(inner).map(tuple), st.builds(Pair, inner, inner),
    st.dictionaries(KEYS, inner), st.dictionaries(st.text(), inner).map(OrderedDict)),
    max_leaves=30)


#: Values chosen for what the encoder treats apart, each checked on every run: every scalar
#: type and the strategies' odd values, a subclass of int, str-less keys of every kind, tuples
#: and namedtuples, an OrderedDict, empty and nested containers, lists of scalars alone (one
#: call of the C encoder) and mixed with containers (lines completed), deep nesting.
CHOSEN = [
    None, True, 0, -7, 2 ** 70, 0.1, -0.0, math.nan, math.inf, -math.inf, 1e300, "",
    "a,\n b", "\u2028\x00\"\\", "\u00e9\U0001f600", Level.HIGH,
    [], (), {}, [[]], [{}], {"": {}}, [1, 2.5, "x", None, True], (1, [2, (3,)]),
    Pair(1, [2, {"k": Pair(None, ())}]), Pair([], {}),
    {1: "int", 2.5: "float", True: "bool", None: "none", Level.HIGH: "enum", "s": "str"},
    {-0.0: 1, math.inf: 2, math.nan: 3},
    OrderedDict([("b", [1, {"c": (2, 3)}]), ("a", OrderedDict())]),
    {"samples": [0.1, 0.2, 0.30000000000000004], "nested": [[1, 2], [3, [4, [5, {}]]]]},
    [[[[[[[[["deep"]]]]]]]]], [{"a": [1, {"b": [2, {"c": []}]}]}, (), "tail"],
]


@pytest.mark.parametrize("value", CHOSEN, ids=range(len(CHOSEN)))
def test_the_encoder_writes_what_json_dumps_writes_for_chosen_values(value):
    assert export.dumps_indent1(value) == json.dumps(value, indent=1)


# 200 generated values beside CHOSEN's, checked on every run: the generated ones add the
# shapes no list names (what CHOSEN covers needs no 600 draws, each of them costly to make).
@pytest.mark.slow
@hypothesis.settings(max_examples=200, deadline=None, derandomize=True)
@hypothesis.given(JSONISH)
def test_the_encoder_writes_what_json_dumps_with_indent_1_writes(value):
    assert export.dumps_indent1(value) == json.dumps(value, indent=1)


def test_the_encoder_refuses_what_json_dumps_refuses():
    for bad in (object(), {(1, 2): 3}, [1, {"k": {1, 2}}]):
        with pytest.raises(TypeError) as want:
            json.dumps(bad, indent=1)
        with pytest.raises(TypeError) as got:
            export.dumps_indent1(bad)
        assert str(got.value) == str(want.value)


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> list:
    """A record of every kind, failures included: those of tests/test_export.py's store."""
    import test_export as te
    tmp = tmp_path_factory.mktemp("fast")
    with Store(te.OLD_STORE, readonly=True) as store:
        recs = store.results()
    for name, ids in te.EXTRA.items():
        with Store(te._plain(name, tmp)) as src:
            recs += ([r for r in src.results(kind=ids[0][1:])][:1] if ids[0].startswith("*")
                     else [src.get(i) for i in ids])
    h100 = next(r for r in recs if r.kind == "throughput" and r.ok
                and (r.env.get("gpus") or [{}])[0].get("uuid"))
    recs += [te.generate_record(env=h100.env, run_id=h100.run_id),
             te.failed_generate(env=h100.env, run_id=h100.run_id),
             *te.every_column_records(env=h100.env, run_id=h100.run_id)]
    assert {r.kind for r in recs} == set(RECORD_TYPES)
    return recs


def test_asdict_gives_what_dataclasses_asdict_gives(records):
    for r in records:
        want = dataclasses.asdict(r)
        got = records_base.asdict(r)
        assert got == want and json.dumps(got) == json.dumps(want)
        assert records_base.asdict(r.config) == dataclasses.asdict(r.config)
    probe = Pair([1, [2]], {"k": (3, {"z": None})})
    assert records_base.asdict(probe) == probe and type(records_base.asdict(probe)) is Pair
    data = {"l": [1.5, "x"]}
    copied = records_base.asdict(data)
    assert copied == data and copied["l"] is not data["l"]  # a copy: the record stays as it was


def _plain_csv_row(r) -> str:
    """A record's CSV row written the plain way: every column asked for in turn."""
    s = export._summary(r)
    cells = []
    for col in export.columns(r.kind):
        if col.group == "result" and not r.ok and col.name != "unit":
            v = None
        else:
            try:
                v = col.get(r, s)
            except (AttributeError, KeyError, TypeError, ValueError, ZeroDivisionError):
                v = None
        cells.append("" if v is None or isinstance(v, float) and not math.isfinite(v)
                     else export.csv_text(v) if isinstance(v, str) else v)
    one = io.StringIO()
    csv.writer(one, lineterminator="\r\n").writerow(cells)
    return one.getvalue()[:-2] + "\n"


def test_every_kinds_rows_and_documents_are_those_of_the_plain_way(records):
    for r in records:
        assert export.csv_row(r) == _plain_csv_row(r), r.kind
        doc = json.loads(export.to_json([r]))[0]
        assert export.to_json([r]) == json.dumps([doc], indent=1)
        row = export.flat_row(r)
        assert doc["figures"] == json.loads(json.dumps(
            {c.name: row[c.name] for c in export.columns(r.kind) if c.group == "result"}))


def test_a_kept_summary_is_only_ever_that_of_the_same_step_times():
    ints, floats = (1, 2, 3, 5, 8), (1.0, 2.0, 3.0, 5.0, 8.0)
    a = stats.summarize(ints, 2)
    b = stats.summarize(floats, 2)      # equal values, another tuple: its own summary
    assert a is not b and a == stats._summarize(ints, 2, 0.95)
    assert stats.summarize(ints, 2) is a  # the same tuple again: kept
    assert stats.summarize(ints, 2.0) == stats._summarize(ints, 2.0, 0.95)
    assert stats.summarize(ints, 2, 0.9) == stats._summarize(ints, 2, 0.9)
    times = [1.0, 2.0, 3.0]
    first = stats.summarize(times, 1)
    times.append(50.0)                  # a list can change: never kept
    assert stats.summarize(times, 1).steps == 4 and first.steps == 3
    ranks = ((1.0, 2.0, 3.0), (2.0, 2.0, 2.5))
    assert stats.aggregate(ranks, (4, 4)) == stats._aggregate(ranks, (4, 4), 0.95)
    assert stats.aggregate(ranks, (4, 4)) is stats.aggregate(ranks, (4, 4))


# A plain document (a dict of string keys, JSON's own types within) is written by its shape's
# template: its scalars in one call of the C encoder, its layout kept per shape. Keys and
# strings holding "%" or control characters must come out as json.dumps writes them, at any
# indent, and a kept template must serve a document of that shape whatever its scalars and the
# lengths of its lists of scalars.
PLAIN_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
    st.text(), st.sampled_from(["%s", "%", "%(x)s", "\x00", "a\x00b", "\n", -0.0, 2 ** 70]))
PLAIN_KEYS = st.one_of(st.text(), st.sampled_from(["%", "%s", "%%d", "\x00", "k\n"]))
PLAIN = st.recursive(PLAIN_SCALARS, lambda inner: st.one_of(
    st.lists(inner), st.lists(inner).map(tuple), st.dictionaries(PLAIN_KEYS, inner)),
    max_leaves=40)


def _varied(value):
    """``value`` of the same shape with other scalars, each list of scalars one longer."""
    if isinstance(value, dict):
        return {k: _varied(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        out = [_varied(v) for v in value]
        if value and all(type(v) in (str, int, float, bool, type(None)) for v in value):
            out.append(0.1)
        return out
    if type(value) is bool:
        return not value
    if type(value) in (int, float):
        return value * 3 + 1
    if type(value) is str:
        return value + "%\x01"
    return value


def _check_by_template(doc: dict, level: int) -> None:
    for value in (doc, _varied(doc)):
        want = json.dumps(value, indent=1).replace("\n", "\n" + " " * level)
        assert export.dumps_indent1(value, level) == want


#: Plain documents chosen for what a template must get right, each checked at every indent on
#: every run: keys and strings holding "%" and control characters (PLAIN's odd values), every
#: scalar of JSON, empty containers, lists of scalars (which _varied makes one longer), tuples,
#: dicts and lists within lists, and a record's shape.
PLAIN_CHOSEN = [
    {},
    {"": None, "%": "%", "%s": "%s", "%%d": "%(x)s", "\x00": "\x00", "k\n": "a\x00b",
     "\u2028": "\n", "\u00e9": "\U0001f600"},
    {"t": True, "f": False, "n": None, "i": -3, "big": 2 ** 70, "x": 0.1, "z": -0.0,
     "nan": math.nan, "inf": math.inf, "-inf": -math.inf},
    {"empty": [], "tuple": (), "dict": {}, "deep": {"a": {"b": {"c": {}}}}},
    {"samples": [0.1, 0.2, 0.3], "one": [7], "mixed": [1, "%s", None, 2.5, True],
     "tuple": (1.5, "%"), "nested": [[1, 2], [], [[3]], {"k": [4]}]},
    {"rows": [{"%": 1, "b": [1, 2]}, {"%": 2, "b": []}], "%s": {"\x00": [{"x": ()}]}},
    {"kind": "throughput", "config": {"model": "tiny_cnn", "batch_size": 4, "stop": {
        "min_steps": 5, "max_seconds": 1.0}}, "step_times_s": [0.01, 0.011, 0.0105],
     "env": {"gpus": [{"name": "H100", "uuid": "GPU-%s"}], "packages": {"torch": "2.9"}},
     "error": None, "ok": True},
]


@pytest.mark.parametrize("level", range(4))
@pytest.mark.parametrize("doc", PLAIN_CHOSEN, ids=range(len(PLAIN_CHOSEN)))
def test_a_chosen_plain_document_by_its_template_is_what_json_dumps_writes(doc, level):
    _check_by_template(doc, level)


# 100 generated documents beside PLAIN_CHOSEN's, checked on every run: the generated ones add
# the shapes no list names (what PLAIN_CHOSEN covers needs no 400 draws, and a document of
# dicts of up to 40 leaves each takes about 40 ms to generate).
@pytest.mark.slow
@hypothesis.settings(max_examples=100, deadline=None, derandomize=True)
@hypothesis.given(st.dictionaries(PLAIN_KEYS, PLAIN), st.integers(0, 3))
def test_a_plain_document_by_its_template_is_what_json_dumps_writes(doc, level):
    _check_by_template(doc, level)


def test_every_kinds_document_is_written_by_a_kept_template(records):
    export._TEMPLATES.clear()
    first = [export.json_element(r) for r in records]
    kept = len(export._TEMPLATES)
    assert 0 < kept <= len(records)
    for r, text in zip(records, first):
        assert export.json_element(r) == text == export.to_json([r])[2:-2], r.kind
        doc = json.loads(text)
        assert text == " " + json.dumps(doc, indent=1).replace("\n", "\n ")
    assert len(export._TEMPLATES) == kept  # met again: nothing new made

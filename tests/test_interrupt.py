"""The message of an interrupted command says where it was stopped.

A run ended by a time limit (``timeout -s INT``) with ``-q`` prints nothing but this line, so
the line must tell a store lock from a probe's subprocess wait from a measurement.
"""

from __future__ import annotations

import re

import pytest

from dlbench import cli
from dlbench.commands import common


def _raise_interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def test_innermost_frame_outside_dlbench_is_reported_as_the_wait():
    try:
        _raise_interrupt()
    except KeyboardInterrupt as exc:
        text = cli.interrupted_at(exc.__traceback__)
    assert text.startswith("waiting in _raise_interrupt (test_interrupt.py:")


def test_dlbench_frame_and_the_library_wait_below_it(monkeypatch, tmp_path):
    from dlbench import store
    monkeypatch.setattr(store.sqlite3, "connect", _raise_interrupt)
    with pytest.raises(KeyboardInterrupt) as info:
        store.Store(tmp_path / "x.db")
    text = cli.interrupted_at(info.value.__traceback__)
    # the innermost dlbench frame: the store's open, where it connects
    assert text.startswith("in _open_for_writing (store.py:"), text
    assert text.endswith(")") and ", waiting in _raise_interrupt (test_interrupt.py:" in text


def test_main_prints_where_and_exits_130(monkeypatch, tmp_path, capsys):
    from dlbench import store
    db = tmp_path / "x.db"
    store.Store(db).close()
    monkeypatch.setattr(store.sqlite3, "connect", _raise_interrupt)
    code = cli.main(["results", "ls", "--db", str(db)])
    assert code == common.EXIT_INTERRUPTED == 130
    err = capsys.readouterr().err
    line = " ".join(err.split())
    # the store's frame that opened the connection (which method does depends on the store's
    # state), then the library call that was waiting
    pattern = r"error: interrupted in \w+ \(store\.py:\d+\), waiting in _raise_interrupt"
    assert re.search(pattern, line), line

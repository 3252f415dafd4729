"""The exports committed beside each campaign store are what dlbench writes from that store
today: a change to a figure, an interval or a flag that leaves them stale fails here (rewrite
them with ``python3 tools/committed_exports.py --write``)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from fakes.cli import script

ce = script("tools/committed_exports.py")

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ce.folders(ROOT / "results")


def test_every_campaign_with_a_store_has_its_exports_checked():
    names = {str(f.relative_to(ROOT / "results")) for f in FOLDERS}
    assert {"pt2.14-cpu", "pt2.11-cu130-h100-80gb-hbm3", "pt2.11-cu130-2x-h200",
            "pt2.11-cu130-h200/generate"} <= names


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_committed_exports_match_their_store(folder, tmp_path):
    drifted = ce.drift(folder, tmp_path)
    assert not drifted, (f"{folder}: {drifted}; rewrite with "
                         "`python3 tools/committed_exports.py --write`")


def test_a_hand_edited_export_is_found(tmp_path):
    """The check can fail: one changed figure in a copy of a folder is reported."""
    src = ROOT / "results" / "pt2.14-cpu"
    folder = tmp_path / "copy"
    folder.mkdir()
    for p in list(src.glob("all*")) + [src / ce.STORE]:
        (folder / p.name).write_bytes(p.read_bytes())
    assert ce.drift(folder, tmp_path) == []
    csv = next(folder.glob("all*.csv"))
    lines = csv.read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace(",", ",9", 1)
    csv.write_text("".join(lines))
    (folder / "all-extra.csv").write_text("x\n")
    assert ce.drift(folder, tmp_path) == [f"{csv.name}: differs",
                                          "all-extra.csv: stale (no longer written)"]
    ce.write(folder, tmp_path)
    assert ce.drift(folder, tmp_path) == [] and not (folder / "all-extra.csv").exists()


def test_a_gzipped_export_is_compared_by_what_it_holds(tmp_path):
    """The check compares a .gz export uncompressed: another writer's header passes, one
    changed figure inside fails (and --write puts the file back)."""
    src = ROOT / "results" / "pt2.11-cu130-2x-h200" / "comm-stream" / "probe"  # a small store
    folder = tmp_path / "copy"
    folder.mkdir()
    for p in list(src.glob("all*")) + [src / ce.STORE]:
        (folder / p.name).write_bytes(p.read_bytes())
    gz = folder / "all.json.gz"
    held = gzip.decompress(gz.read_bytes())
    gz.write_bytes(gzip.compress(held, compresslevel=1, mtime=12345))  # another header
    assert ce.drift(folder, tmp_path) == []
    gz.write_bytes(gzip.compress(held.replace(b"1", b"2", 1)))
    assert ce.drift(folder, tmp_path) == ["all.json.gz: differs"]
    ce.write(folder, tmp_path)
    assert gz.read_bytes() == ce.expected(folder, tmp_path)["all.json.gz"]
    assert ce.drift(folder, tmp_path) == []


def test_the_gzipped_json_is_the_same_bytes_for_the_same_store(tmp_path):
    folder = ROOT / "results" / "pt2.11-cu130-2x-h200"
    a = ce.expected(folder, tmp_path)["all.json.gz"]
    b = ce.expected(folder, tmp_path)["all.json.gz"]
    assert a == b and gzip.decompress(a).startswith(b"[")

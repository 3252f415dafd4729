"""The reference articles' former ids: one module knows them (:mod:`dlbench.records.compat`),
every reader of an old store or an old command line goes through it, and the keys of the
configs stored under them did not move."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from dlbench import reference as ref
from dlbench.records import ThroughputConfig, compat
from dlbench.store import Store
from dlbench.suites import SUITES, canonical
from dlbench.workloads.gpu_fit import SOURCE_IDS

ROOT = Path(__file__).resolve().parents[1]
OLD_ID = re.compile(r"seed0\d\d")
#: How the source and the docs named an article by its place in the project, not by what it is.
BY_NUMBER = re.compile(r"seed0\d\d|\bseed[ -](?:article|style|stud(?:y|ies)|documents?)\b",
                       re.I)
#: The one file that may spell an old id.
COMPAT = ROOT / "src" / "dlbench" / "records" / "compat.py"
#: A page's generated tables: tools/headline.py renders them from the committed stores (a run's
#: stored tag included) and tests/test_readme_claims.py holds them to that render, word for word.
#: tools/ is not scanned yet, so neither is its output.
GENERATED = re.compile(r"<!-- headline:.*?<!-- /headline:[\w-]+ -->", re.S)
STORES = sorted(p.parent.name for p in (ROOT / "results").glob("*/dlbench.db.gz"))


# -- the mapping ---------------------------------------------------------------------------------
def test_every_article_has_a_name_that_says_what_it_is():
    assert set(compat.ARTICLES) == {f"seed00{i}" for i in range(5)}
    names = list(compat.ARTICLES.values())
    assert len(set(names)) == 5
    assert all(re.fullmatch(r"[a-z0-9][a-z0-9.-]*", n) and not OLD_ID.search(n) for n in names)


def test_the_shipped_tables_are_keyed_by_the_articles_names():
    """The reference data's source ids are the articles' ids, and ``gpus --source`` shows and
    takes exactly those."""
    shipped = set(ref.sources())
    assert shipped == {r.source for r in ref.reference_results()}
    assert shipped == {"tf-cnn-benchmarks", "ms-per-batch", "cifar10-frameworks"}
    assert shipped <= set(compat.ARTICLES.values())
    assert SOURCE_IDS == {name: name for name in shipped}
    assert {compat.current(compat.ARTICLES, old) for old in ("seed000", "seed002", "seed003")} \
        == shipped


def test_old_names_map_to_todays_and_others_pass_through():
    assert compat.current(compat.SUITES, "seed000") == "classic-cnn"
    assert compat.current(compat.SUITES, "seed002") == "ms-per-batch"
    assert compat.current(compat.METHODS, "seed002") == "fwd-bwd"
    assert compat.current(compat.FLAGS, "--seed004") == "--ps-cluster"
    assert compat.current(compat.ARTICLES, "seed004") == "slow-networks"
    # today's names, and names that never had another, come back as they are
    for table in (compat.ARTICLES, compat.SUITES, compat.METHODS, compat.FLAGS):
        for new in table.values():
            assert compat.current(table, new) == new
    assert compat.current(compat.SUITES, "tuned-seed002") == "tuned-seed002"  # a free tag


def test_former_and_spellings_go_back_from_todays_names():
    assert compat.former(compat.SUITES, "classic-cnn") == ("seed000",)
    assert compat.former(compat.SUITES, "smoke") == ()
    assert compat.former(compat.FLAGS, "--ps-cluster") == ("--seed004",)
    assert compat.spellings(compat.SUITES, "ms-per-batch") == ("ms-per-batch", "seed002")
    assert compat.spellings(compat.SUITES, "seed002") == ("ms-per-batch", "seed002")
    assert compat.spellings(compat.SUITES, "cpu") == ("cpu",)


def test_the_suites_and_methods_it_maps_to_exist():
    from dlbench.config import METHODS
    assert set(compat.SUITES.values()) <= set(SUITES)
    assert set(compat.METHODS.values()) <= set(METHODS)
    assert all(canonical(old) == new for old, new in compat.SUITES.items())


def test_the_tables_cannot_be_changed_by_a_caller():
    with pytest.raises(TypeError):
        compat.SUITES["seed000"] = "x"  # type: ignore[index]


def test_a_method_keys_under_its_first_stored_name():
    assert compat.method_in_key("fwd-bwd") == "seed002"
    assert compat.method_in_key("standard") == "standard"
    old = ThroughputConfig(model="tiny_mlp", batch_size=4, method="seed002")
    new = ThroughputConfig(model="tiny_mlp", batch_size=4, method="fwd-bwd")
    assert old == new and old.method == "fwd-bwd" and old.key() == new.key()
    assert new.key() != ThroughputConfig(model="tiny_mlp", batch_size=4).key()


# -- the committed stores: keys before (the stored column) and after (today's code) ---------------
@pytest.fixture(scope="module")
def unzipped(tmp_path_factory):
    """Each committed store, unzipped once into a temporary folder (the committed file stays as
    it is: opening a store may add columns to it)."""
    folder = tmp_path_factory.mktemp("stores")

    def open_copy(name: str) -> Path:
        target = folder / f"{name}.db"
        if not target.exists():
            with gzip.open(ROOT / "results" / name / "dlbench.db.gz", "rb") as src, \
                    open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
        return target
    return open_copy


@pytest.mark.parametrize("name", STORES)
def test_every_committed_record_keeps_its_stored_key(name, unzipped):
    """The key each record was stored under (the index column, written by the dlbench of its
    day) is the key today's code computes: --resume, ``compare`` and the pages' picks still
    match, old method names included."""
    path = unzipped(name)
    db = sqlite3.connect(path)
    stored = dict(db.execute("SELECT id, config_key FROM results"))
    with Store(path) as store:
        records = store.results()
    assert records and len(records) == len(stored)
    moved = [r.id for r in records if r.config.key() != stored[r.id]]
    assert not moved, f"{name}: {len(moved)} record(s) whose key moved, e.g. {moved[:3]}"


def test_the_h100_store_holds_old_methods_and_reads_them_under_todays(unzipped):
    """The single-H100 campaign measured ms per batch under the method's old name: its records
    read as fwd-bwd, keyed as stored, and a round trip through today's writer keeps both."""
    path = unzipped("pt2.11-cu130-h100-80gb-hbm3")
    db = sqlite3.connect(path)
    old = {rid: key for rid, key in db.execute(
        "SELECT id, config_key FROM results WHERE record_json LIKE '%\"method\": \"seed002\"%'")}
    assert len(old) >= 12   # the ms-per-batch suite's run alone has twelve
    with Store(path) as store:
        records = [store.get(rid) for rid in old]
    for r in records:
        base = getattr(r.config, "base", r.config)
        assert base.method == "fwd-bwd" and r.config.key() == old[r.id]
        again = type(r).from_dict(r.to_dict())
        assert '"seed002"' not in json.dumps(r.to_dict()) and again.config.key() == old[r.id]


# -- nobody else spells an old id ----------------------------------------------------------------
def _without_generated(text: str) -> str:
    """The page without its generated tables, each left as blank lines: line numbers hold."""
    return GENERATED.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def _scanned() -> list[Path]:
    src = [p for p in (ROOT / "src" / "dlbench").rglob("*")
           if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"]
    return src + sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]


def test_no_old_id_outside_compat():
    """An article, suite, method or flag is named by what it is: the source, the docs and the
    README never spell a former working number (or "the seed article"); compat alone does."""
    found = []
    for path in _scanned():
        if path == COMPAT:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if path.suffix == ".md":
            text = _without_generated(text)
        for n, line in enumerate(text.splitlines(), 1):
            if BY_NUMBER.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, "named by number, not by what it is:\n" + "\n".join(found)


def test_the_scan_would_see_one():
    assert COMPAT.exists() and OLD_ID.search(COMPAT.read_text())
    assert BY_NUMBER.search('SOURCE = "seed002"') and BY_NUMBER.search("the seed article")
    assert not BY_NUMBER.search("seeds converged; --seed 0; seed_0")
    page = "a\n<!-- headline:x generated -->\ntag seed000\n<!-- /headline:x -->\nb seed002"
    assert BY_NUMBER.findall(_without_generated(page)) == ["seed002"]
    assert _without_generated(page).splitlines()[4] == "b seed002"

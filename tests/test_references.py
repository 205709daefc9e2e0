"""The papers' keys: one list (mltcp.lab.common.references), docs/references.md equal to
it, and every key the code and configs cite is in it."""

from __future__ import annotations

from pathlib import Path

from mltcp.lab.cluster.papers import setups
from mltcp.lab.common import references

REPO = Path(__file__).resolve().parents[1]


def test_the_references_page_is_rendered_from_the_list() -> None:
    page = (REPO / "docs" / "references.md").read_text()
    assert page == references.markdown(), \
        "run: python -m mltcp.lab.common.references > docs/references.md"


def test_keys_are_unique_and_complete() -> None:
    keys = [r.key for r in references.REFERENCES]
    assert len(keys) == len(set(keys))
    for r in references.REFERENCES:
        assert r.title and r.authors and r.venue and 2000 < r.year < 2100, r.key


def test_every_paper_setup_cites_a_known_paper() -> None:
    for name in setups.names():
        assert setups.setup(name).paper in references.BY_KEY, name

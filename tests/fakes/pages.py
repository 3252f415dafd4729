"""Reading a campaign page's prose (its text without the generated tables) in the tests that
check the figures it quotes against their records."""

from __future__ import annotations

import re

_GENERATED = re.compile(r"<!-- headline:.*?<!-- /headline:[\w-]+ -->", re.S)


def prose(page: str) -> str:
    """The page without its generated tables, whitespace folded: the text a person wrote."""
    return " ".join(_GENERATED.sub("", page).split())


def assert_says(page: str, text: str) -> None:
    assert text in prose(page), f"the page no longer says {text!r}"

"""The term filter drops every Unicode Default_Ignorable_Code_Point before matching."""

from __future__ import annotations

import sys

import pytest

from marketplace.wordfilter.terms import (
    DEFAULT_IGNORABLE_RANGES,
    TermFilter,
    is_default_ignorable,
    normalize,
)

SHIPPED = TermFilter.from_sources()

# One code point of each kind the brief and DerivedCoreProperties.txt list, by name where it has
# one (reserved ones by number).
HANGUL_FILLERS = ["\u115f", "\u1160", "\u3164", "\uffa0"]
IGNORABLES = [
    "\u00ad",  # SOFT HYPHEN
    "\u034f",  # COMBINING GRAPHEME JOINER
    "\u061c",  # ARABIC LETTER MARK
    *HANGUL_FILLERS,
    "\u17b4",  # KHMER VOWEL INHERENT AQ
    "\u17b5",  # KHMER VOWEL INHERENT AA
    "\u180b",  # MONGOLIAN FREE VARIATION SELECTOR ONE
    "\u180e",  # MONGOLIAN VOWEL SEPARATOR
    "\u180f",  # MONGOLIAN FREE VARIATION SELECTOR FOUR
    "\u200b",  # ZERO WIDTH SPACE
    "\u200d",  # ZERO WIDTH JOINER
    "\u200e",  # LEFT-TO-RIGHT MARK
    "\u200f",  # RIGHT-TO-LEFT MARK
    "\u202a",  # LEFT-TO-RIGHT EMBEDDING
    "\u202c",  # POP DIRECTIONAL FORMATTING
    "\u2060",  # WORD JOINER
    "\u2065",  # reserved
    "\u2066",  # LEFT-TO-RIGHT ISOLATE
    "\u2069",  # POP DIRECTIONAL ISOLATE
    "\u206f",  # NOMINAL DIGIT SHAPES
    "\ufe00",  # VARIATION SELECTOR-1
    "\ufe0f",  # VARIATION SELECTOR-16
    "\ufeff",  # ZERO WIDTH NO-BREAK SPACE
    "\ufff0",  # reserved
    "\ufff8",  # reserved
    "\U0001bca0",  # SHORTHAND FORMAT LETTER OVERLAP
    "\U0001bca3",  # SHORTHAND FORMAT UP STEP
    "\U0001d173",  # MUSICAL SYMBOL BEGIN BEAM
    "\U0001d17a",  # MUSICAL SYMBOL END PHRASE
    "\U000e0000",  # reserved
    "\U000e0001",  # LANGUAGE TAG
    "\U000e0041",  # TAG LATIN CAPITAL LETTER A
    "\U000e0100",  # VARIATION SELECTOR-17
    "\U000e01ef",  # VARIATION SELECTOR-256
    "\U000e0fff",  # reserved
]


def test_the_table_is_unicodes_default_ignorable_property() -> None:
    # The regex module carries its own Unicode tables (a newer version than unicodedata's); the
    # property has not changed between them.
    regex = pytest.importorskip("regex")
    pattern = regex.compile(r"\p{Default_Ignorable_Code_Point}")
    expected = {code for code in range(sys.maxunicode + 1) if pattern.match(chr(code))}
    table = {code for low, high in DEFAULT_IGNORABLE_RANGES for code in range(low, high + 1)}
    assert table == expected
    assert all(is_default_ignorable(code) for code in expected)
    assert not is_default_ignorable(ord("a"))
    assert not is_default_ignorable(0x1161)  # HANGUL JUNGSEONG A, beside a filler


@pytest.mark.parametrize("char", IGNORABLES, ids=lambda c: f"U+{ord(c):04X}")
def test_an_ignorable_inside_a_multi_word_term_is_dropped(char: str) -> None:
    body = f"bad{char}word-can{char}ary"
    found = SHIPPED.match(body)
    assert found is not None and found.term == "badword-canary"


@pytest.mark.parametrize("char", IGNORABLES, ids=lambda c: f"U+{ord(c):04X}")
def test_an_ignorable_between_the_letters_of_a_word_is_dropped(char: str) -> None:
    found = SHIPPED.match(f"well s{char}h{char}i{char}t, then")
    assert found is not None and found.term == "shit"
    assert char not in normalize(f"x{char}y")


@pytest.mark.parametrize("filler", HANGUL_FILLERS, ids=lambda c: f"U+{ord(c):04X}")
def test_hangul_fillers_are_not_letters_to_the_filter(filler: str) -> None:
    # The fillers are letters (Lo) to unicodedata: before, "bad<filler>word" was one unknown word.
    found = SHIPPED.match(f"bad{filler}word-can{filler}ary")
    assert found is not None and found.term == "badword-canary"
    found = SHIPPED.match(f"{filler}fuck{filler}")
    assert found is not None and found.term == "fuck"
    assert normalize(f"bad{filler}word") == "badword"


def test_ignorables_do_not_make_innocent_text_match() -> None:
    assert SHIPPED.match("\u3164\u115f\u1160\uffa0") is None
    assert SHIPPED.match("한\u3164국어 \ufe0f👍 \U000e0067\U000e0062") is None
    assert SHIPPED.match("Scun\u200bthorpe") is None


def test_a_term_written_with_ignorables_matches_plain_text() -> None:
    term_filter = TermFilter.from_terms(["spam\u3164mer"])
    found = term_filter.match("a spammer here")
    assert found is not None and found.term == "spam\u3164mer"

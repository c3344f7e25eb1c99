"""The offensive-term filter: normalisation, obfuscations, whole words, term lists."""

from __future__ import annotations

import dataclasses
import pickle
import random
import string
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from marketplace.wordfilter.terms import (
    CANARY_TERM,
    CUSTOM_SOURCE,
    SHIPPED_SOURCE,
    TermFilter,
    TermListError,
    TermMatch,
    _keyed,
    _words,
    _words_one_by_one,
    load_terms_file,
    normalize,
    shipped_terms,
)

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = TermFilter.from_sources()


def matched(term_filter: TermFilter, body: str) -> str | None:
    found = term_filter.match(body)
    return None if found is None else found.term


# --- the canary -----------------------------------------------------------------------------


def test_the_canary_is_in_the_shipped_list() -> None:
    assert CANARY_TERM == "badword-canary"
    assert CANARY_TERM in shipped_terms()
    assert TermMatch(CANARY_TERM, SHIPPED_SOURCE) in SHIPPED.terms


@pytest.mark.parametrize(
    "body",
    [
        "badword-canary",
        "BADWORD canary",
        "Badword_Canary",
        "badwordcanary",
        "b a d w o r d - c a n a r y",
        "deployment check: badword-canary (please ignore)",
        "b4dw0rd-c4n4ry",
    ],
)
def test_the_canary_matches_however_it_is_written(body: str) -> None:
    found = SHIPPED.match(body)
    assert found == TermMatch(CANARY_TERM, SHIPPED_SOURCE)
    assert found is not None and found.is_canary


@pytest.mark.parametrize(
    "body", ["badword", "canary", "canary badword", "mybadword-canary", "badword-canaryx"]
)
def test_part_of_the_canary_is_not_the_canary(body: str) -> None:
    assert SHIPPED.match(body) is None


def test_the_canary_is_documented_for_operators() -> None:
    text = (ROOT / "docs" / "messaging.md").read_text(encoding="utf-8")
    section = text.split("## Term filter", 1)[1]
    assert f"`{CANARY_TERM}`" in section
    assert "422 `offensive_content`" in section


def test_only_the_canary_is_the_canary() -> None:
    found = SHIPPED.match("shit")
    assert found is not None and not found.is_canary


# --- obfuscations -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "term"),
    [
        # case and Unicode compatibility forms (NFKC)
        ("SHIT", "shit"),
        ("ＳＨＩＴ", "shit"),  # noqa: RUF001 - full-width
        ("𝐬𝐡𝐢𝐭", "shit"),  # noqa: RUF001 - mathematical bold
        ("ⓢⓗⓘⓣ", "shit"),  # circled
        ("ſhit", "shit"),  # noqa: RUF001 - long s folds to s
        # diacritics
        ("shït", "shit"),
        ("fück", "fuck"),
        ("s\u0301h\u0302i\u0308t", "shit"),  # combining marks after each letter
        # repeated letters
        ("shiiiiit", "shit"),
        ("fuuuuccckkk", "fuck"),
        ("SSSHHHIIIITTT", "shit"),
        ("asssshole", "asshole"),
        # separators between single letters
        ("s.h.i.t", "shit"),
        ("s h i t", "shit"),
        ("s-h-i-t", "shit"),
        ("s_h_i_t", "shit"),
        ("s / h / i / t", "shit"),
        ("s\nh\ni\nt", "shit"),
        ("s* h* i* t*", "shit"),
        ("s😀h😀i😀t", "shit"),
        # digits and symbols for letters
        ("5h1t", "shit"),
        ("sh1t", "shit"),
        ("b1tch", "bitch"),  # 1 read as i
        ("s1ut", "slut"),  # 1 read as l
        ("$hit", "shit"),
        ("@sshole", "asshole"),
        ("sh!t", "shit"),
        ("5 h 1 t", "shit"),
        ("$h11111t", "shit"),  # many 1s: read all as i
        ("fuck3r", "fucker"),
        ("w4nk3r", "wanker"),
        ("7w47", "twat"),
        # invisible characters inserted between letters
        ("s\u200bh\u200bi\u200bt", "shit"),  # zero-width space
        ("f\u200du\u200cc\u200dk", "fuck"),  # zero-width joiner / non-joiner
        ("sh\u00adit", "shit"),  # soft hyphen
        ("sh\u2060i\ufefft", "shit"),  # word joiner, byte order mark
        ("sh\u200ei\u200ft", "shit"),  # left-to-right / right-to-left marks
        ("\u202etihs\u202c", "shit"),  # right-to-left override displays "shit"
        # letters of other scripts that look Latin
        ("fu\u0441k", "fuck"),  # Cyrillic es
        ("wh\u03bfre", "whore"),  # Greek omicron
        ("\u0455hit", "shit"),  # Cyrillic dze
        # punctuation around the word
        ("shit!", "shit"),
        ("shit?!", "shit"),
        ("(shit)", "shit"),
        ("'shit'", "shit"),
        ("\u201cshit\u201d", "shit"),
        ("this shit's bad", "shit"),
        ("sh!!t!!!", "shit"),
    ],
)
def test_obfuscations_match(body: str, term: str) -> None:
    assert matched(SHIPPED, body) == term


@pytest.mark.parametrize(
    "body",
    [
        "\u202eshit\u202c",  # displayed "tihs"
        "Price: 455 USD, order 5417, code 1337",  # digits alone stay digits
        "sh it",  # not single letters: two words
        "it's h i t",  # the "s" of "it's" does not join the spelled-out letters after it
    ],
)
def test_what_is_not_read_as_a_term(body: str) -> None:
    assert SHIPPED.match(body) is None


# --- whole words (Scunthorpe) ----------------------------------------------------------------

STRICT = TermFilter.from_terms(["cunt", "ass", "cock", "sex", "rape", "tit", "hell", "dick"])


@pytest.mark.parametrize(
    "body",
    [
        "Scunthorpe United",
        "assessment",
        "a thorough assessment of the class",
        "cockpit",
        "Essex",
        "Middlesex",
        "grape",
        "therapist",
        "title",
        "bass",
        "embarrass",
        "hello",
        "shell",
        "Dickens",
        "as",  # repeats only lengthen a term's letters: "as" is not "ass"
        "s e x y",  # spelled-out letters form one word, "sexy"
        "a s s e s s m e n t",
        "c0ckp1t",
    ],
)
def test_words_that_merely_contain_a_term_do_not_match(body: str) -> None:
    assert STRICT.match(body) is None


@pytest.mark.parametrize(
    ("body", "term"),
    [
        ("what an ass", "ass"),
        ("a55", "ass"),
        ("4ss", "ass"),
        ("aaasss", "ass"),
        ("Scunthorpe is no cunt", "cunt"),
        ("cock-pit", "cock"),  # written as two words, the first one is the term
        ("go to hell", "hell"),
        ("he11", "hell"),
    ],
)
def test_the_same_terms_match_as_whole_words(body: str, term: str) -> None:
    assert matched(STRICT, body) == term


@pytest.mark.parametrize(
    "body",
    [
        "Scunthorpe",
        "assessment",
        "cockpit",
        "Essex",
        "grape",
        "classic",
        "passage",
        "Dickens",
        "shiitake mushrooms",
        "analysis of the document",
        "Fuchsia",
        "Spicy",
        "glass",
        "Pakistan",
        "retardant",
        "bitcoin",
        "cocktail",
        "shitake",
        "Kiss my class, Mr. Cumming",
    ],
)
def test_the_shipped_list_spares_innocent_words(body: str) -> None:
    assert SHIPPED.match(body) is None


def test_every_shipped_term_matches_itself() -> None:
    # A term shadowed by normalisation (or one that normalises to something else) would be
    # dead weight in the list.
    for term in shipped_terms():
        assert matched(SHIPPED, term) == term, term


# --- multi-word terms ------------------------------------------------------------------------

PHRASES = TermFilter.from_terms(["son of a bitch", "go away"])


@pytest.mark.parametrize(
    "body",
    [
        "son of a bitch",
        "You SON OF A BITCH!",
        "son-of-a-b1tch",
        "sonofabitch",
        "son  of\na   bitch",
        "just go away",
        "goaway",
        "g0 4w4y",
        "go go go away",  # a repeated first word is tried at each place
    ],
)
def test_multi_word_terms_match_in_sequence(body: str) -> None:
    assert PHRASES.match(body) is not None


@pytest.mark.parametrize(
    "body", ["son of a gun", "son of bitch", "a bitch", "go on and away", "go awayyyz", "ago away"]
)
def test_multi_word_terms_need_every_word_in_order(body: str) -> None:
    assert PHRASES.match(body) is None


# --- what a match reports ----------------------------------------------------------------------


def test_a_match_names_the_term_as_listed_not_the_text() -> None:
    found = SHIPPED.match("well, that is $HIIIIIT, I said, and lots of other private words")
    assert found == TermMatch("shit", SHIPPED_SOURCE)
    # Only the term and where it came from: nothing of the body reaches the audit log.
    assert [field.name for field in dataclasses.fields(TermMatch)] == ["term", "source"]


def test_the_first_term_in_reading_order_is_reported() -> None:
    assert matched(SHIPPED, "you twat, what a load of shit") == "twat"
    assert matched(SHIPPED, "what a load of shit, you twat") == "shit"


def test_clean_text_matches_nothing() -> None:
    body = "Milestone 2 is delivered: the contract tests pass and the audit report is attached."
    assert SHIPPED.match(body) is None


# --- unusual input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        "",
        " ",
        "\n\t  \r\n",
        "😀🎉👍",
        "👨\u200d👩\u200d👧\u200d👦",  # emoji joined by zero-width joiners
        "\u200b\u200c\u200d\u2060\ufeff",  # nothing but invisible characters
        "مرحبا بالعالم",  # Arabic (right to left)
        "שלום עולם",  # Hebrew (right to left)
        "\u202bשלום\u202c \u2067abc\u2069",  # noqa: RUF001 - embeddings and isolates
        "\u202e",  # a lone override
        "!!! ''' $$$ @@@",
        "I",
        "a b",
        "\x00\x01\x7f",
        "\ud7ff\ue000\U0010fffd",
    ],
)
def test_unusual_input_is_handled(body: str) -> None:
    assert SHIPPED.match(body) is None


def test_a_term_inside_right_to_left_text_matches() -> None:
    assert matched(SHIPPED, "مرحبا shit بالعالم") == "shit"
    assert matched(SHIPPED, "שלום \u200fb\u200fi\u200ft\u200fc\u200fh") == "bitch"


def test_terms_in_other_scripts() -> None:
    term_filter = TermFilter.from_terms(["дурак", "バカ"])
    assert matched(term_filter, "ты ДУРАК!") == "дурак"
    assert matched(term_filter, "ﾊﾞｶ") == "バカ"  # half-width katakana (NFKC)
    assert term_filter.match("дураки") is None


# --- long bodies --------------------------------------------------------------------------------


def prose(length: int, seed: int = 7) -> str:
    rnd = random.Random(seed)
    words = [
        "the",
        "milestone",
        "contract",
        "review",
        "delivery",
        "payment",
        "escrow",
        "worker",
        "owner",
        "project",
        "bid",
        "report",
        "test",
        "deploy",
        "audit",
        "a",
        "an",
        "I",
        "of",
        "to",
        "in",
        "is",
        "it's",
        "don't",
        "2025",
        "42",
        "$100",
        "e-mail:",
        "x@y.z!",
    ]
    text = ""
    while len(text) < length:
        text += rnd.choice(words) + rnd.choice([" ", " ", ", ", ". ", "\n", " - "])
    return text[:length]


@pytest.mark.parametrize(
    "body",
    [
        prose(4000),
        prose(4000).replace("e", "é"),
        "1" * 4000,
        "a " * 2000,
        ("s h i " * 667)[:4000],
        "!" * 4000,
        "'" * 4000,
        "\u202e" * 4000,
        "".join(chr(0x4E00 + i) for i in range(4000)),  # 4000 distinct characters
        " ".join(
            "".join(random.Random(i).choices(string.ascii_lowercase + "0134!@$", k=7))
            for i in range(501)
        )[:4000],
    ],
    ids=["prose", "accented", "ones", "letters", "spelled", "bangs", "quotes", "rlo", "cjk", "rnd"],
)
def test_a_4000_character_body_is_checked(body: str) -> None:
    assert len(body) == 4000
    assert SHIPPED.match(body) is None
    # The same body with a term on a last line of its own is refused.
    assert matched(SHIPPED, body[:-7] + "\nfuck ") == "fuck"


def test_a_body_full_of_near_misses_is_checked_word_by_word() -> None:
    # "as" shares its loose key with "ass", so every word passes the cheap rejection and is
    # read exactly; the last one matches.
    near_misses = "as " * 1330
    assert STRICT.match(near_misses) is None
    assert matched(STRICT, near_misses + "aass") == "ass"
    assert STRICT.match(" ".join("a" * n + "s" for n in range(1, 80))) is None


# --- term lists ---------------------------------------------------------------------------------


def test_custom_terms_are_merged_with_the_shipped_list(tmp_path: Path) -> None:
    path = tmp_path / "terms.txt"
    path.write_text(
        "\ufeff# our own list\n\nfrobnicate\n  widget wrangler   # a phrase, inline comment\n",
        encoding="utf-8",
    )
    merged = TermFilter.from_sources(extra_file=path)
    assert merged.match("FR0BNICATE!") == TermMatch("frobnicate", CUSTOM_SOURCE)
    assert merged.match("a widget-wrangler") == TermMatch("widget wrangler", CUSTOM_SOURCE)
    assert merged.match("shit") == TermMatch("shit", SHIPPED_SOURCE)
    assert merged.match(CANARY_TERM) == TermMatch(CANARY_TERM, SHIPPED_SOURCE)
    assert len(merged) == len(SHIPPED) + 2

    custom_only = TermFilter.from_sources(shipped=False, extra_file=path)
    assert custom_only.match("frobnicate") is not None
    assert custom_only.match("shit") is None
    assert load_terms_file(path) == ["frobnicate", "widget wrangler"]


def test_a_term_listed_twice_reports_its_first_listing(tmp_path: Path) -> None:
    path = tmp_path / "terms.txt"
    path.write_text("SHIT\n", encoding="utf-8")
    assert TermFilter.from_sources(extra_file=path).match("shit") == TermMatch(
        "shit", SHIPPED_SOURCE
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("fine\nx\n", "line 2: term 'x' needs at least two letters or digits"),
        ("ok\n\n# c\n !!! \n", "line 4: term '!!!' needs at least two letters or digits"),
        ("\u200b\u200b\n", "line 1"),
    ],
)
def test_a_term_that_can_never_match_is_refused_with_its_line(
    tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "terms.txt"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(TermListError, match=message) as caught:
        TermFilter.from_sources(extra_file=path)
    assert str(path) in str(caught.value)


def test_unreadable_term_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TermListError, match=r"cannot read moderation terms file .*missing\.txt"):
        TermFilter.from_sources(extra_file=tmp_path / "missing.txt")
    with pytest.raises(TermListError, match="cannot read"):
        load_terms_file(tmp_path)  # a directory
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("m\xe9chant\n".encode("latin-1"))
    with pytest.raises(TermListError, match="is not UTF-8"):
        load_terms_file(latin1)


def test_terms_given_directly_are_checked_too() -> None:
    with pytest.raises(TermListError, match="needs at least two"):
        TermFilter.from_terms(["ok", "-"])


def test_the_shipped_list_is_package_data() -> None:
    # The list is read with importlib.resources; it must also be in the built distribution.
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "wordfilter/*.txt" in pyproject["tool"]["setuptools"]["package-data"]["marketplace"]
    assert len(shipped_terms()) >= 50


def test_a_filter_survives_pickling() -> None:
    # Handed to actors across the Ray boundary.
    copy = pickle.loads(pickle.dumps(SHIPPED))
    assert copy.match("5h1iiit") == TermMatch("shit", SHIPPED_SOURCE)
    assert copy.match("Scunthorpe") is None


# --- properties -----------------------------------------------------------------------------

INVISIBLE = st.sampled_from(["\u200b", "\u200c", "\u200d", "\u2060", "\u00ad", "\ufeff", "\u200e"])


SINGLE_WORD_TERMS = [term for term in shipped_terms() if term.isalpha()]
# Per letter of a term: how often it is repeated, whether it is upper case, and the invisible
# characters that follow it.
DISGUISES = st.lists(
    st.tuples(
        st.integers(min_value=1, max_value=3), st.booleans(), st.lists(INVISIBLE, max_size=2)
    ),
    min_size=16,
    max_size=16,
)


@settings(max_examples=100, deadline=None)
@given(term=st.sampled_from(SINGLE_WORD_TERMS), disguise=DISGUISES)
def test_any_mix_of_case_repeats_and_invisible_characters_matches(
    term: str, disguise: list[tuple[int, bool, list[str]]]
) -> None:
    body = "".join(
        (char.upper() if upper else char) * repeat + "".join(invisible)
        for char, (repeat, upper, invisible) in zip(term, disguise, strict=False)
    )
    assert matched(SHIPPED, f"well {body}, then") == term


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=200))
def test_arbitrary_text_never_raises(body: str) -> None:
    found = SHIPPED.match(body)
    assert found is None or found.term in shipped_terms()


TRICKY = TermFilter.from_terms(["ass", "shit", "hell", "lilo", "all in", "sa sa", "1488", "i11"])


def exhaustive(term_filter: TermFilter, body: str) -> TermMatch | None:
    """The exact rules applied to every word, without the cheap rejection in front of them."""
    words = _words(normalize(body))
    for index, word in enumerate(words):
        keyed = _keyed(word)
        found = term_filter._match_word(keyed) or term_filter._match_sequence(keyed, words, index)
        if found is not None:
            return found
    return None


# Pieces of the terms above, their obfuscations and separators, so that many bodies match.
FRAGMENTS = st.lists(
    st.sampled_from(
        [
            *("a", "aa", "4", "@", "s", "ss", "5", "$", "sh", "i", "ii", "1", "!", "t", "l"),
            *("lo", "he", "hell", "he11", "all", "in", "sa", "14", "88", "o"),
            *(" ", "  ", "-", "'", "\u200b"),
        ]
    ),
    max_size=20,
).map("".join)


@settings(max_examples=400, deadline=None)
@given(FRAGMENTS)
def test_the_cheap_rejection_never_hides_a_match(body: str) -> None:
    # match() skips the exact rules for words whose loose key is not listed; that must only ever
    # skip words the exact rules would not match.
    assert TRICKY.match(body) == exhaustive(TRICKY, body)


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="ab1$@'! \u2019\n", max_size=30))
def test_the_quick_split_cuts_words_as_the_word_by_word_pass_does(body: str) -> None:
    normalized = normalize(body)
    assert _words(normalized) == _words_one_by_one(normalized)

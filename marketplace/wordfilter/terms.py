"""The offensive-term filter every chat and DM body passes before it is stored.

Terms come from the shipped list (``terms.txt`` beside this module) plus an optional operator
file (``MARKETPLACE_MODERATION_TERMS_FILE``). Text and terms go through the same normalisation,
so a term matches however it is dressed up:

1. characters shown reversed by a RIGHT-TO-LEFT OVERRIDE are put back in reading order;
2. Unicode NFKC (full-width, ligatures, mathematical and circled letters), case folding;
3. diacritics stripped (NFKD, combining marks dropped), format characters and every Unicode
   ``Default_Ignorable_Code_Point`` dropped (zero-width spaces and joiners, bidi marks, soft
   hyphens, variation selectors, tag characters, the Hangul fillers that render as nothing), a
   few look-alike letters of other scripts (Cyrillic a, Greek omicron...) read as their Latin
   twins;
4. the text is cut into words at everything but letters, digits, ``@``, ``$``, ``!`` and
   apostrophes; ``!`` at either end of a word is punctuation, an apostrophe separates words;
5. single characters in a row are joined into one word ("s h i t", "s.h.i.t", "s-h-i-t"), except
   one touching an apostrophe (the "s" of "it's");
6. in a word that has a letter, ``0 1 3 4 5 7 @ $ !`` read as ``o i/l e a s t a s i`` ("5h1t");
   a word of digits only, such as an amount, stays as it is;
7. a run of a repeated character matches a shorter run of it in the term, never a longer one:
   "shiiiit" matches "shit", but "as" does not match "ass".

A term matches whole words only: "Scunthorpe", "cockpit" and "assessment" never match a term they
merely contain. A multi-word or hyphenated term matches its words in sequence with anything
between them, or written together: "badword-canary", "BADWORD canary", "badwordcanary" and
"b a d w o r d - c a n a r y" all match the canary term.

Cost: a body is matched with a handful of whole-string operations in C (translate, split, set
intersection) against a set of loose keys (the terms' words with digits read as letters, "l"
read as "i" and repeats collapsed); the exact rules above run only for words whose loose key is
in the set, so a clean 4000-character body costs a few hundred microseconds whatever the number
of terms.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

# Reserved term that lets anyone check the filter end to end on a live deployment, the way the
# EICAR file checks a virus scanner. It is in the shipped list and must stay there.
CANARY_TERM = "badword-canary"

SHIPPED_SOURCE = "shipped"
CUSTOM_SOURCE = "custom"

_SHIPPED_FILE = "terms.txt"

# Letters of other scripts (after case folding) that readers take for Latin ones, plus Latin
# letters whose stroke NFKD does not decompose. The usual substitutions, not the full Unicode
# confusables table; named rather than written, since they look like the letters they stand for.
_LOOKALIKES = {
    unicodedata.lookup(name): latin
    for name, latin in [
        ("CYRILLIC SMALL LETTER A", "a"),
        ("CYRILLIC SMALL LETTER VE", "b"),
        ("CYRILLIC SMALL LETTER ES", "c"),
        ("CYRILLIC SMALL LETTER KOMI DE", "d"),
        ("CYRILLIC SMALL LETTER IE", "e"),
        ("CYRILLIC SMALL LETTER SHHA", "h"),
        ("CYRILLIC SMALL LETTER BYELORUSSIAN-UKRAINIAN I", "i"),
        ("CYRILLIC SMALL LETTER JE", "j"),
        ("CYRILLIC SMALL LETTER KA", "k"),
        ("CYRILLIC SMALL LETTER PALOCHKA", "l"),
        ("CYRILLIC SMALL LETTER EM", "m"),
        ("CYRILLIC SMALL LETTER O", "o"),
        ("CYRILLIC SMALL LETTER ER", "p"),
        ("CYRILLIC SMALL LETTER QA", "q"),
        ("CYRILLIC SMALL LETTER DZE", "s"),
        ("CYRILLIC SMALL LETTER TE", "t"),
        ("CYRILLIC SMALL LETTER U", "y"),
        ("CYRILLIC SMALL LETTER WE", "w"),
        ("CYRILLIC SMALL LETTER HA", "x"),
        ("GREEK SMALL LETTER ALPHA", "a"),
        ("GREEK SMALL LETTER IOTA", "i"),
        ("GREEK SMALL LETTER KAPPA", "k"),
        ("GREEK SMALL LETTER NU", "v"),
        ("GREEK SMALL LETTER OMICRON", "o"),
        ("GREEK SMALL LETTER RHO", "p"),
        ("GREEK SMALL LETTER TAU", "t"),
        ("GREEK SMALL LETTER UPSILON", "u"),
        ("GREEK SMALL LETTER CHI", "x"),
        ("LATIN SMALL LETTER DOTLESS I", "i"),
        ("LATIN SMALL LETTER L WITH STROKE", "l"),
        ("LATIN SMALL LETTER O WITH STROKE", "o"),
        ("LATIN SMALL LETTER D WITH STROKE", "d"),
        ("LATIN SMALL LETTER H WITH STROKE", "h"),
    ]
}

# Kept inside words by normalize(); every other character that is not a letter or digit
# becomes a space.
_WORD_SYMBOLS = "@$!'"
_APOSTROPHES = {"\u2019": "'", "\u02bc": "'"}

# Digit-for-letter and symbol-for-letter readings. "1" stands for "i" or "l": both are tried.
_LEET = str.maketrans(
    {"0": "o", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s", "!": "i"}
)
_ONE_READINGS = ("i", "l")
# A word with more "1"s than this is read with all of them as "i" and all as "l" only, so a body
# of "1111..." cannot make the filter try every combination.
_MAX_ONE_COMBINATIONS = 4
# The loose key: every substitution at once, "1" and "l" both read as "i". Two words that match
# exactly always have equal loose keys (the converse need not hold).
_LOOSE = str.maketrans({**{chr(k): v for k, v in _LEET.items()}, "1": "i", "l": "i"})

# Two single characters in a row (in normalised text with a space in front), as step 5 joins
# them; only a body where this finds something needs the word-by-word pass.
_SPELLED = re.compile(r" [^\s'] +[^\s'](?!\S)")
_LETTER = re.compile(r"[^\W\d_]")
_REPEATS = re.compile(r"(.)\1+")
_RUNS = re.compile(r"(.)\1*")
# Unicode's Default_Ignorable_Code_Point property, copied from DerivedCoreProperties.txt of
# Unicode 16.0.0 (https://www.unicode.org/Public/16.0.0/ucd/DerivedCoreProperties.txt; the
# unit tests compare it with the ``regex`` module's own Unicode tables): code points a renderer
# shows as nothing when it does not support them. Python's unicodedata has no such property.
# Most are format characters (Cf) or combining marks, which the character table drops anyway,
# but not all: the Hangul fillers U+115F, U+1160, U+3164 and U+FFA0 are letters (Lo), so
# "bad\u115fword" was one unknown word, and the reserved ones (Cn) became spaces, cutting a term
# in two. Inclusive ranges, in code point order.
DEFAULT_IGNORABLE_RANGES: tuple[tuple[int, int], ...] = (
    (0x00AD, 0x00AD),  # SOFT HYPHEN
    (0x034F, 0x034F),  # COMBINING GRAPHEME JOINER
    (0x061C, 0x061C),  # ARABIC LETTER MARK
    (0x115F, 0x1160),  # HANGUL CHOSEONG FILLER..HANGUL JUNGSEONG FILLER
    (0x17B4, 0x17B5),  # KHMER VOWEL INHERENT AQ..KHMER VOWEL INHERENT AA
    (0x180B, 0x180F),  # MONGOLIAN FREE VARIATION SELECTORS, VOWEL SEPARATOR
    (0x200B, 0x200F),  # ZERO WIDTH SPACE..RIGHT-TO-LEFT MARK
    (0x202A, 0x202E),  # LEFT-TO-RIGHT EMBEDDING..RIGHT-TO-LEFT OVERRIDE
    (0x2060, 0x206F),  # WORD JOINER..NOMINAL DIGIT SHAPES (with reserved U+2065)
    (0x3164, 0x3164),  # HANGUL FILLER
    (0xFE00, 0xFE0F),  # VARIATION SELECTOR-1..VARIATION SELECTOR-16
    (0xFEFF, 0xFEFF),  # ZERO WIDTH NO-BREAK SPACE
    (0xFFA0, 0xFFA0),  # HALFWIDTH HANGUL FILLER
    (0xFFF0, 0xFFF8),  # <reserved-FFF0>..<reserved-FFF8>
    (0x1BCA0, 0x1BCA3),  # SHORTHAND FORMAT LETTER OVERLAP..SHORTHAND FORMAT UP STEP
    (0x1D173, 0x1D17A),  # MUSICAL SYMBOL BEGIN BEAM..MUSICAL SYMBOL END PHRASE
    (0xE0000, 0xE0FFF),  # tags, VARIATION SELECTOR-17..256, reserved
)


def is_default_ignorable(code: int) -> bool:
    """Whether ``code`` has Unicode's ``Default_Ignorable_Code_Point`` property."""
    return any(low <= code <= high for low, high in DEFAULT_IGNORABLE_RANGES)


# RIGHT-TO-LEFT OVERRIDE shows what follows, up to POP DIRECTIONAL FORMATTING or the end of the
# line, in reverse: "\u202etihs" reads "shit".
_OVERRIDDEN = re.compile("\u202e([^\u202c\n]*)")


def _ascii_value(char: str) -> str:
    if char.isalnum():
        return char.lower()
    return char if char in _WORD_SYMBOLS else " "


_ASCII = {code: _ascii_value(chr(code)) for code in range(128)}


class TermListError(ValueError):
    """A term list cannot be read or holds a term that can never match."""


@dataclass(frozen=True, slots=True)
class TermMatch:
    """Which term a body matched, for the refusal and the audit log (never the body itself)."""

    term: str
    source: str

    @property
    def is_canary(self) -> bool:
        return self.term == CANARY_TERM


class _CharTable(dict[int, str | None]):
    """``str.translate`` table for non-ASCII text, filled on first sight of each character: drops
    format characters, combining marks and default-ignorable code points, maps look-alike
    letters, turns separators into spaces. Caching per character keeps the Unicode category
    lookups off the hot path: a message repeats few distinct characters.
    """

    _LIMIT = 1 << 16

    def __missing__(self, code: int) -> str | None:
        char = chr(code)
        category = unicodedata.category(char)
        value: str | None
        if category in ("Mn", "Me", "Cf") or is_default_ignorable(code):
            value = None
        elif category[0] in "LN" or category == "Mc":
            value = _LOOKALIKES.get(char, char)
        else:
            value = _APOSTROPHES.get(char, " ")
        # Bounded: a stream of distinct rare characters must not grow the table without end.
        if len(self) < self._LIMIT:
            self[code] = value
        return value


_CHARS = _CharTable(_ASCII)
_MAX_REPLACED = 32


def normalize(text: str) -> str:
    """Steps 1-3 of the module docstring, with every separator turned into a space."""
    if text.isascii():
        return text.translate(_ASCII)
    if "\u202e" in text:
        text = _OVERRIDDEN.sub(lambda m: m.group(1)[::-1], text)
    text = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", text).casefold())
    # str.translate looks up every character in Python objects once the text is not ASCII; when
    # the few distinct non-ASCII characters all become ASCII (accents dropped, look-alikes,
    # punctuation), replacing each of them first leaves ASCII text for translate's fast path.
    others = [char for char in set(text) if not char.isascii()]
    if len(others) > _MAX_REPLACED or any(_CHARS[ord(char)] == char for char in others):
        return text.translate(_CHARS)
    for char in others:
        text = text.replace(char, _CHARS[ord(char)] or "")
    return text.translate(_ASCII)


def _words(normalized: str) -> list[str]:
    """Steps 4-5: the words of normalised text, runs of single characters joined."""
    if "!" not in normalized and not _SPELLED.search(" " + normalized):
        # Nothing to strip or join (most bodies): splitting in C is several times faster.
        return normalized.replace("'", " ").split()
    return _words_one_by_one(normalized)


def _words_one_by_one(normalized: str) -> list[str]:
    words: list[str] = []
    run: list[str] = []
    for token in normalized.split():
        if "'" in token:
            parts = [part for part in (p.strip("!") for p in token.split("'")) if part]
        else:
            token = token.strip("!")
            if len(token) == 1:
                run.append(token)
                continue
            if not token:
                continue
            parts = [token]
        if run:
            words.append("".join(run))
            run = []
        words.extend(parts)
    if run:
        words.append("".join(run))
    return words


def _readings(word: str) -> tuple[str, ...]:
    """Step 6: the spellings a word stands for."""
    if word.isalpha() or not _LETTER.search(word):
        return (word,)
    word = word.translate(_LEET)
    ones = word.count("1")
    if not ones:
        return (word,)
    if ones > _MAX_ONE_COMBINATIONS:
        return (word.replace("1", "i"), word.replace("1", "l"))
    parts = word.split("1")
    return tuple(
        "".join(part + letter for part, letter in zip(parts, (*choice, ""), strict=True))
        for choice in itertools.product(_ONE_READINGS, repeat=ones)
    )


def _keyed(word: str) -> list[tuple[str, str]]:
    """A word's readings, each with its key: the reading with repeats collapsed (step 7)."""
    return [(_REPEATS.sub(r"\1", reading), reading) for reading in _readings(word)]


def _run_lengths(word: str) -> tuple[int, ...]:
    return tuple(len(m.group()) for m in _RUNS.finditer(word))


def _long_enough(runs: tuple[int, ...], needed: tuple[int, ...]) -> bool:
    return all(have >= need for have, need in zip(runs, needed, strict=True))


def _loose(text: str) -> str:
    return _REPEATS.sub(r"\1", text.translate(_LOOSE))


def _collapse(text: str, chars: Iterable[str]) -> str:
    """Collapses repeats of ``chars`` only: repeats of other characters cannot change whether a
    word equals a loose key (a word holding such a character equals none). ``str.replace`` per
    character is much faster than one regular expression pass over the whole text."""
    for char in chars:
        pair = char + char
        while pair in text:
            text = text.replace(pair, char)
    return text


@dataclass(frozen=True, slots=True)
class _Entry:
    match: TermMatch
    # Per term word: the length of each run of a repeated character; a text word needs runs at
    # least this long (step 7).
    runs: tuple[tuple[int, ...], ...]


class TermFilter:
    """Finds the first listed term a body contains (see the module docstring for the rules).

    Immutable after construction and picklable, so one instance serves every request of a
    frontend or can be handed to an actor.
    """

    def __init__(self, terms: Iterable[tuple[str, str]]) -> None:
        """``terms`` are ``(term, source)`` pairs; a term that can never match raises
        :class:`TermListError`."""
        self._terms: list[TermMatch] = []
        self._single: dict[str, list[_Entry]] = {}
        self._multi: dict[tuple[str, ...], list[_Entry]] = {}
        # Keys of the first words of multi-word terms: most words start none, which skips the
        # sequence lookups for them.
        self._multi_first: set[str] = set()
        self._loose_keys: set[str] = set()
        seen: set[tuple[str, ...]] = set()
        lengths: set[int] = set()
        for term, source in terms:
            term_match = TermMatch(term, source)
            words = _term_words(term)
            self._terms.append(term_match)
            spellings = [words] if len(words) == 1 else [words, ["".join(words)]]
            for spelling in spellings:
                self._loose_keys.update(_loose(word) for word in spelling)
                for readings in itertools.product(*(_readings(word) for word in spelling)):
                    if readings in seen:
                        continue
                    seen.add(readings)
                    key = tuple(_REPEATS.sub(r"\1", reading) for reading in readings)
                    entry = _Entry(term_match, tuple(_run_lengths(r) for r in readings))
                    if len(key) == 1:
                        self._single.setdefault(key[0], []).append(entry)
                    else:
                        self._multi.setdefault(key, []).append(entry)
                        self._multi_first.add(key[0])
                        lengths.add(len(key))
        self._lengths = tuple(sorted(lengths))
        self._loose_chars = "".join(sorted(set("".join(self._loose_keys))))

    @classmethod
    def from_terms(cls, terms: Iterable[str], source: str = CUSTOM_SOURCE) -> TermFilter:
        return cls((term, source) for term in terms)

    @classmethod
    def from_sources(cls, shipped: bool = True, extra_file: Path | None = None) -> TermFilter:
        """The shipped list (unless ``shipped`` is false) merged with the terms of ``extra_file``.

        Raises :class:`TermListError`, naming the file and line, when the file cannot be read or
        holds a term that can never match.
        """
        terms: list[tuple[str, str]] = []
        if shipped:
            terms += [(term, SHIPPED_SOURCE) for term in shipped_terms()]
        if extra_file is not None:
            terms += [(term, CUSTOM_SOURCE) for term in load_terms_file(extra_file)]
        return cls(terms)

    @property
    def terms(self) -> tuple[TermMatch, ...]:
        return tuple(self._terms)

    def __len__(self) -> int:
        return len(self._terms)

    def match(self, body: str) -> TermMatch | None:
        """The first term ``body`` contains, in reading order, or None."""
        words = _words(normalize(body))
        # Cheap rejection first, on each distinct word once: most bodies end here.
        distinct = " ".join(set(words)).translate(_LOOSE)
        if self._loose_keys.isdisjoint(_collapse(distinct, self._loose_chars).split()):
            return None
        loose_words = _collapse(" ".join(words).translate(_LOOSE), self._loose_chars).split()
        # Per distinct word: its readings when they may begin a multi-word term, else None. A
        # word repeated throughout a body is read once.
        tried: dict[str, list[tuple[str, str]] | None] = {}
        for index, loose_word in enumerate(loose_words):
            if loose_word not in self._loose_keys:
                continue
            word = words[index]
            if word not in tried:
                keyed = _keyed(word)
                found = self._match_word(keyed)
                if found is not None:
                    return found
                starts = any(key in self._multi_first for key, _ in keyed)
                tried[word] = keyed if starts else None
            first = tried[word]
            if first is not None:
                found = self._match_sequence(first, words, index)
                if found is not None:
                    return found
        return None

    def _match_word(self, keyed: list[tuple[str, str]]) -> TermMatch | None:
        for key, reading in keyed:
            for entry in self._single.get(key, ()):
                if _long_enough(_run_lengths(reading), entry.runs[0]):
                    return entry.match
        return None

    def _match_sequence(
        self, first: list[tuple[str, str]], words: Sequence[str], start: int
    ) -> TermMatch | None:
        for length in self._lengths:
            if start + length > len(words):
                break
            window = [first, *(_keyed(word) for word in words[start + 1 : start + length])]
            for combination in itertools.product(*window):
                for entry in self._multi.get(tuple(key for key, _ in combination), ()):
                    if all(
                        _long_enough(_run_lengths(reading), needed)
                        for (_, reading), needed in zip(combination, entry.runs, strict=True)
                    ):
                        return entry.match
        return None


def _term_words(term: str) -> list[str]:
    """A term's words, normalised as a body's are.

    A term that normalises to nothing, or to a single character, is refused: it could never
    match, or would match every stray letter.
    """
    words = _words(normalize(term))
    if sum(map(len, words)) < 2:
        raise TermListError(f"term {term!r} needs at least two letters or digits")
    return words


def parse_terms(lines: Iterable[str], source_name: str) -> list[str]:
    """Terms of a list: one per line, ``#`` starts a comment, blank lines are skipped.

    A term that can never match is refused with its line number (see :func:`_term_words`).
    """
    terms = []
    for number, line in enumerate(lines, start=1):
        term = line.split("#", 1)[0].strip()
        if not term:
            continue
        try:
            _term_words(term)
        except TermListError as exc:
            raise TermListError(f"{source_name} line {number}: {exc}") from None
        terms.append(term)
    return terms


def shipped_terms() -> list[str]:
    text = resources.files(__package__).joinpath(_SHIPPED_FILE).read_text(encoding="utf-8")
    return parse_terms(text.splitlines(), f"shipped {_SHIPPED_FILE}")


def load_terms_file(path: Path) -> list[str]:
    """Terms of an operator's list (UTF-8, a byte order mark allowed)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise TermListError(
            f"cannot read moderation terms file {path}: {exc.strerror or exc}"
        ) from exc
    except UnicodeDecodeError as exc:
        raise TermListError(
            f"moderation terms file {path} is not UTF-8 (byte {exc.start})"
        ) from exc
    return parse_terms(text.splitlines(), str(path))

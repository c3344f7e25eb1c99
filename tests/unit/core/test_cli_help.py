"""Every flag of every ``marketplace`` command says what it does and, when it has one, its
default; ``--help`` shows plain text, never reStructuredText markup from docstrings."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

from marketplace.cli import build_parser
from marketplace.cli_commands import plain_text

RST_MARKUP = re.compile(r"``|:[a-z]+:`")
# Flags whose default needs no words: off unless given (store_true), or one of a pair that
# sets the same destination (`--passes`/`--fails`, `--active`/`--inactive`).
SELF_EXPLAINING = (
    argparse._StoreTrueAction,
    argparse._StoreFalseAction,
    argparse._StoreConstAction,
)
# Not options to describe: --help and --version say what they do and have no default to name.
NO_DEFAULT = (*SELF_EXPLAINING, argparse._HelpAction, argparse._VersionAction)


def parsers(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ("marketplace",)
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield " ".join(path), parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from parsers(child, (*path, name))


def expanded_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The help text as ``--help`` prints it (``%(default)s`` and the like filled in)."""
    return parser._get_formatter()._expand_help(action) if action.help else ""


def every_parser() -> list[tuple[str, argparse.ArgumentParser]]:
    found = list(parsers(build_parser()))
    # The dev stack's commands are part of the walk (installed with scripts/setup).
    names = {name for name, _ in found}
    assert {"marketplace up", "marketplace devnet create", "marketplace serve"} <= names, names
    return found


def test_every_option_and_argument_has_help() -> None:
    missing = [
        f"{name} {'/'.join(action.option_strings) or action.dest}"
        for name, parser in every_parser()
        for action in parser._actions
        if not isinstance(action, argparse._SubParsersAction) and not (action.help or "").strip()
    ]
    assert missing == []


def test_every_option_with_a_default_names_it() -> None:
    silent = []
    for name, parser in every_parser():
        for action in parser._actions:
            if (
                not action.option_strings
                or action.default in (None, argparse.SUPPRESS)
                or isinstance(action, NO_DEFAULT)
            ):
                continue
            if "default" not in expanded_help(parser, action).lower():
                silent.append(f"{name} {'/'.join(action.option_strings)} ({action.default!r})")
    assert silent == []


def test_help_has_no_restructuredtext_markup() -> None:
    marked: list[str] = []
    for name, parser in every_parser():
        texts = [parser.description or "", parser.epilog or ""]
        for action in parser._actions:
            texts.append(expanded_help(parser, action))
            if isinstance(action, argparse._SubParsersAction):
                texts.extend(choice.help or "" for choice in action._choices_actions)
        marked.extend(f"{name}: {text[:80]!r}" for text in texts if RST_MARKUP.search(text))
        assert not RST_MARKUP.search(parser.format_help()), name
    assert marked == []


def test_plain_text_drops_literal_and_role_markup() -> None:
    assert plain_text("the ``marketplace up`` data dir") == "the `marketplace up` data dir"
    assert plain_text("see :func:`~marketplace.cli.main`") == "see `marketplace.cli.main`"
    assert plain_text(":py:class:`Settings` and ``a\nb``") == "`Settings` and `a\nb`"
    assert plain_text("no markup, `one` tick") == "no markup, `one` tick"

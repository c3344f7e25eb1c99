"""The ``marketplace`` sub-commands the capabilities add: the CLI half of
:mod:`marketplace.http.capabilities`, kept apart so that the CLI starts without the server.

:mod:`marketplace.http.capabilities` imports every capability's routes, contexts and actors (about
2 s and Ray); ``marketplace --help`` and ``marketplace serve --help`` need none of that. So a
command is declared here by its name, its one-line help (all ``marketplace --help`` shows) and a
``"module:attribute"`` reference to its ``configure(parser)``, imported only when that command
runs: ``marketplace serve`` never loads, say, web3's client. This is the only string
wiring of the service; ``tests/unit/core/test_capabilities.py`` resolves every reference and
checks that each capability named here exists.

This module imports nothing of ours.
"""

from __future__ import annotations

import argparse
import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass

Configure = Callable[[argparse.ArgumentParser], None]


@dataclass(frozen=True)
class Command:
    """A ``marketplace`` sub-command.

    ``configure`` names ``fn(parser)``, which adds the command's arguments (and sub-commands) to
    the sub-parser the CLI made for ``name`` and sets ``func``; the CLI resolves it only when the
    command line invokes ``name`` (or its parent).

    ``parent`` names a command group (``"admin"``): the command is then ``marketplace <parent>
    <name>``, so several capabilities share one group without knowing of each other.
    """

    name: str
    help: str
    configure: str
    parent: str | None = None

    def load(self) -> Configure:
        """The ``configure`` function, importing its module."""
        return resolve(self.configure)


# Per capability (its name in marketplace.http.capabilities.CAPABILITIES, or a CLI-only one), the
# commands it adds, in the order `marketplace --help` lists them.
CAPABILITY_COMMANDS: dict[str, tuple[Command, ...]] = {
    "identity": (
        Command(
            "grant",
            "set permission flags of a user",
            "marketplace.identity.cli:configure_grant",
            parent="admin",
        ),
        Command(
            "revoke",
            "clear permission flags of a user",
            "marketplace.identity.cli:configure_revoke",
            parent="admin",
        ),
        Command(
            "show",
            "print a user's permission flags",
            "marketplace.identity.cli:configure_show",
            parent="admin",
        ),
    ),
    "verifier": (
        Command(
            "verifier",
            "run the verifier runtime (`POST /v1/verify`) on the Ray cluster",
            "marketplace.http.verifier_runtime:configure",
        ),
    ),
    "leaderboards": (
        Command(
            "categories",
            "list, add, update or deactivate leaderboard categories",
            "marketplace.leaderboards.cli:configure",
            parent="admin",
        ),
        Command(
            "leaderboards",
            "rebuild the leaderboard boards (entries and standings) from scratch",
            "marketplace.leaderboards.cli:configure_boards",
            parent="admin",
        ),
    ),
    # `marketplace up`, `status` and `devnet ...` are the dev stack's (devstack/), which adds
    # them through entry points (marketplace.cli.plugin_commands): never declared here.
}


# reStructuredText in docstrings: ``literal`` and :role:`target` (a role may be prefixed, as
# :py:func:); `--help` shows them as `literal` and `target`.
_RST_LITERAL = re.compile(r"``(.+?)``", re.DOTALL)
_RST_ROLE = re.compile(r":(?:[a-z]+:)+`~?([^`]+)`")


def plain_text(doc: str) -> str:
    """A docstring as ``--help`` shows it: without reStructuredText markup."""
    return _RST_ROLE.sub(r"`\1`", _RST_LITERAL.sub(r"`\1`", doc))


def resolve(reference: str) -> Configure:
    """The ``configure`` function a ``"module:attribute"`` reference names."""
    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"command reference {reference!r} is not 'module:attribute'")
    configure: Configure = getattr(importlib.import_module(module_name), attribute)
    return configure

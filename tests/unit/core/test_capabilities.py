"""The capability registry is the one place that decides what the service serves and runs."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
from typing import Any

import pytest

import marketplace.http.routes as route_package
from marketplace.cli import build_parser, commands, invoked_command
from marketplace.cli_commands import CAPABILITY_COMMANDS, resolve
from marketplace.http.capabilities import (
    CAPABILITIES,
    Capability,
    Guard,
    GuardSlot,
    declared_queues,
    ordered_guards,
)
from marketplace.http.moderation_gate import moderation_suspension_guard
from marketplace.http.routes.legal import legal_assent_guard
from marketplace.http.routing import RouteTable
from marketplace.notifications.sending import NOTIFICATIONS_QUEUE
from marketplace.verifier.execution import VERIFIER_QUEUE
from tests.support.serve_cli import serve_with


def test_every_route_module_is_declared_by_exactly_one_capability() -> None:
    tables = {
        f"{route_package.__name__}.{info.name}": importlib.import_module(
            f"{route_package.__name__}.{info.name}"
        ).routes
        for info in pkgutil.iter_modules(route_package.__path__)
    }
    assert all(isinstance(table, RouteTable) for table in tables.values())
    declared = [table for cap in CAPABILITIES for table in cap.routes]
    declared_modules = [m for table in declared for m, t in tables.items() if t is table]
    assert len(declared_modules) == len(declared), "a declared table is no routes module's"
    assert sorted(declared_modules) == sorted(tables), "a route module is missing or twice"
    assert len({cap.name for cap in CAPABILITIES}) == len(CAPABILITIES)


async def _early(call: Any) -> None: ...


async def _late(call: Any) -> None: ...


def test_guards_run_in_slot_order_whatever_the_list_order() -> None:
    late = Capability(name="b", summary="", guards=(Guard(GuardSlot.MODERATION_SUSPENSION, _late),))
    early = Capability(name="a", summary="", guards=(Guard(GuardSlot.LEGAL_ASSENT, _early),))
    assert ordered_guards((late, early)) == [_early, _late]
    # The service's own: legal assent, then moderation's suspension check.
    assert ordered_guards() == [legal_assent_guard, moderation_suspension_guard]


def test_the_registry_holds_the_declared_queues_and_refuses_a_name_twice() -> None:
    assert declared_queues().names() == [NOTIFICATIONS_QUEUE.name, VERIFIER_QUEUE.name]
    mail = Capability(name="mail", summary="", queues=(NOTIFICATIONS_QUEUE,))
    with pytest.raises(ValueError, match="registered twice"):
        declared_queues((mail, mail))


def test_every_command_reference_resolves_and_its_capability_exists() -> None:
    for commands_of in CAPABILITY_COMMANDS.values():
        for command in commands_of:
            assert callable(command.load()), command.configure
    assert set(CAPABILITY_COMMANDS) <= {cap.name for cap in CAPABILITIES}


def test_bad_reference_is_refused() -> None:
    with pytest.raises(ValueError, match="module:attribute"):
        resolve("marketplace.http.capabilities")


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_the_cli_offers_the_commands_the_capabilities_declare() -> None:
    declared = [command.name for command in commands()]
    assert len(declared) == len(set(declared)), "a command name is declared twice"
    assert {"up", "serve", "admin", "devnet"} <= set(declared)
    # Listed without being configured: `marketplace --help` loads no command's module.
    assert list(_subcommands(build_parser(configured=()))) == declared
    # Every declared `configure` adds the arguments and, on each leaf command, what runs it.
    pending = list(_subcommands(build_parser()).items())
    leaves = []
    while pending:
        name, command_parser = pending.pop()
        if command_parser._subparsers is None:
            assert callable(command_parser._defaults.get("func")), name
            leaves.append(name)
        else:
            pending += [(f"{name} {n}", p) for n, p in _subcommands(command_parser).items()]
    assert {
        "serve",
        "admin show",
        "admin categories add",
        "devnet info",
        "devnet allowlist add",
    } <= set(leaves)
    # Sub-commands of a group are named once per group, and only groups that exist have them.
    children = [
        (c.parent, c.name) for cmds in CAPABILITY_COMMANDS.values() for c in cmds if c.parent
    ]
    assert len(children) == len(set(children))
    assert {parent for parent, _ in children} <= set(declared)


def test_only_the_invoked_command_is_configured() -> None:
    assert invoked_command(["admin", "show", "--user-id", "x"]) == "admin"
    subcommands = _subcommands(build_parser(configured=("admin",)))
    assert subcommands["admin"]._subparsers is not None
    assert subcommands["devnet"]._subparsers is None
    assert "func" not in subcommands["serve"]._defaults
    assert invoked_command(["--help"]) is None
    assert invoked_command(["-h", "devnet", "info"]) == "devnet"


def test_serve_names_the_dependencies_it_misses() -> None:
    done = serve_with(MARKETPLACE_REDIS_URL="redis://unused")
    assert done.returncode == 2, done.stderr
    assert "MARKETPLACE_DATABASE_URL" in done.stderr
    assert "MARKETPLACE_REDIS_URL" not in done.stderr

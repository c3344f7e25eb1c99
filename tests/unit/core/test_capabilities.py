"""The capability registry is the one place that decides what the service serves and runs."""

from __future__ import annotations

import argparse
import pkgutil

import pytest

import marketplace.http.routes as route_package
from marketplace.capabilities import (
    CAPABILITIES,
    GUARD_ORDER,
    Capability,
    ordered_guards,
    resolve,
)
from marketplace.cli import build_parser, commands, invoked_command
from marketplace.http.routing import RouteTable


def test_every_route_module_is_declared_by_exactly_one_capability() -> None:
    modules = {
        f"{route_package.__name__}.{info.name}"
        for info in pkgutil.iter_modules(route_package.__path__)
    }
    declared = [ref.partition(":")[0] for cap in CAPABILITIES for ref in cap.routes]
    assert sorted(declared) == sorted(set(declared)), "a route module is declared twice"
    assert set(declared) == modules


def test_every_reference_resolves_to_what_it_claims() -> None:
    for cap in CAPABILITIES:
        for ref in cap.routes:
            assert isinstance(resolve(ref), RouteTable), ref
        for ref in (
            *cap.setup,
            *cap.contexts,
            *(command.configure for command in cap.cli),
            *(g for _, g in cap.guards),
        ):
            assert callable(resolve(ref)), ref
    assert len({cap.name for cap in CAPABILITIES}) == len(CAPABILITIES)


def test_guards_run_in_the_declared_order_whatever_the_list_order() -> None:
    late = Capability(name="b", summary="", guards=(("moderation_suspension", "x:late"),))
    early = Capability(name="a", summary="", guards=(("legal_assent", "x:early"),))
    assert [name for name, _ in ordered_guards((late, early))] == list(GUARD_ORDER)
    with pytest.raises(ValueError, match="GUARD_ORDER"):
        ordered_guards((Capability(name="c", summary="", guards=(("nope", "x:y"),)),))


def test_bad_reference_is_refused() -> None:
    with pytest.raises(ValueError, match="module:attribute"):
        resolve("marketplace.capabilities")


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
    children = [(c.parent, c.name) for cap in CAPABILITIES for c in cap.cli if c.parent]
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

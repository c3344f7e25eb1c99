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
from marketplace.cli import build_parser
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
        for ref in (*cap.setup, *cap.contexts, *cap.cli, *(g for _, g in cap.guards)):
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


def test_the_cli_offers_the_commands_the_capabilities_declare() -> None:
    parser = build_parser()
    subcommands = next(
        action for action in parser._actions if isinstance(action, argparse._SubParsersAction)
    )
    assert {"admin", "devnet"} <= set(subcommands.choices)

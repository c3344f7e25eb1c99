"""Which package may import which: the import graph read from the source, without running it."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "marketplace"


def imports_in(source: str, package: str) -> Iterator[str]:
    """Every module ``source`` (a module of ``package``) imports, anywhere in it
    (function-level imports included), relative imports made absolute."""
    parts = package.split(".")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = parts[: len(parts) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            yield module
            # `from marketplace import devnet` imports a module by its attribute name.
            yield from (f"{module}.{alias.name}" for alias in node.names)


def imports_of(path: Path) -> Iterator[str]:
    package = ".".join(path.relative_to(PACKAGE.parent).parent.parts)
    return imports_in(path.read_text(encoding="utf-8"), package)


def _offenders(paths: Iterator[Path], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in paths
        for name in imports_of(path)
        if name in forbidden or name.startswith(tuple(f"{f}." for f in forbidden))
    )


def test_domain_packages_import_neither_http_nor_actors() -> None:
    # The request flows one way: handler -> domain -> repository. Domain code that imported the
    # web layer or the Ray actors could not be tested or reused without them.
    domains = (
        "identity",
        "projects",
        "records",
        "events",
        "jobs",
        "legal",
        "moderation",
        "messaging",
        "stream",
    )
    paths = (path for package in domains for path in (PACKAGE / package).rglob("*.py"))
    assert _offenders(paths, ("marketplace.http", "marketplace.actors")) == []


def test_storage_imports_no_domain_package() -> None:
    # Repositories hold the SQL every domain uses; a repository that imported a domain's rules
    # would make the layers a cycle. The shared leaves (events.types, pagination, types, errors)
    # are allowed: they import nothing but each other.
    domains = tuple(
        f"marketplace.{name}"
        for name in (
            "identity",
            "projects",
            "records",
            "moderation",
            "messaging",
            "notifications",
            "verifier",
            "leaderboards",
            "stream",
            "indexer",
            "legal",
            "http",
            "actors",
        )
    )
    paths = (PACKAGE / "storage").rglob("*.py")
    assert _offenders(paths, domains) == []


def test_production_code_never_imports_the_devnet_tooling() -> None:
    # The devnet tooling (anvil, contract deployment, the web3 client of `marketplace devnet`)
    # is for the demo chain only. Only `marketplace up`'s embedded stack may start it; a
    # production module importing it would load web3's client and the dev keys into `serve`.
    allowed = (PACKAGE / "devnet", PACKAGE / "embedded")
    paths = (
        path
        for path in PACKAGE.rglob("*.py")
        if not any(path.is_relative_to(directory) for directory in allowed)
    )
    assert _offenders(paths, ("marketplace.devnet",)) == []


def test_the_import_walk_sees_every_form_of_import() -> None:
    # The checks above are only as good as this walk: a form it missed would pass silently.
    source = (
        "import marketplace.devnet.anvil\n"
        "from marketplace import devnet\n"
        "from ..devnet import client\n"
        "def later() -> None:\n"
        "    from marketplace.devnet.cli import configure\n"
    )
    found = set(imports_in(source, "marketplace.indexer"))
    assert {
        "marketplace.devnet.anvil",
        "marketplace.devnet",
        "marketplace.devnet.client",
        "marketplace.devnet.cli",
    } <= found
    assert set(imports_of(PACKAGE / "devnet" / "node.py")) >= {"marketplace.devnet.anvil"}


def test_config_imports_nothing_above_it_but_the_terms_parser_left_to_move() -> None:
    # `config` is meant to be a leaf: everything needs settings, so an import from config to a
    # domain package turns the layering into a loop. The mail parsers and the notification rates
    # moved down into config/; the moderation terms file is still parsed by its domain (its
    # parser is the term filter's whole normalisation; issue 26). This list may only shrink.
    allowed = ("marketplace.config", "marketplace.moderation.terms")
    imported = {
        name
        for path in (PACKAGE / "config").rglob("*.py")
        for name in imports_of(path)
        if name.startswith("marketplace")
    }
    assert sorted(n for n in imported if not n.startswith(allowed)) == []

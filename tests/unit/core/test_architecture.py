"""Which package may import which: the import graph read from the source, without running it."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator, Mapping, Set
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
            # `from marketplace import shards` imports a module by its attribute name.
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
        "outbox",
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
    # would make the layers a cycle. The shared leaves (the event contract `events`, pagination,
    # types, errors) are allowed: they import nothing but each other; the outbox machinery that
    # follows the events (`outbox`) stands on storage, so storage may not import it.
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
            "outbox",
        )
    )
    paths = (PACKAGE / "storage").rglob("*.py")
    assert _offenders(paths, domains) == []


def test_the_event_contract_is_a_leaf() -> None:
    # Producers (repositories, shard commands, the indexer) and consumers both import the event
    # payload models; the contract itself imports no storage and none of the outbox machinery
    # (relay, consumer, leader: `marketplace.outbox`), only the other leaves and pydantic.
    allowed = ("marketplace.events", "marketplace.types", "marketplace.errors")
    imported = {
        name
        for path in (PACKAGE / "events").rglob("*.py")
        for name in imports_of(path)
        if name.startswith("marketplace")
    }
    assert sorted(n for n in imported if not n.startswith(allowed)) == []
    third_party = {
        name.split(".")[0]
        for path in (PACKAGE / "events").rglob("*.py")
        for name in imports_of(path)
        if not name.startswith("marketplace")
    }
    assert third_party <= {"__future__", "dataclasses", "datetime", "enum", "typing", "pydantic"}


# The dev stack (devstack/, its own distribution): `marketplace up`, its embedded servers, the
# devnet tooling. It imports the production package; never the other way round, not even lazily
# or by a "module:attribute" string: `serve` must run where it is not installed (the service's
# image), and the dev keys and web3's client stay out of it. Its commands reach the CLI through
# entry points (marketplace.cli.plugin_commands).
DEV_STACK = "marketplace_devstack"
_DEV_STACK_REFERENCE = re.compile(rf"{DEV_STACK}(\.\w*)*(:\w*)?")


def dev_stack_references(source: str, package: str) -> Iterator[str]:
    """What in ``source`` names the dev stack: an import of it, or a string that is a reference
    to one of its modules (``importlib.import_module("...")``, ``"module:attribute"``)."""
    for name in imports_in(source, package):
        if name == DEV_STACK or name.startswith(f"{DEV_STACK}."):
            yield f"import {name}"
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and _DEV_STACK_REFERENCE.fullmatch(node.value.strip())
        ):
            yield f"string {node.value!r}"


def test_the_production_package_never_names_the_dev_stack() -> None:
    found = sorted(
        f"{path.relative_to(PACKAGE)}: {reference}"
        for path in PACKAGE.rglob("*.py")
        for reference in dev_stack_references(
            path.read_text(encoding="utf-8"),
            ".".join(path.relative_to(PACKAGE.parent).parent.parts),
        )
    )
    assert found == []
    # Nor does the production package hold the dev stack's old homes.
    assert not (PACKAGE / "devnet").exists() and not (PACKAGE / "embedded").exists()


def test_the_dev_stack_check_sees_imports_and_references() -> None:
    source = (
        "import importlib\n"
        "from marketplace_devstack.embedded import stack\n"
        "def later(name: str) -> object:\n"
        "    import marketplace_devstack\n"
        "    importlib.import_module('marketplace_devstack.devnet.cli')\n"
        "    return importlib.import_module(f'marketplace_devstack.{name}')\n"
        "COMMAND = 'marketplace_devstack.commands:configure_up'\n"
        "HELP = 'the dev stack (marketplace_devstack) is not installed'\n"
    )
    assert sorted(dev_stack_references(source, "marketplace.cli")) == [
        "import marketplace_devstack",
        "import marketplace_devstack.embedded",
        "import marketplace_devstack.embedded.stack",
        "string 'marketplace_devstack.'",
        "string 'marketplace_devstack.commands:configure_up'",
        "string 'marketplace_devstack.devnet.cli'",
    ]


def test_the_import_walk_sees_every_form_of_import() -> None:
    # The checks above are only as good as this walk: a form it missed would pass silently.
    source = (
        "import marketplace.storage.pool\n"
        "from marketplace import shards\n"
        "from ..storage import rows\n"
        "def later() -> None:\n"
        "    from marketplace.http.app import create_app\n"
    )
    found = set(imports_in(source, "marketplace.indexer"))
    assert {
        "marketplace.storage.pool",
        "marketplace.shards",
        "marketplace.storage.rows",
        "marketplace.http.app",
    } <= found
    assert set(imports_of(PACKAGE / "identity" / "cli.py")) >= {"marketplace.config.data_dir"}


# The package-level layers, lowest first. A package may import its own layer or a lower one,
# and the package graph has no loop (within a layer too): a change low in the stack never needs
# one above it. A new top-level module or package must be placed here on purpose.
LAYERS: tuple[tuple[str, ...], ...] = (
    # Leaves: shared types, errors and helpers that import nothing of the package but each other.
    (
        "types",
        "errors",
        "aio",
        "ttl_cache",
        "interpreter",
        "logs",
        "metric_sources",
        "metrics",
        "gcra",
        "pagination",
        "events",
        "chain",
        "wordfilter",
    ),
    # Settings: raw values and their own parsing.
    ("config",),
    # Infrastructure every domain stands on.
    ("storage", "auth", "redis_client", "shards"),
    ("jobs", "outbox"),
    # Domains, which may use each other without a loop.
    (
        "identity",
        "legal",
        "records",
        "projects",
        "moderation",
        "messaging",
        "notifications",
        "verifier",
        "leaderboards",
        "indexer",
        "stream",
    ),
    ("deployment_figures",),
    ("actors",),
    ("http",),
    ("cli_commands", "cli", "__main__"),
)


def package_of(module: str) -> str | None:
    """The top-level package or module of ``marketplace`` that ``module`` belongs to."""
    parts = module.split(".")
    if parts[0] != "marketplace" or len(parts) < 2:
        return None
    name = parts[1]
    if (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").is_file():
        return name
    return None


@functools.cache
def package_graph() -> dict[str, frozenset[str]]:
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        source = package_of(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts))
        if source is None:
            continue
        targets = graph.setdefault(source, set())
        for name in imports_of(path):
            target = package_of(name)
            if target is not None and target != source:
                targets.add(target)
    return {source: frozenset(targets) for source, targets in graph.items()}


def loops(graph: Mapping[str, Set[str]]) -> list[list[str]]:
    """The strongly connected sets of more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            members: list[str] = []
            while True:
                member = stack.pop()
                members.append(member)
                if member == node:
                    break
            if len(members) > 1:
                found.append(sorted(members))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_package_has_a_layer() -> None:
    placed = {name for layer in LAYERS for name in layer}
    present = {
        path.stem if path.is_file() else path.name
        for path in PACKAGE.iterdir()
        if (path.is_dir() and (path / "__init__.py").is_file())
        or (path.suffix == ".py" and path.stem != "__init__")
    }
    assert sorted(present - placed) == []


def test_the_package_graph_has_no_loop() -> None:
    assert loops(package_graph()) == []


def test_no_package_imports_a_higher_layer() -> None:
    rank = {name: level for level, layer in enumerate(LAYERS) for name in layer}
    upward = sorted(
        f"{source} -> {target}"
        for source, targets in package_graph().items()
        for target in targets
        if rank.get(target, len(LAYERS)) > rank.get(source, -1)
    )
    assert upward == []


def test_the_loop_finder_finds_loops() -> None:
    assert loops({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert loops({"a": {"b"}, "b": set()}) == []

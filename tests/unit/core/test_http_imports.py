"""The HTTP package's imports run one way: ``keys`` is a leaf and nothing imports in a circle.

Imports under ``if TYPE_CHECKING:`` count too: a cycle hidden there still ties the modules
together (each has to know the other to be read or type-checked).
"""

from __future__ import annotations

import ast
from pathlib import Path

HTTP = Path(__file__).resolve().parents[3] / "marketplace" / "http"
PACKAGE = "marketplace.http"


def _module_name(path: Path) -> str:
    parts = path.relative_to(HTTP.parent.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _http_imports(path: Path) -> set[str]:
    return _imports_in(path.read_text(encoding="utf-8"), _module_name(path), path.name)


def _imports_in(source: str, module_name: str, file_name: str) -> set[str]:
    """The ``marketplace.http`` modules a source imports, wherever the import statement is."""
    package = module_name.split(".")
    if file_name != "__init__.py":
        package = package[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the file's package
                base = package[: len(package) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module == PACKAGE or (node.level and not node.module):
                found |= {f"{module}.{alias.name}" for alias in node.names}
            elif module.startswith(PACKAGE + "."):
                found.add(module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith(PACKAGE)}
    return found


def _graph() -> dict[str, set[str]]:
    return {_module_name(path): _http_imports(path) for path in HTTP.rglob("*.py")}


def test_keys_imports_no_other_http_module() -> None:
    imports = _http_imports(HTTP / "keys.py")
    assert imports == set(), f"marketplace/http/keys.py must stay a leaf, imports {imports}"


def test_the_checker_sees_type_checking_and_relative_imports() -> None:
    # The leaf test above is only as good as this parser: it must not miss the import forms
    # that created the original cycle.
    source = (
        "from typing import TYPE_CHECKING\n"
        "import asyncpg\n"
        "from marketplace.auth import Principal\n"
        "if TYPE_CHECKING:\n"
        "    from marketplace.http.routing import Route\n"
        "from . import ratelimit\n"
        "from .middlewares import request_context\n"
        "import marketplace.http.app\n"
    )
    assert _imports_in(source, "marketplace.http.keys", "keys.py") == {
        "marketplace.http.routing",
        "marketplace.http.ratelimit",
        "marketplace.http.middlewares",
        "marketplace.http.app",
    }


def test_http_modules_import_each_other_without_cycles() -> None:
    graph = _graph()
    assert "marketplace.http.routing" in graph and "marketplace.http.ratelimit" in graph
    # routing -> keys and ratelimit -> keys, never back.
    assert "marketplace.http.routing" not in graph["marketplace.http.ratelimit"]
    cycles: list[list[str]] = []
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph.get(module, ())):
            if state.get(target) == "open":
                cycles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []

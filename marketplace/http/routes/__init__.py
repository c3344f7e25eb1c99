"""Domain route modules. Every module in this package that defines ``routes`` (a RouteTable) is
registered by the app factory, and its optional ``setup(app)`` runs first, so a new capability is
a new module here and nothing in the core changes."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def discover() -> list[ModuleType]:
    modules = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "routes"):
            modules.append(module)
    return modules

"""Which external tools this node has for the policies, probed once per process.

A tool counts only when it runs: ``git --version``, ``node --version`` and ``npm --version``,
``cargo --version`` under the same minimal environment the test policies give it (the rustup
proxy needs ``RUSTUP_HOME``), ``forge --version`` (``$MARKETPLACE_FORGE_BIN``, else the binary of
the ``@foundry-rs/forge-linux-amd64`` npm package, else ``forge`` on ``PATH``), and a solc forge
can run whose ``--version`` prints a ``Version:`` line: a native one (``$MARKETPLACE_SOLC_BIN``
or ``solc`` on ``PATH``), else ``solcjs_cli.js``, a solc command line over the repository's
``solc`` npm package (solcjs). forge may not download a compiler: it runs with
``FOUNDRY_OFFLINE``.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
NPM_FORGE_BIN = REPO_ROOT / "node_modules" / "@foundry-rs" / "forge-linux-amd64" / "bin" / "forge"
FORGE_BIN_ENV = "MARKETPLACE_FORGE_BIN"
SOLC_BIN_ENV = "MARKETPLACE_SOLC_BIN"
SOLCJS_MODULE = REPO_ROOT / "node_modules" / "solc"
SOLCJS_SHIM = Path(__file__).resolve().parent / "solcjs_cli.js"
_PROBE_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Tooling:
    git: str | None
    node: str | None
    npm: str | None
    cargo: str | None
    # Where rustup keeps its toolchains; handed to cargo in the minimal environment.
    rustup_home: str | None
    forge: str | None
    # A solc command forge can run: native, or the solcjs shim (then the module it loads).
    solc: str | None
    solcjs_module: str | None = None

    def path_dirs(self) -> list[str]:
        """The directories of the tools found, for a child's ``PATH``."""
        dirs: list[str] = []
        for tool in (self.git, self.node, self.npm, self.cargo, self.forge, self.solc):
            if tool is not None and str(Path(tool).parent) not in dirs:
                dirs.append(str(Path(tool).parent))
        return dirs

    # The host paths each test policy's tools need inside the sandbox, bound read-only there
    # (the sandbox leaves out those under /usr and the other system directories it shows).

    def node_paths(self) -> list[str]:
        """node and npm (npm is a link to ``npm-cli.js`` in its package, which it needs)."""
        paths: list[str] = []
        for tool in (self.node, self.npm):
            if tool is not None:
                paths += _tool_paths(tool)
        if self.npm is not None:
            package = Path(self.npm).resolve().parent.parent
            if (package / "package.json").is_file():
                paths.append(str(package))
        return paths

    def cargo_paths(self) -> list[str]:
        """cargo (under rustup a proxy, beside the other proxies) and what the proxy reads of
        ``RUSTUP_HOME``: the toolchains, the settings and ``update-hashes`` (which the proxy
        creates when it is missing, and cannot on a read-only filesystem). Nothing of
        ``CARGO_HOME``: it may hold registry tokens."""
        if self.cargo is None:
            return []
        paths = _tool_paths(self.cargo)
        if self.rustup_home:
            home = Path(self.rustup_home)
            paths += [str(home / name) for name in ("toolchains", "settings.toml", "update-hashes")]
        return [p for p in paths if Path(p).exists()]

    def forge_paths(self) -> list[str]:
        """forge and the solc it runs: a native one, or the solcjs shim with node and the
        ``solc`` npm package with the packages it requires (not the whole node_modules)."""
        paths: list[str] = []
        if self.forge is not None:
            paths += _tool_paths(self.forge)
        if self.solc is not None and self.solcjs_module is not None:
            paths.append(self.solc)
            paths += node_package_closure(Path(self.solcjs_module))
            if self.node is not None:
                paths += _tool_paths(self.node)
        elif self.solc is not None:
            paths += _tool_paths(self.solc)
        return paths


def _tool_paths(tool: str) -> list[str]:
    """What a tool at ``tool`` needs visible: the directory of its path and of its resolved
    path (its siblings: a rustup proxy is a link to ``rustup`` beside it), or only the file
    when that directory is a top-level one or a home directory (never all of ``/root``)."""
    paths: list[str] = []
    home = Path.home().resolve()
    for path in dict.fromkeys([Path(os.path.abspath(tool)), Path(tool).resolve()]):
        parent = path.parent
        broad = len(parent.parts) <= 2 or parent == home or parent.parent == Path("/home")
        paths.append(str(path if broad else parent))
    return paths


def node_package_closure(package: Path) -> list[str]:
    """``package`` (a directory with a package.json) and every package its ``dependencies``
    and ``optionalDependencies`` resolve to, found as node does (the package's own
    node_modules, then each enclosing node_modules directory)."""
    found: list[str] = []
    queue = [package]
    while queue:
        current = queue.pop()
        if str(current) in found:
            continue
        found.append(str(current))
        try:
            manifest = json.loads((current / "package.json").read_text())
        except (OSError, ValueError):
            continue
        names: set[str] = set()
        for key in ("dependencies", "optionalDependencies"):
            deps = manifest.get(key)
            if isinstance(deps, dict):
                names |= {n for n in deps if isinstance(n, str)}
        for name in sorted(names):
            for modules in [current / "node_modules"] + [
                a for a in current.parents if a.name == "node_modules"
            ]:
                candidate = modules / name
                if (candidate / "package.json").is_file():
                    queue.append(candidate)
                    break
    return found


def _runs(argv: list[str], env: dict[str, str] | None = None, expect: str = "") -> bool:
    try:
        result = subprocess.run(
            argv,
            env=env,
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0 and expect in result.stdout


def _which(name: str) -> str | None:
    found = shutil.which(name)
    return str(Path(found).resolve()) if found and Path(found).is_file() else None


def _rustup_home() -> str | None:
    configured = os.environ.get("RUSTUP_HOME")
    candidate = Path(configured) if configured else Path.home() / ".rustup"
    return str(candidate) if candidate.is_dir() else None


def _probe_cargo() -> tuple[str | None, str | None]:
    cargo = shutil.which("cargo")
    if cargo is None:
        return None, None
    rustup_home = _rustup_home()
    with tempfile.TemporaryDirectory(prefix="mkt-probe-") as home:
        env = {"HOME": home, "PATH": f"{Path(cargo).parent}:/usr/bin:/bin"}
        if rustup_home:
            env["RUSTUP_HOME"] = rustup_home
        if not _runs([cargo, "--version"], env):
            return None, None
    # Not resolved: under rustup, `cargo` is a proxy whose name picks the tool.
    return cargo, rustup_home


def _probe_solc(node: str | None) -> tuple[str | None, str | None]:
    """A native solc (``$MARKETPLACE_SOLC_BIN`` or ``solc`` on ``PATH``), else the solcjs shim
    over the repository's ``solc`` npm package; with the shim, the module path it loads."""
    native = os.environ.get(SOLC_BIN_ENV) or shutil.which("solc")
    if native is not None and _runs([native, "--version"], expect="Version:"):
        return native, None
    if node is None or not (SOLCJS_MODULE / "package.json").is_file():
        return None, None
    env = {"PATH": f"{Path(node).parent}:/usr/bin:/bin", "SOLCJS_MODULE": str(SOLCJS_MODULE)}
    if not _runs([str(SOLCJS_SHIM), "--version"], env, expect="Version:"):
        return None, None
    return str(SOLCJS_SHIM), str(SOLCJS_MODULE)


def _probe_forge() -> str | None:
    override = os.environ.get(FORGE_BIN_ENV)
    candidates = [override] if override else [str(NPM_FORGE_BIN), shutil.which("forge")]
    forge = next((c for c in candidates if c and Path(c).is_file() and os.access(c, os.X_OK)), None)
    return forge if forge is not None and _runs([forge, "--version"]) else None


@functools.cache
def probe() -> Tooling:
    git = _which("git")
    if git is not None and not _runs([git, "--version"]):
        git = None
    node, npm = _which("node"), shutil.which("npm")
    if (
        node is None
        or npm is None
        or not (_runs([node, "--version"]) and _runs([npm, "--version"]))
    ):
        node = npm = None
    cargo, rustup_home = _probe_cargo()
    forge = _probe_forge()
    solc, solcjs_module = _probe_solc(node) if forge else (None, None)
    return Tooling(
        git=git,
        node=node,
        npm=npm,
        cargo=cargo,
        rustup_home=rustup_home,
        forge=forge,
        solc=solc,
        solcjs_module=solcjs_module,
    )

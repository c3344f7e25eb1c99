"""Compiled contract artifacts shipped as package data, and the source digest that ties them to
``contracts/*.sol``.

``scripts/build_contracts.js`` writes ``marketplace/chain/artifacts/<ContractName>.json``
(``contractName``, ``abi``, ``bytecode``, ``deployedBytecode``) and ``sources.sha256``.
:func:`sources_digest` recomputes the digest from the repository's ``contracts/`` directory
exactly the way the build script does, so a test can detect a ``.sol`` edit without a rebuild.
"""

from __future__ import annotations

import functools
import hashlib
import json
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import NotRequired, TypedDict, cast

DIGEST_FILE = "sources.sha256"

# marketplace/chain/artifacts.py -> repository root is three levels up.
REPO_ROOT = Path(__file__).resolve().parents[2]
CONTRACTS_DIR = REPO_ROOT / "contracts"


class AbiParam(TypedDict):
    """One input or output of an ABI entry (a struct's members are its ``components``)."""

    name: str
    type: str
    internalType: NotRequired[str]
    components: NotRequired[list[AbiParam]]
    indexed: NotRequired[bool]  # event inputs only


class AbiEntry(TypedDict):
    """One entry of a contract's ABI (a function, an event, an error, the constructor...)."""

    type: str
    name: NotRequired[str]  # every function, event and error has one
    inputs: NotRequired[list[AbiParam]]
    outputs: NotRequired[list[AbiParam]]  # functions only
    stateMutability: NotRequired[str]
    anonymous: NotRequired[bool]  # events only


class Artifact(TypedDict):
    """A compiled contract as ``scripts/build_contracts.js`` writes it."""

    contractName: str
    abi: list[AbiEntry]
    bytecode: str
    deployedBytecode: str


class ArtifactNotFound(LookupError):
    """No compiled artifact with that contract name."""


def artifacts_dir() -> Traversable:
    """The packaged artifacts directory (works from a source tree and from an installed wheel)."""
    return resources.files("marketplace.chain").joinpath("artifacts")


@functools.cache
def _load(name: str) -> str:
    path = artifacts_dir().joinpath(f"{name}.json")
    if not path.is_file():
        raise ArtifactNotFound(f"no artifact {name}.json; run `node scripts/build_contracts.js`")
    return path.read_text(encoding="utf-8")


def load_artifact(name: str) -> Artifact:
    """``{"contractName", "abi", "bytecode", "deployedBytecode"}`` for a deployable contract
    (``TestUSDC``, ``MarketplaceEscrow``, ``MarketplaceRegistry``, ``MarketplaceProject``).
    Bytecode strings carry a ``0x`` prefix. Returns a fresh dict on every call."""
    return cast(Artifact, json.loads(_load(name)))


def artifact_names() -> list[str]:
    """Names of every compiled contract, sorted."""
    return sorted(
        entry.name.removesuffix(".json")
        for entry in artifacts_dir().iterdir()
        if entry.name.endswith(".json")
    )


def _read_digest_file() -> dict[str, str]:
    text = artifacts_dir().joinpath(DIGEST_FILE).read_text(encoding="utf-8")
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        fields[key.strip()] = value.strip()
    return fields


def artifacts_digest() -> str:
    """The source digest recorded by the build that produced the committed artifacts."""
    return _read_digest_file()["sha256"]


def artifacts_solc_version() -> str:
    """The solc (solcjs package) version that produced the committed artifacts."""
    return _read_digest_file()["solc"]


def sources_digest(contracts_dir: Path | None = None, *, solc_version: str | None = None) -> str:
    """sha256 over ``contracts/*.sol`` sorted by file name, each as
    ``"<name>\\n<byte length>\\n<raw bytes>\\n"``, followed by ``"solc <version>\\n"``.

    ``solc_version`` defaults to the version recorded in ``sources.sha256``, so the result equals
    :func:`artifacts_digest` exactly when no source changed since the last build. Raises
    ``FileNotFoundError`` when the contracts directory is absent (an installed wheel has none).
    """
    directory = contracts_dir or CONTRACTS_DIR
    if not directory.is_dir():
        raise FileNotFoundError(f"contracts directory not found: {directory}")
    version = solc_version if solc_version is not None else artifacts_solc_version()
    digest = hashlib.sha256()
    for path in sorted(directory.glob("*.sol"), key=lambda p: p.name):
        content = path.read_bytes()
        digest.update(f"{path.name}\n{len(content)}\n".encode())
        digest.update(content)
        digest.update(b"\n")
    digest.update(f"solc {version}\n".encode())
    return digest.hexdigest()

"""Fixture repositories and servers shared by the policy tests (tests/support/verifier_fixtures)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.verifier_fixtures import (
    GitRepo,
    WebFixture,
    cargo_repo,
    forge_repo,
    npm_repo,
    web_fixture,
)


@pytest.fixture(scope="package")
def git_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("git-repos")


@pytest.fixture(scope="package")
def npm_fixture(git_root: Path) -> GitRepo:
    return npm_repo(git_root)


@pytest.fixture(scope="package")
def cargo_fixture(git_root: Path) -> GitRepo:
    return cargo_repo(git_root)


@pytest.fixture(scope="package")
def forge_fixture(git_root: Path) -> GitRepo:
    return forge_repo(git_root)


@pytest.fixture(scope="package")
async def web(git_root: Path, npm_fixture: GitRepo) -> AsyncIterator[WebFixture]:
    async with web_fixture(git_root=git_root, big_bytes=300_000) as server:
        yield server

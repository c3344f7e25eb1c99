"""Which policies a node offers follows the tools it really has (probed by running them)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from marketplace.verifier.policies import available_policies, run_policy
from marketplace.verifier.policies.tooling import FORGE_BIN_ENV, SOLC_BIN_ENV, probe
from marketplace.verifier.policy import PolicyId, TransientPolicyError
from tests.support.verifier_fixtures import context, local_settings

ALWAYS = [PolicyId.ADDRESS_SMOKE, PolicyId.FIGMA_REF, PolicyId.SCREENSHOT_REF]


@pytest.fixture
def fresh_probe(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """The probe is cached per process: clear it around a test that changes the tools."""
    monkeypatch.delenv(FORGE_BIN_ENV, raising=False)
    monkeypatch.delenv(SOLC_BIN_ENV, raising=False)
    probe.cache_clear()
    try:
        yield monkeypatch
    finally:
        monkeypatch.undo()
        probe.cache_clear()


def test_this_node_offers_what_it_has() -> None:
    tools = probe()
    offered = available_policies(local_settings())
    assert offered == [pid for pid in PolicyId if pid in offered]  # enum order
    assert (PolicyId.GITHUB_REF in offered) == (tools.git is not None)
    assert (PolicyId.NPM_TEST in offered) == (tools.npm is not None and tools.git is not None)
    assert (PolicyId.CARGO_TEST in offered) == (tools.cargo is not None and tools.git is not None)
    # forge alone is not enough: it needs a native solc, and may not download one.
    assert (PolicyId.FORGE_TEST in offered) == (tools.forge is not None and tools.solc is not None)
    assert set(ALWAYS) <= set(offered)


async def test_no_tools_on_path(fresh_probe: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fresh_probe.setenv("PATH", str(tmp_path))
    assert available_policies(local_settings()) == ALWAYS
    # A job that reaches such a node is retried elsewhere, never passed unchecked.
    for policy in (PolicyId.NPM_TEST, PolicyId.FORGE_TEST, PolicyId.GITHUB_REF):
        with pytest.raises(TransientPolicyError):
            await run_policy(policy, "acme/widget@main", context(tmp_path, local_settings()))


def test_forge_needs_a_native_solc(fresh_probe: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """forge and a native solc cannot be installed on this machine (no registry ships a native
    solc here), so two stand-in scripts that answer ``--version`` like them show the probe's
    rule: forge without solc is not offered; with one, it is."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    forge = bin_dir / "forge"
    forge.write_text("#!/bin/sh\necho 'forge Version: 1.7.1'\n")
    forge.chmod(0o755)
    fresh_probe.setenv(FORGE_BIN_ENV, str(forge))
    fresh_probe.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    assert PolicyId.FORGE_TEST not in available_policies(local_settings())
    assert probe().forge == str(forge) and probe().solc is None
    solc = bin_dir / "solc"
    solc.write_text("#!/bin/sh\necho 'Version: 0.8.30+commit.73712a01.Linux.g++'\n")
    solc.chmod(0o755)
    probe.cache_clear()
    assert PolicyId.FORGE_TEST in available_policies(local_settings())

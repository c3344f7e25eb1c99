"""Which policies a node offers follows the tools it really has (probed by running them) and,
for the test policies, whether the sandbox runs them: never offered to run unsandboxed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from marketplace.verifier.policies import available_policies, run_policy
from marketplace.verifier.policies.tooling import FORGE_BIN_ENV, SOLC_BIN_ENV, probe
from marketplace.verifier.policy import PolicyId, TransientPolicyError
from marketplace.verifier.sandbox import sandbox_unavailable_reason
from tests.support.verifier_fixtures import context, local_settings

ALWAYS = [PolicyId.ADDRESS_SMOKE, PolicyId.FIGMA_REF, PolicyId.SCREENSHOT_REF]


@pytest.fixture
def fresh_probe(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """The probe is cached per process: clear it around a test that changes the tools."""
    monkeypatch.delenv(SOLC_BIN_ENV, raising=False)
    probe.cache_clear()
    sandbox_unavailable_reason.cache_clear()
    try:
        yield monkeypatch
    finally:
        monkeypatch.undo()
        probe.cache_clear()
        sandbox_unavailable_reason.cache_clear()


def test_this_node_offers_what_it_has() -> None:
    tools = probe()
    sandbox = sandbox_unavailable_reason() is None
    offered = available_policies(local_settings())
    assert offered == [pid for pid in PolicyId if pid in offered]  # enum order
    assert (PolicyId.GITHUB_REF in offered) == (tools.git is not None)
    has_git = tools.git is not None and sandbox
    assert (PolicyId.NPM_TEST in offered) == (tools.npm is not None and has_git)
    assert (PolicyId.CARGO_TEST in offered) == (tools.cargo is not None and has_git)
    # forge alone is not enough: it needs a native solc, and may not download one.
    forge = tools.forge is not None and tools.solc is not None
    assert (PolicyId.FORGE_TEST in offered) == (forge and has_git)
    assert set(ALWAYS) <= set(offered)


async def test_no_sandbox_no_test_policies(fresh_probe: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every tool present, but no bwrap: the test policies are not offered, and a job that
    reaches this node anyway is retried elsewhere, never run unsandboxed."""
    tools = probe()
    assert tools.git and tools.npm and tools.node and tools.cargo
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in (tools.git, tools.node, tools.npm, tools.cargo):
        (bin_dir / Path(tool).name).symlink_to(tool)
    probe.cache_clear()
    fresh_probe.setenv("PATH", str(bin_dir))
    assert probe().npm is not None and probe().cargo is not None
    assert sandbox_unavailable_reason() == "bwrap not found (install the bubblewrap package)"
    offered = available_policies(local_settings())
    assert PolicyId.GITHUB_REF in offered
    assert not {PolicyId.NPM_TEST, PolicyId.CARGO_TEST, PolicyId.FORGE_TEST} & set(offered)
    for policy in (PolicyId.NPM_TEST, PolicyId.CARGO_TEST, PolicyId.FORGE_TEST):
        with pytest.raises(TransientPolicyError):
            await run_policy(policy, "acme/widget@main", context(tmp_path, local_settings()))


async def test_no_tools_on_path(fresh_probe: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fresh_probe.delenv(FORGE_BIN_ENV, raising=False)
    fresh_probe.setenv("PATH", str(tmp_path))
    assert available_policies(local_settings()) == ALWAYS
    # A job that reaches such a node is retried elsewhere, never passed unchecked.
    for policy in (PolicyId.NPM_TEST, PolicyId.FORGE_TEST, PolicyId.GITHUB_REF):
        with pytest.raises(TransientPolicyError):
            await run_policy(policy, "acme/widget@main", context(tmp_path, local_settings()))


def test_forge_needs_a_solc(fresh_probe: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """forge alone is not offered: without node (for the solcjs shim) and without a native
    solc there is no compiler it may use, and it may not download one."""
    forge = probe().forge
    assert forge is not None, "forge is installed by scripts/setup (package.json)"
    probe.cache_clear()
    fresh_probe.setenv(FORGE_BIN_ENV, forge)
    fresh_probe.setenv("PATH", str(tmp_path))
    tools = probe()
    assert tools.forge == forge and tools.solc is None
    assert PolicyId.FORGE_TEST not in available_policies(local_settings())

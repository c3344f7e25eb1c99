"""``npm-test`` and ``cargo-test`` on tiny fixture repositories (no dependencies, so no network):
fetched at the ref over ``file://`` and run under the sandbox's limits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from marketplace.verifier.evidence import evidence_hash
from marketplace.verifier.policies import run_policy
from marketplace.verifier.policy import PolicyId, PolicyOutcome
from tests.support.verifier_fixtures import GitRepo, context, local_settings


async def _run(
    policy: PolicyId, ref: str, git_root: Path, tmp_path: Path, **settings: Any
) -> PolicyOutcome:
    values: dict[str, Any] = {"verifier_git_base_url": f"file://{git_root}", **settings}
    return await run_policy(policy, ref, context(tmp_path, local_settings(**values)))


async def test_npm_passing_commit(npm_fixture: GitRepo, git_root: Path, tmp_path: Path) -> None:
    outcome = await _run(PolicyId.NPM_TEST, f"{npm_fixture.slug}@v-pass", git_root, tmp_path)
    assert outcome.passes, outcome.logs
    assert outcome.evidence["commit"] == npm_fixture.commits["pass"]
    assert outcome.evidence["commands"] == [
        {"command": "npm ci", "exitCode": 0, "timedOut": False},
        {"command": "npm test", "exitCode": 0, "timedOut": False},
    ]
    assert outcome.evidence["reason"] == "passed"
    assert "$ " in outcome.logs and "ok" in outcome.logs
    # Durations are not evidence: the same commit gives the same hash.
    again = await _run(PolicyId.NPM_TEST, f"{npm_fixture.slug}@v-pass", git_root, tmp_path)
    assert evidence_hash(again.evidence) == evidence_hash(outcome.evidence)
    assert all("durationMs" in command for command in outcome.raw["commands"])


async def test_npm_failing_commit(npm_fixture: GitRepo, git_root: Path, tmp_path: Path) -> None:
    sha = npm_fixture.commits["fail"]
    outcome = await _run(PolicyId.NPM_TEST, f"{npm_fixture.slug}@{sha}", git_root, tmp_path)
    assert not outcome.passes
    assert outcome.evidence["commit"] == sha
    assert outcome.evidence["reason"] == "exit_nonzero"
    assert outcome.evidence["commands"][-1] == {
        "command": "npm test",
        "exitCode": 1,
        "timedOut": False,
    }
    assert "1 failing" in outcome.logs


async def test_npm_timeout_is_a_negative_result(
    npm_fixture: GitRepo, git_root: Path, tmp_path: Path
) -> None:
    outcome = await _run(
        PolicyId.NPM_TEST,
        f"{npm_fixture.slug}@hang",
        git_root,
        tmp_path,
        verifier_command_timeout_seconds=4.0,
    )
    assert not outcome.passes
    assert outcome.evidence["reason"] == "timeout"
    assert outcome.evidence["commands"][-1]["timedOut"] is True
    assert outcome.evidence["limits"]["timeoutMs"] == 4000


async def test_npm_output_is_bounded(npm_fixture: GitRepo, git_root: Path, tmp_path: Path) -> None:
    outcome = await _run(
        PolicyId.NPM_TEST,
        f"{npm_fixture.slug}@flood",
        git_root,
        tmp_path,
        verifier_max_log_bytes=2048,
    )
    assert outcome.passes
    assert len(outcome.logs.encode()) <= 2048
    assert "cut" in outcome.logs
    assert outcome.raw["commands"][-1]["outputTruncated"] is True


async def test_npm_missing_ref(npm_fixture: GitRepo, git_root: Path, tmp_path: Path) -> None:
    outcome = await _run(PolicyId.NPM_TEST, f"{npm_fixture.slug}@nope", git_root, tmp_path)
    assert not outcome.passes
    assert outcome.evidence["reason"] == "ref_not_found"
    assert outcome.evidence["commands"] == []


async def test_cargo_passing_and_failing(
    cargo_fixture: GitRepo, git_root: Path, tmp_path: Path
) -> None:
    passing = await _run(
        PolicyId.CARGO_TEST, f"{cargo_fixture.slug}@v-pass", git_root, tmp_path / "pass"
    )
    assert passing.passes, passing.logs
    assert passing.evidence["commit"] == cargo_fixture.commits["pass"]
    assert passing.evidence["commands"] == [
        {"command": "cargo test", "exitCode": 0, "timedOut": False}
    ]
    failing = await _run(
        PolicyId.CARGO_TEST, f"{cargo_fixture.slug}@v-fail", git_root, tmp_path / "fail"
    )
    assert not failing.passes
    assert failing.evidence["reason"] == "exit_nonzero"
    assert failing.evidence["commands"][0]["exitCode"] == 101
    assert "assertion" in failing.logs


async def test_forge_passing_and_failing(
    forge_fixture: GitRepo, git_root: Path, tmp_path: Path
) -> None:
    """forge from the ``@foundry-rs/forge-linux-amd64`` npm package, compiling offline with
    the solcjs shim (or a native solc where the node has one)."""
    passing = await _run(
        PolicyId.FORGE_TEST, f"{forge_fixture.slug}@v-pass", git_root, tmp_path / "pass"
    )
    assert passing.passes, passing.logs
    assert passing.evidence["commit"] == forge_fixture.commits["pass"]
    assert passing.evidence["commands"] == [
        {"command": "forge test", "exitCode": 0, "timedOut": False}
    ]
    assert "[PASS] test_increment()" in passing.logs
    failing = await _run(
        PolicyId.FORGE_TEST, f"{forge_fixture.slug}@v-fail", git_root, tmp_path / "fail"
    )
    assert not failing.passes
    assert failing.evidence["reason"] == "exit_nonzero"
    assert "[FAIL" in failing.logs

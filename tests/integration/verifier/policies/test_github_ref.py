"""``github-ref`` against real git repositories: over ``file://`` and over HTTP (git's "dumb"
protocol, served by a local aiohttp server, which also exercises the pinned address)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from marketplace.verifier.evidence import evidence_hash
from marketplace.verifier.policies import run_policy
from marketplace.verifier.policy import PolicyId, PolicyOutcome, TransientPolicyError
from tests.support.verifier_fixtures import (
    GitRepo,
    WebFixture,
    context,
    free_port,
    local_settings,
)


async def _run(ref: str, git_root: Path, tmp_path: Path, **settings: Any) -> PolicyOutcome:
    values: dict[str, Any] = {"verifier_git_base_url": f"file://{git_root}", **settings}
    return await run_policy(PolicyId.GITHUB_REF, ref, context(tmp_path, local_settings(**values)))


async def test_branch_resolves_to_its_head(
    npm_fixture: GitRepo, git_root: Path, tmp_path: Path
) -> None:
    outcome = await _run(f"{npm_fixture.slug}@main", git_root, tmp_path)
    assert outcome.passes
    assert outcome.evidence["commit"] == npm_fixture.commits["fail"]
    assert outcome.evidence["refName"] == "refs/heads/main"
    assert outcome.evidence["refKind"] == "branch"
    assert outcome.evidence["repository"] == "acme/npm-fixture"


@pytest.mark.parametrize("tag", ["v-pass", "v-annotated", "refs/tags/v-annotated"])
async def test_tags_resolve_to_the_tagged_commit(
    tag: str, npm_fixture: GitRepo, git_root: Path, tmp_path: Path
) -> None:
    outcome = await _run(f"{npm_fixture.slug}@{tag}", git_root, tmp_path)
    assert outcome.passes
    # An annotated tag is peeled to its commit, not the tag object.
    assert outcome.evidence["commit"] == npm_fixture.commits["pass"]
    assert outcome.evidence["refKind"] == "tag"


async def test_full_commit_that_is_no_ref_tip(
    npm_fixture: GitRepo, git_root: Path, tmp_path: Path
) -> None:
    # "hang" is the parent of the "flood" branch's head: reachable, but no ref points at it.
    sha = npm_fixture.commits["hang"]
    outcome = await _run(f"{npm_fixture.slug}@{sha}", git_root, tmp_path)
    assert outcome.passes
    assert outcome.evidence["commit"] == sha
    assert outcome.evidence["refKind"] == "commit"
    assert outcome.evidence["refName"] is None


@pytest.mark.parametrize(
    ("ref", "reason"),
    [
        ("acme/npm-fixture@no-such-branch", "ref_not_found"),
        ("acme/npm-fixture@" + "0" * 40, "ref_not_found"),
        ("acme/no-such-repo@main", "repository_not_found"),
    ],
)
async def test_missing_is_a_negative_result(
    ref: str, reason: str, npm_fixture: GitRepo, git_root: Path, tmp_path: Path
) -> None:
    outcome = await _run(ref, git_root, tmp_path)
    assert not outcome.passes
    assert outcome.evidence["reason"] == reason
    assert outcome.evidence["commit"] is None


async def test_evidence_is_reproducible(
    npm_fixture: GitRepo, git_root: Path, tmp_path: Path
) -> None:
    first = await _run(f"{npm_fixture.slug}@v-pass", git_root, tmp_path / "a")
    second = await _run(f"{npm_fixture.slug}@v-pass", git_root, tmp_path / "b")
    assert evidence_hash(first.evidence) == evidence_hash(second.evidence)


async def test_over_http_with_the_host_pinned(
    web: WebFixture, npm_fixture: GitRepo, tmp_path: Path
) -> None:
    # "localhost" is resolved and checked once, then pinned (http.curloptResolve).
    base = web.url("/git").replace("127.0.0.1", "localhost")
    outcome = await _run(
        f"{npm_fixture.slug}@v-pass", Path("/unused"), tmp_path, verifier_git_base_url=base
    )
    assert outcome.passes
    assert outcome.evidence["commit"] == npm_fixture.commits["pass"]
    assert outcome.evidence["repositoryUrl"] == f"{base}/acme/npm-fixture.git"
    assert web.hits.get("/git/acme/npm-fixture.git/info/refs", 0) >= 1


async def test_git_host_down_is_transient(npm_fixture: GitRepo, tmp_path: Path) -> None:
    base = f"http://127.0.0.1:{free_port()}/git"
    with pytest.raises(TransientPolicyError):
        await _run(
            f"{npm_fixture.slug}@main", Path("/unused"), tmp_path, verifier_git_base_url=base
        )


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_private_git_host_refused(
    host: str, web: WebFixture, npm_fixture: GitRepo, tmp_path: Path
) -> None:
    base = web.url("/git").replace("127.0.0.1", host)
    hits_before = dict(web.hits)
    outcome = await _run(
        f"{npm_fixture.slug}@main",
        Path("/unused"),
        tmp_path,
        verifier_git_base_url=base,
        verifier_allow_private_hosts=False,
    )
    assert not outcome.passes
    assert outcome.evidence["reason"] == "host_refused"
    assert web.hits == hits_before


async def test_file_base_url_refused_without_private_hosts(
    npm_fixture: GitRepo, git_root: Path, tmp_path: Path
) -> None:
    outcome = await _run(
        f"{npm_fixture.slug}@main", git_root, tmp_path, verifier_allow_private_hosts=False
    )
    assert not outcome.passes
    assert outcome.evidence["reason"] == "host_refused"

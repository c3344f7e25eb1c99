"""``screenshot-ref`` and ``figma-ref`` against a real local HTTP server (aiohttp on 127.0.0.1)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from marketplace.verifier.evidence import evidence_hash
from marketplace.verifier.policies import run_policy
from marketplace.verifier.policy import PolicyId, PolicyOutcome, TransientPolicyError
from tests.support.verifier_fixtures import (
    PNG_1X1,
    WebFixture,
    context,
    local_settings,
    web_fixture,
)

CID = "bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi"


async def screenshot(url: str, tmp_path: Path, **settings: Any) -> PolicyOutcome:
    ctx = context(tmp_path, local_settings(**settings))
    return await run_policy(PolicyId.SCREENSHOT_REF, url, ctx)


async def figma(url: str, web: WebFixture, tmp_path: Path) -> PolicyOutcome:
    ctx = context(tmp_path, local_settings(verifier_figma_host=web.authority))
    return await run_policy(PolicyId.FIGMA_REF, url, ctx)


async def test_png_passes(web: WebFixture, tmp_path: Path) -> None:
    outcome = await screenshot(web.url("/img/ok.png"), tmp_path)
    assert outcome.passes
    assert outcome.evidence["format"] == "png"
    assert outcome.evidence["contentType"] == "image/png"
    assert outcome.evidence["size"] == len(PNG_1X1)
    assert outcome.evidence["sha256"] == hashlib.sha256(PNG_1X1).hexdigest()
    again = await screenshot(web.url("/img/ok.png"), tmp_path)
    assert evidence_hash(again.evidence) == evidence_hash(outcome.evidence)


async def test_ipfs_through_the_gateway(web: WebFixture, tmp_path: Path) -> None:
    outcome = await screenshot(
        f"ipfs://{CID}/shot.png", tmp_path, verifier_ipfs_gateway_url=web.base
    )
    assert outcome.passes
    assert outcome.evidence["url"] == f"ipfs://{CID}/shot.png"
    assert outcome.evidence["fetchUrl"] == web.url(f"/ipfs/{CID}/shot.png")


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/img/fake.png", "magic_mismatch"),  # text/html labelled image/png
        ("/img/page.html", "not_an_image_type"),
        ("/img/missing.png", "http_status"),
        ("/loop", "too_many_redirects"),
    ],
)
async def test_not_an_image(path: str, reason: str, web: WebFixture, tmp_path: Path) -> None:
    outcome = await screenshot(web.url(path), tmp_path)
    assert not outcome.passes
    assert outcome.evidence["reason"] == reason


async def test_oversized_image_stops_at_the_limit(web: WebFixture, tmp_path: Path) -> None:
    outcome = await screenshot(web.url("/img/big.png"), tmp_path, verifier_max_image_bytes=100_000)
    assert not outcome.passes
    assert outcome.evidence["reason"] == "too_large"
    assert outcome.evidence["sizeLimit"] == 100_000
    # The same image within a larger limit passes: the limit is what refused it.
    bigger = await screenshot(web.url("/img/big.png"), tmp_path, verifier_max_image_bytes=400_000)
    assert bigger.passes and bigger.evidence["size"] > 100_000


async def test_redirect_followed_and_recorded(web: WebFixture, tmp_path: Path) -> None:
    outcome = await screenshot(web.url("/redirect?to=/img/ok.png"), tmp_path)
    assert outcome.passes
    assert [hop["status"] for hop in outcome.evidence["hops"]] == [302, 200]
    assert outcome.evidence["hops"][-1]["url"] == web.url("/img/ok.png")


async def test_server_error_is_transient_then_passes(web: WebFixture, tmp_path: Path) -> None:
    url = web.url("/img/flaky.png")
    with pytest.raises(TransientPolicyError):
        await screenshot(url, tmp_path)
    outcome = await screenshot(url, tmp_path)
    assert outcome.passes


async def test_stopped_server_is_transient(tmp_path: Path) -> None:
    async with web_fixture() as server:
        url = server.url("/img/ok.png")
    with pytest.raises(TransientPolicyError):
        await screenshot(url, tmp_path)


async def test_private_host_refused_without_the_setting(web: WebFixture, tmp_path: Path) -> None:
    before = web.hits.get("/img/ok.png", 0)
    for url in (
        web.url("/img/ok.png").replace("http://", "https://"),
        web.url("/img/ok.png").replace("http://127.0.0.1", "https://localhost"),
    ):
        outcome = await screenshot(url, tmp_path, verifier_allow_private_hosts=False)
        assert not outcome.passes
        assert outcome.evidence["reason"] == "host_refused"
    assert web.hits.get("/img/ok.png", 0) == before


async def test_figma_answers_200(web: WebFixture, tmp_path: Path) -> None:
    outcome = await figma(web.url("/design/AbC123/Landing?node-id=1-2"), web, tmp_path)
    assert outcome.passes
    assert outcome.evidence["fileKey"] == "AbC123"
    assert outcome.evidence["kind"] == "design"
    assert outcome.evidence["status"] == 200


async def test_figma_missing_file(web: WebFixture, tmp_path: Path) -> None:
    outcome = await figma(web.url("/file/missing/x"), web, tmp_path)
    assert not outcome.passes
    assert outcome.evidence["status"] == 404
    assert outcome.evidence["reason"] == "http_status"


async def test_figma_unavailable_is_transient_then_passes(web: WebFixture, tmp_path: Path) -> None:
    url = web.url("/proto/flaky/x")
    with pytest.raises(TransientPolicyError):
        await figma(url, web, tmp_path)
    assert (await figma(url, web, tmp_path)).passes

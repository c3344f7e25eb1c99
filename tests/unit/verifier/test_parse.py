"""Reading ``deliveryRef`` for each policy: the accepted forms and the 400s."""

from __future__ import annotations

import pytest

from marketplace.config import Settings
from marketplace.verifier.policies import POLICIES, parse_delivery_ref
from marketplace.verifier.policies.gitrepo import RepoRef
from marketplace.verifier.policies.web import FigmaRef, ScreenshotRef, sniff_image
from marketplace.verifier.policy import InvalidDeliveryRef, PolicyId

SETTINGS = Settings()
PRIVATE = Settings(verifier_allow_private_hosts=True)


def test_every_policy_is_registered_in_enum_order() -> None:
    assert list(POLICIES) == list(PolicyId)
    assert all(POLICIES[pid].id == pid for pid in PolicyId)


@pytest.mark.parametrize(
    "text",
    [
        "acme/widget@main",
        "acme/widget.git@main",
        "https://github.com/acme/widget@main",
        "https://github.com/acme/widget.git@main",
        "https://GitHub.com/acme/widget.git@main",
    ],
)
@pytest.mark.parametrize(
    "policy", [PolicyId.GITHUB_REF, PolicyId.NPM_TEST, PolicyId.CARGO_TEST, PolicyId.FORGE_TEST]
)
def test_repository_forms(text: str, policy: PolicyId) -> None:
    ref = parse_delivery_ref(policy, text, SETTINGS)
    assert ref == RepoRef("acme", "widget", "main", "https://github.com/acme/widget.git")


def test_ref_kinds_kept_verbatim() -> None:
    sha = "a" * 40
    assert parse_delivery_ref(PolicyId.GITHUB_REF, f"o/r@{sha}", SETTINGS).ref == sha
    assert parse_delivery_ref(PolicyId.GITHUB_REF, "o/r@v1.2.3", SETTINGS).ref == "v1.2.3"
    assert parse_delivery_ref(PolicyId.GITHUB_REF, "o/r@feat/x", SETTINGS).ref == "feat/x"


def test_repository_on_the_configured_host() -> None:
    settings = Settings(verifier_git_base_url="https://git.example.org/")
    ref = parse_delivery_ref(PolicyId.GITHUB_REF, "https://git.example.org/o/r@main", settings)
    assert ref.url == "https://git.example.org/o/r.git"
    with pytest.raises(InvalidDeliveryRef):
        parse_delivery_ref(PolicyId.GITHUB_REF, "https://github.com/o/r@main", settings)


@pytest.mark.parametrize(
    "text",
    [
        "acme/widget",
        "acme/widget@",
        "acme@main",
        "a/b/c@main",
        "https://gitlab.com/acme/widget@main",
        "http://github.com/acme/widget@main",
        "https://user:pw@github.com/acme/widget@main",
        "acme/widget@-upload-pack=x",
        "acme/widget@a..b",
        "acme/widget@ma in",
        "../widget@main",
        "acme/..@main",
        "acme/widget@main.lock",
    ],
)
def test_repository_refused(text: str) -> None:
    with pytest.raises(InvalidDeliveryRef):
        parse_delivery_ref(PolicyId.GITHUB_REF, text, SETTINGS)


def test_address_forms() -> None:
    lower = "0x" + "ab" * 20
    checksummed = parse_delivery_ref(PolicyId.ADDRESS_SMOKE, lower, SETTINGS)
    assert checksummed.lower() == lower and checksummed != lower
    assert parse_delivery_ref(PolicyId.ADDRESS_SMOKE, checksummed, SETTINGS) == checksummed
    bad_checksum = checksummed[:2] + checksummed[2:].swapcase()
    for text in ("0x1234", "ab" * 20, "0x" + "zz" * 20, bad_checksum):
        with pytest.raises(InvalidDeliveryRef):
            parse_delivery_ref(PolicyId.ADDRESS_SMOKE, text, SETTINGS)


def test_figma_forms() -> None:
    for kind in ("file", "design", "proto"):
        ref = parse_delivery_ref(
            PolicyId.FIGMA_REF, f"https://www.figma.com/{kind}/AbC123/Name?node-id=1", SETTINGS
        )
        assert ref == FigmaRef(
            f"https://www.figma.com/{kind}/AbC123/Name?node-id=1", kind, "AbC123"
        )
    for text in (
        "https://figma.com/file/AbC/x",
        "https://www.figma.com/board/AbC/x",
        "https://www.figma.com/file/",
        "http://www.figma.com/file/AbC/x",
        "https://evil.example/file/AbC/x",
    ):
        with pytest.raises(InvalidDeliveryRef):
            parse_delivery_ref(PolicyId.FIGMA_REF, text, SETTINGS)


def test_screenshot_forms() -> None:
    cid = "bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi"
    ref = parse_delivery_ref(PolicyId.SCREENSHOT_REF, f"ipfs://{cid}/shots/a.png", SETTINGS)
    assert ref == ScreenshotRef(
        f"ipfs://{cid}/shots/a.png", f"https://ipfs.io/ipfs/{cid}/shots/a.png"
    )
    https = parse_delivery_ref(PolicyId.SCREENSHOT_REF, "https://cdn.example/a.png", SETTINGS)
    assert https.fetch_url == "https://cdn.example/a.png"
    for text in ("http://cdn.example/a.png", "ipfs://short", "ftp://x/a.png", "a.png", ""):
        with pytest.raises(InvalidDeliveryRef):
            parse_delivery_ref(PolicyId.SCREENSHOT_REF, text, SETTINGS)
    # Plain http only for local fixtures, where private hosts are allowed.
    assert parse_delivery_ref(PolicyId.SCREENSHOT_REF, "http://127.0.0.1:9/a.png", PRIVATE)


def test_overlong_ref_refused() -> None:
    with pytest.raises(InvalidDeliveryRef):
        parse_delivery_ref(PolicyId.SCREENSHOT_REF, "https://x.example/" + "a" * 3000, SETTINGS)


def test_sniff_image() -> None:
    assert sniff_image(b"\x89PNG\r\n\x1a\n....") == "png"
    assert sniff_image(b"\xff\xd8\xff\xe0") == "jpeg"
    assert sniff_image(b"GIF89a") == "gif"
    assert sniff_image(b"RIFF\x10\x00\x00\x00WEBPVP8 ") == "webp"
    assert sniff_image(b"RIFF\x10\x00\x00\x00WAVEfmt ") is None
    assert sniff_image(b"<html>") is None


REPOSITORY_POLICIES = [
    PolicyId.GITHUB_REF,
    PolicyId.NPM_TEST,
    PolicyId.CARGO_TEST,
    PolicyId.FORGE_TEST,
]
LEGACY_HOSTS = ["2130706433", "0177.0.0.1", "0x7f.0.0.1", "127.1", "10.1", "127.0.0.1."]


@pytest.mark.parametrize("host", LEGACY_HOSTS)
@pytest.mark.parametrize("settings", [SETTINGS, PRIVATE], ids=["public-only", "private-allowed"])
def test_unfetchable_hosts_refused_for_every_url_policy(host: str, settings: Settings) -> None:
    """Refused when read, whatever the private-hosts setting: the host form is the fault, not
    the address it might reach (that is the SSRF guard's question, asked when fetching)."""
    refs = [
        (PolicyId.SCREENSHOT_REF, f"https://{host}/x.png"),
        (PolicyId.FIGMA_REF, f"https://{host}/file/AbC123/x"),
        *((pid, f"https://{host}/acme/widget@main") for pid in REPOSITORY_POLICIES),
    ]
    for policy, text in refs:
        with pytest.raises(InvalidDeliveryRef, match="IPv4"):
            parse_delivery_ref(policy, text, settings)


def test_well_formed_ip_literals_still_parse() -> None:
    """Dotted quads and bracketed IPv6 stay references (the guard refuses private ones when
    fetching unless private hosts are allowed)."""
    for text in ("https://127.0.0.1/a.png", "https://[::1]:8443/a.png", "https://8.8.8.8/a.png"):
        ref = parse_delivery_ref(PolicyId.SCREENSHOT_REF, text, SETTINGS)
        assert ref.fetch_url == text
    figma = Settings(verifier_figma_host="127.0.0.1:8443")
    ref = parse_delivery_ref(PolicyId.FIGMA_REF, "https://127.0.0.1:8443/file/AbC/x", figma)
    assert ref.key == "AbC"
    git = Settings(verifier_git_base_url="https://127.0.0.1:8443")
    ref = parse_delivery_ref(PolicyId.GITHUB_REF, "https://127.0.0.1:8443/o/r@main", git)
    assert ref.url == "https://127.0.0.1:8443/o/r.git"
    with pytest.raises(InvalidDeliveryRef, match="port 0"):
        parse_delivery_ref(PolicyId.GITHUB_REF, "https://127.0.0.1:0/o/r@main", git)


@pytest.mark.parametrize(
    "url",
    [
        "https://[::1/o/r",
        "https://github.com:99999/o/r",
        "https://[::1]:x/o/r",
        "https://github.com:-1/o/r",
    ],
)
@pytest.mark.parametrize("policy", [PolicyId.GITHUB_REF, PolicyId.NPM_TEST])
@pytest.mark.parametrize("settings", [SETTINGS, PRIVATE])
def test_malformed_repository_urls_are_invalid_refs(
    url: str, policy: PolicyId, settings: Settings
) -> None:
    """A URL yarl cannot read (an open bracket, a port out of range) is the client's 400, not a
    ValueError from deep inside the parser (which the API would answer with 500)."""
    with pytest.raises(InvalidDeliveryRef):
        parse_delivery_ref(policy, f"{url}@main", settings)

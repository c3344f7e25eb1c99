"""``figma-ref`` and ``screenshot-ref``: an HTTP(S) resource that answers as it should.

Fetched through the SSRF guard (:mod:`marketplace.verifier.net`). A 5xx, 408, 429, a timeout
or a broken connection is transient; any other answer is a deterministic result.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import aiohttp
from pydantic import JsonValue
from yarl import URL

from marketplace.types import JsonObject
from marketplace.verifier.net import (
    FetchTrace,
    HostNotFound,
    HostRefused,
    TooManyRedirects,
    check_bracketed_host,
    check_host_form,
    guarded_get,
    guarded_session,
)
from marketplace.verifier.policy import (
    InvalidDeliveryRef,
    PolicyContext,
    PolicyOutcome,
    PolicySettings,
    TransientPolicyError,
)

_FIGMA_KINDS = ("file", "design", "proto")
_FIGMA_KEY = re.compile(r"[A-Za-z0-9]{1,128}")
_CID = re.compile(r"[A-Za-z0-9]{20,128}")
_TRANSIENT_STATUSES = (408, 425, 429)
# Declared content type -> the format its magic bytes must show.
IMAGE_TYPES = {
    "image/png": "png",
    "image/jpeg": "jpeg",
    "image/jpg": "jpeg",
    "image/gif": "gif",
    "image/webp": "webp",
}


def sniff_image(head: bytes) -> str | None:
    """The image format the first bytes show (PNG, JPEG, GIF, WebP), or None."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "gif"
    if len(head) >= 12 and head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    return None


def _authority(url: URL) -> str:
    host = (url.host or "").lower()
    return host if url.explicit_port is None else f"{host}:{url.explicit_port}"


def _web_url(text: str, settings: PolicySettings) -> URL:
    value = text.strip()
    if not value or any(c.isspace() for c in value):
        raise InvalidDeliveryRef("expected a URL")
    check_bracketed_host(value)
    try:
        url = URL(value)
    except ValueError as exc:
        raise InvalidDeliveryRef(f"not a URL: {exc}") from exc
    schemes = ("https", "http") if settings.verifier_allow_private_hosts else ("https",)
    if url.scheme not in schemes or not url.host:
        raise InvalidDeliveryRef(f"expected an {' or '.join(schemes)}:// URL")
    if url.user or url.password:
        raise InvalidDeliveryRef("the URL may not carry credentials")
    check_host_form(url)
    return url


@dataclass(frozen=True)
class FigmaRef:
    url: str
    kind: str
    key: str


def parse_figma(text: str, settings: PolicySettings) -> FigmaRef:
    url = _web_url(text, settings)
    if _authority(url) != settings.verifier_figma_host.lower():
        raise InvalidDeliveryRef(f"expected a URL on {settings.verifier_figma_host}")
    parts = url.path.strip("/").split("/")
    if len(parts) < 2 or parts[0] not in _FIGMA_KINDS or not _FIGMA_KEY.fullmatch(parts[1]):
        raise InvalidDeliveryRef("expected https://HOST/(file|design|proto)/KEY/...")
    return FigmaRef(url=str(url.with_fragment(None)), kind=parts[0], key=parts[1])


@dataclass(frozen=True)
class ScreenshotRef:
    # As given (https:// or ipfs://), and where it is fetched from.
    source: str
    fetch_url: str


def parse_screenshot(text: str, settings: PolicySettings) -> ScreenshotRef:
    value = text.strip()
    if value.startswith("ipfs://"):
        gateway = URL(settings.verifier_ipfs_gateway_url)
        if gateway.scheme not in ("https", "http"):
            raise InvalidDeliveryRef("this deployment's IPFS gateway is not an http(s) URL")
        rest = value.removeprefix("ipfs://")
        cid, _, path = rest.partition("/")
        if not _CID.fullmatch(cid) or any(c.isspace() for c in rest) or ".." in path.split("/"):
            raise InvalidDeliveryRef("expected ipfs://CID[/path]")
        fetch = f"{settings.verifier_ipfs_gateway_url}/ipfs/{cid}" + (f"/{path}" if path else "")
        return ScreenshotRef(source=value, fetch_url=fetch)
    url = _web_url(value, settings).with_fragment(None)
    return ScreenshotRef(source=str(url), fetch_url=str(url))


def _transient_status(status: int) -> bool:
    return status >= 500 or status in _TRANSIENT_STATUSES


def _hops(trace: FetchTrace) -> list[JsonValue]:
    return [{"url": url, "status": status} for url, status in trace.hops]


async def run_figma(ref: FigmaRef, ctx: PolicyContext) -> PolicyOutcome:
    settings = ctx.settings
    allow_private = settings.verifier_allow_private_hosts
    trace = FetchTrace()
    evidence: JsonObject = {
        "policy": "figma-ref",
        "url": ref.url,
        "kind": ref.kind,
        "fileKey": ref.key,
    }
    try:
        async with (
            guarded_session(
                allow_private=allow_private, timeout_s=settings.verifier_http_timeout_seconds
            ) as session,
            guarded_get(session, ref.url, allow_private=allow_private, trace=trace) as response,
        ):
            status = response.status
    except HostNotFound as exc:
        # The Figma host is the deployment's setting: DNS trouble, to retry.
        raise TransientPolicyError(str(exc)) from exc
    except (HostRefused, TooManyRedirects) as exc:
        evidence.update(status=None, hops=_hops(trace), reason=_reason(exc))
        return PolicyOutcome(passes=False, evidence=evidence, raw={"error": str(exc)})
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise TransientPolicyError(f"fetching {ref.url}: {exc!r}") from exc
    if _transient_status(status):
        raise TransientPolicyError(f"{ref.url} answered {status}")
    evidence.update(
        status=status, hops=_hops(trace), reason=None if status == 200 else "http_status"
    )
    return PolicyOutcome(passes=status == 200, evidence=evidence)


def _reason(exc: Exception) -> str:
    if isinstance(exc, HostRefused):
        return "host_refused"
    if isinstance(exc, HostNotFound):
        return "host_not_found"
    return "too_many_redirects"


async def run_screenshot(ref: ScreenshotRef, ctx: PolicyContext) -> PolicyOutcome:
    settings = ctx.settings
    allow_private = settings.verifier_allow_private_hosts
    limit = settings.verifier_max_image_bytes
    trace = FetchTrace()
    evidence: JsonObject = {
        "policy": "screenshot-ref",
        "url": ref.source,
        "fetchUrl": ref.fetch_url,
        "sizeLimit": limit,
    }
    raw: JsonObject = {}
    try:
        async with (
            guarded_session(
                allow_private=allow_private, timeout_s=settings.verifier_http_timeout_seconds
            ) as session,
            guarded_get(session, ref.fetch_url, allow_private=allow_private, trace=trace) as resp,
        ):
            status = resp.status
            if _transient_status(status):
                raise TransientPolicyError(f"{ref.fetch_url} answered {status}")
            content_type = resp.headers.get("Content-Type", "").split(";")[0].strip().lower()
            raw["headers"] = {k: v for k, v in resp.headers.items() if k.lower() != "set-cookie"}
            evidence.update(status=status, contentType=content_type or None, hops=_hops(trace))
            if status != 200:
                return _negative(evidence, raw, "http_status")
            declared = IMAGE_TYPES.get(content_type)
            if declared is None:
                return _negative(evidence, raw, "not_an_image_type")
            if resp.content_length is not None and resp.content_length > limit:
                return _negative(evidence, raw, "too_large")
            body = bytearray()
            async for chunk in resp.content.iter_chunked(65_536):
                body.extend(chunk)
                if len(body) > limit:
                    # Stop reading: whatever follows is past the limit anyway.
                    return _negative(evidence, raw, "too_large")
    except (HostRefused, HostNotFound, TooManyRedirects) as exc:
        if isinstance(exc, HostNotFound) and ref.source.startswith("ipfs://"):
            # The gateway is the deployment's setting: DNS trouble, to retry. A host named in
            # an https:// reference that does not exist is the reference's fault.
            raise TransientPolicyError(str(exc)) from exc
        evidence.update(hops=_hops(trace))
        raw["error"] = str(exc)
        return _negative(evidence, raw, _reason(exc))
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise TransientPolicyError(f"fetching {ref.fetch_url}: {exc!r}") from exc
    detected = sniff_image(bytes(body[:16]))
    evidence.update(format=detected, size=len(body), sha256=hashlib.sha256(body).hexdigest())
    if detected != declared:
        return _negative(evidence, raw, "magic_mismatch")
    evidence["reason"] = None
    return PolicyOutcome(passes=True, evidence=evidence, raw=raw)


def _negative(evidence: JsonObject, raw: JsonObject, reason: str) -> PolicyOutcome:
    evidence["reason"] = reason
    return PolicyOutcome(passes=False, evidence=evidence, raw=raw)

"""The API reference page: Swagger UI served by this server from the swagger-ui-bundle wheel."""

from __future__ import annotations

import gzip
import re
from typing import Any

from swagger_ui_bundle import swagger_ui_path

IMMUTABLE = "public, max-age=31536000, immutable"
# Any absolute URL in the page: the page must name none (no CDN, no hosted validator).
EXTERNAL_URL = re.compile(r"(?:https?:)?//[A-Za-z0-9.-]+", re.IGNORECASE)


def asset_urls(html: str) -> list[str]:
    return re.findall(r'(?:src|href)="(/v1/docs/static/[^"]+)"', html)


async def test_docs_page_is_swagger_ui_on_the_document(client: Any) -> None:
    resp = await client.get("/v1/docs")
    assert resp.status == 200
    assert resp.content_type == "text/html"
    assert resp.headers["Cache-Control"] == "no-cache"
    csp = resp.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "connect-src 'self'" in csp
    html = await resp.text()
    assert EXTERNAL_URL.findall(html) == []
    assert '<div id="swagger-ui"></div>' in html
    # Without JavaScript the page still says where the description is.
    noscript = html[html.index("<noscript>") : html.index("</noscript>")]
    assert 'href="/v1/openapi.json"' in noscript and "docs/hashes.md" in noscript
    urls = asset_urls(html)
    version = swagger_ui_path.name
    assert f"/v1/docs/static/{version}/swagger-ui-bundle.js" in urls
    assert f"/v1/docs/static/{version}/swagger-ui.css" in urls
    own = [u for u in urls if u.endswith("/docs.js")]
    assert len(own) == 1
    assert re.fullmatch(r"/v1/docs/static/marketplace-[0-9a-f]{16}/docs\.js", own[0])
    script = await (await client.get(own[0])).text()
    assert 'url: "/v1/openapi.json"' in script
    assert "persistAuthorization: true" in script and "validatorUrl: null" in script
    assert EXTERNAL_URL.findall(script) == []


async def test_every_asset_of_the_page_is_served_with_a_long_cache(client: Any) -> None:
    html = await (await client.get("/v1/docs")).text()
    expected_types = {
        ".js": "text/javascript",
        ".css": "text/css",
        ".png": "image/png",
    }
    urls = asset_urls(html)
    assert len(urls) == 5
    for url in urls:
        resp = await client.get(url, headers={"Accept-Encoding": "identity"})
        assert resp.status == 200, url
        suffix = url[url.rfind(".") :]
        assert resp.content_type == expected_types[suffix], url
        assert resp.headers["Cache-Control"] == IMMUTABLE, url
        assert resp.headers["X-Content-Type-Options"] == "nosniff"
        assert "Content-Encoding" not in resp.headers
        body = await resp.read()
        assert len(body) > 100, url
        if url.startswith(f"/v1/docs/static/{swagger_ui_path.name}/"):
            name = url.rsplit("/", 1)[1]
            assert body == (swagger_ui_path / name).read_bytes(), url


async def test_text_assets_are_gzipped_for_clients_that_accept_it(client: Any) -> None:
    url = f"/v1/docs/static/{swagger_ui_path.name}/swagger-ui-bundle.js"
    resp = await client.get(url, headers={"Accept-Encoding": "gzip"}, auto_decompress=False)
    assert resp.status == 200
    assert resp.headers["Content-Encoding"] == "gzip"
    assert resp.headers["Vary"] == "Accept-Encoding"
    compressed = await resp.read()
    original = (swagger_ui_path / "swagger-ui-bundle.js").read_bytes()
    assert gzip.decompress(compressed) == original
    assert len(compressed) < len(original) / 2


async def test_unknown_assets_and_versions_are_json_404s(client: Any) -> None:
    version = swagger_ui_path.name
    for url in (
        f"/v1/docs/static/{version}/index.html",  # in the wheel, but not one the page uses
        f"/v1/docs/static/{version}/..%2F..%2F__init__.py",
        "/v1/docs/static/swagger-ui-0.0.1/swagger-ui.css",  # an old version is gone, not aliased
        "/v1/docs/static/marketplace-0000000000000000/docs.js",
    ):
        resp = await client.get(url)
        assert resp.status == 404, url
        assert (await resp.json())["error"] == "not_found"

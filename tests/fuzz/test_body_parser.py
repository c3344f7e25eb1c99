"""Hypothesis fuzz of the body parser with hostile shapes, through aiohttp, against a live app.

Bodies are JSON texts built token by token (so they can hold what no serializer writes: NaN and
Infinity literals, numbers past float range, integers past Python's 4300-digit limit, lone
surrogate escapes, control characters, bidi overrides, duplicate keys), nested to and beyond the
free-form depth limit, widened past the member limit, then sometimes broken (invalid UTF-8,
truncation) and sometimes gzip-compressed, including bombs that inflate past the body limit.

Each is sent to a route with a body (dispute evidence, whose payload is free-form JSON; username
set; username batch). Every answer must be JSON, either the route's success or an
``{"error", "message"}`` error with a 4xx status the OpenAPI document lists for the route, never a
5xx; the classes with a known verdict (over the depth or member limit, not JSON, not plain
Unicode, inflating past the limit) must get exactly it. A stored payload must read back, and the
app must keep answering.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from marketplace.records.models import EVIDENCE_PAYLOAD_MAX_BYTES
from marketplace.types import FREE_FORM_MAX_DEPTH, FREE_FORM_MAX_MEMBERS
from tests.fuzz.conftest import CALLER_USER_ID, CALLER_WALLET, PROJECTS, Caller, LiveApp

EVIDENCE_PROJECT = PROJECTS["owner_in_dispute"]
EVIDENCE_PATH = f"/v1/projects/{EVIDENCE_PROJECT}/dispute-evidence"
EVIDENCE_HASH = "0x" + "e7" * 32
EXAMPLES = 1200
MAX_BODY_BYTES = 256 * 1024  # the default the live app runs with

# --- JSON texts with what we know about them ---------------------------------------------------


@dataclass(frozen=True)
class Doc:
    """A JSON text and the facts about it the verdicts depend on."""

    text: str
    depth: int = 0  # containers on the deepest path (a scalar is 0, `{}` is 1)
    members: int = 0  # keys and array items in all
    hostile: frozenset[str] = field(default_factory=frozenset)  # reasons it must be refused
    # False once a key repeats: the parser keeps one of the values, so the facts above may
    # describe a value the server never sees.
    certain: bool = True


def _string(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


# Text the service must refuse anywhere: C0 controls other than tab/LF/CR, DEL, lone surrogates.
REFUSED_TEXT = st.one_of(
    st.sampled_from(["\x00", "\x01", "\x08", "\x0b", "\x1b", "\x7f", "\x85", "\x9b", "\x80"]).map(
        lambda c: Doc(json.dumps("a" + c + "b"), hostile=frozenset({"control character"}))
    ),
    st.sampled_from(["\\ud800", "\\udfff", "\\ud83d", "a\\udc00b"]).map(
        lambda s: Doc('"' + s + '"', hostile=frozenset({"lone surrogate"}))
    ),
)
# Text that is acceptable JSON text, including what is merely unusual.
PLAIN_TEXT = st.one_of(
    st.text(
        st.characters(blacklist_categories=["Cs", "Cc"]) | st.sampled_from("\t\n\r"), max_size=20
    ).map(lambda s: Doc(_string(s))),
    st.sampled_from(["\u202e", "\u2066x\u2069", "\u200f", "\ufeff", "\U0001f600"]).map(
        lambda s: Doc(_string("evil" + s + "txt"))
    ),
    st.sampled_from(["\\u0041", "\\t", "\\\\", '\\"', "\\/", "\\ud83d\\ude00"]).map(
        lambda s: Doc('"' + s + '"')
    ),
)
REFUSED_NUMBERS = st.one_of(
    st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1.5e99999"]).map(
        lambda t: Doc(t, hostile=frozenset({"non-finite number"}))
    ),
    st.integers(4301, 6000).map(
        lambda n: Doc("9" * n, hostile=frozenset({"integer over the digit limit"}))
    ),
)
PLAIN_NUMBERS = st.one_of(
    st.integers(-(2**70), 2**70).map(lambda n: Doc(str(n))),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda f: Doc(repr(f).lower())),
    st.sampled_from(["-0", "0.0", "1e308", "1E-400", "2.5e+10", "9" * 4300]).map(Doc),
)
LITERALS = st.sampled_from(["true", "false", "null"]).map(Doc)

LEAVES = st.one_of(PLAIN_TEXT, PLAIN_NUMBERS, LITERALS, REFUSED_TEXT, REFUSED_NUMBERS)
KEYS = st.one_of(
    st.text(st.characters(blacklist_categories=["Cs", "Cc"]), max_size=8).map(
        lambda s: Doc(_string(s))
    ),
    REFUSED_TEXT,
)


def _array(items: list[Doc]) -> Doc:
    return Doc(
        "[" + ",".join(i.text for i in items) + "]",
        1 + max((i.depth for i in items), default=0),
        len(items) + sum(i.members for i in items),
        frozenset().union(*(i.hostile for i in items)),
        all(i.certain for i in items),
    )


def _object(pairs: list[tuple[Doc, Doc]]) -> Doc:
    keys = [json.loads(k.text) if not k.hostile else k.text for k, _ in pairs]
    return Doc(
        "{" + ",".join(f"{k.text}:{v.text}" for k, v in pairs) + "}",
        1 + max((v.depth for _, v in pairs), default=0),
        len(pairs) + sum(v.members for _, v in pairs),
        frozenset().union(*(k.hostile | v.hostile for k, v in pairs)),
        len(set(keys)) == len(keys) and all(v.certain for _, v in pairs),
    )


TREES = st.recursive(
    LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=4).map(_array),
        st.lists(st.tuples(KEYS, children), max_size=4).map(_object),
        # The same key twice: JSON allows it, parsers disagree on which wins.
        st.tuples(KEYS, children, children).map(lambda t: _object([(t[0], t[1]), (t[0], t[2])])),
    ),
    max_leaves=12,
)


@st.composite
def nested(draw: st.DrawFn) -> Doc:
    """A chain of containers, at the limit, just over it, or far over it (the nesting bomb)."""
    limit = FREE_FORM_MAX_DEPTH
    depth = draw(
        st.one_of(
            st.integers(1, limit + 2),
            st.sampled_from([limit - 1, limit, limit + 1, 256, 1_000, 20_000, 100_000]),
        )
    )
    opener, closer = draw(st.sampled_from([("[", "]"), ('{"k":', "}")]))
    core = draw(st.sampled_from(["", "1", '"x"', "null"])) if opener == "[" else "1"
    members = depth if core else depth - 1  # the innermost array may be empty
    return Doc(opener * depth + core + closer * depth, depth=depth, members=members)


@st.composite
def wide(draw: st.DrawFn) -> Doc:
    """One array or object with many members, around and past the member limit."""
    limit = FREE_FORM_MAX_MEMBERS
    count = draw(st.sampled_from([limit - 1, limit, limit + 1, 3 * limit]))
    if draw(st.booleans()):
        return Doc("[" + ",".join("0" for _ in range(count)) + "]", 1, count)
    return Doc("{" + ",".join(f'"k{i}":0' for i in range(count)) + "}", 1, count)


def _wrap_object(doc: Doc) -> Doc:
    """Payloads must be objects: put anything else one level down."""
    if doc.text.startswith("{"):
        return doc
    return _object([(Doc('"v"'), doc)])


PAYLOADS = st.one_of(TREES, nested(), wide()).map(_wrap_object)

# --- requests ----------------------------------------------------------------------------------


@dataclass(repr=False)
class Attempt:
    method: str
    path: str
    operation: str  # "METHOD /template" as in the OpenAPI document
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    must_be: frozenset[int] | None = None  # the statuses the verdict allows, when it fixes any
    success: int = 200
    stores_evidence: bool = False
    notes: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        # Bodies run to hundreds of kilobytes; a failure report needs their shape and start.
        return (
            f"Attempt({self.method} {self.path}, {'; '.join(self.notes)}, "
            f"headers={self.headers}, must_be={self.must_be}, body={self.body[:200]!r}...)"
        )

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


def _payload_verdict(payload: Doc) -> int | None:
    """400 for a refused value, 201 for an acceptable evidence payload, None when unsure."""
    if not payload.certain:
        return None
    if payload.hostile:
        return 400
    if payload.depth > FREE_FORM_MAX_DEPTH or payload.members > FREE_FORM_MAX_MEMBERS:
        return 400
    compact = json.dumps(json.loads(payload.text), ensure_ascii=False, separators=(",", ":"))
    if len(compact.encode("utf-8")) > EVIDENCE_PAYLOAD_MAX_BYTES:
        return 400
    return 201


@st.composite
def attempts(draw: st.DrawFn) -> Attempt:
    target = draw(st.sampled_from(["evidence", "username", "batch"]))
    verdict: int | None
    if target == "evidence":
        payload = draw(PAYLOADS)
        if draw(st.booleans()):
            text = (
                f'{{"milestoneIndex":1,"submitterAddress":"{CALLER_WALLET}",'
                f'"evidenceHash":"{EVIDENCE_HASH}","evidencePayload":{payload.text}}}'
            )
        else:
            text = f'{{"evidenceHash":"{EVIDENCE_HASH}","payload":{payload.text}}}'
        attempt = Attempt(
            "POST",
            EVIDENCE_PATH,
            "POST /v1/projects/{projectAddress}/dispute-evidence",
            success=201,
            stores_evidence=True,
        )
        verdict = _payload_verdict(payload)
        attempt.notes.append(f"payload depth {payload.depth}, members {payload.members}")
    elif target == "username":
        value = draw(st.one_of(LEAVES, TREES, nested()))
        text = f'{{"userId":"{CALLER_USER_ID}","username":{value.text}}}'
        attempt = Attempt("PUT", "/v1/username", "PUT /v1/username")
        verdict = 400 if value.hostile and value.certain else None
    else:
        value = draw(st.one_of(TREES, nested(), wide()))
        text = f'{{"userIds":{value.text}}}'
        attempt = Attempt("POST", "/v1/username/batch", "POST /v1/username/batch")
        verdict = 400 if value.hostile and value.certain else None
    body = text.encode("utf-8", "surrogatepass")

    # Broken JSON: the body is an object, so any proper prefix or any trailing junk is invalid.
    breakage = draw(st.sampled_from(["none"] * 6 + ["invalid utf-8", "truncated", "trailing"]))
    if breakage == "invalid utf-8":
        where = draw(st.integers(0, len(body)))
        bad = draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80"]))
        body = body[:where] + bad + body[where:]
        verdict = 400
    elif breakage == "truncated":
        body = body[: draw(st.integers(1, len(body) - 1))]
        verdict = 400
    elif breakage == "trailing":
        body += draw(st.sampled_from([b" x", b"}", b",", b"\x00"]))
        verdict = 400
    attempt.notes.append(f"breakage: {breakage}")

    # Checked before parsing: a body of another media type is refused whatever it holds.
    content_type = draw(
        st.sampled_from(
            ["application/json"] * 6
            + ["application/json; charset=utf-8", "application/problem+json", "text/plain", ""]
        )
    )
    headers = {"Content-Type": content_type} if content_type else {}
    json_type = content_type not in ("text/plain", "")
    if not json_type:
        verdict = 415

    # Checked first of all, while reading: what the body inflates to, and whether it inflates.
    inflated = len(body)
    encoding = draw(
        st.sampled_from(
            ["identity"] * 6
            + ["gzip", "deflate", "gzip bomb", "corrupt gzip", "x-unknown", "br", "zstd"]
        )
    )
    if encoding == "gzip":
        body = gzip.compress(body, compresslevel=1)
    elif encoding == "deflate":
        body = zlib.compress(body)
    elif encoding == "gzip bomb":
        # Valid JSON followed by whitespace that inflates past the body limit.
        inflated += draw(
            st.sampled_from([MAX_BODY_BYTES + 1, 4 * MAX_BODY_BYTES, 64 * MAX_BODY_BYTES])
        )
        body = gzip.compress(body + b" " * (inflated - len(body)), compresslevel=9)
    if encoding != "identity":
        headers["Content-Encoding"] = encoding.removeprefix("corrupt ").removesuffix(" bomb")
    allowed = None if verdict is None else frozenset({verdict})
    if inflated > MAX_BODY_BYTES:
        allowed = frozenset({413})
    if encoding == "corrupt gzip":
        compressed = gzip.compress(body)
        body = compressed[: draw(st.integers(0, len(compressed) - 1))] + b"\x00garbage"
        # zlib notices the damage at once, or only after inflating part of the body, which then
        # meets the later checks as a truncated (or still oversize) JSON text.
        allowed = frozenset({400} | ({413} if inflated > MAX_BODY_BYTES else set()))
        allowed |= set() if json_type else {415}
    elif encoding in ("br", "zstd"):
        # Codings this server cannot decode (their libraries are not installed).
        allowed = frozenset({400, 415})
    attempt.notes.append(f"{content_type or 'no content type'}, {encoding}, {len(body)} bytes")
    attempt.body, attempt.headers, attempt.must_be = body, headers, allowed
    return attempt


# --- the test ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def http(live_app: LiveApp) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(live_app.base_url, auto_decompress=True) as session:
        yield session


@pytest.fixture(scope="module")
async def db(live_app: LiveApp) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(live_app.settings.database_url)
    yield conn
    await conn.close()


@pytest.fixture(scope="module")
def documented(live_app: LiveApp) -> dict[str, set[int]]:
    async def fetch() -> dict[str, Any]:
        async with aiohttp.ClientSession(live_app.base_url) as session:
            return dict(await (await session.get("/v1/openapi.json")).json())

    document = live_app.run(fetch())
    return {
        f"{method.upper()} {path}": {int(status) for status in operation["responses"]}
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
    }


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
        HealthCheck.filter_too_much,
    ],
)
@given(attempt=attempts())
async def test_hostile_bodies_get_a_json_4xx_and_the_app_lives(
    attempt: Attempt,
    live_app: LiveApp,
    http: aiohttp.ClientSession,
    db: asyncpg.Connection,
    caller: Caller,
    documented: dict[str, set[int]],
) -> None:
    assert live_app.settings.max_body_bytes == MAX_BODY_BYTES
    headers = {**attempt.headers, **caller.session_headers}
    async with http.request(
        attempt.method, attempt.path, data=attempt.body, headers=headers
    ) as resp:
        status, content_type, raw = resp.status, resp.content_type, await resp.read()
    context = (
        f"{attempt.method} {attempt.path} ({'; '.join(attempt.notes)}) -> {status} {raw!r:.300}"
    )
    assert status < 500, context
    assert content_type == "application/json", context
    answer = json.loads(raw)
    if status >= 400:
        assert isinstance(answer.get("error"), str) and answer["error"], context
        assert isinstance(answer.get("message"), str) and answer["message"], context
        assert status in documented[attempt.operation], context
    else:
        assert status == attempt.success, context
    if attempt.must_be is not None:
        assert status in attempt.must_be, context

    if attempt.stores_evidence and status == 201:
        # What was stored must read back, for the submitter and anyone else allowed to read it.
        async with http.get(EVIDENCE_PATH, headers=caller.session_headers) as listed:
            assert listed.status == 200, await listed.text()
            items = (await listed.json())["items"]
        assert [item["evidenceHash"] for item in items] == [EVIDENCE_HASH]
        # One submission per party and milestone: clear it so the next example can store again.
        await db.execute(
            "DELETE FROM dispute_evidence WHERE project_address = $1", EVIDENCE_PROJECT
        )

    async with http.get("/v1/health") as health:
        assert health.status == 200

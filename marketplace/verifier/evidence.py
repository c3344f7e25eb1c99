"""The evidence hash: ``keccak256`` of the evidence's canonical JSON encoding.

Canonical encoding (docs/verifier.md, "Evidence hash"): UTF-8 JSON with object keys sorted by
code point, no whitespace (``","`` and ``":"`` separators), non-ASCII characters as themselves
(not ``\\u`` escapes), and only strings, integers, booleans, null, arrays and objects: floats
are refused because their text form is not canonical across languages. Anyone can recompute it:
``keccak256(json.dumps(evidence, sort_keys=True, separators=(",", ":"),
ensure_ascii=False).encode())``.
"""

from __future__ import annotations

import json
from typing import Any

from eth_utils import keccak

from marketplace.types import JsonObject


class NotCanonical(ValueError):
    """The value holds something canonical JSON does not encode (a float, a non-str key...)."""


def _check(value: Any, path: str) -> None:
    if value is None or isinstance(value, bool | int | str):
        return
    if isinstance(value, float):
        raise NotCanonical(f"{path}: floats are not canonical; use a string or an integer")
    if isinstance(value, list):
        for i, item in enumerate(value):
            _check(item, f"{path}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise NotCanonical(f"{path}: object keys must be strings")
            _check(item, f"{path}.{key}")
        return
    raise NotCanonical(f"{path}: {type(value).__name__} is not JSON")


def canonical_json(evidence: JsonObject) -> bytes:
    _check(evidence, "evidence")
    return json.dumps(
        evidence, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def evidence_hash(evidence: JsonObject) -> str:
    """``0x`` + 64 hex digits."""
    return "0x" + keccak(canonical_json(evidence)).hex()

"""Value types of the spec's conventions (section "Conventions"), shared by every model."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING, Annotated, Any

from eth_utils import to_checksum_address
from pydantic import AfterValidator, ConfigDict, Field, JsonValue, ValidationInfo, field_validator
from pydantic import BaseModel as _PydanticBaseModel

if TYPE_CHECKING:
    #: A JSON object whose members are passed through unread (evidence, free-form payloads,
    #: event payloads, pieces of the OpenAPI document): code that reads a member narrows it.
    JsonObject = dict[str, JsonValue]
else:
    # What pydantic sees in a model field: values that arrive here came from JSON already (a
    # request body, a jsonb column, a decoded message), and pydantic's recursive JsonValue
    # validator would cost about 17 times as much per object and change the OpenAPI schema
    # (`additionalProperties: {"$ref": JsonValue}` instead of `true`). The type checker sees
    # the exact type above.
    JsonObject = dict[str, Any]

ADDRESS_PATTERN = r"^0x[0-9a-fA-F]{40}$"
BYTES32_PATTERN = r"^0x[0-9a-fA-F]{64}$"
DECIMAL_PATTERN = r"^(0|[1-9][0-9]*)$"
HEX_SIGNATURE_PATTERN = r"^0x[0-9a-fA-F]+$"
ZERO_BYTES32 = "0x" + "0" * 64
ZERO_ADDRESS = "0x" + "0" * 40
MILESTONE_INDEX_MAX = 65_535


@lru_cache(maxsize=65_536)
def checksum_address(value: str) -> str:
    # EIP-55 costs a keccak per call; the same few thousand addresses recur on every read.
    return to_checksum_address(value)


def _lower_hex(value: str) -> str:
    return value.lower()


_ADDRESS_FIELD = Field(
    pattern=ADDRESS_PATTERN, examples=["0x5FbDB2315678afecb367f032d93F642f64180aa3"]
)
# Addresses are always returned in EIP-55 checksum form.
Address = Annotated[str, _ADDRESS_FIELD, AfterValidator(checksum_address)]
# An address a client sends (body, query or path), accepted in any case and lower-cased here at
# the edge: the form every table stores and every comparison uses, so nothing past the request
# models lower-cases again.
LowerAddress = Annotated[str, _ADDRESS_FIELD, AfterValidator(_lower_hex)]
# bytes32 values are returned lower-case so equal hashes compare equal as strings.
Bytes32 = Annotated[str, Field(pattern=BYTES32_PATTERN), AfterValidator(_lower_hex)]
Usdc = Annotated[str, Field(pattern=DECIMAL_PATTERN, description="whole-token USDC units")]
UnixSeconds = Annotated[str, Field(pattern=DECIMAL_PATTERN, description="Unix seconds")]
HexSignature = Annotated[str, Field(pattern=HEX_SIGNATURE_PATTERN)]
MilestoneIndex = Annotated[int, Field(ge=0, le=MILESTONE_INDEX_MAX)]


# --- input hygiene ------------------------------------------------------------------------------
# Every string a client sends (body fields, free-form JSON keys and values, query and path
# parameters) is checked once, by the request/query base models below, so no route can forget it.
# C0 controls other than tab, line feed and carriage return, DEL, and the C1 controls
# (U+0080-U+009F: NEXT LINE U+0085 breaks lines, CSI U+009B drives terminals) have no business in
# any of our text and confuse logs and terminals; NUL cannot even be stored in PostgreSQL text.
_CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# Bidirectional-text controls (marks, embeddings, overrides, isolates, the Arabic letter mark)
# let a URI or a name display differently from what it is (Trojan Source).
BIDI_CONTROLS = r"\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"  # a regex character-class body
# Free-form JSON objects (dispute evidence payloads, verifier evidence) are bounded in shape as
# well as size: a deeply nested value breaks serializers far from where it was accepted.
FREE_FORM_MAX_DEPTH = 32
FREE_FORM_MAX_MEMBERS = 10_000


def text_problem(value: str) -> str | None:
    """Why ``value`` is not acceptable text, or None."""
    match = _CONTROL_CHARACTERS.search(value)
    if match is not None:
        return f"must not contain control characters (found U+{ord(match.group()):04X})"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid Unicode (no lone surrogates)"
    return None


def check_json_value(
    value: Any, *, max_depth: int | None = None, max_members: int | None = None
) -> None:
    """Raise ValueError for unacceptable text anywhere in ``value`` (keys included) or, when
    limits are given, for nesting deeper than ``max_depth`` or more than ``max_members`` keys and
    array items in all. Iterative, so no input can exhaust the interpreter's stack."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    members = 0
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            problem = text_problem(node)
            if problem is not None:
                raise ValueError(problem)
            continue
        if isinstance(node, dict):
            children: Any = node.values()
            for key in node:
                if isinstance(key, str) and (problem := text_problem(key)) is not None:
                    raise ValueError(f"object key {problem}")
        elif isinstance(node, list | tuple):
            children = node
        else:
            continue
        if max_depth is not None and depth > max_depth:
            raise ValueError(f"is nested more than {max_depth} levels deep")
        members += len(node)
        if max_members is not None and members > max_members:
            raise ValueError(f"has more than {max_members} keys and array items in all")
        stack.extend((child, depth + 1) for child in children)


def _bounded_free_form(value: JsonObject) -> JsonObject:
    check_json_value(value, max_depth=FREE_FORM_MAX_DEPTH, max_members=FREE_FORM_MAX_MEMBERS)
    return value


FreeFormObject = Annotated[
    JsonObject,
    Field(
        description=(
            f"a JSON object nested at most {FREE_FORM_MAX_DEPTH} levels deep (the object itself "
            f"is level 1) with at most {FREE_FORM_MAX_MEMBERS} keys and array items in all"
        ),
        json_schema_extra={
            "x-max-depth": FREE_FORM_MAX_DEPTH,
            "x-max-members": FREE_FORM_MAX_MEMBERS,
        },
    ),
    AfterValidator(_bounded_free_form),
]


URI_MAX = 1024
# https:// or ipfs:// (lower-case scheme, as the spec writes it), then no whitespace, control or
# bidirectional-text characters. Written so JSON Schema (ECMA) and pydantic (Rust) read it alike.
HTTPS_OR_IPFS_URI_PATTERN = rf"^(https|ipfs)://[^\s\x00-\x1f\x7f-\x9f{BIDI_CONTROLS}]+$"
HttpsOrIpfsUri = Annotated[
    str,
    Field(
        max_length=URI_MAX,
        pattern=HTTPS_OR_IPFS_URI_PATTERN,
        description="`https://` or `ipfs://` URI, at most 1024 characters",
        examples=["ipfs://bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi"],
    ),
]


def _checked_field(value: Any, info: ValidationInfo) -> Any:
    # Nested models checked their own fields already; everything else is walked here.
    if not isinstance(value, _PydanticBaseModel):
        check_json_value(value)
    return value


class RequestModel(_PydanticBaseModel):
    """A request body: unknown fields are refused so typos fail loudly instead of being ignored.
    Bodies are validated strictly from JSON (``true`` or ``"5"`` is not an integer), and every
    string in them is checked by :func:`text_problem`."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)

    @field_validator("*", mode="after")
    @classmethod
    def _acceptable_text(cls, value: Any, info: ValidationInfo) -> Any:
        return _checked_field(value, info)


class QueryModel(_PydanticBaseModel):
    """Query string and path parameters: unknown ones are ignored (cache busters, tracking
    parameters); every value's text is checked like a body's."""

    model_config = ConfigDict(extra="ignore")

    @field_validator("*", mode="after")
    @classmethod
    def _acceptable_text(cls, value: Any, info: ValidationInfo) -> Any:
        return _checked_field(value, info)


class ResponseModel(_PydanticBaseModel):
    model_config = ConfigDict(extra="forbid")

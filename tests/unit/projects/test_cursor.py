"""The listing cursor (the shared codec of marketplace.pagination with the project list's kind):
round trips, and everything this service did not issue is refused."""

from __future__ import annotations

import base64

import pytest

from marketplace.projects.read_models import PROJECT_LIST_CURSOR

encode_cursor = PROJECT_LIST_CURSOR.encode
decode_cursor = PROJECT_LIST_CURSOR.decode


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()


@pytest.mark.parametrize(
    "position", [(0, 0), (1, 0), (123_456, 7), (2**63 - 1, 2**31 - 1), (10**12, 65_535)]
)
def test_round_trip(position: tuple[int, int]) -> None:
    cursor = encode_cursor(*position)
    assert cursor.isascii() and "=" not in cursor and "/" not in cursor and "+" not in cursor
    assert decode_cursor(cursor) == position


def test_cursor_is_opaque_but_stable() -> None:
    assert encode_cursor(5, 1) == encode_cursor(5, 1) == _b64("p1:5:1")
    assert encode_cursor(5, 1) != encode_cursor(5, 2)


@pytest.mark.parametrize(("block", "log_index"), [(-1, 0), (0, -1), (2**63, 0), (0, 2**31)])
def test_encode_refuses_out_of_range(block: int, log_index: int) -> None:
    with pytest.raises(ValueError, match="out of range"):
        encode_cursor(block, log_index)


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "zz",
        "a",  # impossible base64 length
        "!!!!",
        _b64("p1:5"),
        _b64("p1:5:1:2"),
        _b64("p2:5:1"),  # another version
        _b64("p1:05:1"),  # non-canonical number
        _b64("p1:5:01"),
        _b64("p1:-5:1"),
        _b64("p1:+5:1"),
        _b64("p1: 5:1"),
        _b64("p1:5:1\n"),
        _b64(f"p1:{2**63}:1"),  # beyond bigint
        _b64(f"p1:5:{2**31}"),  # beyond integer
        _b64("p1:5:1") + "=",  # padded form is not what we issue
        _b64("p1:\u0661:1"),  # non-ASCII digit (ARABIC-INDIC ONE)
        "é" * 4,
        "A" * 201,
        base64.urlsafe_b64encode(b"\xff\xfe\xfd").decode(),  # not text
    ],
)
def test_decode_refuses_what_we_did_not_issue(cursor: str) -> None:
    with pytest.raises(ValueError, match="malformed cursor"):
        decode_cursor(cursor)

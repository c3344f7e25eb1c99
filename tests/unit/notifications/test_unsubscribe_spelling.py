"""Unsubscribe tokens have one spelling (issue 27; docs/notifications.md, "Preferences and
unsubscribe"): every other spelling of the same bytes (padding, the standard base64 alphabet,
different unused bits in the last character, another case of the prefix, extra characters) is
refused, although a lenient base64 decoder reads it as the same token."""

from __future__ import annotations

import base64
import uuid

import pytest

from marketplace.notifications.errors import InvalidUnsubscribeToken
from marketplace.notifications.models import NotificationEventType
from marketplace.notifications.unsubscribe import TOKEN_PREFIX, make_token, read_token

KEY = b"k" * 32
ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def lenient_bytes(token: str) -> bytes:
    """What a forgiving decoder reads: any case of prefix, either alphabet, padding optional,
    unused bits ignored."""
    body = token[len(TOKEN_PREFIX) :].rstrip("=").replace("-", "+").replace("_", "/")
    return base64.b64decode(body + "=" * (-len(body) % 4))


def token_with(chars: str) -> tuple[uuid.UUID, str]:
    """A user and its token, whose body holds one of ``chars`` (found by trying user ids)."""
    for n in range(1, 10_000):
        user_id = uuid.UUID(int=n)
        token = make_token(KEY, user_id, NotificationEventType.DIRECT_MESSAGE)
        if any(c in token[len(TOKEN_PREFIX) :] for c in chars):
            return user_id, token
    raise AssertionError("no such token")


def spellings(token: str) -> dict[str, str]:
    body = token[len(TOKEN_PREFIX) :]
    last = ALPHABET.index(body[-1])
    # 49 bytes: the last character carries 2 bits of data; its 4 low bits are unused.
    same_bits = ALPHABET[last ^ 0b0001]
    return {
        "unused bits": TOKEN_PREFIX + body[:-1] + same_bits,
        "standard alphabet": TOKEN_PREFIX + body.replace("-", "+").replace("_", "/"),
        "padded": token + "==",
        "upper-case prefix": "U1." + body,
        "trailing newline": token + "\n",
        "leading space": " " + token,
    }


@pytest.mark.parametrize(
    "kind",
    [
        "unused bits",
        "standard alphabet",
        "padded",
        "upper-case prefix",
        "trailing newline",
        "leading space",
    ],
)
def test_other_spellings_of_the_same_bytes_are_refused(kind: str) -> None:
    user_id, token = token_with("-_")
    variant = spellings(token)[kind]
    assert variant != token
    # The variant names the same bytes: it is a spelling, not a forgery.
    assert lenient_bytes(variant.replace("U1.", TOKEN_PREFIX).strip()) == lenient_bytes(token)
    with pytest.raises(InvalidUnsubscribeToken):
        read_token(KEY, variant)
    # The canonical spelling still works.
    target = read_token(KEY, token)
    assert (target.user_id, target.event_type) == (user_id, NotificationEventType.DIRECT_MESSAGE)


def test_every_last_character_but_the_canonical_one_is_refused() -> None:
    _, token = token_with("-_")
    body = token[len(TOKEN_PREFIX) :]
    accepted = []
    for char in ALPHABET:
        try:
            read_token(KEY, TOKEN_PREFIX + body[:-1] + char)
        except InvalidUnsubscribeToken:
            continue
        accepted.append(char)
    assert accepted == [body[-1]]


def test_canonical_tokens_use_the_url_safe_alphabet_without_padding() -> None:
    for n in range(200):
        token = make_token(KEY, uuid.UUID(int=n), NotificationEventType.BID_DRAFT)
        body = token[len(TOKEN_PREFIX) :]
        assert set(body) <= set(ALPHABET)
        assert read_token(KEY, token).user_id == uuid.UUID(int=n)

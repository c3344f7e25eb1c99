"""Outbox rows no payload model checks, for tests of how consumers take what no producer may
write: a malformed payload, a payload missing fields, a type this code does not know.

Production code writes ``NewEvent`` (a payload model) through ``events.append``; this helper runs
the same statement (``events.append_rows``) with the rows as given.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import asyncpg

from marketplace.storage.repositories import events as repo


@dataclass(frozen=True)
class RawEvent:
    type: str
    subject: str
    payload: Mapping[str, object] = field(default_factory=dict)


async def append_raw(conn: asyncpg.Connection, events: Sequence[RawEvent]) -> list[int]:
    """Write ``events`` as ``events.append`` does (inside the caller's transaction, as its last
    statement); their ids."""
    assert conn.is_in_transaction(), "events are written inside a transaction"
    return await repo.append_rows(
        conn,
        [e.type for e in events],
        [e.subject for e in events],
        [json.dumps(dict(e.payload), separators=(",", ":")) for e in events],
    )

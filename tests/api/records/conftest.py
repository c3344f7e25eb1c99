"""Helpers of the off-chain records API tests: app builder, linked parties, seeded projects.

Wallets are linked through the API with real EIP-191 signatures (eth-account); projects are
inserted straight into the read-model table the indexer fills (lower-case addresses), which is
what the records' rules read. Chain-backed flows live in tests/integration/records.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg

from tests.api.identity.conftest import Wallet, link_wallet
from tests.conftest import User, new_user
from tests.support import apps

# A direct connection, opened after the shared ``client`` (tests/support/apps.py).
db = apps.db
AppFactory = apps.AppFactory

_positions = itertools.count(1)

HASH_A = "0x" + "a1" * 32
HASH_B = "0x" + "b2" * 32
ZERO_HASH = "0x" + "00" * 32


@dataclass
class Party:
    """A signed-in user with one wallet linked through the API."""

    user: User
    wallet: Wallet

    @property
    def headers(self) -> dict[str, str]:
        return self.user.headers

    @property
    def address(self) -> str:
        return self.wallet.address

    @property
    def lower(self) -> str:
        return self.wallet.address.lower()


async def linked_party(client: Any, *, email_verified: bool = True) -> Party:
    user, wallet = new_user(email_verified=email_verified), Wallet()
    await link_wallet(client, user.headers, wallet)
    return Party(user, wallet)


async def link_another(client: Any, party: Party) -> Wallet:
    wallet = Wallet()
    await link_wallet(client, party.headers, wallet)
    return wallet


def random_address() -> str:
    return "0x" + os.urandom(20).hex()


async def seed_project(conn: asyncpg.Connection, **values: Any) -> str:
    """Insert an indexed project (defaults: open standard project in bidding); returns its
    lower-case address."""
    position = next(_positions)
    now = datetime.now(UTC)
    row: dict[str, Any] = {
        "project_address": random_address(),
        "chain_id": 31337,
        "owner_address": random_address(),
        "status": "bidding",
        "project_mode": "standard",
        "bidding_access": "open",
        "config_hash": "0x" + os.urandom(32).hex(),
        "milestone_count": 2,
        "allowlist": [],
        "created_block": 10_000 + position,
        "created_log_index": 0,
        "created_at": now,
        "updated_at": now,
        "snapshot_block": 10_000 + position,
    }
    row.update(values)
    columns = list(row)
    await conn.execute(
        f"INSERT INTO projects ({', '.join(columns)}) "
        f"VALUES ({', '.join(f'${i + 1}' for i in range(len(columns)))})",
        *row.values(),
    )
    return str(row["project_address"])


async def seed_dispute(
    conn: asyncpg.Connection, owner: str, worker: str, *, milestone: int = 1, **values: Any
) -> str:
    """An indexed standard project in an active dispute (phase challenged) on ``milestone``."""
    fields: dict[str, Any] = {
        "owner_address": owner.lower(),
        "selected_builder_address": worker.lower(),
        "status": "dispute",
        "dispute_phase": "challenged",
        "dispute_reason": "low_quality",
        "dispute_raised_by": owner.lower(),
        "dispute_milestone_index": milestone,
        "dispute_opened_at": 1_700_000_000,
    }
    fields.update(values)
    return await seed_project(conn, **fields)


async def error_code(resp: Any, status: int) -> str:
    body = await resp.json()
    assert resp.status == status, body
    assert resp.content_type == "application/json"
    assert isinstance(body["message"], str) and body["message"]
    return str(body["error"])

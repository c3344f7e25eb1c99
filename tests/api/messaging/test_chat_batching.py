"""Concurrent chat sends: the frontend sends each shard at most a few calls at a time and the
rest in batches (``execute_batch``), and the shard writes concurrent sends together (group
commit). Each send still gets its own answer: a refusal in a batch refuses only its sender."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import asyncpg

from marketplace.actors.keyed_shard import MAX_CALLS_IN_FLIGHT_PER_SHARD
from tests.api.messaging.conftest import post_chat, project_with_worker
from tests.api.records.conftest import random_address
from tests.support.waiting import eventually

SENDS_PER_PROJECT = 4
PROJECTS = 6


def batch_calls(metrics: str) -> float:
    pattern = (
        r"marketplace_actor_call_duration_seconds_count\{"
        r'actor="project-shard-\d+",method="execute_batch",outcome="ok"\} ([0-9.e+]+)'
    )
    return sum(float(count) for count in re.findall(pattern, metrics))


def chat_commands(metrics: str, outcome: str) -> float:
    """The frontend's count of chat sends run as shard commands (one each, batched or not)."""
    series = (
        "marketplace_shard_commands_total"
        f'{{command="PostChatMessage",family="project",outcome="{outcome}"}} '
    )
    return sum(
        float(line[len(series) :]) for line in metrics.splitlines() if line.startswith(series)
    )


def chat_command_latencies(metrics: str) -> float:
    series = (
        'marketplace_shard_command_duration_seconds_count{command="PostChatMessage",'
        'family="project"} '
    )
    return sum(
        float(line[len(series) :]) for line in metrics.splitlines() if line.startswith(series)
    )


async def wait_for_waiting_inserts(db: asyncpg.Connection) -> None:
    await eventually(
        lambda: db.fetchval(
            "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
            "WHERE c.relname = 'messages' AND NOT l.granted"
        ),
        within=30,
        what="an insert waiting for the lock on messages",
    )


async def test_concurrent_sends_are_batched_and_answered_one_by_one(
    client: Any, db: asyncpg.Connection
) -> None:
    projects = [await project_with_worker(client, db) for _ in range(PROJECTS)]
    before_text = await (await client.get("/metrics")).text()
    before = batch_calls(before_text)

    async def send(project_index: int, n: int) -> tuple[int, int, dict[str, Any]]:
        project = projects[project_index]
        party = project.owner if n % 2 else project.worker
        if n == 3:  # a wallet the sender has not linked: refused inside the batch
            resp = await post_chat(client, party, project.address, wallet=random_address())
        else:
            resp = await post_chat(client, party, project.address, f"p{project_index} m{n}")
        return project_index, resp.status, await resp.json()

    # Inserts into messages wait while this lock is held, so the first calls to each shard stay
    # in flight and the sends that arrive meanwhile queue at the frontend.
    blocker = db.transaction()
    await blocker.start()
    await db.execute("LOCK TABLE messages IN SHARE ROW EXCLUSIVE MODE")
    try:
        sends = [
            asyncio.create_task(send(p, n))
            for n in range(SENDS_PER_PROJECT)
            for p in range(PROJECTS)
        ]
        await wait_for_waiting_inserts(db)
        await asyncio.sleep(1.0)  # the other sends reach the frontend's queues
    finally:
        await blocker.rollback()
    answers = await asyncio.wait_for(asyncio.gather(*sends), 60)
    after_text = await (await client.get("/metrics")).text()
    after = batch_calls(after_text)

    for project_index, status, body in answers:
        if body.get("error"):
            assert (status, body["error"]) == (403, "wallet_not_linked"), body
        else:
            assert status == 201, body
            assert body["projectAddress"].lower() == projects[project_index].address
    refused = [a for a in answers if a[1] == 403]
    assert len(refused) == PROJECTS
    # 24 sends over 2 shards, at most MAX_CALLS_IN_FLIGHT_PER_SHARD calls each at a time: some
    # went in batches.
    assert len(answers) > MAX_CALLS_IN_FLIGHT_PER_SHARD * 2
    assert after > before
    # Every command counts on its own, batched or not: the accepted ones ok, the refused ones
    # (refused inside their batch) domain_error, and each has its latency observed.
    sent = len(answers) - len(refused)
    ok = chat_commands(after_text, "ok") - chat_commands(before_text, "ok")
    domain = chat_commands(after_text, "domain_error") - chat_commands(before_text, "domain_error")
    assert (ok, domain) == (sent, len(refused))
    assert chat_command_latencies(after_text) - chat_command_latencies(before_text) == len(answers)

    # Every accepted send is stored once, with its event.
    for index, project in enumerate(projects):
        bodies = await db.fetch(
            "SELECT body FROM messages WHERE project_address = $1 ORDER BY seq", project.address
        )
        assert sorted(r["body"] for r in bodies) == [f"p{index} m{n}" for n in (0, 1, 2)]
        events = await db.fetchval(
            "SELECT count(*) FROM events WHERE type = 'chat.message' AND subject = $1",
            project.address,
        )
        assert events == 3

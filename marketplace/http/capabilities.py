"""Every capability of the service, in one explicit list.

A capability declares here, in one place, everything it plugs into the server: its route
tables, the functions that build its app state, its cleanup contexts (actors, subscribers,
background tasks), its guard hooks (each in a :class:`GuardSlot`, which fixes their order) and
its job queues. Each is the object itself, imported above, so mypy, an IDE and the import graph
see the wiring. The app factory (``marketplace.http.app``) reads this list and nothing else: no
module is found by its file name, and import order decides nothing. The list lives in ``http``,
beside the factory: it imports modules of ``http`` and the factory imports it, so in any other
package the two would import each other.

Importing this module imports the whole server (about 2 s, Ray included). The CLI therefore
reads its commands from :mod:`marketplace.cli_commands`, the one place where references are
``"module:attribute"`` strings, imported only when their command runs.

Adding a capability: write its package (rules, models, repositories) and its routes module, then
add one :class:`Capability` entry below (and, if it guards mutations, a :class:`GuardSlot` for
its guard; CLI commands go in :mod:`marketplace.cli_commands`). A test checks that every route
module is declared by exactly one entry.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass

from aiohttp import web

from marketplace.http import (
    deployment_figures,
    events_lag,
    idempotency,
    job_queue,
    leaderboard_consumer,
    moderation_gate,
    notification_pipeline,
    read_cache,
    sessions,
)
from marketplace.http.routes import (
    agents,
    api_keys,
    bid_drafts,
    bids,
    challenge_submissions,
    dispute_evidence,
    indexer_status,
    leaderboards,
    legal,
    messaging,
    moderation,
    notifications,
    permissions,
    project_claims,
    projects_read,
    stream,
    system,
    usernames,
    verifier,
    wallet_links,
)
from marketplace.http.routing import GuardHook, RouteTable
from marketplace.jobs.registry import JobRegistry, QueueSpec
from marketplace.notifications.sending import NOTIFICATIONS_QUEUE
from marketplace.verifier.execution import VERIFIER_QUEUE

# ``fn(app)``: builds app state and hooks when the app is made.
Setup = Callable[[web.Application], None]
# An aiohttp cleanup context: ``async def ctx(app): ...; yield; ...``.
AppContext = Callable[[web.Application], AsyncIterator[None]]


class GuardSlot(enum.Enum):
    """Where a guard runs. Guarded mutations run the verified-e-mail check first (built into the
    router, spec section 5), then the declared guards in the order of these members: where a
    guard runs relative to the others is a decision, not an accident of registration order."""

    LEGAL_ASSENT = "legal_assent"
    MODERATION_SUSPENSION = "moderation_suspension"


@dataclass(frozen=True)
class Guard:
    slot: GuardSlot
    hook: GuardHook


@dataclass(frozen=True)
class Capability:
    name: str
    summary: str
    # Route tables, registered in this order.
    routes: tuple[RouteTable, ...] = ()
    # Run by the app factory, in list order, to build app state and hooks.
    setup: tuple[Setup, ...] = ()
    # Started after the core's contexts (Postgres, Redis, Ray) in list order, stopped in reverse.
    contexts: tuple[AppContext, ...] = ()
    # Run for every guarded mutation, in GuardSlot order.
    guards: tuple[Guard, ...] = ()
    # Job queues this capability's work runs on; the jobs capability starts their worker actors
    # (docs/jobs.md).
    queues: tuple[QueueSpec, ...] = ()


CAPABILITIES: tuple[Capability, ...] = (
    Capability(
        name="system",
        summary="health, readiness, the OpenAPI document and its UI, Prometheus metrics",
        routes=(system.routes,),
        # The deployment-wide figures of /metrics (docs/metrics.md), and the outbox consumers'
        # lag (docs/events.md).
        setup=(system.setup, deployment_figures.setup, events_lag.setup),
        contexts=(system.openapi_document,),
    ),
    Capability(
        name="identity",
        summary=(
            "session users, wallet links, usernames, permissions, agent API keys "
            "(spec sections 2, 4, 5)"
        ),
        routes=(wallet_links.routes, usernames.routes, permissions.routes, api_keys.routes),
        # The session recorder first: the key resolver reads it.
        setup=(sessions.setup, api_keys.setup),
        contexts=(sessions.session_writer, api_keys.usage_writer),
    ),
    Capability(
        name="legal",
        summary="legal documents and assent; guards every mutation that needs it",
        routes=(legal.routes,),
        setup=(legal.setup,),
        guards=(Guard(GuardSlot.LEGAL_ASSENT, legal.legal_assent_guard),),
    ),
    Capability(
        name="indexer",
        summary="the chain indexer actor and its status",
        routes=(indexer_status.routes,),
        setup=(indexer_status.setup,),
        contexts=(indexer_status.indexer_actor,),
    ),
    Capability(
        name="projects",
        summary="project read API, create-intents, claims and metadata",
        routes=(projects_read.routes, project_claims.routes, bids.routes),
        # The read cache of this frontend (marketplace/http/read_cache.py).
        contexts=(read_cache.read_cache,),
    ),
    Capability(
        name="records",
        summary="off-chain records: bid drafts, challenge submissions, dispute evidence",
        routes=(bid_drafts.routes, challenge_submissions.routes, dispute_evidence.routes),
    ),
    Capability(
        name="messaging",
        summary="project chat, direct messages, blocks and mutes, message reports",
        routes=(messaging.routes,),
    ),
    Capability(
        name="moderation",
        summary="the term filter, offense counters and suspensions, the audit log",
        routes=(moderation.routes,),
        # One term filter per process; the send check of `sends_messages=True` routes.
        setup=(moderation_gate.setup,),
        guards=(
            Guard(GuardSlot.MODERATION_SUSPENSION, moderation_gate.moderation_suspension_guard),
        ),
    ),
    Capability(
        name="notifications",
        summary="the notification delivery log, preferences and one-click unsubscribe links",
        routes=(notifications.routes,),
        # Reads the unsubscribe secret: the app does not start without one.
        setup=(notifications.setup,),
    ),
    Capability(
        name="stream",
        summary="the live event stream (Server-Sent Events) of the events each user may see",
        routes=(stream.routes,),
        setup=(stream.setup,),
        contexts=(stream.stream_hub,),
    ),
    Capability(
        name="jobs",
        summary="the durable job queue: worker actors for every declared queue, queue metrics",
        setup=(job_queue.setup,),
        contexts=(job_queue.job_workers,),
    ),
    Capability(
        name="notification_pipeline",
        summary=(
            "lifecycle e-mails: the outbox consumer writing delivery rows and their jobs, the "
            "per-recipient rate-limiter actor, the `notifications` job queue"
        ),
        contexts=(notification_pipeline.notification_consumer,),
        queues=(NOTIFICATIONS_QUEUE,),
    ),
    Capability(
        name="verifier",
        summary=(
            "verifier jobs: deterministic policy checks on the `verifier` pool (Ray actors), "
            "evidence, EIP-712 attestations, the retention sweep, the verifier runtime"
        ),
        routes=(verifier.routes,),
        contexts=(verifier.policy_executors, verifier.retention_sweeper),
        queues=(VERIFIER_QUEUE,),
    ),
    Capability(
        name="leaderboards",
        summary=(
            "leaderboard categories, the owner's category tags of completed milestones and "
            "their revisions, the boards and the outbox consumer keeping them current"
        ),
        routes=(leaderboards.routes,),
        setup=(leaderboards.setup,),
        contexts=(leaderboard_consumer.boards_consumer,),
    ),
    Capability(
        name="agents",
        summary="public agent profiles: wallets, project history, statistics, category rankings",
        routes=(agents.routes,),
    ),
    Capability(
        name="idempotency",
        summary=(
            "`Idempotency-Key` on create requests (routes declared `idempotent=True`): the "
            "sweep of expired keys"
        ),
        contexts=(idempotency.key_sweeper,),
    ),
)


def ordered_guards(capabilities: Iterable[Capability] = CAPABILITIES) -> list[GuardHook]:
    """Every declared guard hook, in :class:`GuardSlot` order (list order within a slot)."""
    slots = list(GuardSlot)
    guards = [guard for capability in capabilities for guard in capability.guards]
    return [guard.hook for guard in sorted(guards, key=lambda guard: slots.index(guard.slot))]


def declared_queues(capabilities: Iterable[Capability] = CAPABILITIES) -> JobRegistry:
    """Every queue the capabilities declare; a queue name declared twice is refused."""
    return JobRegistry(queue for capability in capabilities for queue in capability.queues)

"""Every capability of the service, in one explicit list.

A capability declares here, in one place, everything it plugs into the core: its route tables,
the functions that build its app state, its cleanup contexts (actors, subscribers, background
tasks), its guard hooks (placed by name in :data:`GUARD_ORDER`), its CLI commands and the event
types it produces and consumes. The app factory (``marketplace.http.app``) and the CLI
(``marketplace.cli``) read this list and nothing else: no module is found by its file name, and
import order decides nothing.

References are ``"module:attribute"`` strings resolved when used, so the CLI can list its
commands without importing the web stack, and this module imports nothing of ours. A CLI command
is declared with its name and one-line help (all ``marketplace --help`` shows); its module is
imported only when that command runs, so ``marketplace serve`` never loads, say, the devnet
tooling.

Adding a capability: write its package (rules, models, repositories) and its routes module, then
add one :class:`Capability` entry below (and, if it guards mutations, its guard's name in
:data:`GUARD_ORDER`). A test checks that every route module is declared by exactly one entry.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

# Guarded mutations run the verified-e-mail check first (built into the router, spec section 5),
# then these hooks in this order. A capability's guard must be named here: where it runs relative
# to the others is a decision, not an accident of registration order.
GUARD_ORDER: tuple[str, ...] = ("legal_assent", "moderation_suspension")


@dataclass(frozen=True)
class Command:
    """A ``marketplace`` sub-command.

    ``configure`` names ``fn(parser)``, which adds the command's arguments (and sub-commands) to
    the sub-parser the CLI made for ``name`` and sets ``func``; the CLI resolves it only when the
    command line invokes ``name`` (or its parent).

    ``parent`` names a command group (``"admin"``): the command is then ``marketplace <parent>
    <name>``, so several capabilities share one group without knowing of each other.
    """

    name: str
    help: str
    configure: str
    parent: str | None = None


@dataclass(frozen=True)
class Capability:
    name: str
    summary: str
    # Route tables (``RouteTable``), registered in this order.
    routes: tuple[str, ...] = ()
    # ``fn(app)`` run by the app factory, in list order, to build app state and hooks.
    setup: tuple[str, ...] = ()
    # aiohttp cleanup contexts ``async def ctx(app): ...; yield; ...``, started after the core's
    # (Postgres, Redis, Ray) in list order and stopped in reverse.
    contexts: tuple[str, ...] = ()
    # (name from GUARD_ORDER, ``async fn(call)``) run for every guarded mutation.
    guards: tuple[tuple[str, str], ...] = ()
    # Sub-commands of ``marketplace``, each loaded only when it runs.
    cli: tuple[Command, ...] = ()
    # Job queues (``QueueSpec``) this capability's work runs on; the jobs capability starts
    # their worker actors (docs/jobs.md).
    queues: tuple[str, ...] = ()
    # Event types written to the outbox / read from the stream (docs/events.md).
    produces: tuple[str, ...] = ()
    consumes: tuple[str, ...] = ()


ROUTES = "marketplace.http.routes"

CAPABILITIES: tuple[Capability, ...] = (
    Capability(
        name="system",
        summary="health, readiness, the OpenAPI document and its UI, Prometheus metrics",
        routes=(f"{ROUTES}.system:routes",),
        # The deployment-wide figures of /metrics (docs/metrics.md).
        setup=(f"{ROUTES}.system:setup", "marketplace.http.deployment_metrics:setup"),
        contexts=(f"{ROUTES}.system:openapi_document",),
    ),
    Capability(
        name="identity",
        summary=(
            "session users, wallet links, usernames, permissions, agent API keys "
            "(spec sections 2, 4, 5)"
        ),
        routes=(
            f"{ROUTES}.wallet_links:routes",
            f"{ROUTES}.usernames:routes",
            f"{ROUTES}.permissions:routes",
            f"{ROUTES}.api_keys:routes",
        ),
        # The session recorder first: the key resolver reads it.
        setup=("marketplace.http.sessions:setup", f"{ROUTES}.api_keys:setup"),
        contexts=("marketplace.http.sessions:session_writer", f"{ROUTES}.api_keys:usage_writer"),
        cli=(
            Command(
                "grant",
                "set permission flags of a user",
                "marketplace.identity.cli:configure_grant",
                parent="admin",
            ),
            Command(
                "revoke",
                "clear permission flags of a user",
                "marketplace.identity.cli:configure_revoke",
                parent="admin",
            ),
            Command(
                "show",
                "print a user's permission flags",
                "marketplace.identity.cli:configure_show",
                parent="admin",
            ),
        ),
    ),
    Capability(
        name="legal",
        summary="legal documents and assent; guards every mutation that needs it",
        routes=(f"{ROUTES}.legal:routes",),
        setup=(f"{ROUTES}.legal:setup",),
        guards=(("legal_assent", f"{ROUTES}.legal:legal_assent_guard"),),
    ),
    Capability(
        name="indexer",
        summary="the chain indexer actor and its status",
        routes=(f"{ROUTES}.indexer_status:routes",),
        setup=(f"{ROUTES}.indexer_status:setup",),
        contexts=(f"{ROUTES}.indexer_status:indexer_actor",),
        produces=("project.created", "project.changed", "project.removed", "chain.reorg"),
    ),
    Capability(
        name="projects",
        summary="project read API, create-intents, claims and metadata",
        routes=(f"{ROUTES}.projects_read:routes", f"{ROUTES}.project_claims:routes"),
        # The read cache of this frontend (marketplace/http/read_cache.py).
        contexts=("marketplace.http.read_cache:read_cache",),
        produces=("project.claimed", "project.metadata_updated"),
        # The types that invalidate cached reads (read_cache.CONSUMED_TYPES; a test checks).
        consumes=(
            "project.created",
            "project.changed",
            "project.removed",
            "project.claimed",
            "project.metadata_updated",
            "verifier_job.completed",
            "chain.reorg",
        ),
    ),
    Capability(
        name="records",
        summary="off-chain records: bid drafts, challenge submissions, dispute evidence",
        routes=(
            f"{ROUTES}.bid_drafts:routes",
            f"{ROUTES}.challenge_submissions:routes",
            f"{ROUTES}.dispute_evidence:routes",
        ),
        produces=(
            "bid_draft.created",
            "bid_draft.updated",
            "challenge_submission.created",
            "challenge_submission.updated",
            "dispute_evidence.submitted",
        ),
    ),
    Capability(
        name="messaging",
        summary="project chat, direct messages, blocks and mutes, message reports",
        routes=(f"{ROUTES}.messaging:routes",),
        produces=("chat.message", "dm.message", "message.reported", "report.updated"),
    ),
    Capability(
        name="moderation",
        summary="the term filter, offense counters and suspensions, the audit log",
        routes=(f"{ROUTES}.moderation:routes",),
        # One term filter per process; the send check of `sends_messages=True` routes.
        setup=("marketplace.http.moderation_gate:setup",),
        guards=(
            (
                "moderation_suspension",
                "marketplace.http.moderation_gate:moderation_suspension_guard",
            ),
        ),
        produces=(
            "moderation.offense",
            "moderation.suspended",
            "moderation.suspension_lifted",
        ),
    ),
    Capability(
        name="notifications",
        summary="the notification delivery log, preferences and one-click unsubscribe links",
        routes=(f"{ROUTES}.notifications:routes",),
        # Reads the unsubscribe secret: the app does not start without one.
        setup=(f"{ROUTES}.notifications:setup",),
    ),
    Capability(
        name="stream",
        summary="the live event stream (Server-Sent Events) of the events each user may see",
        routes=(f"{ROUTES}.stream:routes",),
        setup=(f"{ROUTES}.stream:setup",),
        contexts=(f"{ROUTES}.stream:stream_hub",),
        # The types with an audience rule in marketplace/stream/audience.py (a test checks).
        consumes=("project.changed", "chat.message", "dm.message", "report.updated"),
    ),
    Capability(
        name="jobs",
        summary="the durable job queue: worker actors for every declared queue, queue metrics",
        setup=("marketplace.http.job_queue:setup",),
        contexts=("marketplace.http.job_queue:job_workers",),
    ),
    Capability(
        name="notification_pipeline",
        summary=(
            "lifecycle e-mails: the outbox consumer writing delivery rows and their jobs, the "
            "per-recipient rate-limiter actor, the `notifications` job queue"
        ),
        contexts=("marketplace.http.notification_pipeline:notification_consumer",),
        queues=("marketplace.notifications.sending:NOTIFICATIONS_QUEUE",),
        # The types marketplace/notifications/recipients.py turns into deliveries (a test checks).
        consumes=(
            "bid_draft.created",
            "dispute_evidence.submitted",
            "chat.message",
            "dm.message",
        ),
    ),
    Capability(
        name="verifier",
        summary=(
            "verifier jobs: deterministic policy checks on the `verifier` pool (Ray actors), "
            "evidence, EIP-712 attestations, the retention sweep, the verifier runtime"
        ),
        routes=(f"{ROUTES}.verifier:routes",),
        contexts=(f"{ROUTES}.verifier:policy_executors", f"{ROUTES}.verifier:retention_sweeper"),
        queues=("marketplace.verifier.execution:VERIFIER_QUEUE",),
        produces=("verifier_job.completed",),
        cli=(
            Command(
                "verifier",
                "run the verifier runtime (`POST /v1/verify`) on the Ray cluster",
                "marketplace.http.verifier_runtime:configure",
            ),
        ),
    ),
    Capability(
        name="leaderboards",
        summary=(
            "leaderboard categories, the owner's category tags of completed milestones and "
            "their revisions, the boards and the outbox consumer keeping them current"
        ),
        routes=(f"{ROUTES}.leaderboards:routes",),
        setup=(f"{ROUTES}.leaderboards:setup",),
        contexts=("marketplace.http.leaderboard_consumer:boards_consumer",),
        cli=(
            Command(
                "categories",
                "list, add, update or deactivate leaderboard categories",
                "marketplace.leaderboards.cli:configure",
                parent="admin",
            ),
            Command(
                "leaderboards",
                "rebuild the leaderboard boards (entries and standings) from scratch",
                "marketplace.leaderboards.cli:configure_boards",
                parent="admin",
            ),
        ),
        produces=("category_tags.changed",),
        # The types marketplace/leaderboards/boards.py rebuilds projects for (a test checks).
        consumes=(
            "project.created",
            "project.changed",
            "project.removed",
            "chain.reorg",
            "category_tags.changed",
        ),
    ),
    Capability(
        name="agents",
        summary="public agent profiles: wallets, project history, statistics, category rankings",
        routes=(f"{ROUTES}.agents:routes",),
    ),
    Capability(
        name="devnet",
        summary="`marketplace devnet ...`: drive the local demo chain (never loaded by serve)",
        cli=(
            Command(
                "devnet",
                "drive the devnet of `marketplace up` (create, bid, dispute, seed, ...)",
                "marketplace.devnet.cli:configure",
            ),
        ),
    ),
)


def resolve(reference: str) -> Any:
    """The object a ``"module:attribute"`` reference names."""
    module_name, _, attribute = reference.partition(":")
    if not attribute:
        raise ValueError(f"capability reference {reference!r} is not 'module:attribute'")
    return getattr(importlib.import_module(module_name), attribute)


def ordered_guards(capabilities: tuple[Capability, ...] = CAPABILITIES) -> list[tuple[str, str]]:
    """Every declared guard, in :data:`GUARD_ORDER`; an undeclared name is a programming error."""
    guards = [guard for capability in capabilities for guard in capability.guards]
    for name, _ in guards:
        if name not in GUARD_ORDER:
            raise ValueError(f"guard {name!r} has no place in GUARD_ORDER")
    return sorted(guards, key=lambda guard: GUARD_ORDER.index(guard[0]))

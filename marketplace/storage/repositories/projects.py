"""SQL of the project read API: listing, detail and milestone reads of the indexed read models.

The tables are filled by the chain indexer (``repositories/indexer.py``); this module only reads.

Visibility (spec section 1.1, section 5 rule 10) is decided inside each statement, so a page, its
count and a detail read always agree: an open project is visible to everyone; an invite-only one
only to a caller with an ACTIVE wallet link (``revoked_at IS NULL``) to its owner wallet, to its
selected worker's wallet or to a wallet on its on-chain ``allowlist``. The caller's active wallets
are computed once per statement by the ``viewer`` CTE; anonymous callers get statements without
it (only ``bidding_access = 'open'``). The off-chain records (``marketplace/records``) check
visibility with the same predicate (``SELECT_VISIBLE_PROJECT_PARTIES``), so the two cannot
disagree about who sees a project.

Listing order is (created_block DESC, created_log_index DESC), the unique index
``projects_listing_order`` (``projects_open_order``, migration 0005, for open projects); pages
are keyset-paginated on that pair, so projects indexed while a client pages through appear before
page 1 and never shift later pages. Owner and status filters use ``projects_owner_order`` and
``projects_status_order``, which end in the same pair.

One list request is ONE statement and one round trip: the count of all matching projects
(independent of the cursor; open ones by an index-only scan of ``projects_open_order``, plus for
a signed-in caller the invite-only ones reached through its wallets) next to the page, LEFT JOIN
LATERAL, whose milestones are aggregated per project as arrays of records; an empty page still
yields one row carrying the count. A detail read is one statement too. Statement texts differ per
combination of filters (rather than ``$n IS NULL OR ...``) so that a cached generic plan can
never pick the wrong index. ``bench/read_throughput.py --explain`` prints every plan.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from functools import cache
from typing import NamedTuple

from marketplace.storage import rows
from marketplace.storage.pool import Conn
from marketplace.storage.repositories.claims import StoredMilestonePolicy

# Fallback window after the owner-response deadline of a challenge (spec section 8).
CHALLENGE_FALLBACK_SECONDS = 5 * 24 * 3600

PROJECT_COLUMNS = """
    p.project_address, p.owner_address, p.status, p.project_mode, p.bidding_access,
    p.config_hash, p.selected_builder_address, p.milestone_count, p.bid_bond_usdc,
    p.challenge_payout_usdc, p.challenge_submission_count,
    p.challenge_submission_window_seconds, p.challenge_owner_response_window_seconds,
    p.challenge_submission_deadline, p.challenge_owner_response_deadline,
    p.dispute_phase, p.dispute_reason, p.dispute_raised_by, p.dispute_milestone_index,
    p.dispute_opened_at, p.dispute_verdict_submitted_at,
    p.dispute_owner_evidence_hash, p.dispute_worker_evidence_hash,
    p.created_block, p.created_log_index, p.created_at, p.updated_at,
    md.title, md.description, md.image_url, md.repo_url, md.milestone_policies"""

# A project's milestones, by index, as an array of anonymous records (decoded by asyncpg into
# tuples in this column order; see MILESTONE_FIELDS).
MILESTONES_AGGREGATE = """
    ARRAY(
        SELECT ROW(m.milestone_index, m.status, m.payout_usdc, m.deadline_at, m.approved_at,
                   m.resolved_at, m.submitted_at, m.delivery_ref_hash,
                   coalesce(m.latest_verifier_evidence_hash, m.latest_evidence_hash),
                   m.latest_verifier_job_id, m.latest_verifier_passes, m.attested_on_chain)
        FROM milestones m WHERE m.project_address = p.project_address
        ORDER BY m.milestone_index
    ) AS milestones"""
MILESTONE_FIELDS = (
    "milestone_index",
    "status",
    "payout_usdc",
    "deadline_at",
    "approved_at",
    "resolved_at",
    "submitted_at",
    "delivery_ref_hash",
    "latest_evidence_hash",
    "latest_verifier_job_id",
    "latest_verifier_passes",
    "attested_on_chain",
)
# One element of the aggregate, as asyncpg decodes it (a plain tuple, MILESTONE_FIELDS order).
MilestoneValues = tuple[
    int,  # milestone_index
    str,  # status
    Decimal | None,  # payout_usdc
    datetime | None,  # deadline_at
    datetime | None,  # approved_at
    datetime | None,  # resolved_at
    datetime | None,  # submitted_at
    str | None,  # delivery_ref_hash
    str | None,  # latest_evidence_hash
    uuid.UUID | None,  # latest_verifier_job_id
    bool | None,  # latest_verifier_passes
    bool,  # attested_on_chain
]


class ProjectReadRow(NamedTuple):
    """A project as the listing and detail statements read it: PROJECT_COLUMNS, the milestones
    aggregate, and (detail reads by a signed-in caller) whether the caller owns it."""

    project_address: str
    owner_address: str
    status: str
    project_mode: str
    bidding_access: str
    config_hash: str
    selected_builder_address: str | None
    milestone_count: int
    bid_bond_usdc: Decimal | None
    challenge_payout_usdc: Decimal | None
    challenge_submission_count: int | None
    challenge_submission_window_seconds: int | None
    challenge_owner_response_window_seconds: int | None
    challenge_submission_deadline: int | None
    challenge_owner_response_deadline: int | None
    dispute_phase: str | None
    dispute_reason: str | None
    dispute_raised_by: str | None
    dispute_milestone_index: int | None
    dispute_opened_at: int | None
    dispute_verdict_submitted_at: int | None
    dispute_owner_evidence_hash: str | None
    dispute_worker_evidence_hash: str | None
    created_block: int
    created_log_index: int
    created_at: datetime
    updated_at: datetime
    title: str | None
    description: str | None
    image_url: str | None
    repo_url: str | None
    milestone_policies: list[StoredMilestonePolicy] | None  # None: no claimed metadata
    milestones: list[MilestoneValues]
    viewer_is_owner: bool | None  # None: a listing or an anonymous read


# A listing's columns: the count of all matching projects, then the project (without
# viewer_is_owner, which only a detail read has).
_LISTED_COLUMNS = ("total", *ProjectReadRow._fields[:-1])


class ProjectPartiesRow(NamedTuple):
    """The project facts the off-chain records' rules need (SELECT_VISIBLE_PROJECT_PARTIES)."""

    project_address: str
    owner_address: str
    status: str
    project_mode: str
    bidding_access: str
    selected_builder_address: str | None
    allowlist: list[str]
    challenge_submission_count: int | None
    dispute_phase: str | None
    dispute_milestone_index: int | None
    dispute_opened_at: int | None
    milestone_count: int


# Callers and their visible projects: the caller's wallets, then the project's parties.
_CALLER_PARTIES_COLUMNS = ("wallets", *ProjectPartiesRow._fields)

# Metadata shows only once its claimed owner is the indexed owner (spec section 4, claim rule 3:
# queued metadata is merged on the first owner-matched indexing).
METADATA_JOIN = """
    LEFT JOIN project_metadata md
        ON md.project_address = p.project_address AND md.owner_address = p.owner_address"""

# The caller's active wallets (lower-case), one row even when there are none.
VIEWER_CTE = """
viewer AS (
    SELECT coalesce(array_agg(w.wallet_address), '{}'::text[]) AS wallets
    FROM wallet_links w WHERE w.user_id = $1::uuid AND w.revoked_at IS NULL
)"""
# The one visibility rule: who sees an invite-only project (everyone sees open ones), given the
# caller's active wallets `v.wallets`. The selected worker stays an insider after being removed
# from the allowlist: it was allowlisted to bid and is paid for the work, so the project must not
# vanish from under it. Each disjunct has an index (projects_owner_order,
# projects_selected_builder, projects_allowlist), so the invite-only count is a BitmapOr, never a
# table scan.
INSIDER = (
    "(p.owner_address = any(v.wallets) OR p.selected_builder_address = any(v.wallets)"
    " OR p.allowlist && v.wallets)"
)
VISIBLE_TO_VIEWER = f"(p.bidding_access = 'open' OR {INSIDER})"
VISIBLE_TO_ANONYMOUS = "p.bidding_access = 'open'"
OPEN = VISIBLE_TO_ANONYMOUS
INVITED_VIEWER = f"p.bidding_access = 'invite_only' AND {INSIDER}"

# The effective status (docs/read-models.md) as SQL, for the `effectiveStatus` list filter; it
# mirrors marketplace.projects.read_models.effective_status, and a test checks both agree on
# every row of the derivation table. {now} is the parameter carrying the request's Unix time.
EFFECTIVE_STATUS_SQL = f"""
    CASE
        WHEN p.project_mode <> 'challenge' OR p.status NOT IN ('bidding', 'building')
            OR p.challenge_submission_deadline IS NULL THEN p.status
        WHEN {{now}} <= p.challenge_submission_deadline THEN p.status
        WHEN coalesce(p.challenge_submission_count, 0) = 0 THEN
            CASE WHEN p.status = 'bidding' THEN 'failed' ELSE p.status END
        WHEN p.challenge_owner_response_deadline IS NULL
            OR {{now}} <= p.challenge_owner_response_deadline THEN 'building'
        WHEN {{now}} <= p.challenge_owner_response_deadline + {CHALLENGE_FALLBACK_SECONDS}
            THEN 'dispute'
        ELSE 'failed'
    END"""

LISTING_ORDER = "p.created_block DESC, p.created_log_index DESC"


@dataclass(frozen=True)
class ListFilters:
    """What a listing selects; ``None`` means "no filter". Addresses are lower-case."""

    owner_address: str | None = None
    status: str | None = None
    effective_status: str | None = None
    # Unix seconds the effective status is evaluated at (needed with ``effective_status``).
    now: int | None = None


class _Params:
    def __init__(self) -> None:
        self.count = 0

    def next(self, cast: str) -> str:
        self.count += 1
        return f"${self.count}::{cast}"


@cache
def list_statement(*, viewer: bool, owner: bool, status: bool, effective: bool, after: bool) -> str:
    """The listing statement for one combination of filters.

    Parameters, in order: viewer user id (if ``viewer``), owner address, status, now and
    effective status (if ``effective``), cursor block and log index (if ``after``), page size.
    """
    params = _Params()
    ctes = ""
    viewer_from = ""
    if viewer:
        params.next("uuid")  # $1, used by VIEWER_CTE
        ctes = f"WITH {VIEWER_CTE.strip()}\n"
        viewer_from = " CROSS JOIN viewer v"
    filters = []
    if owner:
        filters.append(f"p.owner_address = {params.next('text')}")
    if status:
        filters.append(f"p.status = {params.next('text')}")
    if effective:
        now = params.next("bigint")
        filters.append(f"{EFFECTIVE_STATUS_SQL.format(now=now).strip()} = {params.next('text')}")
    visible = VISIBLE_TO_VIEWER if viewer else VISIBLE_TO_ANONYMOUS
    page_where = "\n      AND ".join([visible, *filters])
    if after:
        block, log_index = params.next("bigint"), params.next("integer")
        page_where += f"\n      AND (p.created_block, p.created_log_index) < ({block}, {log_index})"
    limit = params.next("integer")
    # The count in two parts: open projects (projects_open_order, index-only), plus for a
    # signed-in viewer the invite-only ones it may see (found through its wallets: the owner and
    # selected-worker indexes and the allowlist GIN index), so that no count scans the whole
    # table.
    open_where = "\n      AND ".join([OPEN, *filters])
    total = f"(SELECT count(*) FROM projects p\n     WHERE {open_where})"
    if viewer:
        invited_where = "\n      AND ".join([INVITED_VIEWER, *filters])
        total += f"\n + (SELECT count(*) FROM projects p{viewer_from}\n     WHERE {invited_where})"
    return f"""{ctes}SELECT {total} AS total, page.*
FROM (SELECT 1) AS one
LEFT JOIN LATERAL (
    SELECT {PROJECT_COLUMNS.strip()},
    {MILESTONES_AGGREGATE.strip()}
    FROM projects p{viewer_from}{METADATA_JOIN}
    WHERE {page_where}
    ORDER BY {LISTING_ORDER}
    LIMIT {limit}
) AS page ON true
ORDER BY page.created_block DESC, page.created_log_index DESC
"""


# Detail read ($2 = lower-case project address); NULL viewer_is_owner for anonymous callers.
SELECT_PROJECT_FOR_VIEWER = f"""
WITH {VIEWER_CTE.strip()}
SELECT {PROJECT_COLUMNS.strip()},
    {MILESTONES_AGGREGATE.strip()},
    p.owner_address = any(v.wallets) AS viewer_is_owner
FROM projects p CROSS JOIN viewer v{METADATA_JOIN}
WHERE p.project_address = $2::text AND {VISIBLE_TO_VIEWER}
"""
SELECT_PROJECT_FOR_ANONYMOUS = f"""
SELECT {PROJECT_COLUMNS.strip()},
    {MILESTONES_AGGREGATE.strip()},
    NULL::boolean AS viewer_is_owner
FROM projects p{METADATA_JOIN}
WHERE p.project_address = $1::text AND {VISIBLE_TO_ANONYMOUS}
"""

# The project facts the off-chain records' rules need (marketplace/records/access.py), returned
# only when the caller may see the project, by the same predicate as the reads above. $1: the
# lower-case project address; $2: the caller's active wallets (a records operation reads them
# once and checks everything against that one set); $3: wallets whose holders see the project
# whatever its access (the dispute admins, when they read dispute evidence).
SELECT_VISIBLE_PROJECT_PARTIES = f"""
SELECT p.project_address, p.owner_address, p.status, p.project_mode, p.bidding_access,
       p.selected_builder_address, p.allowlist, p.challenge_submission_count,
       p.dispute_phase, p.dispute_milestone_index, p.dispute_opened_at, p.milestone_count
FROM projects p CROSS JOIN (SELECT $2::text[] AS wallets) v
WHERE p.project_address = $1::text
  AND ($4::bool OR {VISIBLE_TO_VIEWER} OR v.wallets && $3::text[])
"""
SELECT_IS_INDEXED = "SELECT EXISTS (SELECT 1 FROM projects WHERE project_address = $1)"

# Callers' active wallets and, through them, the project if visible: one round trip for the
# pair every write rule starts with, for any number of (user, project) pairs. One row per pair,
# in order; the project's columns are NULL when it is not indexed or hidden.
SELECT_CALLERS_AND_VISIBLE_PROJECTS = f"""
SELECT v.wallets, p.project_address, p.owner_address, p.status, p.project_mode,
       p.bidding_access, p.selected_builder_address, p.allowlist,
       p.challenge_submission_count, p.dispute_phase, p.dispute_milestone_index,
       p.dispute_opened_at, p.milestone_count
FROM unnest($1::uuid[], $2::text[]) WITH ORDINALITY AS q(user_id, project_address, n)
CROSS JOIN LATERAL (
    SELECT coalesce(array_agg(wallet_address ORDER BY wallet_address), '{{}}') AS wallets
    FROM wallet_links WHERE user_id = q.user_id AND revoked_at IS NULL
) v
LEFT JOIN projects p ON p.project_address = q.project_address AND {VISIBLE_TO_VIEWER}
ORDER BY q.n
"""


@dataclass(frozen=True)
class ProjectPage:
    total: int
    rows: list[ProjectReadRow]  # at most the requested limit, newest first


def list_arguments(
    *,
    viewer: uuid.UUID | None,
    filters: ListFilters,
    after: tuple[int, int] | None,
    limit: int,
) -> tuple[str, list[object]]:
    """The statement and its arguments for one listing (also used by the read benchmark)."""
    effective = filters.effective_status is not None
    if effective and filters.now is None:
        raise ValueError("an effective_status filter needs `now`")
    args: list[object] = []
    if viewer is not None:
        args.append(viewer)
    if filters.owner_address is not None:
        args.append(filters.owner_address)
    if filters.status is not None:
        args.append(filters.status)
    if effective:
        args.extend((filters.now, filters.effective_status))
    if after is not None:
        args.extend(after)
    args.append(limit)
    sql = list_statement(
        viewer=viewer is not None,
        owner=filters.owner_address is not None,
        status=filters.status is not None,
        effective=effective,
        after=after is not None,
    )
    return sql, args


async def list_projects(
    conn: Conn,
    *,
    viewer: uuid.UUID | None,
    filters: ListFilters,
    after: tuple[int, int] | None,
    limit: int,
) -> ProjectPage:
    """One page of visible projects, newest first, strictly after ``after`` (block, log index),
    plus the number of visible projects matching ``filters`` across all pages."""
    sql, args = list_arguments(viewer=viewer, filters=filters, after=after, limit=limit)
    records = await conn.fetch(sql, *args)
    if not records:
        return ProjectPage(0, [])
    rows.check_names(_LISTED_COLUMNS, records[0], "a project listing")
    # An empty page is one row carrying the count, its project columns NULL.
    make = ProjectReadRow._make
    page = [make((*record[1:], None)) for record in records if record[1] is not None]
    return ProjectPage(records[0][0], page)


def detail_arguments(viewer: uuid.UUID | None, project_address: str) -> tuple[str, list[object]]:
    if viewer is None:
        return SELECT_PROJECT_FOR_ANONYMOUS, [project_address]
    return SELECT_PROJECT_FOR_VIEWER, [viewer, project_address]


async def get_project(
    conn: Conn, *, viewer: uuid.UUID | None, project_address: str
) -> ProjectReadRow | None:
    """The project with its milestones, or None when it does not exist or the viewer may not
    see it (the two are deliberately indistinguishable)."""
    sql, args = detail_arguments(viewer, project_address)
    return rows.maybe(ProjectReadRow, await conn.fetchrow(sql, *args))


async def callers_and_visible_projects(
    conn: Conn, pairs: Sequence[tuple[uuid.UUID, str]]
) -> list[tuple[list[str], ProjectPartiesRow | None]]:
    """For each (user, project address): the user's active wallets (lower-case) and the
    project's parties as :func:`visible_project_parties` reads them with those wallets (None:
    not indexed or hidden), in one statement."""
    records = await conn.fetch(
        SELECT_CALLERS_AND_VISIBLE_PROJECTS,
        [user_id for user_id, _ in pairs],
        [address.lower() for _, address in pairs],
    )
    if records:
        rows.check_names(_CALLER_PARTIES_COLUMNS, records[0], "callers and their projects")
    make = ProjectPartiesRow._make
    return [
        (list(record[0]), make(record[1:]) if record[1] is not None else None) for record in records
    ]


async def visible_project_parties(
    conn: Conn,
    project_address: str,
    wallets: Iterable[str],
    *,
    also_visible_to: Iterable[str] = (),
    everyone: bool = False,
) -> ProjectPartiesRow | None:
    """The project's parties and state for the records' rules, or None when it is not indexed or
    hidden from a holder of ``wallets`` (lower-case); holders of ``also_visible_to`` see it too,
    and with ``everyone`` (an administrator) nothing is hidden.
    """
    record = await conn.fetchrow(
        SELECT_VISIBLE_PROJECT_PARTIES,
        project_address.lower(),
        sorted(wallets),
        sorted(also_visible_to),
        everyone,
    )
    return rows.maybe(ProjectPartiesRow, record)


async def is_indexed(conn: Conn, project_address: str) -> bool:
    return bool(await conn.fetchval(SELECT_IS_INDEXED, project_address.lower()))

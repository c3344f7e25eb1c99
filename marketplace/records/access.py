"""Who may see and write the off-chain records of a project.

Everything is decided from two facts read from Postgres: the indexed project (owner, selected
worker, allowlist, mode, status, dispute) and the caller's active wallet links. Addresses are
compared lower-case. Whether the caller sees the project at all is not decided here: the project
is read through the project read API's visibility predicate
(``projects_repo.visible_project_parties``), so the records and the reads share one rule.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from marketplace.records.errors import ProjectNotFound, WalletNotLinked
from marketplace.storage.pool import Conn
from marketplace.storage.repositories import projects as projects_repo
from marketplace.storage.repositories import wallet_links as wallet_links_repo


@dataclass(frozen=True)
class ProjectParties:
    address: str
    owner: str
    status: str
    mode: str
    bidding_access: str
    worker: str | None
    allowlist: frozenset[str]
    challenge_submission_count: int | None
    dispute_phase: str | None
    dispute_milestone_index: int | None
    dispute_opened_at: int | None
    milestone_count: int

    @classmethod
    def from_row(cls, row: projects_repo.ProjectPartiesRow) -> ProjectParties:
        return cls(
            address=row.project_address,
            owner=row.owner_address,
            status=row.status,
            mode=row.project_mode,
            bidding_access=row.bidding_access,
            worker=row.selected_builder_address,
            allowlist=frozenset(row.allowlist or ()),
            challenge_submission_count=row.challenge_submission_count,
            dispute_phase=row.dispute_phase,
            dispute_milestone_index=row.dispute_milestone_index,
            dispute_opened_at=row.dispute_opened_at,
            milestone_count=row.milestone_count,
        )

    def role_of(self, wallet: str) -> str | None:
        if wallet == self.owner:
            return "owner"
        if self.worker is not None and wallet == self.worker:
            return "worker"
        return None

    @property
    def active_dispute_milestone(self) -> int | None:
        """The milestone of the active dispute (phase challenged or verifier_verdict), if any."""
        if self.status != "dispute" or self.dispute_phase is None:
            return None
        return self.dispute_milestone_index


async def caller_wallets(conn: Conn, user_id: uuid.UUID) -> frozenset[str]:
    return frozenset(await wallet_links_repo.active_wallets(conn, user_id))


async def visible_project(
    conn: Conn, project_address: str, wallets: Iterable[str], *, extra: Iterable[str] = ()
) -> ProjectParties:
    """The indexed project, or 404 when it is not indexed or hidden from the caller (the two are
    indistinguishable on purpose, as on the project read routes). ``extra``: wallets whose
    holders see the project even when it is invite-only (dispute admins reading evidence)."""
    row = await projects_repo.visible_project_parties(
        conn, project_address, wallets, also_visible_to=extra
    )
    if row is None:
        raise ProjectNotFound()
    return ProjectParties.from_row(row)


async def callers_and_visible_projects(
    conn: Conn, pairs: Sequence[tuple[uuid.UUID, str]]
) -> list[tuple[frozenset[str], ProjectParties | ProjectNotFound]]:
    """:func:`caller_wallets` and :func:`visible_project` with them for each (user, project), in
    one round trip; a project the user cannot see comes back as its 404 error (not raised)."""
    return [
        (frozenset(wallets), ProjectParties.from_row(row) if row is not None else ProjectNotFound())
        for wallets, row in await projects_repo.callers_and_visible_projects(conn, pairs)
    ]


async def caller_and_visible_project(
    conn: Conn, user_id: uuid.UUID, project_address: str
) -> tuple[frozenset[str], ProjectParties]:
    """:func:`caller_wallets` and :func:`visible_project` with them, in one round trip."""
    ((wallets, project),) = await callers_and_visible_projects(conn, [(user_id, project_address)])
    if isinstance(project, ProjectNotFound):
        raise project
    return wallets, project


def require_linked(wallets: frozenset[str], wallet: str, field: str) -> None:
    if wallet not in wallets:
        raise WalletNotLinked(f"{field} is not an active wallet link of the caller")

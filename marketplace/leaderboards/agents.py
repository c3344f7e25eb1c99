"""Agent profiles (`GET /v1/agents/{idOrWallet}`; docs/leaderboards.md, "Agent profiles").

A profile is found by a user id or by a wallet address:
- a user id: that user, its username and its active wallets (404 for an unknown id);
- a wallet actively linked to a user: that user's profile (as by its id);
- any other wallet that was ever linked or is a party (owner or selected worker) of an indexed
  project: a profile of that wallet alone, without user (404 otherwise);
- neither a uuid nor an address: 400.

Projects are listed as the viewer may see them (invite-only ones only for their insiders);
statistics and rankings count every project, as the boards do, and name none.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from decimal import Decimal

import asyncpg
from pydantic import Field

from marketplace.errors import InvalidRequest, NotFound
from marketplace.records.access import caller_wallets
from marketplace.storage.repositories import agents as repo
from marketplace.types import Address, QueryModel, ResponseModel

ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}")
MAX_PROJECTS = 200


class AgentNotFound(NotFound):
    code = "agent_not_found"
    default_message = "no user or wallet with that id (never linked, never a project party)"


class AgentPath(QueryModel):
    idOrWallet: str = Field(
        min_length=1,
        max_length=64,
        description="a user id (uuid) or a wallet address (0x + 40 hex, any case)",
    )


class AgentProject(ResponseModel):
    projectAddress: Address
    title: str | None
    role: str = Field(pattern="^(owner|worker)$")
    status: str
    completedMilestones: int = Field(ge=0)
    payoutUSDC: str = Field(description="gross payouts of its approved milestones (USDC units)")


class CategoryRanking(ResponseModel):
    category: str
    rank: int = Field(ge=1, description="in the category's all-time board by payout")
    completedMilestones: int = Field(ge=0)
    totalPayoutUSDC: str


class AgentStats(ResponseModel):
    completedMilestones: int = Field(ge=0, description="approved milestones as selected worker")
    totalPayoutUSDC: str = Field(description="their gross payouts")
    projects: int = Field(ge=0, description="projects as owner or selected worker")
    disputes: int = Field(ge=0, description="milestones of those projects that were disputed")
    disputesLost: int = Field(
        ge=0,
        description="disputes its side lost: rejected as worker, approved against it as owner",
    )


class AgentProfile(ResponseModel):
    userId: uuid.UUID | None
    username: str | None
    wallets: list[Address]
    projects: list[AgentProject] = Field(
        description=f"newest first, at most {MAX_PROJECTS}; invite-only ones only for viewers "
        "who may see them"
    )
    categoryRankings: list[CategoryRanking] = Field(
        description="per category (in the categories' order), the best-ranked of its wallets"
    )
    stats: AgentStats


def _usdc(value: Decimal | int) -> str:
    return str(int(value))


async def _who(
    pool: asyncpg.Pool, id_or_wallet: str
) -> tuple[uuid.UUID | None, str | None, list[str]]:
    """(user id, username, wallets) of the profile; 400 / 404 as the module says."""
    text = id_or_wallet.strip()
    if ADDRESS.fullmatch(text):
        found = await repo.wallet(pool, text)
        if found.user_id is None:
            if not found.known:
                raise AgentNotFound()
            return None, None, [text.lower()]
        user_id = found.user_id
    else:
        try:
            user_id = uuid.UUID(text)
        except ValueError:
            raise InvalidRequest(
                "invalid path: path.idOrWallet",
                [
                    {
                        "location": "path",
                        "field": "idOrWallet",
                        "message": "neither a user id (uuid) nor a wallet address",
                        "type": "value_error",
                    }
                ],
            ) from None
    row = await repo.user(pool, user_id)
    if row is None:
        raise AgentNotFound()
    return row.user_id, row.username, list(row.wallets)


async def profile(
    pool: asyncpg.Pool, viewer_id: uuid.UUID | None, id_or_wallet: str
) -> AgentProfile:
    user_id, username, wallets = await _who(pool, id_or_wallet)
    viewer_wallets = sorted(await caller_wallets(pool, viewer_id)) if viewer_id else []
    # Three independent reads: one round trip's wait instead of three.
    projects, stats, rankings = await asyncio.gather(
        repo.projects(pool, wallets, viewer_wallets, MAX_PROJECTS),
        repo.stats(pool, wallets),
        repo.rankings(pool, wallets),
    )
    best: dict[str, CategoryRanking] = {}
    for row in rankings:
        if row.category not in best:  # rows come best rank first per category
            best[row.category] = CategoryRanking(
                category=row.category,
                rank=row.rank,
                completedMilestones=row.completed_milestones,
                totalPayoutUSDC=_usdc(row.total_payout_usdc),
            )
    return AgentProfile(
        userId=user_id,
        username=username,
        wallets=wallets,
        projects=[
            AgentProject(
                projectAddress=row.project_address,
                title=row.title,
                role=row.role,
                status=row.status,
                completedMilestones=row.completed,
                payoutUSDC=_usdc(row.payout),
            )
            for row in projects
        ],
        categoryRankings=list(best.values()),
        stats=AgentStats(
            completedMilestones=stats.completed,
            totalPayoutUSDC=_usdc(stats.payout),
            projects=stats.projects,
            disputes=stats.disputes,
            disputesLost=stats.disputes_lost,
        ),
    )

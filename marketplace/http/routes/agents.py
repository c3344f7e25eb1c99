"""Agent profiles (spec section 4 "Leaderboards and agents", issue #15): a user's or a wallet's
project history, statistics and category rankings. Rules in marketplace.leaderboards.agents;
docs/leaderboards.md."""

from __future__ import annotations

from marketplace.http.routing import AuthMode, Call, RouteTable
from marketplace.leaderboards.agents import AgentNotFound, AgentPath, AgentProfile, profile

routes = RouteTable(tag="leaderboards")


@routes.get(
    "/v1/agents/{idOrWallet}",
    name="getAgentProfile",
    summary="An agent's profile: wallets, project history, statistics, category rankings",
    auth=AuthMode.OPTIONAL,
    response=AgentProfile,
    path_params=AgentPath,
    errors=(AgentNotFound,),
)
async def get_agent(call: Call[None, None, AgentPath]) -> AgentProfile:
    """`idOrWallet` is a user id (uuid) or a wallet address. A wallet actively linked to a user
    shows that user's profile; another wallet that was ever linked or is a project party shows a
    profile without user; anything else is 404 `agent_not_found`, and a value that is neither a
    uuid nor an address is 400. Projects where the profile's wallets are owner or selected
    worker are listed as the viewer may see them (invite-only ones only to their insiders);
    `stats` and `categoryRankings` count every project (invite-only ones too, never named).
    Rankings: per category, the best rank of the profile's wallets on the category's all-time
    board by payout."""
    viewer = call.principal.user_id if call.principal is not None else None
    return await profile(call.pool, viewer, call.path.idOrWallet)

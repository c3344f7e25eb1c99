"""Invite-only projects (spec section 1.1, section 5 rule 10): visible to the owner's and to
allowlisted agents' ACTIVE wallet links (and the selected worker's: tests/api/records/
test_visibility.py, which also runs the records' check on the same callers); absent from lists
and counts and 404 on reads for everyone else. Also viewerCanEditMetadata."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
from eth_utils import to_checksum_address

from tests.api.projects import seed
from tests.conftest import User, new_user


class World:
    """One open and one invite-only project, an owner, an allowlisted agent and a stranger."""

    def __init__(self) -> None:
        self.owner = new_user()
        self.agent = new_user()
        self.stranger = new_user()
        self.owner_wallet = seed.address()
        self.agent_wallet = seed.address()
        self.stranger_wallet = seed.address()
        self.open: dict[str, Any] = {}
        self.hidden: dict[str, Any] = {}

    async def build(self, db: asyncpg.Connection) -> World:
        self.open = await seed.project(db, bidding_access="open", owner_address=self.owner_wallet)
        self.hidden = await seed.project(
            db,
            bidding_access="invite_only",
            owner_address=self.owner_wallet,
            allowlist=[seed.address(), self.agent_wallet],
            milestone_count=1,
        )
        await seed.milestone(db, self.hidden["project_address"], 0)
        await seed.link(db, self.owner.user_id, self.owner_wallet)
        await seed.link(db, self.agent.user_id, self.agent_wallet)
        await seed.link(db, self.stranger.user_id, self.stranger_wallet)
        return self

    @property
    def hidden_address(self) -> str:
        return to_checksum_address(self.hidden["project_address"])

    @property
    def open_address(self) -> str:
        return to_checksum_address(self.open["project_address"])


@pytest.fixture
async def world(db: asyncpg.Connection) -> World:
    return await World().build(db)


async def _sees(client: Any, user: User | None, world: World) -> bool:
    """What ``user`` sees of the invite-only project, checked consistently on every read."""
    headers = user.headers if user else {}
    listing = await (await client.get("/v1/projects", headers=headers)).json()
    listed = [i["projectAddress"] for i in listing["items"]]
    assert world.open_address in listed
    in_list = world.hidden_address in listed
    assert listing["count"] == len(listed) == (2 if in_list else 1)  # counts agree with pages
    owner_filtered = await (
        await client.get(f"/v1/projects?ownerAddress={world.owner_wallet}", headers=headers)
    ).json()
    assert owner_filtered["count"] == (2 if in_list else 1)
    by_status = await (await client.get("/v1/projects?status=draft", headers=headers)).json()
    assert by_status["count"] == (2 if in_list else 1)

    detail = await client.get(f"/v1/projects/{world.hidden_address}", headers=headers)
    milestones = await client.get(
        f"/v1/projects/{world.hidden_address}/milestones", headers=headers
    )
    if in_list:
        assert detail.status == 200
        assert (await detail.json())["biddingAccess"] == "invite_only"
        assert milestones.status == 200
        assert (await milestones.json())["count"] == 1
    else:
        for resp in (detail, milestones):
            assert resp.status == 404
            body = await resp.json()
            assert body["error"] == "not_found"
    return in_list


async def test_owner_sees_invite_only(client: Any, world: World) -> None:
    assert await _sees(client, world.owner, world)


async def test_allowlisted_agent_sees_invite_only(client: Any, world: World) -> None:
    assert await _sees(client, world.agent, world)


async def test_stranger_does_not_see_invite_only(client: Any, world: World) -> None:
    assert not await _sees(client, world.stranger, world)


async def test_anonymous_does_not_see_invite_only(client: Any, world: World) -> None:
    assert not await _sees(client, None, world)


async def test_user_without_any_wallet_does_not_see_invite_only(client: Any, world: World) -> None:
    assert not await _sees(client, new_user(), world)


async def test_revoked_links_lose_access(client: Any, world: World, db: asyncpg.Connection) -> None:
    assert await _sees(client, world.owner, world)
    assert await _sees(client, world.agent, world)
    await seed.revoke(db, world.owner.user_id, world.owner_wallet)
    await seed.revoke(db, world.agent.user_id, world.agent_wallet)
    assert not await _sees(client, world.owner, world)
    assert not await _sees(client, world.agent, world)


async def test_previously_revoked_link_grants_nothing(
    client: Any, world: World, db: asyncpg.Connection
) -> None:
    """A wallet the stranger once linked to the owner wallet (revoked since) gives no access."""
    former = new_user()
    await seed.link(db, former.user_id, seed.address())
    await seed.revoke(db, world.owner.user_id, world.owner_wallet)
    await seed.link(db, former.user_id, world.owner_wallet, revoked=True)
    assert not await _sees(client, former, world)


async def test_hidden_and_unknown_projects_answer_alike(client: Any, world: World) -> None:
    unknown = to_checksum_address(seed.address())
    hidden = await client.get(f"/v1/projects/{world.hidden_address}")
    missing = await client.get(f"/v1/projects/{unknown}")
    assert hidden.status == missing.status == 404
    assert await hidden.json() == await missing.json()


async def test_invalid_credentials_are_401_not_anonymous(client: Any, world: World) -> None:
    resp = await client.get("/v1/projects", headers={"Authorization": "Bearer not-a-jwt"})
    assert resp.status == 401


# --- viewerCanEditMetadata ------------------------------------------------------------------


async def test_viewer_can_edit_metadata(client: Any, world: World, db: asyncpg.Connection) -> None:
    async def flag(user: User | None, address: str) -> Any:
        headers = user.headers if user else {}
        body = await (await client.get(f"/v1/projects/{address}", headers=headers)).json()
        return body.get("viewerCanEditMetadata", "absent")

    for address in (world.open_address, world.hidden_address):
        assert await flag(world.owner, address) is True  # active owner link, draft
        assert await flag(world.agent, address) is False  # sees it (allowlist) but not owner
    assert await flag(world.stranger, world.open_address) is False
    assert await flag(new_user(), world.open_address) is False
    assert await flag(None, world.open_address) == "absent"

    # never on list items
    listing = await (await client.get("/v1/projects", headers=world.owner.headers)).json()
    assert all("viewerCanEditMetadata" not in item for item in listing["items"])

    # only while the stored status is draft
    await db.execute(
        "UPDATE projects SET status = 'bidding' WHERE project_address = $1",
        world.open["project_address"],
    )
    assert await flag(world.owner, world.open_address) is False

    # and only with an active link
    await seed.revoke(db, world.owner.user_id, world.owner_wallet)
    assert await flag(world.owner, world.hidden_address) == "absent"  # now hidden: 404 body
    open_draft = await seed.project(db, owner_address=world.owner_wallet)
    assert await flag(world.owner, to_checksum_address(open_draft["project_address"])) is False


async def test_bad_project_address_is_400(client: Any, world: World) -> None:
    for path in (
        "/v1/projects/0x123",
        "/v1/projects/" + "0x" + "z" * 40,
        "/v1/projects/" + "0x" + "a" * 41,
        "/v1/projects/0x123/milestones",
        "/v1/projects/not-an-address/milestones",
    ):
        resp = await client.get(path)
        assert resp.status == 400, path
        assert (await resp.json())["error"] == "invalid_request"


async def test_address_case_does_not_matter(client: Any, world: World) -> None:
    lower = world.open["project_address"]
    upper = "0x" + lower[2:].upper()
    for spelled in (lower, upper, world.open_address):
        resp = await client.get(f"/v1/projects/{spelled}")
        assert resp.status == 200
        assert (await resp.json())["projectAddress"] == world.open_address
        resp = await client.get(f"/v1/projects/{spelled}/milestones")
        assert (await resp.json())["projectAddress"] == world.open_address


async def test_unknown_project_milestones_are_404(client: Any, world: World) -> None:
    resp = await client.get(f"/v1/projects/{to_checksum_address(seed.address())}/milestones")
    assert resp.status == 404
    assert (await resp.json())["error"] == "not_found"

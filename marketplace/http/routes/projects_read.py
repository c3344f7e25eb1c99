"""Project read endpoints (spec section 4, "Projects (read)"): list, detail and milestones.

Reads go straight to PostgreSQL (no Ray hop); each request is one SQL statement, which also
decides visibility (invite-only projects only for active wallet links to their owner wallet, their
selected worker's wallet or an allowlisted wallet; spec section 1.1 and section 5 rule 10).
Viewer auth is optional: anonymous callers see open projects only.
"""

from __future__ import annotations

import time
from collections.abc import Hashable

from aiohttp import web

from marketplace.auth import Principal
from marketplace.errors import NotFound
from marketplace.http.paths import ProjectPath
from marketplace.http.read_cache import Cacheable, next_change
from marketplace.http.routing import AuthMode, CacheKey, Call, RouteTable
from marketplace.pagination import keyset_page
from marketplace.projects.models import (
    MilestoneListResponse,
    ProjectListQuery,
    ProjectListResponse,
    ProjectReadModel,
)
from marketplace.projects.read_models import (
    CHALLENGE_FALLBACK_SECONDS,
    PROJECT_LIST_CURSOR,
    project_for_viewer,
    project_model,
)
from marketplace.storage.repositories import projects as projects_repo

routes = RouteTable(tag="projects")

NOT_VISIBLE = "project not found"

# --- response cache (docs/read-models.md, "Response cache") ---------------------------------------
# Only responses that are the same for every caller of a key's viewer class are cached: list
# pages for anonymous callers (a signed-in caller's page depends on its wallets), and open
# projects' detail and milestones (invite-only ones are never cached, whoever asks). Signed-in
# detail reads carry `viewerCanEditMetadata`, false for every caller unless the stored status is
# draft, so they are cached apart from anonymous ones and only outside draft.


def _list_key(request: web.Request, principal: Principal | None) -> Hashable | None:
    if principal is not None or "effectiveStatus" in request.query:
        # effectiveStatus: the count covers every project, and moves with the clock.
        return None
    return ("listProjects", request.query_string)


def _project_key(route: str) -> CacheKey:
    def key(request: web.Request, principal: Principal | None) -> Hashable | None:
        return (route, request.match_info["projectAddress"].lower(), principal is None)

    return key


def _status_changes(project: ProjectReadModel) -> list[int | None]:
    """The deadlines whose passing can change the project's `effectiveStatus`."""
    submission = project.challengeSubmissionDeadline
    response = project.challengeOwnerResponseDeadline
    return [
        int(submission) if submission is not None else None,
        int(response) if response is not None else None,
        int(response) + CHALLENGE_FALLBACK_SECONDS if response is not None else None,
    ]


def _cacheable_project(
    project: ProjectReadModel, signed_in: bool, before: float
) -> Cacheable | None:
    if project.biddingAccess != "open" or (signed_in and project.status == "draft"):
        return None
    return Cacheable(
        projects=frozenset({project.projectAddress.lower()}),
        until=next_change(_status_changes(project), before),
    )


@routes.get(
    "/v1/projects",
    name="listProjects",
    summary="List projects, newest first",
    auth=AuthMode.OPTIONAL,
    query=ProjectListQuery,
    response=ProjectListResponse,
    exclude_none=True,
    cache=_list_key,
    description=(
        "Projects newest first by on-chain creation (block, log index), keyset-paginated: pass "
        "`nextCursor` as `cursor` for the next page; projects indexed meanwhile appear before "
        "the first page, never inside later ones. `count` is the number of matching projects "
        "across all pages. `status` filters the stored status; `effectiveStatus` (an extension) "
        "filters the status derived at request time. `limit` defaults to 20, at most 100. "
        "Invite-only projects are listed (and counted) only for callers with an active wallet "
        "link to the owner wallet, to the selected worker's wallet (also after it was removed "
        "from the allowlist) or to an allowlisted wallet."
    ),
)
async def list_projects(call: Call[None, ProjectListQuery, None]) -> ProjectListResponse:
    query = call.query
    position = PROJECT_LIST_CURSOR.position(query.cursor)
    after = None
    if position is not None:
        block, log_index = position
        after = (block, log_index)
    before = time.time()
    now = int(before)
    viewer = call.principal.user_id if call.principal is not None else None
    filters = projects_repo.ListFilters(
        owner_address=query.ownerAddress,
        status=query.status,
        effective_status=query.effectiveStatus,
        now=now,
    )
    page = await projects_repo.list_projects(
        call.pool, viewer=viewer, filters=filters, after=after, limit=query.limit + 1
    )
    rows, next_cursor = keyset_page(
        page.rows,
        query.limit,
        PROJECT_LIST_CURSOR,
        lambda row: (row.created_block, row.created_log_index),
    )
    items = [project_model(row, now) for row in rows]
    if viewer is None and query.effectiveStatus is None:
        deadlines = [d for item in items for d in _status_changes(item)]
        call.cacheable = Cacheable(lists=True, until=next_change(deadlines, before))
    return ProjectListResponse(items=items, count=page.total, nextCursor=next_cursor)


async def _visible_project(call: Call[None, None, ProjectPath]) -> ProjectReadModel:
    viewer = call.principal.user_id if call.principal is not None else None
    before = time.time()
    project = await project_for_viewer(call.pool, viewer, call.path.projectAddress)
    if project is None:
        raise NotFound(NOT_VISIBLE)
    call.cacheable = _cacheable_project(project, viewer is not None, before)
    return project


@routes.get(
    "/v1/projects/{projectAddress}",
    name="getProject",
    summary="Read one project with its milestones",
    auth=AuthMode.OPTIONAL,
    path_params=ProjectPath,
    response=ProjectReadModel,
    errors=(NotFound,),
    exclude_none=True,
    cache=_project_key("getProject"),
    description=(
        "The project read model, including `challengeSubmissionCount` for challenge mode. "
        "`viewerCanEditMetadata` is present only when viewer auth is given. An invite-only "
        "project is visible to active wallet links to its owner wallet, its selected worker's "
        "wallet or an allowlisted wallet; to anyone else it answers 404 like an unknown one."
    ),
)
async def get_project(call: Call[None, None, ProjectPath]) -> ProjectReadModel:
    return await _visible_project(call)


@routes.get(
    "/v1/projects/{projectAddress}/milestones",
    name="listProjectMilestones",
    summary="List a project's milestones",
    auth=AuthMode.OPTIONAL,
    path_params=ProjectPath,
    response=MilestoneListResponse,
    errors=(NotFound,),
    exclude_none=True,
    cache=_project_key("listProjectMilestones"),
    description=(
        "Milestones by index. Same visibility as the project read (invite-only: owner, selected "
        "worker and allowlisted wallets; 404 when hidden)."
    ),
)
async def list_milestones(call: Call[None, None, ProjectPath]) -> MilestoneListResponse:
    project = await _visible_project(call)
    return MilestoneListResponse(
        projectAddress=project.projectAddress,
        items=project.milestones,
        count=len(project.milestones),
    )

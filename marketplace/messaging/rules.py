"""The messaging rules that need no I/O (docs/messaging.md): who may chat on a project, the
ordered user pair of a thread, and the report workflow."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from marketplace.messaging.errors import InvalidTransition, WorkerNotSelected
from marketplace.messaging.models import BodyStatus, ReportStatus
from marketplace.records.access import ProjectParties
from marketplace.records.errors import NotProjectParty

# The admin workflow: open -> reviewing | actioned | dismissed, reviewing -> actioned |
# dismissed. actioned and dismissed are final.
TRANSITIONS: dict[ReportStatus, frozenset[ReportStatus]] = {
    ReportStatus.OPEN: frozenset(
        {ReportStatus.REVIEWING, ReportStatus.ACTIONED, ReportStatus.DISMISSED}
    ),
    ReportStatus.REVIEWING: frozenset({ReportStatus.ACTIONED, ReportStatus.DISMISSED}),
    ReportStatus.ACTIONED: frozenset(),
    ReportStatus.DISMISSED: frozenset(),
}
RESOLVED = frozenset({ReportStatus.ACTIONED, ReportStatus.DISMISSED})
PENDING = frozenset({ReportStatus.OPEN, ReportStatus.REVIEWING})


def require_chat_sender(project: ProjectParties, wallet: str) -> None:
    """The sending wallet must be the owner or the selected worker, and a worker must be
    selected: an owner wallet before selection is 409 ``worker_not_selected``; any other wallet
    (also before selection) is 403 ``not_project_party``."""
    if wallet == project.owner:
        if project.worker is None:
            raise WorkerNotSelected()
        return
    if project.worker is None or wallet != project.worker:
        raise NotProjectParty(
            "senderWalletAddress is neither the project owner nor its selected worker"
        )


def is_chat_party(project: ProjectParties, wallets: Iterable[str]) -> bool:
    """Whether any of ``wallets`` is the owner or the selected worker (chat reads, reports)."""
    parties = {project.owner} if project.worker is None else {project.owner, project.worker}
    return not parties.isdisjoint(wallets)


def ordered_pair(a: uuid.UUID, b: uuid.UUID) -> tuple[uuid.UUID, uuid.UUID]:
    """(low, high) as PostgreSQL orders uuids (byte-wise, which is ``UUID.int`` order)."""
    return (a, b) if a.int < b.int else (b, a)


def check_transition(current: ReportStatus, wanted: ReportStatus) -> None:
    if wanted not in TRANSITIONS[current]:
        allowed = sorted(TRANSITIONS[current])
        raise InvalidTransition(
            f"a report in status {current} cannot move to {wanted}"
            + (f" (allowed: {', '.join(allowed)})" if allowed else f" ({current} is final)")
        )


def body_status_after(
    wanted: ReportStatus, current: BodyStatus, *, other_pending_reports: int
) -> BodyStatus:
    """The message's bodyStatus once a report moves to ``wanted``: actioned removes it;
    dismissed makes it visible again unless it was removed or another report of it is still
    open or in review; reviewing changes nothing."""
    if current is BodyStatus.REMOVED or wanted is ReportStatus.ACTIONED:
        return BodyStatus.REMOVED
    if wanted is ReportStatus.DISMISSED and other_pending_reports == 0:
        return BodyStatus.VISIBLE
    return current


def body_status_on_report(current: BodyStatus) -> BodyStatus:
    """A new report marks a visible message reported; a removed one stays removed."""
    return BodyStatus.REPORTED if current is BodyStatus.VISIBLE else current

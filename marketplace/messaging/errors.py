"""Refusals of the messaging rules (docs/messaging.md, "Errors"). Plain constructors, so they
cross the Ray boundary (the chat send runs on the project's shard)."""

from __future__ import annotations

from marketplace.errors import Conflict, Forbidden, NotFound


class WorkerNotSelected(Conflict):
    code = "worker_not_selected"
    default_message = "the project chat opens once the owner has selected a worker"


class NoSharedProject(Forbidden):
    code = "no_shared_project"
    default_message = (
        "direct messages need a shared project: owner and selected worker, owner and bidder, or "
        "owner and challenge submitter of one indexed project, through wallets linked now"
    )


class Blocked(Forbidden):
    code = "blocked"
    default_message = "one of the two users has blocked the other"


class UserNotFound(NotFound):
    code = "user_not_found"
    default_message = "no such user"


class ThreadNotFound(NotFound):
    code = "thread_not_found"
    default_message = "thread not found (or you are not one of its two participants)"


class MessageNotFound(NotFound):
    code = "message_not_found"
    default_message = "message not found (or you cannot see it)"


class ReportNotFound(NotFound):
    code = "report_not_found"
    default_message = "report not found"


class InvalidTransition(Conflict):
    code = "invalid_transition"
    default_message = "the report cannot move to that status from its current one"

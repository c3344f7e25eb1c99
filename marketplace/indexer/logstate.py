"""A project's read-model rows folded from its logs (the indexer's state source since issue 28).

Every field of ``projects`` and ``milestones`` that the indexer writes is said by a log of the
registry or the project contract (docs/read-models.md, "Where each field comes from"), so the
indexer keeps the read model by applying each project's logs, in chain order, to its rows as
they were: a fresh project starts from its ``ProjectCreated`` log, a project indexed before from
its stored rows. The result is exactly what ``snapshot.project_rows`` makes of
``getProjectState()`` at the same block (``tests/integration/indexer/test_log_state.py`` indexes
a devnet with projects in every state both ways and compares every column).

The fold works on the rows themselves (the read model's values: labels, whole-token USDC,
``None`` for absent) rather than on the contract's struct: a stored row is then all the state a
later batch needs. Fields the read model hides are never needed again: the dispute columns are
shown only while a dispute is active and every new dispute sets all of them (``DisputeRaised``).

Arguments are read by slicing the logs' hex text at positions taken from the ABI (one
``int(..., 16)`` per value, no ABI decoding): a backfill folds about twelve logs per project, and
the general decoder cost several times more per log. ``BidSelected``, the one log with arrays,
goes through ``marketplace.chain.loghex`` (the same hex slicing, driven by the ABI).

One value no log of its own carries: the time a dispute resolution stamps on its milestone
(``resolvedAt`` in ``DisputeResolved`` / ``DisputeFinalized``). The contract always logs a time
later in the same transaction (``MilestoneApproved``, ``MilestoneRejected`` or ``ProjectFailed``),
so the fold takes that one; should a transaction ever end without one, the fold reports the
milestone in :attr:`ProjectFold.unresolved` and the indexer fills in the block's time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from functools import cache
from typing import Any, cast

from marketplace.chain.abi import AbiEvent, ContractAbi
from marketplace.chain.loghex import HexEvent
from marketplace.chain.rpc import RpcLog
from marketplace.indexer.snapshot import (
    BIDDING_ACCESS,
    DISPUTE_REASONS,
    MILESTONE_STATUSES,
    PROJECT_MODES,
    PROJECT_STATUSES,
    usdc_display,
)
from marketplace.storage.read_model_rows import MilestoneRow, ProjectCreation, ProjectRow
from marketplace.types import ZERO_ADDRESS

_ZERO_WORD = "0" * 64
_PROJECT_COLUMNS = tuple(f for f in ProjectRow.__dataclass_fields__ if f != "allowlist")
_MILESTONE_COLUMNS = tuple(MilestoneRow.__dataclass_fields__)
# The dispute columns, shown only while a dispute is active (snapshot.project_rows).
_DISPUTE_COLUMNS = (
    "dispute_phase",
    "dispute_reason",
    "dispute_raised_by",
    "dispute_milestone_index",
    "dispute_opened_at",
    "dispute_verdict_submitted_at",
    "dispute_owner_evidence_hash",
    "dispute_worker_evidence_hash",
)
_PENDING, _SUBMITTED, _APPROVED, _REJECTED, _DISPUTED, _ATTESTED = MILESTONE_STATUSES


def _time(unix: int) -> datetime | None:
    return datetime.fromtimestamp(unix, UTC) if unix else None


def _topic_address(topic: str) -> str | None:
    address = "0x" + topic[-40:].lower()
    return None if address == ZERO_ADDRESS else address


def _int(value: Any) -> int | None:
    return None if value is None else int(cast(int | Decimal, value))


class ProjectFold:
    """One project's rows while its logs are applied: ``project`` holds the ``ProjectRow``
    columns but the allowlist (a set here), ``milestones`` one dict per ``MilestoneRow``."""

    __slots__ = ("allowlist", "milestones", "pending", "project", "unresolved")

    def __init__(
        self, project: dict[str, Any], milestones: list[dict[str, Any]], allowlist: set[str]
    ) -> None:
        self.project = project
        self.milestones = milestones
        self.allowlist = allowlist
        # Milestones a dispute resolution stamped, waiting for the time its transaction logs.
        self.pending: list[tuple[int, str, RpcLog]] = []
        # Milestones whose transaction logged no time: (index, the resolving log).
        self.unresolved: list[tuple[int, RpcLog]] = []

    @classmethod
    def created(cls, creation: ProjectCreation, created_at: int) -> ProjectFold:
        """A project as its ``ProjectCreated`` log announces it (the ``ProjectInitialized`` of
        the same transaction sets its mode, access, amounts and milestones)."""
        project = dict.fromkeys(_PROJECT_COLUMNS)
        project.update(
            project_address=creation.project_address,
            owner_address=creation.owner_address,
            status=PROJECT_STATUSES[0],
            project_mode=PROJECT_MODES[0],
            bidding_access=BIDDING_ACCESS[0],
            config_hash=creation.config_hash,
            milestone_count=0,
            challenge_selection_phase=False,
            created_at=datetime.fromtimestamp(created_at, UTC),
        )
        return cls(project, [], set())

    @classmethod
    def from_rows(
        cls, project: Mapping[str, Any], milestones: Sequence[Mapping[str, Any]]
    ) -> ProjectFold:
        """A project as the read model stores it (``indexer.current_state`` rows)."""
        values = {column: project[column] for column in _PROJECT_COLUMNS}
        values["bid_bond_usdc"] = _int(values["bid_bond_usdc"])
        values["challenge_payout_usdc"] = _int(values["challenge_payout_usdc"])
        rows = []
        for milestone in sorted(milestones, key=lambda m: cast(int, m["milestone_index"])):
            row = {column: milestone[column] for column in _MILESTONE_COLUMNS}
            row["payout_usdc"] = _int(row["payout_usdc"])
            rows.append(row)
        return cls(values, rows, set(cast(list[str], project["allowlist"] or [])))

    def rows(self) -> tuple[ProjectRow, list[MilestoneRow]]:
        project = ProjectRow(**self.project, allowlist=sorted(self.allowlist))
        return project, [MilestoneRow(**m) for m in self.milestones]

    def resolve(self, index: int, unix: int) -> None:
        """Stamp an unresolved milestone with its block's time (the engine's fallback)."""
        self.milestones[index]["resolved_at"] = _time(unix)

    # --- helpers of the handlers ---------------------------------------------------------

    def _settle(self, entry: RpcLog, unix: int) -> None:
        """A log carrying a time: the milestones its transaction's resolution stamped get it."""
        if not self.pending:
            return
        tx = entry["transactionHash"]
        keep = []
        for index, pending_tx, log in self.pending:
            if pending_tx == tx:
                self.milestones[index]["resolved_at"] = _time(unix)
            else:
                keep.append((index, pending_tx, log))
        self.pending = keep

    def close_pending(self) -> None:
        """End of the project's logs: whatever is still pending has no time in its logs."""
        self.unresolved.extend((index, log) for index, _, log in self.pending)
        self.pending = []

    def _milestone(self, topic: str) -> dict[str, Any] | None:
        index = int(topic, 16)
        return self.milestones[index] if index < len(self.milestones) else None

    @property
    def challenge(self) -> bool:
        return bool(self.project["project_mode"] == PROJECT_MODES[1])


# --- the handlers: one per event that changes a row ------------------------------------------

Handler = Callable[[ProjectFold, RpcLog], None]


def _word(data: str, i: int) -> int:
    """The ``i``-th data word of a log as an unsigned integer."""
    return int(data[2 + 64 * i : 66 + 64 * i], 16)


def _hash_word(data: str, i: int) -> str | None:
    word = data[2 + 64 * i : 66 + 64 * i]
    return None if word == _ZERO_WORD else "0x" + word.lower()


def _project_initialized(fold: ProjectFold, entry: RpcLog) -> None:
    data = entry["data"]
    mode, access, bid_bond, count = (_word(data, i) for i in range(4))
    payout, submission_window, response_window = (_word(data, i) for i in range(4, 7))
    challenge = mode == 1
    fold.project.update(
        project_mode=PROJECT_MODES[mode],
        bidding_access=BIDDING_ACCESS[access],
        milestone_count=count,
        bid_bond_usdc=None if challenge else usdc_display(bid_bond),
        challenge_payout_usdc=usdc_display(payout) if challenge else None,
        challenge_submission_count=0 if challenge else None,
        challenge_submission_window_seconds=(submission_window or None) if challenge else None,
        challenge_owner_response_window_seconds=(response_window or None) if challenge else None,
    )
    address = fold.project["project_address"]
    fold.milestones = [
        {
            "project_address": address,
            "milestone_index": index,
            "status": _PENDING,
            "payout_usdc": None,
            "deadline_at": None,
            "submitted_at": None,
            "approved_at": None,
            "resolved_at": None,
            "delivery_ref_hash": None,
            "latest_evidence_hash": None,
            "attested_on_chain": False,
        }
        for index in range(count)
    ]


def _status_changed(fold: ProjectFold, entry: RpcLog) -> None:
    fold.project["status"] = PROJECT_STATUSES[_word(entry["data"], 1)]


def _bidding_opened(fold: ProjectFold, entry: RpcLog) -> None:
    if fold.challenge:
        data = entry["data"]
        fold.project["challenge_submission_deadline"] = _word(data, 6) or None
        fold.project["challenge_owner_response_deadline"] = _word(data, 7) or None


def _allowlist_updated(fold: ProjectFold, entry: RpcLog) -> None:
    account = "0x" + entry["topics"][1][-40:].lower()
    if _word(entry["data"], 0):
        fold.allowlist.add(account)
    else:
        fold.allowlist.discard(account)


def _bid_selected(event: AbiEvent) -> Handler:
    decoder = HexEvent(event)

    def apply(fold: ProjectFold, entry: RpcLog) -> None:
        args = decoder.decode(entry)
        fold.project["selected_builder_address"] = _topic_address(entry["topics"][1])
        payouts = cast(list[int], args["payouts"])
        deadlines = cast(list[int], args["deadlines"])
        for milestone, payout, deadline in zip(fold.milestones, payouts, deadlines, strict=False):
            milestone["payout_usdc"] = usdc_display(payout) if payout else None
            milestone["deadline_at"] = _time(deadline)

    return apply


def _milestone_submitted(fold: ProjectFold, entry: RpcLog) -> None:
    milestone = fold._milestone(entry["topics"][1])
    if milestone is not None:
        data = entry["data"]
        milestone["status"] = _SUBMITTED
        milestone["delivery_ref_hash"] = _hash_word(data, 0)
        milestone["submitted_at"] = _time(_word(data, 1))


def _milestone_approved(fold: ProjectFold, entry: RpcLog) -> None:
    approved_at = _word(entry["data"], 2)
    milestone = fold._milestone(entry["topics"][1])
    if milestone is not None:
        milestone["status"] = _APPROVED
        milestone["approved_at"] = _time(approved_at)
    fold._settle(entry, approved_at)


def _milestone_rejected(fold: ProjectFold, entry: RpcLog) -> None:
    resolved_at = _word(entry["data"], 0)
    milestone = fold._milestone(entry["topics"][1])
    if milestone is not None:
        milestone["status"] = _REJECTED
        milestone["resolved_at"] = _time(resolved_at)
    fold._settle(entry, resolved_at)


def _dispute_raised(fold: ProjectFold, entry: RpcLog) -> None:
    topics, data = entry["topics"], entry["data"]
    index = int(topics[1], 16)
    milestone = fold._milestone(topics[1])
    if milestone is not None:
        milestone["status"] = _DISPUTED
    fold.project.update(
        dispute_phase="challenged",
        dispute_reason=DISPUTE_REASONS[_word(data, 0)],
        dispute_raised_by=_topic_address(topics[2]),
        dispute_milestone_index=index,
        dispute_opened_at=_word(data, 2) or None,
        dispute_verdict_submitted_at=None,
        dispute_owner_evidence_hash=None,
        dispute_worker_evidence_hash=None,
    )


def _dispute_evidence(fold: ProjectFold, entry: RpcLog) -> None:
    data = entry["data"]
    evidence = _hash_word(data, 1)
    by_owner = _word(data, 0)
    fold.project["dispute_owner_evidence_hash" if by_owner else "dispute_worker_evidence_hash"] = (
        evidence
    )
    milestone = fold._milestone(entry["topics"][1])
    if milestone is not None:
        milestone["latest_evidence_hash"] = evidence


def _milestone_attested(fold: ProjectFold, entry: RpcLog) -> None:
    data = entry["data"]
    milestone = fold._milestone(entry["topics"][1])
    if milestone is not None:
        milestone["status"] = _ATTESTED
        milestone["attested_on_chain"] = True
        evidence = _hash_word(data, 1)
        if evidence is not None:
            milestone["latest_evidence_hash"] = evidence
    fold.project["dispute_phase"] = "verifier_verdict"
    fold.project["dispute_verdict_submitted_at"] = _word(data, 4) or None


def _dispute_closed(fold: ProjectFold, entry: RpcLog) -> None:
    """``DisputeResolved`` / ``DisputeFinalized``: the phase leaves the active ones, so the read
    model shows no dispute; the milestone is stamped with the transaction's time."""
    for column in _DISPUTE_COLUMNS:
        fold.project[column] = None
    index = int(entry["topics"][1], 16)
    if index < len(fold.milestones):
        fold.pending.append((index, entry["transactionHash"], entry))


def _challenge_submitted(fold: ProjectFold, entry: RpcLog) -> None:
    if fold.challenge:
        fold.project["challenge_submission_count"] = _word(entry["data"], 2)


def _selection_phase_entered(fold: ProjectFold, entry: RpcLog) -> None:
    fold.project["challenge_selection_phase"] = True
    if fold.challenge:
        fold.project["challenge_submission_count"] = _word(entry["data"], 0)


def _challenge_winner(fold: ProjectFold, entry: RpcLog) -> None:
    winner = _topic_address(entry["topics"][1])
    if winner is not None and fold.challenge:
        fold.project["selected_builder_address"] = winner


def _timed(fold: ProjectFold, entry: RpcLog) -> None:
    """``ProjectCompleted`` / ``ProjectFailed``: no column of their own (``StatusChanged`` sets
    the status), but their time stamps a milestone a dispute resolution left pending."""
    fold._settle(entry, _word(entry["data"], 0))


# The argument positions the handlers above read, checked against the ABI once (a changed
# event signature fails loudly instead of reading the wrong word).
_LAYOUT: dict[str, tuple[tuple[str, str, int], ...]] = {
    "ProjectInitialized": (
        ("owner", "topic", 1),
        ("mode", "word", 0),
        ("biddingAccess", "word", 1),
        ("bidBond", "word", 2),
        ("milestoneCount", "word", 3),
        ("challengePayout", "word", 4),
        ("challengeSubmissionWindowSeconds", "word", 5),
        ("challengeOwnerResponseWindowSeconds", "word", 6),
    ),
    "StatusChanged": (("newStatus", "word", 1),),
    "BiddingOpened": (
        ("challengeSubmissionDeadline", "word", 6),
        ("challengeOwnerResponseDeadline", "word", 7),
    ),
    "AllowlistUpdated": (("account", "topic", 1), ("allowed", "word", 0)),
    "BidSelected": (("builder", "topic", 1),),
    "MilestoneSubmitted": (
        ("milestoneIndex", "topic", 1),
        ("deliveryRefHash", "word", 0),
        ("submittedAt", "word", 1),
    ),
    "MilestoneApproved": (("milestoneIndex", "topic", 1), ("approvedAt", "word", 2)),
    "MilestoneRejected": (("milestoneIndex", "topic", 1), ("resolvedAt", "word", 0)),
    "DisputeRaised": (
        ("milestoneIndex", "topic", 1),
        ("raisedBy", "topic", 2),
        ("reason", "word", 0),
        ("openedAt", "word", 2),
    ),
    "DisputeEvidenceSubmitted": (
        ("milestoneIndex", "topic", 1),
        ("byOwner", "word", 0),
        ("evidenceHash", "word", 1),
    ),
    "MilestoneAttested": (
        ("milestoneIndex", "topic", 1),
        ("evidenceHash", "word", 1),
        ("verdictSubmittedAt", "word", 4),
    ),
    "DisputeResolved": (("milestoneIndex", "topic", 1),),
    "DisputeFinalized": (("milestoneIndex", "topic", 1),),
    "ChallengeSubmitted": (("submissionCount", "word", 2),),
    "ChallengeSelectionPhaseEntered": (("submissionCount", "word", 0),),
    "ChallengeWinnerSelected": (("winner", "topic", 1),),
    "ChallengeFallbackSettled": (("winner", "topic", 1),),
    "ProjectCompleted": (("completedAt", "word", 0),),
    "ProjectFailed": (("failedAt", "word", 0),),
}


def check_layout(abi: ContractAbi) -> None:
    """Raise if an argument the handlers read is not where they read it."""
    for name, arguments in _LAYOUT.items():
        inputs = abi.events[name].abi["inputs"]
        topics = [p["name"] for p in inputs if p["indexed"]]
        words = [p for p in inputs if not p["indexed"]]
        for argument, kind, position in arguments:
            if kind == "topic":
                found = topics.index(argument) + 1 if argument in topics else -1
            else:
                names = [p["name"] for p in words]
                found = names.index(argument) if argument in names else -1
                # A word is read in place only if it and everything before it are one static
                # word each (no arrays, strings or bytes ahead of it).
                if found >= 0 and not all(
                    p["type"] in ("bool", "address", "bytes32")
                    or (p["type"].startswith(("uint", "int")) and not p["type"].endswith("]"))
                    for p in words[: found + 1]
                ):
                    found = -2
            if found != position:
                raise ValueError(f"{name}.{argument}: expected {kind} {position}, ABI has {found}")


class LogFolder:
    """Applies a project's logs to its :class:`ProjectFold`, by ``topics[0]``."""

    def __init__(self, abi: ContractAbi) -> None:
        check_layout(abi)
        handlers: dict[str, Handler] = {
            "ProjectInitialized": _project_initialized,
            "StatusChanged": _status_changed,
            "BiddingOpened": _bidding_opened,
            "AllowlistUpdated": _allowlist_updated,
            "BidSelected": _bid_selected(abi.events["BidSelected"]),
            "MilestoneSubmitted": _milestone_submitted,
            "MilestoneApproved": _milestone_approved,
            "MilestoneRejected": _milestone_rejected,
            "DisputeRaised": _dispute_raised,
            "DisputeEvidenceSubmitted": _dispute_evidence,
            "MilestoneAttested": _milestone_attested,
            "DisputeResolved": _dispute_closed,
            "DisputeFinalized": _dispute_closed,
            "ChallengeSubmitted": _challenge_submitted,
            "ChallengeSelectionPhaseEntered": _selection_phase_entered,
            "ChallengeWinnerSelected": _challenge_winner,
            "ChallengeFallbackSettled": _challenge_winner,
            "ProjectCompleted": _timed,
            "ProjectFailed": _timed,
        }
        self.handlers = {abi.events[name].topic0: handler for name, handler in handlers.items()}

    def apply(self, fold: ProjectFold, entry: RpcLog) -> None:
        """Apply one log of the project (logs of other events, e.g. bids, change no row)."""
        handler = self.handlers.get(entry["topics"][0])
        if handler is not None:
            handler(fold, entry)


@cache
def project_folder() -> LogFolder:
    return LogFolder(ContractAbi.load("MarketplaceProject"))

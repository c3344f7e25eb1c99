"""The effective-status derivation table of docs/read-models.md as test cases, both sides of
every boundary. Shared by the unit tests and the check that the SQL twin agrees."""

from __future__ import annotations

from dataclasses import dataclass

SUB = 1_700_000_000  # challenge_submission_deadline
RESP = SUB + 86_400  # challenge_owner_response_deadline
FALLBACK = 432_000  # 5 days
LATE = RESP + FALLBACK + 10_000_000


@dataclass(frozen=True)
class StatusFacts:
    """The columns the effective status is derived from (a ChallengeClock)."""

    project_mode: str
    status: str
    challenge_submission_deadline: int | None
    challenge_submission_count: int | None
    challenge_owner_response_deadline: int | None


@dataclass(frozen=True)
class Case:
    rule: str
    mode: str
    status: str
    now: int
    count: int | None
    expected: str
    sub: int | None = SUB
    resp: int | None = RESP

    @property
    def row(self) -> StatusFacts:
        return StatusFacts(
            project_mode=self.mode,
            status=self.status,
            challenge_submission_deadline=self.sub,
            challenge_submission_count=self.count,
            challenge_owner_response_deadline=self.resp,
        )

    @property
    def id(self) -> str:
        return f"{self.rule}-{self.mode}-{self.status}-now{self.now - SUB:+d}-count{self.count}"


CASES = [
    # 1. challenge, bidding, now <= submission deadline: bidding (with and without submissions)
    Case("1", "challenge", "bidding", SUB - 1, 0, "bidding"),
    Case("1", "challenge", "bidding", SUB, 0, "bidding"),
    Case("1", "challenge", "bidding", SUB, 2, "bidding"),
    # 2. challenge, bidding, now > submission deadline, no submissions: failed
    Case("2", "challenge", "bidding", SUB + 1, 0, "failed"),
    Case("2", "challenge", "bidding", LATE, 0, "failed"),
    Case("2", "challenge", "bidding", SUB + 1, None, "failed"),  # count not indexed yet = 0
    # 3. challenge, bidding/building, after submission deadline, submissions, <= response
    #    deadline: building
    Case("3", "challenge", "bidding", SUB + 1, 1, "building"),
    Case("3", "challenge", "bidding", RESP, 1, "building"),
    Case("3", "challenge", "building", SUB + 1, 4, "building"),
    Case("3", "challenge", "building", RESP, 4, "building"),
    Case("3", "challenge", "bidding", LATE, 1, "building", resp=None),  # response deadline unknown
    # 4. response deadline < now <= response deadline + 5 days: dispute
    Case("4", "challenge", "bidding", RESP + 1, 1, "dispute"),
    Case("4", "challenge", "bidding", RESP + FALLBACK, 1, "dispute"),
    Case("4", "challenge", "building", RESP + 1, 2, "dispute"),
    Case("4", "challenge", "building", RESP + FALLBACK, 2, "dispute"),
    # 5. now > response deadline + 5 days: failed
    Case("5", "challenge", "bidding", RESP + FALLBACK + 1, 1, "failed"),
    Case("5", "challenge", "building", RESP + FALLBACK + 1, 2, "failed"),
    Case("5", "challenge", "building", LATE, 2, "failed"),
    # 6. draft, dispute, complete, failed: as stored, whatever the deadlines say
    *(
        Case("6", "challenge", status, now, count, status)
        for status in ("draft", "dispute", "complete", "failed")
        for now, count in ((SUB - 1, 0), (SUB + 1, 0), (RESP + 1, 1), (LATE, 1))
    ),
    # standard mode: as stored, even with (stray) deadlines in the past
    *(
        Case("std", "standard", status, LATE, count, status)
        for status in ("draft", "bidding", "building", "dispute", "complete", "failed")
        for count in (None, 0, 1)
    ),
    # remaining combinations: as stored
    Case("other", "challenge", "building", SUB, 3, "building"),  # before the submission deadline
    Case("other", "challenge", "building", SUB + 1, 0, "building"),  # no submissions, not bidding
    Case("other", "challenge", "building", LATE, 0, "building"),
    Case("other", "challenge", "bidding", LATE, 0, "bidding", sub=None),  # deadline unknown
]

"""The job queue's pure rules: backoff with full jitter, failure decisions, transitions."""

from __future__ import annotations

import random
import statistics

import pytest

from marketplace.jobs.model import (
    TRANSITIONS,
    Backoff,
    Fail,
    JobStatus,
    Retry,
    after_failure,
    allowed,
    check_queue_name,
    describe_error,
    error_message,
)


def test_ceiling_doubles_from_base_until_the_cap() -> None:
    backoff = Backoff(base_seconds=2, cap_seconds=600)
    assert [backoff.ceiling(n) for n in range(1, 12)] == [
        2, 4, 8, 16, 32, 64, 128, 256, 512, 600, 600,
    ]  # fmt: skip


def test_ceiling_survives_absurd_attempt_numbers() -> None:
    assert Backoff(base_seconds=0.5, cap_seconds=30).ceiling(10_000) == 30


@pytest.mark.parametrize("attempt", [0, -1])
def test_attempts_are_counted_from_one(attempt: int) -> None:
    with pytest.raises(ValueError, match="from 1"):
        Backoff(1, 10).ceiling(attempt)


@pytest.mark.parametrize(("base", "cap"), [(0, 10), (1, 0), (-1, 5)])
def test_backoff_needs_positive_base_and_cap(base: float, cap: float) -> None:
    with pytest.raises(ValueError, match="positive"):
        Backoff(base, cap)


def test_full_jitter_covers_the_whole_window_uniformly() -> None:
    backoff = Backoff(base_seconds=1, cap_seconds=1000)
    rng = random.Random(7)
    delays = [backoff.delay(4, rng) for _ in range(20_000)]
    ceiling = backoff.ceiling(4)
    assert ceiling == 8
    assert all(0 <= d <= ceiling for d in delays)
    # Full jitter, not "half fixed + half random": the low end of the window is used too.
    assert min(delays) < 0.01 * ceiling
    assert max(delays) > 0.99 * ceiling
    assert statistics.mean(delays) == pytest.approx(ceiling / 2, rel=0.03)
    # Each quarter of the window gets about a quarter of the delays.
    quarters = [sum(1 for d in delays if q * 2 <= d < (q + 1) * 2) for q in range(4)]
    assert all(abs(count - 5000) < 400 for count in quarters), quarters


def test_delay_is_reproducible_with_a_seeded_generator() -> None:
    backoff = Backoff(2, 60)
    first = [backoff.delay(n, random.Random(3)) for n in range(1, 6)]
    again = [backoff.delay(n, random.Random(3)) for n in range(1, 6)]
    assert first == again
    assert len(set(first)) == 5


def test_a_failure_with_attempts_left_is_retried_within_its_window() -> None:
    backoff = Backoff(2, 600)
    for attempt in range(1, 5):
        decision = after_failure(attempt, 5, permanent=False, backoff=backoff)
        assert isinstance(decision, Retry)
        assert 0 <= decision.delay_seconds <= backoff.ceiling(attempt)


def test_the_last_attempt_fails_the_job() -> None:
    decision = after_failure(5, 5, permanent=False, backoff=Backoff(1, 1))
    assert decision == Fail("exhausted")
    # A takeover can push attempt_count past max_attempts; that is exhausted too.
    assert after_failure(6, 5, permanent=False, backoff=Backoff(1, 1)) == Fail("exhausted")


def test_a_permanent_error_fails_at_once_whatever_is_left() -> None:
    decision = after_failure(1, 10, permanent=True, backoff=Backoff(1, 1))
    assert decision == Fail("permanent")


def test_single_attempt_jobs_never_retry() -> None:
    assert after_failure(1, 1, permanent=False, backoff=Backoff(1, 1)) == Fail("exhausted")


def test_finished_states_are_terminal() -> None:
    for terminal in (JobStatus.COMPLETED, JobStatus.FAILED):
        assert not any(allowed(terminal, target) for target in JobStatus)


def test_a_job_runs_before_it_finishes() -> None:
    assert not allowed(JobStatus.QUEUED, JobStatus.COMPLETED)
    assert not allowed(JobStatus.QUEUED, JobStatus.FAILED)
    assert allowed(JobStatus.QUEUED, JobStatus.RUNNING)
    assert allowed(JobStatus.RUNNING, JobStatus.QUEUED)  # retry
    assert allowed(JobStatus.RUNNING, JobStatus.RUNNING)  # takeover after the lease expired
    assert {target for source, target in TRANSITIONS if source is JobStatus.RUNNING} == set(
        JobStatus
    )


@pytest.mark.parametrize("name", ["email", "verifier.runs", "a", "x-1_2", "q" * 63])
def test_queue_names_accepted(name: str) -> None:
    assert check_queue_name(name) == name


@pytest.mark.parametrize("name", ["", "Email", "-x", "a|b", "a b", "q" * 64, "ä"])
def test_queue_names_refused(name: str) -> None:
    with pytest.raises(ValueError, match="queue name"):
        check_queue_name(name)


def test_error_text_leads_with_the_exception_and_is_bounded() -> None:
    def explode() -> None:
        raise RuntimeError("smtp said no " + "x" * 10_000)

    try:
        explode()
    except RuntimeError as exc:
        text = describe_error(exc, limit=500)
    assert text.startswith("RuntimeError: smtp said no")
    assert len(text) == 500 and text.endswith("…")
    try:
        raise KeyError("subject")
    except KeyError as exc:
        short = describe_error(exc)
    assert short.startswith("KeyError: 'subject'")
    assert "test_error_text_leads_with_the_exception" in short  # the frame is kept


def test_the_error_message_is_the_exception_without_its_frames() -> None:
    def explode() -> None:
        raise RuntimeError("smtp said no\nsecond line")

    try:
        explode()
    except RuntimeError as exc:
        message, text = error_message(exc), describe_error(exc)
    assert message == "RuntimeError: smtp said no\nsecond line"
    assert 'File "' not in message
    assert text.startswith(message + "\n") and 'File "' in text
    assert error_message(KeyError()) == "KeyError"
    assert len(error_message(ValueError("x" * 10_000), limit=100)) == 100

"""Job metrics: the Redis hash format the workers write and what /metrics exports from it."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from marketplace.http.job_queue import JobMetricsCollector
from marketplace.jobs.metrics import (
    RUN_BUCKETS,
    WAIT_BUCKETS,
    HistogramData,
    JobMetricsRecorder,
    JobMetricsSnapshot,
    parse_hash,
)


def recorded_fields(recorder: JobMetricsRecorder) -> dict[str, str]:
    # What flush() would add to an empty hash.
    return {
        **{k: str(v) for k, v in recorder._ints.items()},
        **{k: str(v) for k, v in recorder._floats.items()},
    }


def test_recorder_fields_round_trip_through_the_parser() -> None:
    recorder = JobMetricsRecorder(None)
    for waited in (0.001, 0.3, 0.3, 7200):
        recorder.claimed("mail", waited)
    recorder.finished("mail", "completed", 0.02)
    recorder.finished("mail", "completed", 0.04)
    recorder.finished("mail", "retried", 12)
    recorder.reaped("mail", 2)
    snapshot = JobMetricsSnapshot()
    parse_hash(recorded_fields(recorder), snapshot)

    assert snapshot.attempts == {"mail": 4}
    assert snapshot.outcomes == {
        ("mail", "completed"): 2,
        ("mail", "retried"): 1,
        ("mail", "failed"): 2,
    }
    wait = snapshot.wait["mail"]
    assert wait.sum == 0.001 + 0.3 + 0.3 + 7200
    cumulative = dict(wait.cumulative(WAIT_BUCKETS))
    assert cumulative["0.01"] == 1
    assert cumulative["0.25"] == 1
    assert cumulative["0.5"] == 3
    assert cumulative["3600.0"] == 3
    assert cumulative["+Inf"] == 4
    run = dict(snapshot.run[("mail", "completed")].cumulative(RUN_BUCKETS))
    assert run["0.01"] == 0 and run["0.025"] == 1 and run["0.05"] == 2 and run["+Inf"] == 2


def test_unknown_or_malformed_fields_are_ignored() -> None:
    snapshot = JobMetricsSnapshot()
    parse_hash({"attempts|a": "x", "nonsense": "1", "outcome|a": "3", "attempts|b": "2"}, snapshot)
    assert snapshot.attempts == {"b": 2}
    assert snapshot.outcomes == {}


def test_collector_exports_depth_counters_and_histograms() -> None:
    snapshot = JobMetricsSnapshot(
        depth={("mail", "queued"): 3, ("mail", "running"): 1, ("mail", "failed"): 0},
        due={"mail": 2},
        oldest_due_seconds={"mail": 4.5},
        attempts={"mail": 9},
        outcomes={("mail", "completed"): 7, ("mail", "retried"): 2},
        wait={"mail": HistogramData({"0.5": 8, "+Inf": 1}, 100.0)},
        run={("mail", "completed"): HistogramData({"1.0": 7}, 3.5)},
    )
    collector = JobMetricsCollector()
    registry = CollectorRegistry()
    registry.register(collector)
    assert generate_latest(registry) == b""
    collector.snapshot = snapshot
    text = generate_latest(registry).decode()
    assert 'marketplace_jobs{queue="mail",status="queued"} 3.0' in text
    assert 'marketplace_jobs{queue="mail",status="failed"} 0.0' in text
    assert 'marketplace_jobs_due{queue="mail"} 2.0' in text
    assert 'marketplace_jobs_oldest_due_seconds{queue="mail"} 4.5' in text
    assert 'marketplace_job_attempts_total{queue="mail"} 9.0' in text
    assert 'marketplace_job_outcomes_total{outcome="retried",queue="mail"} 2.0' in text
    assert 'marketplace_job_wait_seconds_bucket{le="0.5",queue="mail"} 8.0' in text
    assert 'marketplace_job_wait_seconds_bucket{le="+Inf",queue="mail"} 9.0' in text
    assert 'marketplace_job_wait_seconds_count{queue="mail"} 9.0' in text
    assert 'marketplace_job_wait_seconds_sum{queue="mail"} 100.0' in text
    assert 'marketplace_job_run_seconds_count{outcome="completed",queue="mail"} 7.0' in text

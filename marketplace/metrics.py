"""Prometheus metrics of the frontend process (served at ``GET /metrics``).

Metric objects are module-level because prometheus-client registers them globally; creating them
per app would fail the second time a process builds an app (as tests do).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

# Every process that exports these metrics imports this module first. A `_created` series per
# counter and histogram child (one per label set) doubles the series count for a timestamp no
# dashboard or alert reads; `promtool check metrics` also flags them.
disable_created_metrics()

HTTP_REQUESTS = Counter(
    "marketplace_http_requests_total",
    "HTTP requests by route template, method and status.",
    ["method", "route", "status"],
)
HTTP_LATENCY = Histogram(
    "marketplace_http_request_duration_seconds",
    "HTTP request latency by route template and method.",
    ["method", "route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
HTTP_IN_FLIGHT = Gauge("marketplace_http_in_flight_requests", "HTTP requests being served.")
# Streaming responses (the live event stream) are counted apart: their lifetime is a connection's,
# not a request's, so it must not land in the request latency histogram or the in-flight gauge.
HTTP_STREAMS_OPEN = Gauge(
    "marketplace_http_streams_open", "Streaming responses currently open.", ["route"]
)
HTTP_STREAM_DURATION = Histogram(
    "marketplace_http_stream_duration_seconds",
    "Lifetime of streaming responses, from opening to close.",
    ["route"],
    buckets=(1, 5, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600),
)
# The live event stream (GET /v1/stream, docs/stream.md), per frontend process.
STREAMS_OPEN = Gauge("marketplace_stream_connections", "Live event streams open on this frontend.")
STREAM_EVENTS_DELIVERED = Counter(
    "marketplace_stream_events_delivered_total",
    "Events written to live event streams, by type and source (live fan-out or catch-up).",
    ["type", "source"],
)
STREAM_DELIVERY_LATENCY = Histogram(
    "marketplace_stream_delivery_seconds",
    "From an event's createdAt (its transaction's start) to its write on a live stream "
    "(live fan-out only; catch-up replays are not delivery latency).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
STREAMS_CLOSED = Counter(
    "marketplace_stream_closed_total",
    "Live event streams closed, by reason: client_gone, overflow (client too slow), shutdown, "
    "credentials_expired, credentials_revoked.",
    ["reason"],
)
STREAM_RESETS = Counter(
    "marketplace_stream_resets_total",
    "Live event streams opened with a Last-Event-ID too old to replay, answered with "
    "`event: reset`, by reason: replay_limit, retention.",
    ["reason"],
)
STREAM_HUB_POSITION = Gauge(
    "marketplace_stream_hub_position",
    "Id of the last event this frontend's stream hub has fanned out.",
)
ACTOR_CALL_LATENCY = Histogram(
    "marketplace_actor_call_duration_seconds",
    "Latency of Ray actor calls made by the frontend, by actor and method.",
    ["actor", "method", "outcome"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5),
)
# Shard commands as this frontend saw them (sent, answered), one per command even when several
# went to their shard in one call. Per frontend: sum across frontends (docs/metrics.md).
SHARD_COMMANDS = Counter(
    "marketplace_shard_commands_total",
    "Shard commands run by this frontend, by shard family, command class and outcome (ok, "
    "domain_error: refused by a domain rule, unavailable: 503 such as a restarting shard, "
    "error: anything else).",
    ["family", "command", "outcome"],
)
SHARD_COMMAND_LATENCY = Histogram(
    "marketplace_shard_command_duration_seconds",
    "From a shard command's submission by this frontend to its answer (queueing for its shard "
    "included), by shard family and command class.",
    ["family", "command"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
DB_POOL_SIZE = Gauge("marketplace_db_pool_size", "Connections open in the asyncpg pool.")
DB_POOL_IDLE = Gauge("marketplace_db_pool_idle", "Idle connections in the asyncpg pool.")
DB_POOL_MAX = Gauge("marketplace_db_pool_max_size", "Configured maximum size of the asyncpg pool.")
RATE_LIMITED = Counter(
    "marketplace_rate_limited_total", "Requests refused by the rate limiter.", ["route"]
)
RATE_LIMITER_ERRORS = Counter(
    "marketplace_rate_limiter_errors_total",
    "Rate-limit checks that found Redis unavailable (they ran on the per-process fallback).",
)
RATE_LIMITER_FALLBACK_CHECKS = Counter(
    "marketplace_rate_limiter_fallback_total",
    "Rate-limit checks served by the per-process fallback limiter because Redis was down.",
)
RATE_LIMITER_FALLBACK_ACTIVE = Gauge(
    "marketplace_rate_limiter_fallback_active",
    "1 while this process enforces rate limits on its own because Redis is down.",
)
MODERATION_OFFENSES = Counter(
    "marketplace_moderation_offenses_total",
    "Offenses recorded: chat or DM sends refused by the term filter, by context.",
    ["context"],
)
MODERATION_SUSPENSIONS = Counter(
    "marketplace_moderation_suspensions_total",
    "Suspensions of sending started by an offense that reached the threshold.",
)

# The batched session recorder (marketplace/identity/session_recorder.py).
SESSIONS_RECORDED = Counter(
    "marketplace_sessions_recorded_total",
    "Session users (e-mail flag, verified address, token iat) written to Postgres; a token "
    "this process already wrote is not written again.",
)
SESSION_RECORD_BATCH_SIZE = Histogram(
    "marketplace_session_record_batch_size",
    "Session records per statement written by the session recorder.",
    buckets=(1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500),
)
SESSION_RECORDS_PENDING = Gauge(
    "marketplace_session_records_pending",
    "Session records waiting in this process to be written.",
)
SESSION_RECORDS_DROPPED = Counter(
    "marketplace_session_records_dropped_total",
    "Session records dropped because the queue was full (Postgres unreachable for long); the "
    "user's next request records them again.",
)


# Mirrored from the chain indexer actor (which keeps them in Redis) at each scrape.
class IndexerMetrics(Collector):
    """The chain indexer's figures, copied before each scrape from the Redis hash the indexer
    actor writes (``marketplace:indexer:metrics``, marketplace/indexer/engine.py): its running
    totals as counters, its batch time as a summary (count and sum, no quantiles), the rest as
    gauges. A figure Redis did not have keeps its last value; 0 before the first read."""

    # Redis field -> (metric name without `_total`, help text)
    COUNTERS = {
        "blocks_processed": (
            "marketplace_indexer_blocks_processed",
            "Blocks scanned by the chain indexer.",
        ),
        "events_processed": (
            "marketplace_indexer_events_processed",
            "Marketplace events processed by the chain indexer.",
        ),
        "reorgs_handled": (
            "marketplace_indexer_reorgs_handled",
            "Chain reorganisations rolled back.",
        ),
        "rpc_errors": (
            "marketplace_indexer_rpc_errors",
            "Failed indexer batches, RPC errors included.",
        ),
    }
    GAUGES = {
        "lag_blocks": (
            "marketplace_indexer_lag_blocks",
            "Blocks between the chain head and the indexed block.",
        ),
        "lag_seconds": (
            "marketplace_indexer_lag_seconds",
            "Chain-time age of the newest indexed block when behind (0 when caught up).",
        ),
        "head_block": ("marketplace_indexer_head_block", "Chain head seen by the indexer."),
        "last_synced_block": (
            "marketplace_indexer_last_synced_block",
            "Last block reflected in the read models.",
        ),
    }
    # The summary's count and sum: committed batches and the seconds spent in them.
    BATCHES, BATCH_SECONDS = "batches", "batch_seconds_sum"
    BATCH_DURATION = "marketplace_indexer_batch_duration_seconds"

    def __init__(self) -> None:
        self.values: dict[str, float] = {}

    def mirror(self, values: Mapping[str, float]) -> None:
        self.values.update(values)

    def collect(self) -> Iterator[Metric]:
        for field, (name, help_text) in self.COUNTERS.items():
            counter = CounterMetricFamily(name, help_text)
            counter.add_metric([], self.values.get(field, 0.0))
            yield counter
        yield SummaryMetricFamily(
            self.BATCH_DURATION,
            "Committed indexer batches (count) and the seconds spent in them (sum).",
            count_value=int(self.values.get(self.BATCHES, 0.0)),
            sum_value=self.values.get(self.BATCH_SECONDS, 0.0),
        )
        for field, (name, help_text) in self.GAUGES.items():
            gauge = GaugeMetricFamily(name, help_text)
            gauge.add_metric([], self.values.get(field, 0.0))
            yield gauge


INDEXER_METRICS = IndexerMetrics()
REGISTRY.register(INDEXER_METRICS)

# The outcome of this frontend's last readiness round (marketplace/http/routes/system.py), which
# a scrape also runs when none ran within MARKETPLACE_READINESS_CACHE_MS: the alert on readiness
# needs a series, and probes (the kubelet's, compose's) leave none in Prometheus.
READY = Gauge(
    "marketplace_ready",
    "1 while this frontend's dependencies answered its last readiness check (GET "
    "/v1/health/ready: ready or degraded), 0 when they did not.",
)


READ_CACHE_HITS = Counter(
    "marketplace_read_cache_hits_total",
    "Read responses served from this frontend's cache.",
    ["route"],
)
READ_CACHE_MISSES = Counter(
    "marketplace_read_cache_misses_total",
    "Cacheable reads that found no entry (answered from PostgreSQL).",
    ["route"],
)
READ_CACHE_BYPASSES = Counter(
    "marketplace_read_cache_bypasses_total",
    "Reads answered from PostgreSQL without looking at the cache, by reason (not_serving: the "
    "event follower is lagging or disconnected; uncacheable: a signed-in or effectiveStatus "
    "list).",
    ["route", "reason"],
)
READ_CACHE_INVALIDATIONS = Counter(
    "marketplace_read_cache_invalidations_total",
    "Invalidations applied to the cache, by event type or reason.",
    ["reason"],
)
READ_CACHE_ENTRIES = Gauge("marketplace_read_cache_entries", "Entries in this frontend's cache.")
READ_CACHE_BYTES = Gauge(
    "marketplace_read_cache_bytes", "Approximate bytes held by this frontend's cache."
)
READ_CACHE_FOLLOWER_LAG = Gauge(
    "marketplace_read_cache_follower_lag_seconds",
    "Seconds since the cache's event follower was last confirmed up to date with the outbox.",
)

"""The alert rules and the dashboard: every PromQL expression parses (promql-parser), every
metric it names is one a running app exports at GET /metrics, and the alerts carry what an
operator needs (for, severity, summary, description; the spec's 300 s lag threshold)."""

from __future__ import annotations

from typing import Any

import promql_parser
import pytest

from marketplace.config import Settings
from tests.deploy.manifests import (
    alert_rules,
    annotation_queries,
    dashboard,
    dashboard_targets,
    exported_names,
    is_exported,
    metric_names,
)

# Series Prometheus writes itself for every scrape target; no service exports them.
PROMETHEUS_SERIES = {"up"}
SEVERITIES = {"info", "warning", "critical"}


def _expressions() -> list[tuple[str, str]]:
    found = []
    for rule in alert_rules():
        found.append((f"alert {rule['alert']}", rule["expr"]))
        found.extend((f"alert {rule['alert']} annotation", q) for q in annotation_queries(rule))
    found.extend((f"panel {title}", expr) for title, expr in dashboard_targets())
    return found


EXPRESSIONS = _expressions()


@pytest.mark.parametrize(("where", "expr"), EXPRESSIONS, ids=[w for w, _ in EXPRESSIONS])
def test_expression_parses(where: str, expr: str) -> None:
    parsed = promql_parser.parse(expr)
    assert metric_names(parsed), f"{where} selects no metric: {expr}"


def test_parser_rejects_broken_promql() -> None:
    """The parse check is real: an unbalanced expression is refused."""
    with pytest.raises(ValueError):  # noqa: PT011 (the parser raises plain ValueError)
        promql_parser.parse("sum(rate(marketplace_http_requests_total[5m])")


def test_alerts_have_duration_severity_and_annotations() -> None:
    rules = alert_rules()
    assert len({r["alert"] for r in rules}) == len(rules)
    for rule in rules:
        assert "for" in rule, rule["alert"]
        # "0m" (fire at once) is allowed; the parser refuses zero durations.
        if rule["for"] not in ("0", "0s", "0m"):
            promql_parser.parse_duration(rule["for"])
        assert rule["labels"]["severity"] in SEVERITIES, rule["alert"]
        assert rule["annotations"]["summary"].strip(), rule["alert"]
        assert rule["annotations"]["description"].strip(), rule["alert"]


def test_alerts_cover_the_issue_list() -> None:
    """Indexer lag and staleness, 5xx, actor restarts, job backlog and failures (verifier and
    notifications), SMTP failures, the rate limiter failing open, consumer lag."""
    by_metric: dict[str, list[str]] = {}
    for rule in alert_rules():
        for name in metric_names(promql_parser.parse(rule["expr"])):
            by_metric.setdefault(name, []).append(rule["expr"])
    for metric in (
        "marketplace_indexer_lag_seconds",
        "marketplace_indexer_stale",
        "marketplace_http_requests_total",
        "marketplace_actor_restarts_total",
        "marketplace_jobs_oldest_due_seconds",
        "marketplace_job_outcomes_total",
        "marketplace_notification_deliveries",
        "marketplace_rate_limiter_fallback_active",
        "marketplace_leaderboard_consumer_lag_events",
    ):
        assert metric in by_metric, metric
    backlog = " ".join(by_metric["marketplace_jobs_oldest_due_seconds"])
    assert "verifier" in backlog and "notifications" in backlog
    failures = " ".join(by_metric["marketplace_job_outcomes_total"])
    assert "verifier" in failures and "notifications" in failures and '"failed"' in failures
    assert any('status=~"5.."' in e for e in by_metric["marketplace_http_requests_total"])


def test_indexer_lag_alert_uses_the_spec_threshold() -> None:
    (rule,) = [r for r in alert_rules() if r["alert"] == "MarketplaceIndexerLagHigh"]
    expr = promql_parser.parse(rule["expr"])
    assert isinstance(expr, promql_parser.BinaryExpr)
    assert metric_names(expr.lhs) == {"marketplace_indexer_lag_seconds"}
    assert isinstance(expr.rhs, promql_parser.NumberLiteral)
    # The spec's "lag alert threshold 300 s", which is also the service's default setting.
    assert expr.rhs.val == 300
    assert Settings.model_fields["indexer_lag_alert_seconds"].default == 300


def test_dashboard_shows_the_issue_list() -> None:
    titles = " | ".join(panel["title"] for panel in dashboard()["panels"]).lower()
    queries = " ".join(expr for _, expr in dashboard_targets())
    for word in ("request rate", "errors", "latency", "actor call", "indexer", "job", "moderation"):
        assert word in titles, word
    assert "histogram_quantile" in queries and "by (le, route)" in queries
    for metric in (
        "marketplace_actor_call_duration_seconds_bucket",
        "marketplace_indexer_head_block",
        "marketplace_indexer_lag_seconds",
        "marketplace_jobs",
        "marketplace_job_wait_seconds_bucket",
        "marketplace_job_run_seconds_bucket",
        "marketplace_job_outcomes_total",
        "marketplace_notification_deliveries",
        "marketplace_moderation_offenses_total",
        "marketplace_stream_connections",
        "marketplace_shard_commands_total",
        "marketplace_verifier_results",
    ):
        assert metric in queries, metric


async def test_every_metric_named_is_exported_by_the_service(client: Any) -> None:
    """Reads /metrics of a running app (real Postgres, Redis and Ray from the suite's fixtures)
    after a request, so the per-request families have samples too."""
    assert (await client.get("/v1/health/ready")).status == 200
    response = await client.get("/metrics")
    assert response.status == 200
    exported = exported_names(await response.text())
    assert "marketplace_http_requests_total" in exported  # the reading itself works

    missing: dict[str, list[str]] = {}
    for where, expr in EXPRESSIONS:
        for name in metric_names(promql_parser.parse(expr)):
            if name not in PROMETHEUS_SERIES and not is_exported(name, exported):
                missing.setdefault(name, []).append(where)
    assert not missing, "named but not exported at /metrics:\n" + "\n".join(
        f"  {name}: {', '.join(sorted(set(where)))}" for name, where in sorted(missing.items())
    )

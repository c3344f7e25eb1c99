"""The alert rules and the dashboard: every PromQL expression parses (promql-parser), every
metric it names is one a running app exports at GET /metrics, and the alerts carry what an
operator needs (for, severity, summary, description; the spec's 300 s lag threshold)."""

from __future__ import annotations

import re
from typing import Any

import promql_parser
import pytest

from marketplace.config import Settings
from tests.deploy.manifests import (
    GRAFANA_VARIABLES,
    HISTOGRAM_SUFFIXES,
    REPO_ROOT,
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


# --- runbooks, readiness and latency alerts -------------------------------------------------

OPERATIONS = REPO_ROOT / "docs" / "operations.md"
RUNBOOK_BASE = "https://github.com/marketplace/marketplace/blob/main/docs/operations.md#"


def _runbook_sections() -> dict[str, str]:
    """The "Runbook" part of docs/operations.md: its `###` headings and their text."""
    text = OPERATIONS.read_text()
    runbook = text.split("\n## Runbook\n", 1)[1].split("\n## ", 1)[0]
    sections = re.split(r"^### (.+)$", runbook, flags=re.M)
    return dict(zip(sections[1::2], sections[2::2], strict=True))


def _github_anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_alert_links_a_runbook_section_saying_what_to_check_and_do() -> None:
    sections = _runbook_sections()
    anchors = {_github_anchor(heading): body for heading, body in sections.items()}
    for rule in alert_rules():
        url = rule["annotations"]["runbook_url"]
        assert url.startswith(RUNBOOK_BASE), rule["alert"]
        body = anchors.get(url.removeprefix(RUNBOOK_BASE))
        assert body is not None, f"{rule['alert']}: no section for {url}"
        assert "**Check" in body and re.search(r"\b[Dd]o:\*\*", body), rule["alert"]
    assert set(sections) == {rule["alert"] for rule in alert_rules()}


def _threshold(rule: dict[str, Any]) -> tuple[str, float]:
    expr = promql_parser.parse(rule["expr"])
    assert isinstance(expr, promql_parser.BinaryExpr), rule["alert"]
    assert isinstance(expr.rhs, promql_parser.NumberLiteral), rule["alert"]
    return str(expr.op), expr.rhs.val


def test_alerts_cover_readiness_and_request_latency() -> None:
    rules = {rule["alert"]: rule for rule in alert_rules()}
    ready = rules["MarketplaceFrontendNotReady"]
    assert metric_names(promql_parser.parse(ready["expr"])) == {"marketplace_ready"}
    assert _threshold(ready) == ("<", 1)
    latency = rules["MarketplaceHttpLatencyHigh"]
    parsed = promql_parser.parse(latency["expr"])
    assert metric_names(parsed) == {"marketplace_http_request_duration_seconds_bucket"}
    assert re.sub(r"\s+", "", latency["expr"]).startswith("histogram_quantile(0.99,")
    assert _threshold(latency) == (">", 1)
    for rule in (ready, latency):
        assert promql_parser.parse_duration(rule["for"]).total_seconds() >= 180, rule["alert"]


# --- dashboard: variables, summary row, thresholds, links -----------------------------------


def _panels() -> list[dict[str, Any]]:
    panels: list[dict[str, Any]] = dashboard()["panels"]
    return panels


def _panel_metrics(panel: dict[str, Any]) -> set[str]:
    names: set[str] = set()
    for target in panel.get("targets", []):
        expr = target["expr"]
        for variable, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(variable, value)
        names |= metric_names(promql_parser.parse(expr))
    return names


def test_dashboard_has_job_and_instance_variables() -> None:
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    assert {"datasource", "job", "instance"} <= set(variables)
    for name in ("job", "instance"):
        variable = variables[name]
        assert variable["type"] == "query" and variable["multi"] and variable["includeAll"]
        query = variable["query"]["query"]
        assert query.startswith("label_values(") and query.endswith(f", {name})")
    # instance's values follow the chosen job
    assert '{job=~"$job"}' in variables["instance"]["query"]["query"]


def test_every_panel_query_filters_by_job_and_instance() -> None:
    unfiltered = []
    for title, expr in dashboard_targets():

        def visit(node: promql_parser.Expr, title: str = title, expr: str = expr) -> None:
            if isinstance(node, promql_parser.VectorSelector):
                matchers = {
                    (m.name, str(m.op), m.value) for m in node.matchers.matchers if m.name != "le"
                }
                wanted = {("job", "MatchOp.Re", "$job"), ("instance", "MatchOp.Re", "$instance")}
                if not wanted <= matchers:
                    unfiltered.append(f"{title}: {expr}")

        promql_parser.walk(promql_parser.parse(expr), visit)
    assert not unfiltered, "\n".join(unfiltered)


SUMMARY = {
    "availability": "MarketplaceFrontendNotReady",
    "error ratio": "MarketplaceHttp5xxRateHigh",
    "p99": "MarketplaceHttpLatencyHigh",
    "indexer lag": "MarketplaceIndexerLagHigh",
}


def _colour_at(steps: list[dict[str, Any]], value: float) -> str:
    colour = steps[0]["color"]
    for step in steps[1:]:
        if value >= step["value"]:
            colour = step["color"]
    return str(colour)


def test_summary_row_comes_first_with_availability_errors_latency_and_lag() -> None:
    panels = _panels()
    assert panels[0]["type"] == "row" and panels[0]["title"] == "Summary"
    assert panels[0]["gridPos"]["y"] == 0
    stats = []
    for panel in panels[1:]:
        if panel["type"] == "row":
            break
        stats.append(panel)
    assert {p["type"] for p in stats} == {"stat"}
    assert all(p["gridPos"]["y"] < min(q["gridPos"]["y"] for q in panels[len(stats) + 1 :])
               for p in stats)  # fmt: skip
    rules = {rule["alert"]: rule for rule in alert_rules()}
    for word, alert in SUMMARY.items():
        (panel,) = [p for p in stats if word in p["title"].lower()]
        rule = rules[alert]
        # the panel draws what the alert compares
        assert _panel_metrics(panel) & metric_names(promql_parser.parse(rule["expr"])), word
        steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
        op, threshold = _threshold(rule)
        # red where the alert fires, green where it does not, amber in between
        if op in (">", ">="):
            assert _colour_at(steps, threshold + 1e-9) == "red", word
            assert steps[0]["color"] == "green", word
        else:
            assert _colour_at(steps, threshold) == "green", word
            assert _colour_at(steps, threshold - 1e-9) != "green", word
            assert steps[0]["color"] == "red", word
        assert {s["color"] for s in steps} == {"green", "orange", "red"}, word
        assert rule["annotations"]["runbook_url"] in {link["url"] for link in panel["links"]}


def test_every_panel_has_thresholds_and_alert_lines_sit_at_alert_thresholds() -> None:
    rules = alert_rules()
    lines = 0
    for panel in _panels():
        if panel["type"] == "row":
            continue
        defaults = panel["fieldConfig"]["defaults"]
        steps = defaults["thresholds"]["steps"]
        assert steps and steps[0]["value"] is None, panel["title"]
        style = defaults.get("custom", {}).get("thresholdsStyle", {}).get("mode", "off")
        if panel["type"] == "timeseries" and style != "off":
            lines += 1
            red = [s["value"] for s in steps if s["color"] == "red"]
            related = [r for r in rules if _panel_metrics(panel) & _rule_metrics(r)]
            assert any(_threshold(r)[1] in red for r in related), panel["title"]
    assert lines >= 4


def _rule_metrics(rule: dict[str, Any]) -> set[str]:
    return metric_names(promql_parser.parse(rule["expr"]))


def test_panels_link_to_the_runbooks_of_the_alerts_on_their_metrics() -> None:
    rules = alert_rules()
    linked = set()
    for panel in _panels():
        urls = {link["url"] for link in panel.get("links", [])}
        for rule in rules:
            if _panel_metrics(panel) & _rule_metrics(rule):
                assert rule["annotations"]["runbook_url"] in urls, (panel["title"], rule["alert"])
                linked.add(rule["alert"])
    # every alert but the one on Prometheus' own `up` alone is drawn somewhere
    assert linked >= {rule["alert"] for rule in rules} - {"MarketplaceFrontendDown"}


def _documented(name: str, text: str) -> bool:
    """``name`` (a family, or a histogram's/summary's series) is in docs/metrics.md, written in
    full or as a suffix beside its family's first member (`marketplace_db_pool_size`, `_idle`)."""
    full = set(re.findall(r"`(marketplace_[a-z0-9_]+)`", text))
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in full:
            return True
    if name in full:
        return True
    tails = set(re.findall(r"`(_[a-z0-9_]+)`", text))
    return any(
        name.endswith(tail) and any(f.startswith(name[: -len(tail)] + "_") for f in full)
        for tail in tails
    )


def test_every_metric_of_the_dashboard_and_alerts_is_documented() -> None:
    text = (REPO_ROOT / "docs" / "metrics.md").read_text()
    named = {
        name
        for _, expr in EXPRESSIONS
        for name in metric_names(promql_parser.parse(expr))
        if name not in PROMETHEUS_SERIES
    }
    assert "marketplace_ready" in named
    assert not {name for name in named if not _documented(name, text)}

"""Prometheus' own tool on the alert rules: `promtool check rules` accepts deploy/prometheus/
alerts.yaml, and `promtool test rules` runs its unit tests (deploy/prometheus/alerts.test.yaml:
input series, the alerts expected at given times) and they pass. Every alert has a case where
it fires; the readiness and latency alerts also have cases where they must not."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.manifests import ALERTS, alert_rules

ALERT_TESTS = ALERTS.parent / "alerts.test.yaml"
# Rules the issue added: besides firing, each must be shown not to fire on healthy input.
NEW_ALERTS = {"MarketplaceFrontendNotReady", "MarketplaceHttpLatencyHigh"}


def _promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    found = shutil.which("promtool")
    # scripts/test installs Debian's prometheus package, which carries promtool.
    assert found, "promtool is missing: apt-get install prometheus"
    return subprocess.run(
        [found, *map(str, args)], capture_output=True, text=True, timeout=120, check=False
    )


def _alert_tests() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = [
        case
        for test in yaml.safe_load(ALERT_TESTS.read_text())["tests"]
        for case in test["alert_rule_test"]
    ]
    return cases


def test_promtool_accepts_the_alert_rules() -> None:
    checked = _promtool("check", "rules", ALERTS)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in checked.stdout


def test_alert_rule_unit_tests_pass() -> None:
    tested = _promtool("test", "rules", ALERT_TESTS)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_every_alert_fires_in_a_unit_test() -> None:
    cases = _alert_tests()
    fired = {case["alertname"] for case in cases if case["exp_alerts"]}
    assert fired == {rule["alert"] for rule in alert_rules()}
    quiet = {case["alertname"] for case in cases if not case["exp_alerts"]}
    assert quiet >= NEW_ALERTS
    # Firing cases check the rendered annotations too (runbook link included).
    for case in cases:
        for alert in case["exp_alerts"]:
            assert alert["exp_annotations"]["runbook_url"], case["alertname"]


def test_unit_tests_fail_when_a_threshold_moves(tmp_path: Path) -> None:
    """The unit tests are real: the same tests against rules whose lag and latency thresholds
    were raised fail, naming those alerts."""
    text = ALERTS.read_text()
    lag, latency = "max(marketplace_indexer_lag_seconds) > 300", "\n          ) > 1\n"
    assert text.count(lag) == 1 and text.count(latency) == 1
    moved = text.replace(lag, lag.replace("300", "500")).replace(latency, latency.replace("1", "5"))
    (tmp_path / "alerts.yaml").write_text(moved)
    shutil.copy(ALERT_TESTS, tmp_path / "alerts.test.yaml")
    tested = _promtool("test", "rules", tmp_path / "alerts.test.yaml")
    assert tested.returncode != 0
    output = tested.stdout + tested.stderr
    assert "alertname: MarketplaceIndexerLagHigh" in output
    assert "alertname: MarketplaceHttpLatencyHigh" in output

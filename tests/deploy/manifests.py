"""Reading the files under deploy/ for the tests of this package."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY = REPO_ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
ALERTS = DEPLOY / "prometheus" / "alerts.yaml"
DASHBOARD = DEPLOY / "grafana" / "marketplace.json"
COMPOSE = DEPLOY / "compose.yaml"

# Grafana replaces these before the query reaches Prometheus; any valid duration parses alike.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def yaml_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml"))


def load_documents(path: Path) -> list[Any]:
    with path.open() as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


def kubernetes_objects() -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every Kubernetes object under deploy/kubernetes/ (documents with apiVersion and kind;
    kustomize's own configuration is not one)."""
    for path in sorted(KUBERNETES.glob("*.yaml")):
        for doc in load_documents(path):
            if isinstance(doc, dict) and "apiVersion" in doc and doc.get("kind") != "Kustomization":
                yield path, doc


def objects_of_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for _, doc in kubernetes_objects() if doc["kind"] == kind]


def alert_rules() -> list[dict[str, Any]]:
    data = yaml.safe_load(ALERTS.read_text())
    return [rule for group in data["groups"] for rule in group["rules"]]


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def dashboard_targets() -> list[tuple[str, str]]:
    """(panel title, PromQL with Grafana's variables filled in) of every dashboard query."""
    result = []
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            result.append((panel["title"], expr))
    return result


def metric_names(expr: promql_parser.Expr) -> set[str]:
    """Names of the series an expression selects (``foo{...}``, ``foo[5m]``, and
    ``{__name__="foo"}``), found by walking the parsed AST."""
    names: set[str] = set()

    def visit(node: promql_parser.Expr) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                names.add(node.name)
            names.update(
                m.value for m in node.matchers.matchers if m.name == "__name__" and m.value
            )

    promql_parser.walk(expr, visit)
    return names


def exported_names(exposition: str) -> set[str]:
    """Metric names a Prometheus text exposition declares (# TYPE) or has samples of."""
    names = set(re.findall(r"^# TYPE (\S+) ", exposition, re.M))
    names.update(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{| )", exposition, re.M))
    return names


def is_exported(name: str, exported: set[str]) -> bool:
    """A histogram's series (``_bucket``, ``_sum``, ``_count``) count as its family's."""
    if name in exported:
        return True
    return any(name.endswith(s) and name[: -len(s)] in exported for s in HISTOGRAM_SUFFIXES)


def annotation_queries(rule: dict[str, Any]) -> list[str]:
    """PromQL run by an alert's annotation templates (``{{ with query "..." }}``)."""
    return [
        query
        for text in rule.get("annotations", {}).values()
        for query in re.findall(r'query\s+"((?:[^"\\]|\\.)*)"', text)
    ]


# --- compose and kustomize inputs ------------------------------------------------------------

KUSTOMIZATION = KUBERNETES / "kustomization.yaml"
DOCKER_SCRIPTS = DEPLOY / "docker"
PLACEHOLDER = "CHANGE_ME"


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=value lines of an env file (compose's .env, kustomize's `envs`): comments and blank
    lines skipped, the value taken as written."""
    result: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep, f"{path.name}: not KEY=value: {line!r}"
        result[key.strip()] = value
    return result


def kustomization() -> dict[str, Any]:
    (data,) = load_documents(KUSTOMIZATION)
    assert isinstance(data, dict)
    return data


def generated_secrets() -> dict[str, dict[str, str]]:
    """The Secrets kustomization.yaml's secretGenerator makes, with the keys and values of each
    one's committed ``<env file>.example`` (the real env files are git-ignored)."""
    result: dict[str, dict[str, str]] = {}
    for generator in kustomization()["secretGenerator"]:
        values: dict[str, str] = {}
        for env_file in generator.get("envs", []):
            values |= read_env_file(KUBERNETES / f"{env_file}.example")
        result[generator["name"]] = values
    return result

"""deploy/kubernetes/: the core kinds validate against the Kubernetes schemas
(kubernetes-validate); the RayCluster, ServiceMonitor and PrometheusRule, whose schemas it does
not carry, are checked field by field."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest
import yaml

from marketplace.config import Settings
from tests.deploy.manifests import (
    ALERTS,
    KUBERNETES,
    kubernetes_objects,
    load_documents,
    objects_of_kind,
)

CORE_KINDS = ("Deployment", "Service", "ConfigMap", "Secret", "PodDisruptionBudget")
KUBERNETES_VERSION = "1.30.0"
SETTINGS_ENV = {f"MARKETPLACE_{name.upper()}" for name in Settings.model_fields}


def _name(doc: dict[str, Any]) -> str:
    return str(doc["metadata"]["name"])


def _core_objects() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc)
        for path, doc in kubernetes_objects()
        if doc["kind"] in CORE_KINDS
    ]


def test_every_core_kind_is_present() -> None:
    kinds = {doc["kind"] for _, doc in kubernetes_objects()}
    assert set(CORE_KINDS) <= kinds
    assert {"RayCluster", "ServiceMonitor", "PrometheusRule"} <= kinds


@pytest.mark.parametrize(("name", "doc"), _core_objects(), ids=[n for n, _ in _core_objects()])
def test_core_object_validates_against_the_kubernetes_schema(
    name: str, doc: dict[str, Any]
) -> None:
    # strict: an unknown (misspelt) field is an error too.
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_validation_catches_a_broken_deployment() -> None:
    """The schema check is real: a misspelt probe field fails it."""
    (deployment,) = objects_of_kind("Deployment")
    broken = yaml.safe_load(yaml.safe_dump(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["periodSecond"] = 5
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_kustomization_lists_every_kubernetes_object_file() -> None:
    (kustomization,) = load_documents(KUBERNETES / "kustomization.yaml")
    listed = set(kustomization["resources"])
    files = {path.name for path, _ in kubernetes_objects()}
    assert listed == files
    assert "prometheus-scrape.yaml" not in listed  # a Prometheus config, not an object


# --- frontend --------------------------------------------------------------------------------


def _frontend_container() -> dict[str, Any]:
    (deployment,) = objects_of_kind("Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


def test_frontend_probes_resources_and_settings() -> None:
    (deployment,) = objects_of_kind("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = _frontend_container()
    assert container["readinessProbe"]["httpGet"]["path"] == "/v1/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v1/health"
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(container["resources"][kind])
    sources = {next(iter(s)): next(iter(s.values()))["name"] for s in container["envFrom"]}
    (config_map,) = objects_of_kind("ConfigMap")
    secret_names = {s["metadata"]["name"] for s in objects_of_kind("Secret")}
    assert sources["configMapRef"] == config_map["metadata"]["name"]
    assert sources["secretRef"] in secret_names
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    # The Service and the PodDisruptionBudget select these pods.
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    (service,) = objects_of_kind("Service")
    assert service["spec"]["selector"].items() <= labels.items()
    budgets = [
        b
        for b in objects_of_kind("PodDisruptionBudget")
        if b["spec"]["selector"]["matchLabels"].items() <= labels.items()
    ]
    assert budgets and budgets[0]["spec"]["minAvailable"] >= 1
    port_names = {p["name"] for p in container["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= port_names


def test_config_map_names_real_settings_and_the_spec_lag_threshold() -> None:
    (config_map,) = objects_of_kind("ConfigMap")
    data = config_map["data"]
    unknown = {k for k in data if k.startswith("MARKETPLACE_")} - SETTINGS_ENV
    assert not unknown, f"not Settings fields: {sorted(unknown)}"
    assert data["MARKETPLACE_INDEXER_LAG_ALERT_SECONDS"] == "300"
    assert data["MARKETPLACE_RAY_ADDRESS"].startswith("marketplace-ray-head-svc:")
    (cluster,) = objects_of_kind("RayCluster")
    assert data["MARKETPLACE_RAY_ADDRESS"].startswith(cluster["metadata"]["name"] + "-head-svc")


def test_secret_template_holds_only_placeholders() -> None:
    (secret,) = [
        s for s in objects_of_kind("Secret") if s["metadata"]["name"] == "marketplace-secrets"
    ]
    values = secret["stringData"]
    for name in (
        "MARKETPLACE_DATABASE_URL",
        "MARKETPLACE_REDIS_URL",
        "MARKETPLACE_JWT_SECRET",
        "MARKETPLACE_SCHEDULER_SECRET",
        "MARKETPLACE_NOTIFICATION_UNSUBSCRIBE_SECRET",
        "MARKETPLACE_VERIFIER_PRIVATE_KEY",
        "MARKETPLACE_SMTP_URL",
        "RAY_AUTH_TOKEN",
    ):
        assert "CHANGE_ME" in values[name], name
    assert {k for k in values if k.startswith("MARKETPLACE_")} <= SETTINGS_ENV
    for other in objects_of_kind("Secret"):
        for value in other.get("stringData", {}).values():
            assert "CHANGE_ME" in value
        assert "data" not in other  # base64 would hide a real value from review


# --- KubeRay ---------------------------------------------------------------------------------


def test_ray_cluster_head_workers_and_gcs_fault_tolerance() -> None:
    (cluster,) = objects_of_kind("RayCluster")
    assert cluster["apiVersion"] == "ray.io/v1"
    spec = cluster["spec"]
    head = spec["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"
    assert head["template"]["spec"]["containers"][0]["image"]
    (group,) = spec["workerGroupSpecs"]
    assert group["groupName"]
    assert 1 <= group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
    assert group["maxReplicas"] > group["minReplicas"]
    ft = spec["gcsFaultToleranceOptions"]
    host, _, port = ft["redisAddress"].partition(":")
    assert host and port.isdigit()
    secret_ref = ft["redisPassword"]["valueFrom"]["secretKeyRef"]
    (redis_secret,) = [
        s for s in objects_of_kind("Secret") if s["metadata"]["name"] == secret_ref["name"]
    ]
    assert secret_ref["key"] in redis_secret["stringData"]
    # The pre-1.3 annotation must not be mixed with gcsFaultToleranceOptions (KubeRay refuses it).
    assert "ray.io/ft-enabled" not in cluster["metadata"].get("annotations", {})
    for template in (head["template"], group["template"]):
        pod = template["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        env = {e["name"]: e for e in pod["containers"][0]["env"]}
        assert env["RAY_AUTH_MODE"]["value"] == "token"
        assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "RAY_AUTH_TOKEN"
        # Explicit probes: KubeRay's defaults ask a dashboard agent the image does not run.
        assert pod["containers"][0]["livenessProbe"]["exec"]["command"][0] == "ray-node-healthcheck"
    # Worker liveness ignores the GCS, so workers outlive a head restart.
    worker_liveness = group["template"]["spec"]["containers"][0]["livenessProbe"]
    assert worker_liveness["exec"]["command"] == ["ray-node-healthcheck"]
    # Actors ask for the ConfigMap's actor resource, which only the worker group advertises.
    (config,) = objects_of_kind("ConfigMap")
    resource = config["data"]["MARKETPLACE_RAY_ACTOR_RESOURCE"]
    advertised = json.loads(json.loads(group["rayStartParams"]["resources"]))
    assert advertised[resource] >= 1
    assert "resources" not in head["rayStartParams"]


# --- Prometheus Operator ---------------------------------------------------------------------


def test_service_monitor_scrapes_the_frontend_metrics() -> None:
    (monitor,) = objects_of_kind("ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    (service,) = objects_of_kind("Service")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    endpoints = monitor["spec"]["endpoints"]
    assert endpoints and all(e["path"] == "/metrics" for e in endpoints)
    assert {e["port"] for e in endpoints} <= {p["name"] for p in service["spec"]["ports"]}


def test_plain_scrape_config_keeps_the_service_http_port() -> None:
    (config,) = load_documents(KUBERNETES / "prometheus-scrape.yaml")
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "marketplace"
    assert job["metrics_path"] == "/metrics"
    keeps = {r["regex"] for r in job["relabel_configs"] if r.get("action") == "keep"}
    (service,) = objects_of_kind("Service")
    assert service["metadata"]["name"] in keeps and "http" in keeps


def test_prometheus_rule_carries_the_alert_file_groups() -> None:
    (rule,) = objects_of_kind("PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"]["groups"] == yaml.safe_load(ALERTS.read_text())["groups"]

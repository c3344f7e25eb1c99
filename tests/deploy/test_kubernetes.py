"""deploy/kubernetes/: the core kinds validate against the Kubernetes schemas
(kubernetes-validate), and so do the RayCluster's pod templates; the RayCluster, ServiceMonitor
and PrometheusRule, whose schemas it does not carry, are checked field by field. The verifier
executors' group is checked for what keeps the service's secrets away from untrusted code."""

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

CORE_KINDS = (
    "Deployment",
    "Service",
    "ConfigMap",
    "Secret",
    "PodDisruptionBudget",
    "NetworkPolicy",
)
KUBERNETES_VERSION = "1.30.0"
SETTINGS_ENV = {f"MARKETPLACE_{name.upper()}" for name in Settings.model_fields}
RAY_TOKEN_SECRET = "marketplace-ray-auth"
EXECUTOR_GROUP = "verifier-executors"
# Where a pod spec can name a Secret: env valueFrom, envFrom, a secret volume, a projected
# volume's secret source; and where it can get an API credential (a projected service account
# token).
SECRET_KEYS = ("secretKeyRef", "secretRef", "secret", "serviceAccountToken")


def _name(doc: dict[str, Any]) -> str:
    return str(doc["metadata"]["name"])


def _find_keys(node: Any, keys: tuple[str, ...], path: str = "") -> list[tuple[str, Any]]:
    """(path, value) of every mapping entry whose key is one of ``keys``, at any depth."""
    found: list[tuple[str, Any]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            where = f"{path}.{key}"
            if key in keys:
                found.append((where, value))
            found.extend(_find_keys(value, keys, where))
    elif isinstance(node, list):
        for i, item in enumerate(node):
            found.extend(_find_keys(item, keys, f"{path}[{i}]"))
    return found


def _ray_cluster() -> dict[str, Any]:
    (cluster,) = objects_of_kind("RayCluster")
    return cluster


def _worker_group(name: str) -> dict[str, Any]:
    (group,) = [g for g in _ray_cluster()["spec"]["workerGroupSpecs"] if g["groupName"] == name]
    return dict(group)


def _advertised(group: dict[str, Any]) -> dict[str, float]:
    """The custom resources a group's `ray start` advertises (KubeRay's rayStartParams take the
    JSON as a quoted string)."""
    raw = group["rayStartParams"].get("resources")
    if raw is None:
        return {}
    value: dict[str, float] = json.loads(json.loads(raw))
    return value


def _ray_pod_labels() -> list[tuple[str, dict[str, str]]]:
    """(group, labels) of every RayCluster pod: its template's and the ones KubeRay adds."""
    cluster = _ray_cluster()
    name = cluster["metadata"]["name"]
    head = cluster["spec"]["headGroupSpec"]
    result = [
        (
            "head",
            {
                **head["template"]["metadata"]["labels"],
                "ray.io/cluster": name,
                "ray.io/node-type": "head",
                "ray.io/group": "headgroup",
            },
        )
    ]
    for group in cluster["spec"]["workerGroupSpecs"]:
        labels = {
            **group["template"]["metadata"]["labels"],
            "ray.io/cluster": name,
            "ray.io/node-type": "worker",
            "ray.io/group": group["groupName"],
        }
        result.append((group["groupName"], labels))
    return result


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels", "matchExpressions"}, selector
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for expression in selector.get("matchExpressions", []):
        present = expression["key"] in labels
        value = labels.get(expression["key"])
        match expression["operator"]:
            case "In":
                ok = value in expression["values"]
            case "NotIn":
                ok = value not in expression["values"]
            case "Exists":
                ok = present
            case "DoesNotExist":
                ok = not present
        if not ok:
            return False
    return True


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
    ):
        assert "CHANGE_ME" in values[name], name
    assert {k for k in values if k.startswith("MARKETPLACE_")} <= SETTINGS_ENV
    # Ray's token is alone in a Secret of its own, the one the verifier executors may reference.
    assert "RAY_AUTH_TOKEN" not in values
    (token,) = [s for s in objects_of_kind("Secret") if s["metadata"]["name"] == RAY_TOKEN_SECRET]
    assert set(token["stringData"]) == {"RAY_AUTH_TOKEN"}
    for other in objects_of_kind("Secret"):
        for value in other.get("stringData", {}).values():
            assert "CHANGE_ME" in value
        assert "data" not in other  # base64 would hide a real value from review


# --- KubeRay ---------------------------------------------------------------------------------


def test_ray_cluster_head_workers_and_gcs_fault_tolerance() -> None:
    cluster = _ray_cluster()
    assert cluster["apiVersion"] == "ray.io/v1"
    spec = cluster["spec"]
    head = spec["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"
    assert head["template"]["spec"]["containers"][0]["image"]
    assert {g["groupName"] for g in spec["workerGroupSpecs"]} == {"workers", EXECUTOR_GROUP}
    for worker_group in spec["workerGroupSpecs"]:
        assert 1 <= worker_group["minReplicas"] <= worker_group["replicas"]
        assert worker_group["replicas"] <= worker_group["maxReplicas"]
        assert worker_group["maxReplicas"] > worker_group["minReplicas"]
    group = _worker_group("workers")
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
    templates = [head["template"], *(g["template"] for g in spec["workerGroupSpecs"])]
    for template in templates:
        pod = template["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        env = {e["name"]: e for e in pod["containers"][0]["env"]}
        assert env["RAY_AUTH_MODE"]["value"] == "token"
        assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"] == {
            "name": RAY_TOKEN_SECRET,
            "key": "RAY_AUTH_TOKEN",
        }
        # Explicit probes: KubeRay's defaults ask a dashboard agent the image does not run.
        assert pod["containers"][0]["livenessProbe"]["exec"]["command"][0] == "ray-node-healthcheck"
    # Worker liveness ignores the GCS, so workers outlive a head restart.
    for worker_group in spec["workerGroupSpecs"]:
        worker_liveness = worker_group["template"]["spec"]["containers"][0]["livenessProbe"]
        assert worker_liveness["exec"]["command"] == ["ray-node-healthcheck"]
    # Actors ask for the ConfigMap's actor resource, which only the `workers` group advertises.
    (config,) = objects_of_kind("ConfigMap")
    resource = config["data"]["MARKETPLACE_RAY_ACTOR_RESOURCE"]
    assert _advertised(group)[resource] >= 1
    assert resource not in _advertised(_worker_group(EXECUTOR_GROUP))
    assert "resources" not in head["rayStartParams"]


def _ray_pod_templates() -> list[tuple[str, dict[str, Any]]]:
    spec = _ray_cluster()["spec"]
    groups = [("head", spec["headGroupSpec"])]
    groups += [(g["groupName"], g) for g in spec["workerGroupSpecs"]]
    return [(name, group["template"]) for name, group in groups]


@pytest.mark.parametrize(
    ("group", "template"), _ray_pod_templates(), ids=[n for n, _ in _ray_pod_templates()]
)
def test_ray_pod_template_validates_as_a_pod(group: str, template: dict[str, Any]) -> None:
    """KubeRay makes Pods of these templates: they must be valid Pod specs (strict, so a
    misspelt securityContext field fails here rather than at the API server)."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"marketplace-ray-{group}", **template.get("metadata", {})},
        "spec": template["spec"],
    }
    kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)


# --- the verifier executors ------------------------------------------------------------------


def test_executor_group_advertises_the_settings_executor_resource() -> None:
    (config,) = objects_of_kind("ConfigMap")
    resource = config["data"]["MARKETPLACE_VERIFIER_EXECUTOR_RESOURCE"]
    assert resource == "verifier_sandbox"
    group = _worker_group(EXECUTOR_GROUP)
    slots = _advertised(group)[resource]
    assert slots >= 1 and slots == int(slots)
    # Each executor takes one unit: the pods started by default hold the whole pool.
    assert group["replicas"] * slots >= int(config["data"]["MARKETPLACE_VERIFIER_POOL_SIZE"])
    # Nothing else may be placed there: not the actors (which hold secrets).
    assert set(_advertised(group)) == {resource}


def test_no_other_ray_node_advertises_the_executor_resource() -> None:
    (config,) = objects_of_kind("ConfigMap")
    resource = config["data"]["MARKETPLACE_VERIFIER_EXECUTOR_RESOURCE"]
    spec = _ray_cluster()["spec"]
    assert "resources" not in spec["headGroupSpec"]["rayStartParams"]
    others = [g for g in spec["workerGroupSpecs"] if g["groupName"] != EXECUTOR_GROUP]
    assert others
    for group in others:
        assert resource not in _advertised(group), group["groupName"]
        assert resource not in json.dumps(group["template"]), group["groupName"]
    # The frontends join as CPU-less nodes with no custom resource either.
    (deployment,) = objects_of_kind("Deployment")
    assert resource not in json.dumps(deployment["spec"]["template"])


def test_executor_pods_reference_no_secret_of_the_service() -> None:
    group = _worker_group(EXECUTOR_GROUP)
    pod = group["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod.get("enableServiceLinks") is False
    references = _find_keys(pod, SECRET_KEYS)
    # The one Secret reference: Ray's cluster token, which every Ray node needs.
    assert [value for _, value in references] == [
        {"name": RAY_TOKEN_SECRET, "key": "RAY_AUTH_TOKEN"}
    ], references
    assert all(path.endswith(".valueFrom.secretKeyRef") for path, _ in references)
    (token,) = [s for s in objects_of_kind("Secret") if s["metadata"]["name"] == RAY_TOKEN_SECRET]
    assert set(token["stringData"]) == {"RAY_AUTH_TOKEN"}
    containers = pod["containers"] + pod.get("initContainers", [])
    for container in containers:
        assert "envFrom" not in container, container["name"]
        names = {e["name"] for e in container.get("env", [])}
        assert not {n for n in names if n.startswith("MARKETPLACE_")}, names
    for volume in pod.get("volumes", []):
        assert set(volume) <= {"name", "emptyDir"}, volume
    assert "serviceAccountName" not in pod


def test_other_pods_keep_the_service_secrets_out_of_the_executor_group() -> None:
    """The secret-holding Secret is referenced by the frontends only, never by a Ray group: the
    actors get the secrets from the frontend that creates them."""
    cluster_text = json.dumps(_ray_cluster()["spec"]["workerGroupSpecs"])
    assert "marketplace-secrets" not in cluster_text
    assert "marketplace-redis" not in json.dumps(_worker_group(EXECUTOR_GROUP))


def test_executor_pods_allow_bubblewrap_without_privileges() -> None:
    pod = _worker_group(EXECUTOR_GROUP)["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    (container,) = pod["containers"]
    context = container["securityContext"]
    # bwrap is not setuid: no privilege, no capability, no escalation.
    assert context.get("privileged", False) is False
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert not _find_keys(pod, ("add",))
    # The runtime defaults refuse what bwrap needs (user namespaces, mount, pivot_root).
    assert context["seccompProfile"]["type"] in ("Unconfined", "Localhost")
    assert context["appArmorProfile"]["type"] in ("Unconfined", "Localhost")
    # A fresh /proc in the sandbox needs an unmasked one; the API accepts Unmasked only in a
    # pod with its own user namespace (kubernetes-validate does not check that rule).
    if context.get("procMount") == "Unmasked":
        assert pod["hostUsers"] is False
    for kind in ("requests", "limits"):
        assert {"cpu", "memory", "ephemeral-storage"} <= set(container["resources"][kind])
    # The CPUs Ray advertises match the limit.
    group = _worker_group(EXECUTOR_GROUP)
    assert group["rayStartParams"]["num-cpus"] == container["resources"]["limits"]["cpu"]


def test_each_ray_group_has_one_disruption_budget() -> None:
    """The eviction API refuses a pod that two budgets select: each group gets exactly one."""
    budgets = objects_of_kind("PodDisruptionBudget")
    for group, labels in _ray_pod_labels():
        if group == "head":
            continue
        matching = [b for b in budgets if _selects(b["spec"]["selector"], labels)]
        assert len(matching) == 1, (group, [_name(b) for b in matching])


def test_network_policy_confines_the_executor_pods_only() -> None:
    (policy,) = objects_of_kind("NetworkPolicy")
    spec = policy["spec"]
    assert set(spec["policyTypes"]) == {"Ingress", "Egress"}
    selected = [g for g, labels in _ray_pod_labels() if _selects(spec["podSelector"], labels)]
    assert selected == [EXECUTOR_GROUP]
    (deployment,) = objects_of_kind("Deployment")
    frontend_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert not _selects(spec["podSelector"], frontend_labels)
    # Every rule names its peers (a rule without `to`/`from` would allow everyone).
    assert all(rule.get("from") for rule in spec["ingress"])
    assert all(rule.get("to") for rule in spec["egress"])
    # Addresses outside the cluster: HTTPS only, never the private ranges (PostgreSQL, Redis,
    # the API server, a metadata endpoint).
    for rule in spec["egress"]:
        blocks = [peer["ipBlock"] for peer in rule["to"] if "ipBlock" in peer]
        if not blocks:
            continue
        assert rule["ports"] == [{"protocol": "TCP", "port": 443}]
        for block in blocks:
            if ":" not in block["cidr"]:
                assert {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"} <= set(
                    block["except"]
                )
    # The Ray peers it may reach are the cluster's pods and the frontends, nothing wider.
    ray_peers = [peer for rule in spec["egress"] if "ports" not in rule for peer in rule["to"]]
    assert ray_peers and all(set(peer) == {"podSelector"} for peer in ray_peers)
    cluster = _ray_cluster()["metadata"]["name"]
    for peer in ray_peers:
        labels = peer["podSelector"]["matchLabels"]
        assert labels.get("ray.io/cluster") == cluster or labels.items() <= frontend_labels.items()


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

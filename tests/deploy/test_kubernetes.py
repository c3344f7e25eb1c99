"""deploy/kubernetes/: the core kinds validate against the Kubernetes schemas
(kubernetes-validate), and so do the RayCluster's pod templates; the RayCluster, ServiceMonitor
and PrometheusRule, whose schemas it does not carry, are checked field by field. The verifier
executors' group is checked for what keeps the service's secrets away from untrusted code. The
kustomization sets the image and generates the Secrets from git-ignored env files: rendered with
`kubectl kustomize` in a copy given sample env files, and refused without them."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from marketplace.config import Settings
from tests.deploy.manifests import (
    ALERTS,
    DOCKER_SCRIPTS,
    KUBERNETES,
    PLACEHOLDER,
    REPO_ROOT,
    generated_secrets,
    kubernetes_objects,
    kustomization,
    load_documents,
    objects_of_kind,
)

# The Secrets are not files here: kustomize generates them (rendered and validated below).
CORE_KINDS = (
    "Deployment",
    "Service",
    "ConfigMap",
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
    secret_names = set(generated_secrets())
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


def test_secrets_are_generated_from_git_ignored_env_files() -> None:
    """No Secret object is committed or listed: kustomize generates each from an env file that
    git ignores, and only its example (placeholders) is in the repository."""
    assert not objects_of_kind("Secret")
    config = kustomization()
    assert not [r for r in config["resources"] if "secret" in r.lower()]
    generators = config["secretGenerator"]
    # Fixed names: the RayCluster refers to them in fields kustomize does not rewrite.
    assert config["generatorOptions"]["disableNameSuffixHash"] is True
    for generator in generators:
        assert set(generator) == {"name", "envs"}, generator  # no `literals`: values in git
        for env_file in generator["envs"]:
            relative = (KUBERNETES / env_file).relative_to(REPO_ROOT)
            ignored = subprocess.run(
                ["git", "check-ignore", "--quiet", "--no-index", str(relative)],
                cwd=REPO_ROOT,
                check=False,
            )
            assert ignored.returncode == 0, f"{relative} is not git-ignored"
            assert (KUBERNETES / f"{env_file}.example").is_file(), env_file
    secrets = generated_secrets()
    assert set(secrets["marketplace-secrets"]) == {
        "MARKETPLACE_DATABASE_URL",
        "MARKETPLACE_REDIS_URL",
        "MARKETPLACE_JWT_SECRET",
        "MARKETPLACE_SCHEDULER_SECRET",
        "MARKETPLACE_NOTIFICATION_UNSUBSCRIBE_SECRET",
        "MARKETPLACE_VERIFIER_PRIVATE_KEY",
        "MARKETPLACE_SMTP_URL",
    }
    assert {k for k in secrets["marketplace-secrets"] if k.startswith("MARKETPLACE_")} <= (
        SETTINGS_ENV
    )
    # Ray's token is alone in a Secret of its own, the one the verifier executors may reference.
    assert set(secrets[RAY_TOKEN_SECRET]) == {"RAY_AUTH_TOKEN"}
    # The examples hold placeholders only.
    for name, values in secrets.items():
        for key, value in values.items():
            assert PLACEHOLDER in value, f"{name}.{key}"


def _sample_env_files(directory: Path) -> None:
    """The real env files, made from the examples with a sample value for each placeholder."""
    for generator in kustomization()["secretGenerator"]:
        for env_file in generator["envs"]:
            example = (KUBERNETES / f"{env_file}.example").read_text()
            (directory / env_file).write_text(example.replace(PLACEHOLDER, "sample-value"))


def _kubectl() -> str:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is needed to render the kustomization (kubectl kustomize)"
    return kubectl


def _kustomize(directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_kubectl(), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """`kubectl kustomize` of a copy of deploy/kubernetes/ with sample env files."""
    directory = tmp_path_factory.mktemp("kubernetes") / "kubernetes"
    shutil.copytree(KUBERNETES, directory)
    _sample_env_files(directory)
    result = _kustomize(directory)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def test_kustomize_refuses_to_render_without_the_secret_env_files(tmp_path: Path) -> None:
    """A fresh clone has only the examples: applying it fails instead of creating placeholder
    Secrets."""
    directory = tmp_path / "kubernetes"
    shutil.copytree(KUBERNETES, directory)
    for env_file in directory.glob("*.env"):
        env_file.unlink()  # a developer's own, if any
    result = _kustomize(directory)
    assert result.returncode != 0
    assert "secrets.env" in result.stderr or "ray-auth.env" in result.stderr, result.stderr


def test_rendered_secrets_validate_and_every_reference_resolves(
    rendered: list[dict[str, Any]],
) -> None:
    secrets = {doc["metadata"]["name"]: doc for doc in rendered if doc["kind"] == "Secret"}
    assert set(secrets) == set(generated_secrets())
    for name, secret in secrets.items():
        kubernetes_validate.validate(secret, KUBERNETES_VERSION, strict=True)
        assert secret["metadata"]["namespace"] == "marketplace"
        assert set(secret["data"]) == set(generated_secrets()[name]), name
    # Every Secret a pod or the RayCluster names exists, with the key it asks for.
    references = [
        value
        for doc in rendered
        if doc["kind"] != "Secret"
        for _, value in _find_keys(doc, ("secretKeyRef", "secretRef"))
    ]
    assert len(references) >= 5
    for reference in references:
        assert reference["name"] in secrets, reference
        if "key" in reference:
            assert reference["key"] in secrets[reference["name"]]["data"], reference


def test_the_images_entry_sets_every_container_image(rendered: list[dict[str, Any]]) -> None:
    """The manifests say `image: marketplace`; the operator's `images:` entry (a registry, a
    pinned tag) replaces it in every pod, the RayCluster's included."""
    (entry,) = kustomization()["images"]
    assert entry["name"] == "marketplace"
    registry, _, repository = entry["newName"].partition("/")
    assert "." in registry and repository, entry  # a registry host, not a local name
    assert entry["newTag"] and entry["newTag"] != "latest"
    for _, doc in kubernetes_objects():
        for _, image in _find_keys(doc, ("image",)):
            assert image == "marketplace", (doc["kind"], image)
    images = [image for doc in rendered for _, image in _find_keys(doc, ("image",))]
    # The frontend and the head, workers and executors.
    assert len(images) == 4
    assert set(images) == {f"{entry['newName']}:{entry['newTag']}"}


def test_frontend_entrypoint_refuses_the_example_placeholders(tmp_path: Path) -> None:
    """Secrets generated from a copied example reach the frontends as CHANGE_ME: the entrypoint
    names them and stops before joining Ray or serving."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    served = tmp_path / "served"
    # Stands in for the server the entrypoint execs, to see whether it got that far.
    (bin_dir / "marketplace").write_text(f"#!/bin/sh\ntouch {served}\n")
    (bin_dir / "marketplace").chmod(0o755)
    base = {"PATH": f"{bin_dir}:/usr/bin:/bin", "MARKETPLACE_RAY_ADDRESS": ""}
    script = str(DOCKER_SCRIPTS / "marketplace-frontend.sh")

    example = generated_secrets()["marketplace-secrets"]
    refused = subprocess.run(
        ["sh", script], env=base | example, capture_output=True, text=True, check=False
    )
    assert refused.returncode == 2
    assert "CHANGE_ME" in refused.stderr
    for key in example:
        assert key in refused.stderr, key
    assert "@postgres.example.internal" not in refused.stderr  # names, never values
    assert not served.exists()

    filled = {k: v.replace(PLACEHOLDER, "sample-value") for k, v in example.items()}
    started = subprocess.run(
        ["sh", script], env=base | filled, capture_output=True, text=True, check=False
    )
    assert started.returncode == 0, started.stderr
    assert served.exists()


# --- KubeRay ---------------------------------------------------------------------------------


def test_worker_group_sizes_mean_what_they_say() -> None:
    """Without KubeRay's autoscaler a group runs `replicas` pods whatever min/max say, so they
    must all be equal; with it, the autoscaler needs its options and a range to move in."""
    spec = _ray_cluster()["spec"]
    groups = spec["workerGroupSpecs"]
    if spec.get("enableInTreeAutoscaling", False):
        assert spec["autoscalerOptions"]
        for group in groups:
            assert 1 <= group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
            assert group["maxReplicas"] > group["minReplicas"], group["groupName"]
    else:
        assert "autoscalerOptions" not in spec
        for group in groups:
            assert group["replicas"] >= 1
            assert group["minReplicas"] == group["replicas"] == group["maxReplicas"], group[
                "groupName"
            ]


def test_ray_cluster_head_workers_and_gcs_fault_tolerance() -> None:
    cluster = _ray_cluster()
    assert cluster["apiVersion"] == "ray.io/v1"
    spec = cluster["spec"]
    head = spec["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"
    assert head["template"]["spec"]["containers"][0]["image"]
    assert {g["groupName"] for g in spec["workerGroupSpecs"]} == {"workers", EXECUTOR_GROUP}
    group = _worker_group("workers")
    ft = spec["gcsFaultToleranceOptions"]
    host, _, port = ft["redisAddress"].partition(":")
    assert host and port.isdigit()
    secret_ref = ft["redisPassword"]["valueFrom"]["secretKeyRef"]
    assert secret_ref["key"] in generated_secrets()[secret_ref["name"]]
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
    assert set(generated_secrets()[RAY_TOKEN_SECRET]) == {"RAY_AUTH_TOKEN"}
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

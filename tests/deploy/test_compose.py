"""deploy/compose.yaml, checked statically (no Docker daemon here): the services, their health
checks and start order, and the frontends' configuration by environment."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from marketplace.config import Settings
from tests.deploy.manifests import COMPOSE, DEPLOY

SERVICES = {
    "postgres",
    "redis",
    "ray-head",
    "ray-worker",
    "verifier-executor",
    "frontend-a",
    "frontend-b",
    "prometheus",
    "grafana",
}
FRONTENDS = ("frontend-a", "frontend-b")
SETTINGS_ENV = {f"MARKETPLACE_{name.upper()}" for name in Settings.model_fields}
# Values that are secrets (or carry one): they must come from the environment, never the file.
SECRET_SETTINGS = {
    f"MARKETPLACE_{name.upper()}"
    for name, field in Settings.model_fields.items()
    if "SecretStr" in str(field.annotation)
} | {"MARKETPLACE_DATABASE_URL", "MARKETPLACE_REDIS_URL", "RAY_AUTH_TOKEN"}
SECRET_NAME = re.compile(r"(PASSWORD|SECRET|TOKEN|KEY|AUTH)$")
REFERENCE = re.compile(r"\$\{[A-Z][A-Z0-9_]*(:?[-?][^}]*)?\}")
RESOURCES = re.compile(r"--resources='(\{[^']*\})'")


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return data


def advertised(service: dict[str, Any]) -> dict[str, float]:
    """The custom resources a Ray node's `ray start --resources='{...}'` advertises."""
    command = " ".join(service.get("command", []))
    found = RESOURCES.findall(command)
    assert len(found) <= 1, command
    value: dict[str, float] = json.loads(found[0]) if found else {}
    return value


def test_every_service_is_there_with_a_health_check() -> None:
    services = compose()["services"]
    assert set(services) == SERVICES
    for name, service in services.items():
        test = service["healthcheck"]["test"]
        assert test[0] in ("CMD", "CMD-SHELL") and len(test) > 1, name


def test_start_order_waits_for_healthy_dependencies() -> None:
    services = compose()["services"]
    for frontend in FRONTENDS:
        depends = services[frontend]["depends_on"]
        assert set(depends) == {"postgres", "redis", "ray-head", "ray-worker", "verifier-executor"}
        assert {d["condition"] for d in depends.values()} == {"service_healthy"}
    for node in ("ray-worker", "verifier-executor"):
        assert services[node]["depends_on"] == {"ray-head": {"condition": "service_healthy"}}
    assert services["ray-head"]["depends_on"]["redis"]["condition"] == "service_healthy"
    assert set(services["prometheus"]["depends_on"]) == set(FRONTENDS)
    assert "prometheus" in services["grafana"]["depends_on"]


def test_ray_nodes_run_the_service_image() -> None:
    services = compose()["services"]
    head, worker = services["ray-head"], services["ray-worker"]
    executor = services["verifier-executor"]
    for service in (head, worker, executor, *(services[f] for f in FRONTENDS)):
        assert service["build"]["dockerfile"] == "deploy/Dockerfile"
        assert (DEPLOY / service["build"]["context"] / service["build"]["dockerfile"]).is_file()
    head_command = " ".join(head["command"])
    assert "ray start --head --block" in head_command and "--num-cpus=0" in head_command
    assert "ray start --address=ray-head:6379 --block" in " ".join(worker["command"])
    # Actors ask for the frontends' actor resource, which only the worker advertises.
    resource = services["frontend-a"]["environment"]["MARKETPLACE_RAY_ACTOR_RESOURCE"]
    assert f"--resources='{{\"{resource}\": 1000}}'" in " ".join(worker["command"])
    assert resource not in head_command
    assert "ray start --address=ray-head:6379 --block" in " ".join(executor["command"])
    # GCS fault tolerance against the compose Redis.
    assert head["environment"]["RAY_REDIS_ADDRESS"] == "redis:6379"
    assert "--redis-password" in head_command


def test_only_the_executor_node_advertises_the_executor_resource() -> None:
    services = compose()["services"]
    resource = services["frontend-a"]["environment"]["MARKETPLACE_VERIFIER_EXECUTOR_RESOURCE"]
    assert resource == "verifier_sandbox"
    assert services["frontend-b"]["environment"]["MARKETPLACE_VERIFIER_EXECUTOR_RESOURCE"] == (
        resource
    )
    executor = services["verifier-executor"]
    slots = advertised(executor)[resource]
    assert slots >= 1
    # Only the executors land there: not the actors, which hold secrets.
    assert set(advertised(executor)) == {resource}
    for name, service in services.items():
        if name != "verifier-executor":
            assert resource not in advertised(service), name
            assert resource not in " ".join(service.get("command", [])), name
    # The default pool fits in one executor container.
    pool = services["frontend-a"]["environment"]["MARKETPLACE_VERIFIER_POOL_SIZE"]
    default = re.fullmatch(r"\$\{MARKETPLACE_VERIFIER_POOL_SIZE:-(\d+)\}", pool)
    assert default, pool
    assert int(default.group(1)) <= slots


def test_executor_node_gets_no_secret_of_the_service() -> None:
    services = compose()["services"]
    executor = services["verifier-executor"]
    env = executor["environment"]
    # Ray's settings only (the cluster token every node needs), the same as the worker's.
    assert set(env) <= set(services["ray-worker"]["environment"])
    assert not {k for k in env if k.startswith("MARKETPLACE_")}
    secretive = {k for k in env if SECRET_NAME.search(k) or k in SECRET_SETTINGS}
    assert secretive == {"RAY_AUTH_TOKEN"}
    for key in ("env_file", "volumes", "secrets", "configs", "privileged", "cap_add"):
        assert key not in executor, key
    # What bubblewrap needs in a container, and nothing more (no capability).
    options = set(executor["security_opt"])
    assert {"seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined"} <= options
    assert "no-new-privileges:true" in options
    assert executor["cap_drop"] == ["ALL"]
    for limit in ("cpus", "mem_limit", "pids_limit"):
        assert limit in executor, limit
    assert f"--num-cpus={executor['cpus']}" in " ".join(executor["command"])


def test_frontends_serve_with_settings_from_the_environment() -> None:
    services = compose()["services"]
    for name in FRONTENDS:
        frontend = services[name]
        assert frontend["entrypoint"] == ["marketplace-frontend"]
        assert frontend["command"][0] == "serve"
        env = frontend["environment"]
        assert env["MARKETPLACE_RAY_ADDRESS"] == "ray-head:6379"
        settings = {k for k in env if k.startswith("MARKETPLACE_")}
        unknown = settings - SETTINGS_ENV
        assert not unknown, f"{name}: not Settings fields: {sorted(unknown)}"
        for required in (
            "MARKETPLACE_DATABASE_URL",
            "MARKETPLACE_REDIS_URL",
            "MARKETPLACE_JWT_SECRET",
            "MARKETPLACE_SCHEDULER_SECRET",
            "MARKETPLACE_NOTIFICATION_UNSUBSCRIBE_SECRET",
            "MARKETPLACE_VERIFIER_PRIVATE_KEY",
        ):
            assert required in env, f"{name}: {required}"
        assert env["MARKETPLACE_INDEXER_LAG_ALERT_SECONDS"] == "300"
        assert "8080" in frontend["ports"][0].split(":")[-1]
    assert services["frontend-a"]["ports"] != services["frontend-b"]["ports"]


def test_no_secret_is_written_in_the_file() -> None:
    services = compose()["services"]
    checked = 0
    for name, service in services.items():
        env = service.get("environment", {})
        assert isinstance(env, dict), name
        for key, value in env.items():
            secretive = key in SECRET_SETTINGS or re.search(
                r"(PASSWORD|SECRET|TOKEN|KEY|AUTH)$", key
            )
            if not secretive:
                continue
            checked += 1
            # Every secret part is a ${VAR} reference; what is left has no credentials.
            rest = REFERENCE.sub("", str(value))
            assert not re.search(r"://[^/@]*:[^/@$]+@", rest), f"{name}.{key}"
            if key not in ("MARKETPLACE_DATABASE_URL", "MARKETPLACE_REDIS_URL"):
                assert REFERENCE.fullmatch(str(value)), f"{name}.{key} = {value!r}"
            else:
                assert REFERENCE.search(str(value)), f"{name}.{key} = {value!r}"
    assert checked >= 10
    # The committed example holds placeholders only, and the real env file is ignored by git.
    example = (DEPLOY / "compose.env.example").read_text()
    for line in example.splitlines():
        if re.match(r"[A-Z_]*(PASSWORD|SECRET|TOKEN)=", line):
            assert line.split("=", 1)[1].startswith("CHANGE_ME"), line
    assert "deploy/.env" in (DEPLOY.parent / ".gitignore").read_text().splitlines()


def test_prometheus_and_grafana_mount_the_deploy_files() -> None:
    services = compose()["services"]
    mounts = [v.split(":")[0] for v in services["prometheus"]["volumes"]]
    assert "./prometheus/prometheus.yml" in mounts and "./prometheus/alerts.yaml" in mounts
    grafana = [v.split(":")[0] for v in services["grafana"]["volumes"]]
    assert "./grafana/provisioning" in grafana and "./grafana/marketplace.json" in grafana
    for mount in mounts + grafana:
        if mount.startswith("./"):
            assert (DEPLOY / mount).exists(), mount
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    assert config["rule_files"] == ["/etc/prometheus/alerts.yaml"]
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "marketplace"]
    targets = job["static_configs"][0]["targets"]
    assert sorted(targets) == [f"{f}:8080" for f in FRONTENDS]

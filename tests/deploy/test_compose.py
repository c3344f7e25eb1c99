"""deploy/compose.yaml, checked statically (no Docker daemon here): the services, their health
checks and start order, the frontends' configuration by environment, the secrets (required,
never written, placeholders refused by the preflight script, which runs here), the published
ports, Alertmanager behind Prometheus, and the devnet profile, whose deployment script and the
frontends' reading of its manifest run here against a real anvil."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from web3 import Web3

from marketplace.config import Settings
from marketplace_devstack.devnet.anvil import AnvilProcess
from marketplace_devstack.devnet.deploy import DEV_VERIFIER_PRIVATE_KEY, read_manifest
from tests.deploy.manifests import (
    COMPOSE,
    DEPLOY,
    DOCKER_SCRIPTS,
    PLACEHOLDER,
    REPO_ROOT,
    read_env_file,
)

ENV_EXAMPLE = DEPLOY / "compose.env.example"
PROMETHEUS_CONFIG = DEPLOY / "prometheus" / "prometheus.yml"
ALERTMANAGER_CONFIG = DEPLOY / "alertmanager" / "alertmanager.yml"
# Run once before anything else; then exit 0 (waited for with service_completed_successfully).
ONE_SHOTS = {"preflight", "devnet-deploy"}
DEVNET = {"anvil", "devnet-deploy"}
SERVICES = {
    "preflight",
    "anvil",
    "devnet-deploy",
    "alertmanager",
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
# A ${VAR...} compose interpolates (`$${...}` is a literal `${...}` for the container's shell).
INTERPOLATION = re.compile(r"(?<!\$)\$\{([A-Z][A-Z0-9_]*)(:?[-?])?([^}]*)\}")
# Secrets that may be empty (a feature left off) but must still be named in deploy/.env.
OPTIONAL_SECRETS = {"MARKETPLACE_VERIFIER_PRIVATE_KEY", "MARKETPLACE_SMTP_URL"}
PUBLISHED = re.compile(r"\$\{MARKETPLACE_BIND_ADDRESS:-127\.0\.0\.1\}:(\d+):(\d+)")
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


def interpolations() -> list[tuple[str, str, str]]:
    """(variable, operator, message or default) of every ${...} compose interpolates."""
    return [
        (m.group(1), m.group(2) or "", m.group(3))
        for m in INTERPOLATION.finditer(COMPOSE.read_text())
    ]


def is_secret(variable: str) -> bool:
    return bool(SECRET_NAME.search(variable)) or variable in SECRET_SETTINGS | OPTIONAL_SECRETS


def test_every_service_is_there_with_a_health_check() -> None:
    services = compose()["services"]
    assert set(services) == SERVICES
    for name, service in services.items():
        if name in ONE_SHOTS:
            # Exits when done: never restarted, and the image's HTTP health check does not apply.
            assert service["restart"] == "no", name
            assert service["healthcheck"] == {"disable": True}, name
            continue
        test = service["healthcheck"]["test"]
        assert test[0] in ("CMD", "CMD-SHELL") and len(test) > 1, name


def test_start_order_waits_for_healthy_dependencies() -> None:
    services = compose()["services"]
    for frontend in FRONTENDS:
        depends = dict(services[frontend]["depends_on"])
        assert depends.pop("preflight") == {"condition": "service_completed_successfully"}
        assert depends.pop("devnet-deploy") == {
            "condition": "service_completed_successfully",
            "required": False,
        }
        assert set(depends) == {"postgres", "redis", "ray-head", "ray-worker", "verifier-executor"}
        assert {d["condition"] for d in depends.values()} == {"service_healthy"}
    for node in ("ray-worker", "verifier-executor"):
        assert services[node]["depends_on"] == {
            "preflight": {"condition": "service_completed_successfully"},
            "ray-head": {"condition": "service_healthy"},
        }
    assert services["ray-head"]["depends_on"]["redis"]["condition"] == "service_healthy"
    assert set(services["prometheus"]["depends_on"]) == {"preflight", "alertmanager", *FRONTENDS}
    assert "prometheus" in services["grafana"]["depends_on"]


def test_everything_waits_for_the_preflight_check() -> None:
    services = compose()["services"]
    for name, service in services.items():
        if name == "preflight":
            assert "depends_on" not in service
            continue
        assert service["depends_on"]["preflight"] == {
            "condition": "service_completed_successfully"
        }, name


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


# --- secrets -----------------------------------------------------------------------------------


def test_every_secret_reference_is_required() -> None:
    """A missing secret stops `docker compose` before anything starts (`${VAR:?message}`); the
    two optional ones must still be named in deploy/.env (`${VAR?message}`, empty allowed). No
    secret has a default."""
    seen = set()
    for variable, operator, message in interpolations():
        if not is_secret(variable):
            continue
        seen.add(variable)
        expected = "?" if variable in OPTIONAL_SECRETS else ":?"
        assert operator == expected, f"${{{variable}{operator}...}} should use {expected}"
        assert message.strip(), f"{variable}: say what to set"
    assert seen >= {
        "POSTGRES_PASSWORD",
        "REDIS_PASSWORD",
        "RAY_AUTH_TOKEN",
        "GRAFANA_ADMIN_PASSWORD",
        "MARKETPLACE_JWT_SECRET",
        "MARKETPLACE_SCHEDULER_SECRET",
        "MARKETPLACE_NOTIFICATION_UNSUBSCRIBE_SECRET",
        *OPTIONAL_SECRETS,
    }
    # The chain is required too (not a secret): without it no frontend can start.
    required = {v for v, operator, _ in interpolations() if operator == ":?"}
    assert {
        "MARKETPLACE_CHAIN_RPC_URL",
        "MARKETPLACE_CHAIN_ID",
        "MARKETPLACE_REGISTRY_ADDRESS",
    } <= required


def test_preflight_checks_every_secret_with_the_placeholder_script() -> None:
    preflight = compose()["services"]["preflight"]
    secrets = {v for v, _, _ in interpolations() if is_secret(v)}
    env = preflight["environment"]
    assert set(env) == secrets
    for variable, value in env.items():
        assert re.fullmatch(rf"\$\{{{variable}:?\?[^}}]+\}}", value), value
    (mount,) = preflight["volumes"]
    source, target, mode = mount.split(":")
    assert (DEPLOY / source).resolve() == DOCKER_SCRIPTS / "refuse-placeholders.sh"
    assert mode == "ro"
    assert preflight["entrypoint"] == ["/bin/sh", target]
    # The placeholder it refuses is the one compose.env.example holds.
    example = read_env_file(ENV_EXAMPLE)
    for variable in secrets - OPTIONAL_SECRETS:
        assert example[variable].startswith(PLACEHOLDER), variable


def _run_script(script: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(script), *args],
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_placeholder_script_refuses_the_example_and_accepts_real_values() -> None:
    script = DOCKER_SCRIPTS / "refuse-placeholders.sh"
    example = read_env_file(ENV_EXAMPLE)
    refused = _run_script(script, example)
    assert refused.returncode == 1
    placeholders = sorted(k for k, v in example.items() if PLACEHOLDER in v)
    assert len(placeholders) >= 7
    first_line = refused.stderr.splitlines()[0]
    assert first_line == (
        f"refusing to start: still the {PLACEHOLDER} placeholder in: " + " ".join(placeholders)
    )
    assert "deploy/.env" in refused.stderr

    real = {k: v.replace(PLACEHOLDER, "s3cr3t-value") for k, v in example.items()}
    accepted = _run_script(script, real)
    assert accepted.returncode == 0, accepted.stderr
    assert accepted.stderr == ""

    # Anywhere in a value, in a value over several lines too; named, never shown.
    hidden = real | {"MARKETPLACE_SMTP_URL": f"smtp://user:{PLACEHOLDER}@smtp:587\nsecond line"}
    refused = _run_script(script, hidden)
    assert refused.returncode == 1
    assert refused.stderr.splitlines()[0].endswith(" MARKETPLACE_SMTP_URL")
    assert "smtp://" not in refused.stderr


# --- ports -------------------------------------------------------------------------------------


def test_published_ports_bind_to_loopback_unless_told_otherwise() -> None:
    services = compose()["services"]
    published = {}
    for name, service in services.items():
        for port in service.get("ports", []):
            assert isinstance(port, str), f"{name}: {port!r} (long syntax: host_ip unchecked)"
            match = PUBLISHED.fullmatch(port)
            assert match, f"{name}: {port} is not bound to ${{MARKETPLACE_BIND_ADDRESS:-127.0.0.1}}"
            published[name] = int(match.group(1))
    assert set(published) == {*FRONTENDS, "prometheus", "alertmanager", "grafana", "anvil"}
    assert len(set(published.values())) == len(published)  # one host port each
    assert read_env_file(ENV_EXAMPLE)["MARKETPLACE_BIND_ADDRESS"] == "127.0.0.1"


# --- Alertmanager ------------------------------------------------------------------------------


def test_prometheus_sends_its_alerts_to_alertmanager() -> None:
    services = compose()["services"]
    alertmanager = services["alertmanager"]
    assert alertmanager["image"].startswith("prom/alertmanager:v")
    config_flag = next(a for a in alertmanager["command"] if a.startswith("--config.file="))
    config_path = config_flag.split("=", 1)[1]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in alertmanager["volumes"]}
    assert (DEPLOY / mounts[config_path]).resolve() == ALERTMANAGER_CONFIG
    (port,) = alertmanager["ports"]
    published = PUBLISHED.fullmatch(port)
    assert published, port
    container_port = published.group(2)
    assert "/-/ready" in " ".join(alertmanager["healthcheck"]["test"])
    assert services["prometheus"]["depends_on"]["alertmanager"]["condition"] == "service_healthy"

    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    (manager,) = config["alerting"]["alertmanagers"]
    targets = [t for group in manager["static_configs"] for t in group["targets"]]
    assert targets == [f"alertmanager:{container_port}"]


def test_prometheus_config_with_alerting_passes_promtool(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool (Debian's prometheus package; scripts/test installs it)"
    # The rule file at the path it has in the container.
    text = PROMETHEUS_CONFIG.read_text().replace(
        "/etc/prometheus/alerts.yaml", str(DEPLOY / "prometheus" / "alerts.yaml")
    )
    (tmp_path / "prometheus.yml").write_text(text)
    result = subprocess.run(
        [promtool, "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_alertmanager_routes_to_the_null_receiver_by_default() -> None:
    config = yaml.safe_load(ALERTMANAGER_CONFIG.read_text())
    assert config["route"]["receiver"] == "null"
    assert "routes" not in config["route"]
    (receiver,) = config["receivers"]
    # No integration: alerts are shown, no one is notified until a receiver is added.
    assert receiver == {"name": "null"}
    assert "group_by" in config["route"]
    # The file says how to add a real receiver, with its credentials in files.
    comments = [line for line in ALERTMANAGER_CONFIG.read_text().splitlines() if line[:1] == "#"]
    example = "\n".join(comments)
    assert "receivers:" in example and "routes:" in example and "_file:" in example


# --- the devnet profile ------------------------------------------------------------------------


def _command_flags(service: dict[str, Any]) -> dict[str, str]:
    return dict(a.removeprefix("--").split("=", 1) for a in service["command"] if "=" in a)


def test_devnet_profile_runs_anvil_and_deploys_before_the_frontends() -> None:
    services = compose()["services"]
    for name, service in services.items():
        assert service.get("profiles", []) == (["devnet"] if name in DEVNET else []), name
    anvil, deploy = services["anvil"], services["devnet-deploy"]
    # The anvil version `marketplace up` runs.
    package = json.loads((REPO_ROOT / "package.json").read_text())
    version = package["dependencies"]["@foundry-rs/anvil-linux-amd64"]
    assert anvil["image"] == f"ghcr.io/foundry-rs/foundry:v{version}"
    assert anvil["entrypoint"] == ["anvil"]
    flags = _command_flags(anvil)
    assert flags["host"] == "0.0.0.0"
    assert "state" in flags  # the chain outlives the container, as the indexed database does
    assert deploy["depends_on"]["anvil"] == {"condition": "service_healthy"}

    env = deploy["environment"]
    assert env["DEVNET_RPC_URL"] == f"http://anvil:{flags['port']}"
    # The dev stack, which the image leaves out, is mounted on PYTHONPATH; so is the script.
    mounts = {v.split(":")[1]: v.split(":")[0] for v in deploy["volumes"]}
    assert (DEPLOY / mounts[env["PYTHONPATH"]] / "marketplace_devstack").is_dir()
    (script,) = deploy["entrypoint"][1:]
    assert deploy["entrypoint"][0] == "python"
    assert (DEPLOY / mounts[script]).resolve() == DOCKER_SCRIPTS / "devnet-deploy.py"
    assert mounts[env["DEVNET_DIR"]] == "devnet-data"

    # The frontends read the manifest from the same volume.
    for name in FRONTENDS:
        frontend = services[name]
        manifest = Path(frontend["environment"]["DEVNET_DEPLOYMENT_FILE"])
        (volume,) = frontend["volumes"]
        assert volume == f"devnet-data:{manifest.parent}:ro"
        assert manifest.name == "deployment.json"

    # compose.env.example's chain is the profile's: anvil, its chain id, and `devnet`.
    example = read_env_file(ENV_EXAMPLE)
    assert example["MARKETPLACE_CHAIN_RPC_URL"] == env["DEVNET_RPC_URL"]
    assert example["MARKETPLACE_CHAIN_ID"] == flags["chain-id"]
    assert example["MARKETPLACE_REGISTRY_ADDRESS"] == "devnet"


@pytest.fixture(scope="module")
def devnet(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with AnvilProcess(tmp_path_factory.mktemp("anvil"), silent=True) as process:
        yield process


def _deploy(rpc_url: str, directory: Path) -> subprocess.CompletedProcess[str]:
    """devnet-deploy.py as the one-shot runs it: the dev stack on PYTHONPATH."""
    return subprocess.run(
        [sys.executable, str(DOCKER_SCRIPTS / "devnet-deploy.py")],
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(REPO_ROOT / "devstack"),
            "DEVNET_RPC_URL": rpc_url,
            "DEVNET_DIR": str(directory),
        },
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_devnet_deploy_writes_a_manifest_the_frontends_take_the_registry_from(
    devnet: AnvilProcess, tmp_path: Path
) -> None:
    directory = tmp_path / "devnet-data"
    directory.mkdir()
    first = _deploy(devnet.rpc_url, directory)
    assert first.returncode == 0, first.stderr
    deployment = read_manifest(directory / "deployment.json")
    w3 = Web3(Web3.HTTPProvider(devnet.rpc_url))
    assert w3.eth.get_code(deployment.registry)
    assert deployment.chain_id == 31337
    assert deployment.registry in first.stdout

    # A restart keeps the deployment: no transaction, the same manifest.
    block = w3.eth.block_number
    again = _deploy(devnet.rpc_url, directory)
    assert again.returncode == 0, again.stderr
    assert read_manifest(directory / "deployment.json") == deployment
    assert w3.eth.block_number == block

    # The frontend's entrypoint puts the deployment into the settings `serve` reads.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    seen = tmp_path / "environment"
    (bin_dir / "marketplace").write_text(f"#!/bin/sh\nenv > {seen}\n")
    (bin_dir / "marketplace").chmod(0o755)
    frontend_env = {
        "PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin",
        "MARKETPLACE_RAY_ADDRESS": "",
        "MARKETPLACE_CHAIN_ID": "31337",
        "MARKETPLACE_REGISTRY_ADDRESS": "devnet",
        "MARKETPLACE_VERIFIER_PRIVATE_KEY": "",
        "DEVNET_DEPLOYMENT_FILE": str(directory / "deployment.json"),
    }
    script = DOCKER_SCRIPTS / "marketplace-frontend.sh"
    started = _run_script(script, frontend_env, "serve")
    assert started.returncode == 0, started.stderr
    env = dict(line.split("=", 1) for line in seen.read_text().splitlines() if "=" in line)
    assert env["MARKETPLACE_REGISTRY_ADDRESS"] == deployment.registry
    assert env["MARKETPLACE_CHAIN_ID"] == str(deployment.chain_id)
    assert env["MARKETPLACE_CHAIN_START_BLOCK"] == str(deployment.start_block)
    # The key the devnet's registry trusts, as under `marketplace up`.
    assert env["MARKETPLACE_VERIFIER_PRIVATE_KEY"] == DEV_VERIFIER_PRIVATE_KEY
    assert (
        Web3.to_checksum_address(w3.eth.account.from_key(DEV_VERIFIER_PRIVATE_KEY).address)
        == deployment.verifier_signer
    )
    # An operator's own key wins.
    own_key = "0x" + "11" * 32
    started = _run_script(script, frontend_env | {"MARKETPLACE_VERIFIER_PRIVATE_KEY": own_key})
    assert started.returncode == 0, started.stderr
    assert f"MARKETPLACE_VERIFIER_PRIVATE_KEY={own_key}" in seen.read_text()

    # Without the profile there is no manifest: a clear refusal, nothing started.
    seen.unlink()
    missing = frontend_env | {"DEVNET_DEPLOYMENT_FILE": str(tmp_path / "none" / "deployment.json")}
    refused = _run_script(script, missing)
    assert refused.returncode == 2
    assert "--profile devnet" in refused.stderr
    assert not seen.exists()

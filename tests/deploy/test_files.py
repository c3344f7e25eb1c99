"""Every YAML file under deploy/ parses, and the Dockerfile builds the image the brief names:
checked statically (no Docker daemon here)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from tests.deploy.manifests import DASHBOARD, DEPLOY, REPO_ROOT, load_documents, yaml_files

DOCKERFILE = DEPLOY / "Dockerfile"


def test_deploy_tree_has_the_expected_files() -> None:
    for relative in (
        "Dockerfile",
        "compose.yaml",
        "README.md",
        "prometheus/prometheus.yml",
        "prometheus/alerts.yaml",
        "grafana/marketplace.json",
        "grafana/provisioning/datasources/prometheus.yaml",
        "grafana/provisioning/dashboards/marketplace.yaml",
        "kubernetes/raycluster.yaml",
        "kubernetes/frontend.yaml",
        "kubernetes/service.yaml",
        "kubernetes/configmap.yaml",
        "kubernetes/secrets.env.example",
        "kubernetes/ray-auth.env.example",
        "kubernetes/redis.env.example",
        "alertmanager/alertmanager.yml",
        "docker/refuse-placeholders.sh",
        "docker/devnet-deploy.py",
        "kubernetes/pdb.yaml",
        "kubernetes/networkpolicy.yaml",
        "kubernetes/servicemonitor.yaml",
        "kubernetes/prometheus-scrape.yaml",
        "kubernetes/kustomization.yaml",
    ):
        assert (DEPLOY / relative).is_file(), relative
    # The Secrets are generated from git-ignored env files, never committed as objects.
    assert not (DEPLOY / "kubernetes" / "secret.yaml").exists()


@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_yaml_file_parses(path: Path) -> None:
    documents = load_documents(path)
    assert documents, f"{path} has no document"
    assert all(isinstance(doc, dict) for doc in documents), path


def test_dashboard_is_json() -> None:
    data = json.loads(DASHBOARD.read_text())
    assert data["uid"] == "marketplace"
    assert data["panels"]


# --- Dockerfile ------------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    lines: list[str] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    assert not pending, "Dockerfile ends in a continuation"
    result = []
    for line in lines:
        instruction, _, arguments = line.partition(" ")
        result.append((instruction.upper(), arguments.strip()))
    return result


def _exec_form(arguments: str) -> list[str]:
    value = json.loads(arguments)
    assert isinstance(value, list), arguments
    return [str(item) for item in value]


def test_dockerfile_starts_from_python_311_slim() -> None:
    instructions = dockerfile_instructions()
    assert instructions[0][0] == "FROM"
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", instructions[0][1])
    assert [i for i, _ in instructions].count("FROM") == 1


def test_dockerfile_runs_marketplace_serve_as_a_non_root_user() -> None:
    instructions = dockerfile_instructions()
    names = [i for i, _ in instructions]
    users = [(n, args) for n, (i, args) in enumerate(instructions) if i == "USER"]
    assert users, "no USER"
    position, user = users[-1]
    assert user.split(":")[0] not in ("root", "0")
    assert position < names.index("ENTRYPOINT") and position < names.index("CMD")
    entrypoint = _exec_form(dict(instructions)["ENTRYPOINT"])
    command = _exec_form(dict(instructions)["CMD"])
    assert entrypoint == ["marketplace"]
    assert command == ["serve", "--host", "0.0.0.0", "--port", "8080"]
    assert "8080" in dict(instructions)["EXPOSE"].split()
    healthcheck = dict(instructions)["HEALTHCHECK"]
    assert "http://127.0.0.1:8080/v1/health'" in healthcheck


def test_dockerfile_installs_the_package_without_dev_extras() -> None:
    runs = " ".join(args for i, args in dockerfile_instructions() if i == "RUN")
    installs = re.findall(r"pip install ([^&;]+)", runs)
    assert installs, "the package is never installed"
    for install in installs:
        assert "[dev]" not in install and "dev" not in shlex.split(install)
        assert "/app" in install
    for tool in ("pytest", "ruff", "mypy", "playwright", "schemathesis"):
        assert tool not in runs


def test_dockerfile_copies_only_files_that_exist() -> None:
    for instruction, arguments in dockerfile_instructions():
        if instruction not in ("COPY", "ADD"):
            continue
        parts = [p for p in shlex.split(arguments) if not p.startswith("--")]
        *sources, _destination = parts
        assert sources, arguments
        for source in sources:
            assert (REPO_ROOT / source).exists(), f"COPY source {source} is not in the repository"


def test_dockerignore_keeps_what_the_image_copies() -> None:
    ignored = {
        line.strip()
        for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    for instruction, arguments in dockerfile_instructions():
        if instruction == "COPY":
            *sources, _ = shlex.split(arguments)
            for source in sources:
                top = source.split("/")[0]
                assert top not in ignored and source not in ignored, source
    assert "node_modules" in ignored and ".git" in ignored


def test_the_image_contains_no_dev_stack() -> None:
    # The dev stack (devstack/: `marketplace up`, the embedded servers, the devnet) is never part
    # of the service's image: not copied, kept out of the build context, never installed.
    ignored = {
        line.strip()
        for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert "devstack" in ignored
    for instruction, arguments in dockerfile_instructions():
        if instruction in ("COPY", "ADD"):
            *sources, _ = (p for p in shlex.split(arguments) if not p.startswith("--"))
            for source in sources:
                # Not the dev stack, nor the whole context (`COPY . .`), which holds it.
                parts = Path(source).parts
                assert parts and parts[0] != "devstack", arguments
        if instruction == "RUN":
            assert "devstack" not in arguments

"""Commands other than `up` never create a data dir, and say where they looked."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from marketplace_devstack.embedded.procs import read_or_create_secret
from tests.integration.up.conftest import up_env


def run(root: Path, cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "marketplace", *args],
        env={**up_env(root), **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def empty(tmp_path: Path) -> tuple[Path, Path]:
    """(root with HOME/XDG_STATE_HOME, an empty working directory)."""
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    return tmp_path, cwd


def assert_untouched(root: Path, cwd: Path) -> None:
    assert list(cwd.iterdir()) == []
    assert not (root / "state").exists()
    assert list((root / "home").iterdir()) == []


@pytest.mark.parametrize(
    "command",
    [
        ("token", "--user-id", str(uuid.uuid4())),
        ("admin", "show", "--user-id", str(uuid.uuid4())),
        ("devnet", "info"),
    ],
    ids=["token", "admin", "devnet"],
)
def test_without_a_data_dir_commands_fail_and_create_nothing(
    empty: tuple[Path, Path], command: tuple[str, ...]
) -> None:
    root, cwd = empty
    result = run(root, cwd, *command)
    assert result.returncode == 2, result
    assert result.stdout == ""
    message = result.stderr
    assert "no data dir found" in message
    assert "--data-dir" in message and "MARKETPLACE_DATA_DIR" in message
    assert str(root / "state" / "marketplace" / "up.json") in message  # where it looked
    assert str(cwd / ".data") in message
    assert_untouched(root, cwd)


def test_a_missing_explicit_data_dir_is_not_created(empty: tuple[Path, Path]) -> None:
    root, cwd = empty
    result = run(root, cwd, "token", "--user-id", str(uuid.uuid4()), "--data-dir", "nowhere")
    assert result.returncode == 2
    assert "--data-dir nowhere does not exist" in result.stderr
    from_env = run(
        root, cwd, "token", "--user-id", str(uuid.uuid4()), MARKETPLACE_DATA_DIR=str(cwd / "x")
    )
    assert from_env.returncode == 2
    assert f"MARKETPLACE_DATA_DIR={cwd / 'x'} does not exist" in from_env.stderr
    assert_untouched(root, cwd)


def test_a_data_dir_without_a_secret_is_refused(empty: tuple[Path, Path]) -> None:
    root, cwd = empty
    (cwd / ".data").mkdir()
    result = run(root, cwd, "token", "--user-id", str(uuid.uuid4()))
    assert result.returncode == 2
    assert "has no dev-jwt-secret" in result.stderr
    assert list((cwd / ".data").iterdir()) == []


def test_token_uses_the_secret_of_an_existing_data_dir(empty: tuple[Path, Path]) -> None:
    import jwt

    root, cwd = empty
    secret = read_or_create_secret(cwd / ".data" / "dev-jwt-secret")
    user = uuid.uuid4()
    result = run(root, cwd, "token", "--user-id", str(user))
    assert result.returncode == 0, result.stderr
    claims = jwt.decode(result.stdout.strip(), secret, algorithms=["HS256"])
    assert claims["sub"] == str(user)


def test_status_says_nothing_runs_and_exits_1(empty: tuple[Path, Path]) -> None:
    root, cwd = empty
    result = run(root, cwd, "status")
    assert result.returncode == 1
    assert "no `marketplace up` is running" in result.stdout
    as_json = run(root, cwd, "status", "--json")
    assert as_json.returncode == 1 and json.loads(as_json.stdout) == []
    assert_untouched(root, cwd)


def test_status_ignores_a_stale_record(empty: tuple[Path, Path]) -> None:
    root, cwd = empty
    state = root / "state" / "marketplace" / "up.json"
    state.parent.mkdir(parents=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    record = {"pid": dead.pid, "dataDir": str(cwd), "url": "http://127.0.0.1:9/v1/"}
    state.write_text(json.dumps({"runs": [{**record, "chainRpcUrl": ""}]}))
    result = run(root, cwd, "status")
    assert result.returncode == 1
    token = run(root, cwd, "token", "--user-id", str(uuid.uuid4()))
    assert token.returncode == 2 and "none recorded" in token.stderr

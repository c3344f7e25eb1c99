"""Hostile repositories against the test policies' sandbox (docs/verifier.md, "The test
policies"): each one's code (an npm lifecycle script and test, a cargo build script, forge tests
with ffi and the whole filesystem allowed by its foundry.toml) tries to read the service's
environment through /proc, the test process's environment, secret files outside the work dir,
and to connect to a loopback port. The commands run (their output says what they saw) and
nothing secret reaches the outcome; the listener gets no connection. A command that hangs is
killed at the wall clock with everything it started, and killing the process that runs a policy
kills its sandbox."""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from marketplace.verifier.policies import run_policy
from marketplace.verifier.policies.commands import forge_config
from marketplace.verifier.policies.tooling import REPO_ROOT
from marketplace.verifier.policy import PolicyId, PolicyOutcome
from marketplace.verifier.workdirs import sweep_stale
from tests.support.verifier_fixtures import (
    Bait,
    LoopbackListener,
    context,
    hanging_npm_files,
    hostile_cargo_files,
    hostile_forge_files,
    hostile_npm_files,
    hostile_repo,
    local_settings,
    processes_with,
)
from tests.support.waiting import eventually_sync


@pytest.fixture
def listener() -> Iterator[LoopbackListener]:
    server = LoopbackListener()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def bait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, listener: LoopbackListener
) -> Iterator[Bait]:
    """A secret in this process's environment, one in a file of the test's tmp_path and one in
    /tmp, the listener's port, and a marker for argv."""
    token = secrets.token_hex(12)
    in_tmp_path = tmp_path / "secret.txt"
    in_tmp = Path("/tmp") / f"mkt-hostile-{token}.txt"
    values = {str(in_tmp_path): f"file-secret-{token}", str(in_tmp): f"tmp-secret-{token}"}
    for path, value in values.items():
        Path(path).write_text(value)
    env_name = f"MKT_HOSTILE_SECRET_{token.upper()}"
    monkeypatch.setenv(env_name, f"env-secret-{token}")
    try:
        yield Bait(
            env_name=env_name,
            env_value=f"env-secret-{token}",
            files=values,
            port=listener.port,
            test_pid=os.getpid(),
            marker=f"mkt-marker-{token}",
        )
    finally:
        in_tmp.unlink(missing_ok=True)


async def _run(
    policy: PolicyId, files: dict[str, str], name: str, tmp_path: Path, **settings: Any
) -> PolicyOutcome:
    git_root = tmp_path / "git"
    git_root.mkdir(exist_ok=True)
    repo = hostile_repo(git_root, name, files)
    values: dict[str, Any] = {"verifier_git_base_url": f"file://{git_root}", **settings}
    return await run_policy(
        policy, f"{repo.slug}@v-hostile", context(tmp_path, local_settings(**values))
    )


def _assert_nothing_leaked(outcome: PolicyOutcome, bait: Bait, listener: LoopbackListener) -> None:
    published = "\n".join(
        [json.dumps(outcome.evidence), json.dumps(outcome.raw, default=str), outcome.logs]
    )
    for secret in bait.secrets:
        assert secret not in published
    assert listener.accepted() == 0


def _seen(logs: str, stage: str) -> dict[str, Any]:
    for line in logs.splitlines():
        if line.startswith("HOSTILE-RAN "):
            seen: dict[str, Any] = json.loads(line.removeprefix("HOSTILE-RAN "))
            if seen["stage"] == stage:
                return seen
    raise AssertionError(f"the hostile script did not run at {stage}:\n{logs}")


async def test_npm_scripts_see_only_the_sandbox(
    bait: Bait, listener: LoopbackListener, tmp_path: Path
) -> None:
    outcome = await _run(
        PolicyId.NPM_TEST,
        hostile_npm_files(bait),
        "hostile-npm",
        tmp_path,
        verifier_max_log_bytes=1_048_576,
    )
    _assert_nothing_leaked(outcome, bait, listener)
    assert outcome.passes, outcome.logs
    # It ran at both commands: npm ci's postinstall and npm test.
    for stage in ("ci", "test"):
        seen = _seen(outcome.logs, stage)
        assert seen["connect"].startswith("ERR")
        assert seen["secretEnv"] is None
        # What we set, and what npm adds for its scripts (npm_*, NODE, INIT_CWD...).
        npm_own = {"PWD", "INIT_CWD", "NODE", "EDITOR", "COLOR", "SHLVL", "_"}
        ours = {"HOME", "TMPDIR", "PATH", "LANG", "LC_ALL", "CI"}
        assert {k for k in seen["env"] if not k.startswith("npm_")} <= ours | npm_own
        assert all(v.startswith("ERR") for v in seen["files"].values())
        # A fresh /proc: bwrap's init, and the script's own ancestry only.
        assert len(seen["procs"]) <= 6, seen["procs"]
        assert seen["initEnviron"] == ""
        assert seen["dirs"]["/home"].startswith("ERR")
        assert seen["dirs"]["/work"].startswith("ERR")
        assert seen["writes"] == {"usr": "ERR EROFS", "etc": "ERR EROFS"}
        assert seen["uid"] == 1000


async def test_cargo_build_script_sees_only_the_sandbox(
    bait: Bait, listener: LoopbackListener, tmp_path: Path
) -> None:
    outcome = await _run(
        PolicyId.CARGO_TEST,
        hostile_cargo_files(bait),
        "hostile-cargo",
        tmp_path,
        verifier_max_log_bytes=1_048_576,
    )
    _assert_nothing_leaked(outcome, bait, listener)
    assert outcome.passes, outcome.logs
    assert "HOSTILE-BUILD-RAN" in outcome.logs
    assert "connect: ERR" in outcome.logs and "CONNECTED" not in outcome.logs
    assert re.search(r"init environ: ?\n", outcome.logs)  # /proc/1/environ is empty
    assert "secret env: None" in outcome.logs
    assert 'dir /home: ["ERR' in outcome.logs
    assert "test process environ: ERR" in outcome.logs


async def test_forge_runs_without_ffi_or_file_access_outside_the_checkout(
    bait: Bait, listener: LoopbackListener, tmp_path: Path
) -> None:
    outcome = await _run(
        PolicyId.FORGE_TEST,
        hostile_forge_files(bait),
        "hostile-forge",
        tmp_path,
        verifier_max_log_bytes=1_048_576,
    )
    _assert_nothing_leaked(outcome, bait, listener)
    assert not outcome.passes
    assert outcome.evidence["reason"] == "exit_nonzero"
    logs = outcome.logs
    assert "HOSTILE-FORGE-RAN" in logs
    assert "FFI is disabled" in logs and "FFI-OUTPUT" not in logs
    assert "not allowed to be accessed for read operations" in logs
    assert "READ " not in logs.replace("[FAIL: vm.readFile", "")
    assert "ENV absent" in logs
    assert "FORKED" not in logs.replace('revert("FORKED")', "")


async def test_a_hanging_command_is_killed_with_everything_it_started(
    bait: Bait, tmp_path: Path
) -> None:
    started = time.monotonic()
    outcome = await _run(
        PolicyId.NPM_TEST,
        hanging_npm_files(bait.marker),
        "hanging-npm",
        tmp_path,
        verifier_command_timeout_seconds=5.0,
    )
    assert time.monotonic() - started < 30
    assert not outcome.passes
    assert outcome.evidence["reason"] == "timeout"
    assert outcome.evidence["commands"][-1] == {
        "command": "npm test",
        "exitCode": None,
        "timedOut": True,
    }
    assert "HANGING" in outcome.logs
    # The detached child (its own session) died with the sandbox's PID namespace: the kernel
    # ends the namespace's processes once its init is killed, which may land a moment after the
    # policy has its answer (seen on a busy machine); a `sleep 1000` that survived stays.
    eventually_sync(
        lambda: processes_with(bait.marker),
        until=lambda left: left == [],
        within=5,
        what="the hanging command's processes to end",
        interval=0.05,
    )


_PARENT = """
import asyncio, sys
from pathlib import Path
from marketplace.verifier.policies import run_policy
from marketplace.verifier.workdirs import job_work_dir
from tests.support.verifier_fixtures import context, local_settings

git_root, work_root, ref = sys.argv[1:4]
settings = local_settings(
    verifier_git_base_url=f"file://{git_root}", verifier_command_timeout_seconds=600.0
)

async def main() -> None:
    with job_work_dir(Path(work_root)) as work_dir:
        ctx = context(work_dir, settings)
        await run_policy("npm-test", ref, ctx)

asyncio.run(main())
"""


def test_killing_the_parent_kills_the_sandbox(bait: Bait, tmp_path: Path) -> None:
    """SIGKILL the process that runs a policy (as Ray kills an executor actor) mid-command:
    nothing of the command survives, and its work dir is swept afterwards."""
    git_root = tmp_path / "git"
    git_root.mkdir()
    repo = hostile_repo(git_root, "hanging-npm", hanging_npm_files(bait.marker))
    work_root = tmp_path / "work-root"
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, str(git_root), str(work_root), f"{repo.slug}@v-hostile"],
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        # Both the test script and its detached child.
        while len(processes_with(bait.marker)) < 2:
            assert parent.poll() is None, parent.stderr.read() if parent.stderr else ""
            assert time.monotonic() < deadline, "the command never started"
            time.sleep(0.1)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 10
        while processes_with(bait.marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes_with(bait.marker) == []
        assert len(list(work_root.iterdir())) == 1  # left behind by the killed process
        assert sweep_stale(work_root) == 1
        assert list(work_root.iterdir()) == []
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if parent.stderr is not None:
            parent.stderr.close()


def _profiles(config: str) -> dict[str, Any]:
    profiles: dict[str, Any] = tomllib.loads(config)["profile"]
    return profiles


FORCED = {"ffi": False, "fs_permissions": [{"access": "read-write", "path": "./"}]}


def test_forge_config_forces_ffi_off_in_every_profile(tmp_path: Path) -> None:
    (tmp_path / "foundry.toml").write_text(
        "[profile.default]\n"
        'src = "contracts"\n'
        "ffi = true\n"
        'fs_permissions = [{ access = "read", path = "/" }]\n'
        'extends = "base.toml"\n'
        'remappings = ["a/=lib/a/", "q\\"uote/=x\\\\y/"]\n'
        "[profile.default.fuzz]\n"
        "runs = 7\n"
        "[profile.ci]\n"
        "FFI = true\n"
        'fs-permissions = [{ access = "read-write", path = "/" }]\n'
        "[profile.camel]\n"
        'fsPermissions = [{ access = "read", path = "/" }]\n'
        "[default]\n"  # the legacy layout: a top-level profile
        "ffi = true\n"
        "[rpc_endpoints]\n"
        'local = "http://127.0.0.1:8545"\n'
    )
    config = forge_config(tmp_path)
    document = tomllib.loads(config)
    profiles = document["profile"]
    assert set(profiles) == {"default", "ci", "camel"}
    for profile in profiles.values():
        assert {k: profile[k] for k in FORCED} == FORCED
        assert not {"FFI", "fs-permissions", "fsPermissions", "extends"} & set(profile)
    # The rest survives as written.
    assert profiles["default"]["src"] == "contracts"
    assert profiles["default"]["remappings"] == ["a/=lib/a/", 'q"uote/=x\\y/']
    assert profiles["default"]["fuzz"] == {"runs": 7}
    assert document["rpc_endpoints"] == {"local": "http://127.0.0.1:8545"}
    assert "ffi" not in document["default"]


@pytest.mark.parametrize("content", [None, "not [ toml", "\xff\xfe"])
def test_forge_config_without_a_readable_file(tmp_path: Path, content: str | None) -> None:
    if content is not None:
        (tmp_path / "foundry.toml").write_bytes(content.encode("latin-1"))
    assert _profiles(forge_config(tmp_path)) == {"default": FORCED}


def test_forge_config_does_not_follow_a_link(tmp_path: Path) -> None:
    """The rewrite runs outside the sandbox: a foundry.toml that links to a host file must not
    bring that file's content into the sandbox."""
    outside = tmp_path / "outside.toml"
    outside.write_text('[profile.default]\nsrc = "secret-value"\n')
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "foundry.toml").symlink_to(outside)
    config = forge_config(checkout)
    assert "secret-value" not in config
    assert _profiles(config) == {"default": FORCED}

"""The policy executor as the real Ray actor (marketplace/actors/verifier_executor.py): it runs
a policy from ``PolicySettings`` alone; killed mid-command, nothing of the command survives and
its restarted self removes the work dir the dead one left (issue 25, point 3)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.exceptions import RayActorError

from marketplace.actors.verifier_executor import executor_spec
from marketplace.verifier.execution import ExecutorReport, PolicyRun
from marketplace.verifier.policy import PolicyId, PolicySettings
from marketplace.verifier.workdirs import WORK_ROOT
from tests.conftest import kill_namespace_actors
from tests.support.verifier_fixtures import (
    hanging_npm_files,
    hostile_repo,
    local_settings,
    processes_with,
)

pytestmark = pytest.mark.usefixtures("ray_cluster")


@pytest.fixture
def namespace() -> Iterator[str]:
    name = f"verifier-executor-{uuid.uuid4().hex[:8]}"
    yield name
    kill_namespace_actors(name)


def start(namespace: str, settings: PolicySettings) -> Any:
    spec = executor_spec(0)
    actor: Any = ray.remote(spec.cls).options(**spec.ray_options(namespace))
    return actor.remote(settings, 0)


def work_dirs() -> set[str]:
    return {p.name for p in WORK_ROOT.iterdir()} if WORK_ROOT.exists() else set()


async def test_an_executor_killed_mid_command_leaves_no_process_and_no_work_dir(
    namespace: str, tmp_path: Path
) -> None:
    marker = f"marker-{uuid.uuid4().hex}"
    git_root = tmp_path / "git"
    git_root.mkdir()
    repo = hostile_repo(git_root, "hanging-npm", hanging_npm_files(marker))
    settings = PolicySettings.from_settings(
        local_settings(
            verifier_git_base_url=f"file://{git_root}", verifier_command_timeout_seconds=600.0
        )
    )
    executor = start(namespace, settings)
    report: ExecutorReport = await executor.report.remote()
    assert PolicyId.NPM_TEST in report.available, report

    before = work_dirs()
    running = executor.run.remote(PolicyRun(PolicyId.NPM_TEST, f"{repo.slug}@v-hostile"))
    deadline = time.monotonic() + 120
    while len(processes_with(marker)) < 2:
        assert time.monotonic() < deadline, "the command never started"
        await asyncio.sleep(0.1)
    (new_dir,) = work_dirs() - before
    dead_pid = int(new_dir.split("-")[0])

    # As Ray kills a lost actor; it restarts it (max_restarts=-1).
    ray.kill(executor, no_restart=False)
    with pytest.raises(RayActorError):
        await running
    deadline = time.monotonic() + 15
    while processes_with(marker):
        assert time.monotonic() < deadline, f"still running: {processes_with(marker)}"
        await asyncio.sleep(0.05)

    # The restarted executor swept the dead one's work dir when it started.
    deadline = time.monotonic() + 60
    while True:
        try:
            await executor.report.remote()
            break
        except RayActorError:
            assert time.monotonic() < deadline, "the executor did not come back"
            await asyncio.sleep(0.2)
    assert new_dir not in work_dirs()
    assert not any(name.startswith(f"{dead_pid}-") for name in work_dirs())

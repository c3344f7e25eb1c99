"""Helpers of the verifier jobs API tests: a devnet for attestations, app settings pointing at it,
an in-process `verifier` worker, job requests and polling.

Apps in tests start no `verifier` workers (tests/conftest.py `make_settings`), so the tests that
run jobs start a :class:`JobWorker` of the `verifier` queue in their own event loop, with the
settings they choose (a closed RPC port for transient failures, tiny backoffs). The worker records
the test process's Ray node as where the attempt ran (it is no actor: ``actorName`` is empty).

A policy executor (a Ray actor) takes a second or two to start, so this package's tests share
them (:class:`Executors`): one per distinct :class:`PolicySettings`, reused while the settings
are equal. Callers elsewhere (tests/integration/verifier) get a fresh executor per worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import ray
from eth_account import Account
from pydantic import SecretStr

from marketplace.actors.job_worker import location
from marketplace.actors.verifier_executor import executor_spec
from marketplace.config import Settings
from marketplace.jobs.worker import JobWorker
from marketplace.storage.pool import create_pool
from marketplace.verifier.execution import VERIFIER_QUEUE
from marketplace.verifier.policy import PolicySettings
from marketplace_devstack.devnet.anvil import AnvilProcess
from marketplace_devstack.devnet.deploy import DEV_VERIFIER_PRIVATE_KEY, Deployment
from tests.api.projects import seed
from tests.api.records.conftest import (
    AppFactory,
    Party,
    db,
    error_code,
    linked_party,
    random_address,
    seed_project,
)
from tests.conftest import Servers, make_settings
from tests.contracts.helpers import Chain
from tests.support.chain import start_devnet, web3_for
from tests.support.disputes import disputed_project, set_policies
from tests.support.waiting import eventually_sync, eventually_value

__all__ = [
    "AppFactory",
    "Party",
    "db",
    "error_code",
    "linked_party",
    "random_address",
    "seed",
    "seed_project",
    "set_policies",
]

VERIFIER_KEY = DEV_VERIFIER_PRIVATE_KEY
SIGNER = Account.from_key(VERIFIER_KEY).address
JOBS = "/v1/verifier/jobs"


@dataclass(frozen=True)
class Devnet:
    process: AnvilProcess
    deployment: Deployment

    @property
    def rpc_url(self) -> str:
        return self.process.rpc_url

    def latest_block_time(self) -> int:
        return int(web3_for(self.rpc_url).eth.get_block("latest")["timestamp"])


@pytest.fixture(scope="package")
def devnet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Devnet]:
    """One anvil with the reference contracts for the package: jobs only read the chain
    (``eth_getCode``, ``isNonceUsed``, the latest block), so tests need no snapshots."""
    with start_devnet(tmp_path_factory.mktemp("verifier-anvil"), silent=True) as (proc, dep):
        yield Devnet(proc, dep)


@pytest.fixture(scope="package")
def chain(devnet: Devnet) -> Chain:
    """A driver of the package's devnet. Tests add projects and never revert: each test makes
    its own projects, so they do not see each other's."""
    return Chain(web3_for(devnet.rpc_url), devnet.deployment)


@pytest.fixture(scope="package")
def closed_rpc_url() -> Iterator[str]:
    """An RPC URL nobody listens on, the same for the whole package (so the executors of the
    tests that use it have equal settings and are shared): the port stays bound, never
    listening, so connections are refused and nothing else can take it meanwhile."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def verifier_overrides(devnet: Devnet, **extra: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "chain_rpc_url": devnet.rpc_url,
        "chain_id": devnet.deployment.chain_id,
        "registry_address": devnet.deployment.registry,
        "indexer_enabled": False,
        "verifier_private_key": SecretStr(VERIFIER_KEY),
        "verifier_allow_private_hosts": True,
        "jobs_poll_interval_ms": 50,
        "jobs_backoff_base_seconds": 0.05,
        "jobs_backoff_cap_seconds": 0.2,
    }
    values.update(extra)
    return values


@pytest.fixture
async def vclient(make_client: AppFactory, devnet: Devnet) -> Any:
    """A client of an app that can sign attestations on the devnet."""
    return await make_client(**verifier_overrides(devnet))


@pytest.fixture
def worker_settings(servers: Servers, devnet: Devnet) -> Callable[..., Settings]:
    def build(**extra: Any) -> Settings:
        return make_settings(servers, **verifier_overrides(devnet, **extra))

    return build


class LongestBackoff(random.Random):
    """Every retry waits the backoff's ceiling (no jitter), so a test knows when it falls due."""

    def uniform(self, a: float, b: float) -> float:
        return b


class Executors:
    """Policy executors shared by a package's tests: one per distinct :class:`PolicySettings`
    (an executor's settings are fixed at creation, so only equal settings share one), each at
    its own worker index in its namespace, started on first use and killed when the package
    ends.

    Sharing carries no state between tests: an executor holds only its settings and index;
    each run gets a fresh work dir, removed on every path (marketplace/actors/
    verifier_executor.py). An executor that is gone or was replaced (a test that kills one
    starts its own with :func:`start_executor`) is started again."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, PolicySettings], tuple[int, Any]] = {}

    def executor(self, settings: Settings) -> tuple[int, Any]:
        """The worker index and handle of a running executor with ``settings``' policy
        settings (in ``settings.ray_namespace``)."""
        namespace = settings.ray_namespace
        key = (namespace, PolicySettings.from_settings(settings))
        held = self._held.get(key)
        if held is not None and _is_running(held[1], executor_spec(held[0]).name, namespace):
            return held
        if held is not None:
            index = held[0]
        else:
            used = {i for (ns, _), (i, _) in self._held.items() if ns == namespace}
            index = min(set(range(len(used) + 1)) - used)
        self._held[key] = (index, start_executor(settings, index))
        return self._held[key]

    def close(self) -> None:
        for _, handle in self._held.values():
            ray.kill(handle, no_restart=True)
        for (namespace, _), (index, _) in self._held.items():
            wait_gone(executor_spec(index).name, namespace)
        self._held.clear()


def _is_running(handle: Any, name: str, namespace: str) -> bool:
    try:
        current = ray.get_actor(name, namespace=namespace)
    except ValueError:
        return False
    return bool(current._actor_id == handle._actor_id)


@pytest.fixture(scope="package")
def executors(ray_cluster: None) -> Iterator[Executors]:
    shared = Executors()
    try:
        yield shared
    finally:
        shared.close()


@contextlib.asynccontextmanager
async def verifier_worker(
    settings: Settings,
    *,
    rng: random.Random | None = None,
    executors: Executors | None = None,
) -> AsyncIterator[JobWorker]:
    """A `verifier` queue worker in the test's loop, with ``settings``, and its policy executor
    (a real Ray actor given only the policy settings, as in production): one of ``executors``
    with these policy settings (left running for the next test), else a fresh one (killed on
    exit)."""
    if executors is not None:
        index, executor = executors.executor(settings)
    else:
        index, executor = 0, start_executor(settings)
    pool = await create_pool(settings.database_url, min_size=1, max_size=4)
    worker = JobWorker(
        VERIFIER_QUEUE,
        pool,
        settings,
        owner=f"test-verifier-{uuid.uuid4().hex[:8]}",
        rng=rng,
        location=location(),
        index=index,
    )
    task = asyncio.create_task(worker.run())
    try:
        yield worker
    finally:
        await worker.stop(grace_seconds=0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await pool.close()
        if executors is None:
            ray.kill(executor, no_restart=True)


def start_executor(settings: Settings, index: int = 0) -> Any:
    """The policy executor paired with worker ``index`` (in ``settings.ray_namespace``), made
    afresh: a previous test's one, with its settings, is killed first."""
    spec = executor_spec(index)
    with contextlib.suppress(ValueError):
        ray.kill(ray.get_actor(spec.name, namespace=settings.ray_namespace), no_restart=True)
        wait_gone(spec.name, settings.ray_namespace)
    options = spec.ray_options(settings.ray_namespace)
    return (
        ray.remote(spec.cls)
        .options(**options)
        .remote(PolicySettings.from_settings(settings), index)
    )


def wait_gone(name: str, namespace: str, within: float = 10.0) -> None:
    def gone() -> bool:
        try:
            ray.get_actor(name, namespace=namespace)
        except ValueError:
            return True
        return False

    eventually_sync(gone, within=within, what=f"actor {name} to be unregistered", interval=0.05)


def job_body(project: str, **values: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "projectAddress": project,
        "milestoneIndex": 0,
        "checkPolicyId": "address-smoke",
        "deliveryRef": random_address(),
        "chainId": 31337,
    }
    body.update(values)
    return body


async def create_job(client: Any, headers: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    resp = await client.post(JOBS, json=body, headers=headers)
    assert resp.status == 202, await resp.text()
    return dict(await resp.json())


async def get_job(client: Any, headers: dict[str, str], job_id: str) -> dict[str, Any]:
    resp = await client.get(f"{JOBS}/{job_id}", headers=headers)
    assert resp.status == 200, await resp.text()
    return dict(await resp.json())


async def wait_status(
    client: Any, headers: dict[str, str], job_id: str, *statuses: str, within: float = 30.0
) -> dict[str, Any]:
    return await eventually_value(
        lambda: get_job(client, headers, job_id),
        until=lambda job: job["status"] in statuses,
        within=within,
        what=f"job {job_id} to be {'/'.join(statuses)}",
    )


async def disputed_with_parties(
    client: Any,
    db: Any,
    chain: Chain,
    delivery_ref: str,
    *,
    policy: str | None = "address-smoke",
    index: int = 0,
    parties: tuple[Party, Party] | None = None,
    **values: Any,
) -> tuple[str, Party, Party]:
    """A project disputed on the devnet (milestone ``index`` submitted with ``delivery_ref``,
    phase challenged), indexed with an owner and selected worker linked through the API, its
    claimed metadata fixing ``policy`` as the milestone's acceptance policy (None: no policy).
    The read model's parties are the API users' wallets, not the chain's accounts: job requests
    read the parties from the read model and the dispute from the chain. ``parties``: the
    (owner, worker) of another project, so one pair can have several disputes (one verdict
    each); new linked users by default."""
    contract = disputed_project(chain, delivery_ref, index=index)
    if parties is None:
        parties = (await linked_party(client), await linked_party(client))
    owner, worker = parties
    count = max(2, index + 1)
    project = await seed_project(
        db,
        project_address=contract.address.lower(),
        owner_address=owner.lower,
        selected_builder_address=worker.lower,
        status="dispute",
        milestone_count=count,
        **values,
    )
    for i in range(count):
        await seed.milestone(db, project, i)
    await seed.metadata(db, project, owner.lower)
    if policy is not None:
        await set_policies(db, project, [(index, policy)])
    return project, owner, worker


async def project_with_parties(
    client: Any, db: Any, *, milestones: int = 0, **values: Any
) -> tuple[str, Party, Party]:
    """An indexed open project (owner and selected worker linked through the API) with
    ``milestones`` rows in the milestone read model."""
    owner, worker = await linked_party(client), await linked_party(client)
    project = await seed_project(
        db, owner_address=owner.lower, selected_builder_address=worker.lower, **values
    )
    for index in range(milestones):
        await seed.milestone(db, project, index)
    return project, owner, worker

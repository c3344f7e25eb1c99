"""Retries of every verifier policy at job level (issue 14): a job accepted by
``marketplace.verifier.jobs.accept`` and run by in-process `verifier` workers whose endpoint
really is unavailable, either down (its port closed) or answering 503.

Every endpoint is one local "gateway" server that the test stops, starts and switches to 503:
the git fixture repositories over git's smart HTTP protocol (``git http-backend``, since the test
policies fetch with ``--depth=1``, which the dumb protocol cannot), a Figma page, a PNG, and a
JSON-RPC proxy to the anvil devnet (for `address-smoke`).

- Transient, then success: attempt 1 fails while the gateway is unavailable; the job is back in
  ``queued`` with one attempt, the error and a next attempt a minute away (the backoff's ceiling);
  the gateway recovers, the retry is pulled forward in SQL and a second worker completes it.
- Exhausted: the gateway stays unavailable; with ``verifier_max_attempts=2`` and a tiny backoff
  the job ends ``failed`` after two attempts with the last attempt's error.
"""

from __future__ import annotations

import asyncio
import os
import re
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import aiohttp
import asyncpg
import pytest
from aiohttp import web

from marketplace.config import Settings
from marketplace.indexer.engine import IndexerEngine
from marketplace.storage.repositories import verifier_jobs as repo
from marketplace.verifier.policy import PolicyId
from tests.api.verifier.conftest import LongestBackoff, verifier_worker
from tests.conftest import Servers
from tests.contracts.helpers import Chain
from tests.integration.verifier.conftest import (
    Devnet,
    dispute_jobs,
    verifier_admin,
    verifier_settings,
)
from tests.support.verifier_fixtures import (
    GIT_ENV,
    PNG_1X1,
    GitRepo,
    cargo_repo,
    forge_repo,
    free_port,
    npm_repo,
)
from tests.support.waiting import eventually_value

Outage = Literal["down", "503"]
# What the job's error says for each kind of outage (git, aiohttp and the RPC client word a
# refused connection differently; every 503 names its status).
OUTAGE_ERROR = {"down": re.compile(r"connect", re.IGNORECASE), "503": re.compile(r"503")}


@dataclass
class Gateway:
    """A local server on a fixed port that can be stopped (connection refused), started again,
    or switched to answering 503 to every request."""

    git_root: Path
    rpc_upstream: str
    port: int = field(default_factory=free_port)
    failing: bool = False
    refused: int = 0  # requests answered 503
    served: int = 0  # requests answered normally
    runner: web.AppRunner | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    @property
    def authority(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        @web.middleware
        async def outage(request: web.Request, handler: Any) -> web.StreamResponse:
            if self.failing:
                self.refused += 1
                return web.Response(status=503, text="unavailable")
            self.served += 1
            response: web.StreamResponse = await handler(request)
            return response

        app = web.Application(middlewares=[outage], client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/git/{path:.*}", self.git)
        app.router.add_get("/file/{key}/{rest:.*}", self.figma)
        app.router.add_get("/img/ok.png", self.png)
        app.router.add_post("/rpc", self.rpc)
        self.runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    async def become(self, outage: Outage) -> None:
        if outage == "down":
            await self.stop()
        else:
            self.failing = True

    async def recover(self) -> None:
        self.failing = False
        if self.runner is None:
            await self.start()

    async def git(self, request: web.Request) -> web.Response:
        """Git's smart HTTP protocol through ``git http-backend`` (a CGI program)."""
        body = await request.read()
        env = {
            **os.environ,
            **GIT_ENV,
            "GIT_PROJECT_ROOT": str(self.git_root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": request.method,
            "PATH_INFO": "/" + request.match_info["path"],
            "QUERY_STRING": request.query_string,
            "CONTENT_TYPE": request.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": "127.0.0.1",
        }
        if "Git-Protocol" in request.headers:
            env["HTTP_GIT_PROTOCOL"] = request.headers["Git-Protocol"]
        if body[:2] == b"\x1f\x8b":  # still gzipped: let the backend inflate it
            env["HTTP_CONTENT_ENCODING"] = "gzip"
        proc = await asyncio.create_subprocess_exec(
            "git",
            "http-backend",
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        out, _ = await proc.communicate(body)
        head, _, payload = out.partition(b"\r\n\r\n")
        status, headers = 200, {}
        for line in head.decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers[name] = value.strip()
        return web.Response(status=status, body=payload, headers=headers)

    async def figma(self, request: web.Request) -> web.Response:
        return web.Response(text="<html>figma</html>", content_type="text/html")

    async def png(self, request: web.Request) -> web.Response:
        return web.Response(body=PNG_1X1, content_type="image/png")

    async def rpc(self, request: web.Request) -> web.Response:
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                self.rpc_upstream,
                data=await request.read(),
                headers={"Content-Type": "application/json"},
            ) as upstream,
        ):
            return web.Response(
                status=upstream.status, body=await upstream.read(), content_type="application/json"
            )


@dataclass(frozen=True)
class Case:
    policy: PolicyId
    # The outage of the transient-then-success test; the exhausted test uses the other one, so
    # every policy meets both.
    outage: Outage

    @property
    def other(self) -> Outage:
        return "503" if self.outage == "down" else "down"


CASES = [
    Case(PolicyId.GITHUB_REF, "down"),
    Case(PolicyId.NPM_TEST, "503"),
    Case(PolicyId.CARGO_TEST, "down"),
    Case(PolicyId.FORGE_TEST, "503"),
    Case(PolicyId.FIGMA_REF, "down"),
    Case(PolicyId.SCREENSHOT_REF, "down"),
    Case(PolicyId.ADDRESS_SMOKE, "503"),
]
IDS = [case.policy.value for case in CASES]


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, GitRepo]]:
    root = tmp_path_factory.mktemp("retry-repos")
    return root, {"npm": npm_repo(root), "cargo": cargo_repo(root), "forge": forge_repo(root)}


@pytest.fixture
async def gateway(repos: tuple[Path, dict[str, GitRepo]], devnet: Devnet) -> AsyncIterator[Gateway]:
    server = Gateway(repos[0], devnet.process.rpc_url)
    await server.start()
    yield server
    await server.stop()


def delivery_ref(
    policy: PolicyId, gateway: Gateway, devnet: Devnet, git: dict[str, GitRepo]
) -> str:
    """A reference that passes once its endpoint answers."""
    return {
        PolicyId.GITHUB_REF: f"{git['npm'].slug}@v-pass",
        PolicyId.NPM_TEST: f"{git['npm'].slug}@v-pass",
        PolicyId.CARGO_TEST: f"{git['cargo'].slug}@v-pass",
        PolicyId.FORGE_TEST: f"{git['forge'].slug}@v-pass",
        PolicyId.FIGMA_REF: gateway.url("/file/AbC123/design"),
        PolicyId.SCREENSHOT_REF: gateway.url("/img/ok.png"),
        PolicyId.ADDRESS_SMOKE: devnet.deployment.registry,
    }[policy]


@pytest.fixture
def settings_for(servers: Servers, devnet: Devnet, gateway: Gateway) -> Callable[..., Settings]:
    """Settings whose endpoint of ``policy`` is the gateway (the chain is the gateway's RPC
    proxy only for `address-smoke`: the others need the chain to sign their verdicts)."""

    def build(policy: PolicyId, **extra: Any) -> Settings:
        values: dict[str, Any] = {
            "verifier_git_base_url": gateway.url("/git"),
            "verifier_figma_host": gateway.authority,
            "verifier_allow_private_hosts": True,
            "verifier_http_timeout_seconds": 10.0,
            "jobs_poll_interval_ms": 50,
        }
        if policy is PolicyId.ADDRESS_SMOKE:
            values["chain_rpc_url"] = gateway.url("/rpc")
        values.update(extra)
        return verifier_settings(servers, devnet, f"retries-{uuid.uuid4().hex[:8]}", **values)

    return build


async def wait_row(
    pool: asyncpg.Pool,
    job_id: uuid.UUID,
    done: Callable[[repo.VerifierJobRow], bool],
    what: str,
    within: float = 60.0,
) -> repo.VerifierJobRow:
    async def read() -> repo.VerifierJobRow:
        row = await repo.get(pool, job_id)
        assert row is not None
        return row

    return await eventually_value(read, until=done, within=within, what=what)


async def accept_job(
    pool: asyncpg.Pool,
    settings: Settings,
    chain: Chain,
    engine: IndexerEngine,
    policy: PolicyId,
    ref: str,
) -> uuid.UUID:
    """The job of a project disputed over ``ref``, whose acceptance policy is ``policy``."""
    [job_id] = await dispute_jobs(
        pool, settings, await verifier_admin(pool), chain, engine, policy, [ref]
    )
    return job_id


@pytest.mark.parametrize("case", CASES, ids=IDS)
async def test_transient_failure_then_success(
    case: Case,
    ray_cluster: None,
    pool: asyncpg.Pool,
    chain: Chain,
    engine: IndexerEngine,
    devnet: Devnet,
    gateway: Gateway,
    repos: tuple[Path, dict[str, GitRepo]],
    settings_for: Callable[..., Settings],
) -> None:
    ref = delivery_ref(case.policy, gateway, devnet, repos[1])
    job_id = await accept_job(pool, settings_for(case.policy), chain, engine, case.policy, ref)
    # Accepting an address-smoke job read the dispute through the gateway (its chain RPC).
    served_before = gateway.served

    await gateway.become(case.outage)
    # The retry would fall due a minute later: only the test pulls it forward.
    waiting = settings_for(
        case.policy, jobs_backoff_base_seconds=60.0, jobs_backoff_cap_seconds=60.0
    )
    async with verifier_worker(waiting, rng=LongestBackoff()):
        retrying = await wait_row(
            pool,
            job_id,
            lambda row: row.attempt_count == 1 and row.status == "queued",
            "the first attempt to fail",
        )
    assert retrying.error is not None and retrying.next_attempt_at is not None
    assert retrying.error.startswith("TransientPolicyError: "), retrying.error
    assert OUTAGE_ERROR[case.outage].search(retrying.error), retrying.error
    assert retrying.passes is None and retrying.completed_at is None
    assert retrying.max_attempts == 3
    due_in = (retrying.next_attempt_at - datetime.now(UTC)).total_seconds()
    assert 50 < due_in <= 60, due_in
    if case.outage == "503":
        assert gateway.refused > 0 and gateway.served == served_before

    await gateway.recover()
    await pool.execute(
        "UPDATE jobs SET next_attempt_at = now() "
        "WHERE id = (SELECT job_id FROM verifier_jobs WHERE id = $1)",
        job_id,
    )
    async with verifier_worker(settings_for(case.policy)):
        done = await wait_row(
            pool, job_id, lambda row: row.status in ("completed", "failed"), "the retry"
        )
    assert done.status == "completed", done._asdict()
    assert (done.attempt_count, done.error, done.next_attempt_at) == (2, None, None)
    assert done.passes is True, done.evidence
    assert (done.evidence or {})["policy"] == case.policy.value
    assert done.attestation is not None
    # The second attempt really went through the gateway.
    assert gateway.served > served_before
    attempts = await pool.fetchval(
        "SELECT raw_evidence -> 'attempts' FROM verifier_jobs WHERE id = $1", job_id
    )
    assert [a["attempt"] for a in attempts] == [1, 2]


@pytest.mark.parametrize("case", CASES, ids=IDS)
async def test_exhausted_retries_fail_the_job(
    case: Case,
    ray_cluster: None,
    pool: asyncpg.Pool,
    chain: Chain,
    engine: IndexerEngine,
    devnet: Devnet,
    gateway: Gateway,
    repos: tuple[Path, dict[str, GitRepo]],
    settings_for: Callable[..., Settings],
) -> None:
    settings = settings_for(case.policy, verifier_max_attempts=2)
    ref = delivery_ref(case.policy, gateway, devnet, repos[1])
    job_id = await accept_job(pool, settings, chain, engine, case.policy, ref)
    served_before = gateway.served

    await gateway.become(case.other)
    async with verifier_worker(settings):
        failed = await wait_row(
            pool, job_id, lambda row: row.status in ("completed", "failed"), "the last attempt"
        )
    assert failed.status == "failed", failed._asdict()
    assert (failed.attempt_count, failed.max_attempts) == (2, 2)
    assert failed.error is not None
    assert failed.error.startswith("TransientPolicyError: "), failed.error
    assert OUTAGE_ERROR[case.other].search(failed.error), failed.error
    assert failed.next_attempt_at is None
    assert (failed.passes, failed.evidence, failed.attestation) == (None, None, None)
    if case.other == "503":
        # Both attempts met the outage (each makes at least one request).
        assert gateway.refused >= 2 and gateway.served == served_before
    attempts = await pool.fetchval(
        "SELECT raw_evidence -> 'attempts' FROM verifier_jobs WHERE id = $1", job_id
    )
    assert [a["attempt"] for a in attempts] == [1, 2]

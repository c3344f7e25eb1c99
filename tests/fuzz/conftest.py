"""A live app for the fuzz suites, and the caller the fuzzers act as.

The app is served over TCP by the request handler ``marketplace serve`` uses, from a thread with
its own event loop: schemathesis calls it synchronously and the body fuzz talks to it from the
test's loop, so neither client can stall the server. It runs against the suite's real Postgres,
Redis and Ray, plus a real anvil devnet with the reference contracts, so a claim looks its
transaction up on a chain instead of answering 503 "no chain is configured".

The caller is a verified session that has accepted every required legal document (the app runs
in strict assent mode, so guarded routes are reached, not refused at the guard), with a linked
wallet and an agent API key. Projects are seeded in the read model with that wallet as owner or
worker, and a pending create intent exists, so the fuzzers reach real rows and not only 404s.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import asyncpg
import pytest
from aiohttp import web
from eth_account import Account
from eth_account.messages import encode_defunct
from pydantic import SecretStr
from web3 import Web3
from web3.types import RPCEndpoint

from marketplace.config import Settings
from marketplace.http.server import JsonErrorsAppRunner
from marketplace_devstack.devnet.anvil import AnvilProcess
from marketplace_devstack.devnet.deploy import (
    DEV_VERIFIER_PRIVATE_KEY,
    Deployment,
    deploy_dev_defaults,
)
from tests.api.records.conftest import seed_dispute, seed_project
from tests.conftest import (
    Servers,
    bearer,
    kill_namespace_actors,
    make_settings,
    make_token,
    reset_state,
)

T = TypeVar("T")

# Long enough for the whole run, well under the configured maximum session lifetime.
TOKEN_TTL_SECONDS = 3600

# Fixed so a derandomized run sends the same requests every time.
CALLER_USER_ID = uuid.UUID("5e5e5e5e-0000-4000-8000-00000000f022")
CALLER_WALLET_KEY = "0x" + "5e" * 32
CALLER_WALLET = str(Account.from_key(CALLER_WALLET_KEY).address)
OTHER_WALLET = "0x" + "11" * 20
PROJECTS = {
    "owned_bidding": "0x" + "a0" * 20,
    "owned_draft": "0x" + "a1" * 20,
    "invite_only": "0x" + "a2" * 20,
    "challenge": "0x" + "a3" * 20,
    "owner_in_dispute": "0x" + "a4" * 20,
    "worker_in_dispute": "0x" + "a5" * 20,
}


async def _cancel_remaining_tasks() -> None:
    current = asyncio.current_task()
    tasks = [task for task in asyncio.all_tasks() if task is not current]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=20)


class LiveApp:
    """An app served on 127.0.0.1 from a background thread's event loop."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="fuzz-app", daemon=True)
        self.runner: web.AppRunner | None = None
        self.base_url = ""

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 120.0) -> T:
        """Run ``coro`` on the server's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self) -> None:
        from marketplace.http.app import create_app

        self.thread.start()

        async def start() -> str:
            self.runner = JsonErrorsAppRunner(create_app(self.settings), access_log=None)
            await self.runner.setup()
            site = web.TCPSite(self.runner, "127.0.0.1", 0)
            await site.start()
            host, port = self.runner.addresses[0][:2]
            return f"http://{host}:{port}"

        self.base_url = self.run(start())

    def stop(self) -> None:
        try:
            if self.runner is not None:
                self.run(self.runner.cleanup())
        finally:
            # Whatever cleanup managed, nothing of this app may outlive it: a relay left running
            # on this thread would hold the database-wide relay lock for the rest of the session
            # (a CI run lost every relay test that way).
            with contextlib.suppress(Exception):
                self.run(_cancel_remaining_tasks(), timeout=30)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=30)
            if not self.thread.is_alive():
                self.loop.close()


@pytest.fixture(scope="package")
def devnet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Deployment]]:
    """anvil with the reference contracts. The seeded projects get the project contract's code,
    so chain reads about them get the answers of a fresh project instead of ``0x``."""
    with AnvilProcess(Path(tmp_path_factory.mktemp("fuzz-anvil")), silent=True) as process:
        w3 = Web3(Web3.HTTPProvider(process.rpc_url, request_kwargs={"timeout": 30}))
        deployment = deploy_dev_defaults(w3)
        code = w3.eth.get_code(Web3.to_checksum_address(deployment.project_implementation))
        for address in PROJECTS.values():
            w3.provider.make_request(RPCEndpoint("anvil_setCode"), [address, code.to_0x_hex()])
        yield process.rpc_url, deployment


@pytest.fixture(scope="package")
def fuzz_namespace(ray_cluster: None) -> Iterator[str]:
    """A Ray namespace of the fuzz suites' own, so their actors get the fuzz app's settings
    (named actors keep the settings they were created with)."""
    namespace = f"test-fuzz-{uuid.uuid4().hex[:8]}"
    yield namespace
    kill_namespace_actors(namespace)


@pytest.fixture(scope="package")
def live_app(
    servers: Servers, fuzz_namespace: str, devnet: tuple[str, Deployment]
) -> Iterator[LiveApp]:
    """One app for both suites: starting Ray actors and a devnet costs more than either run."""
    rpc_url, deployment = devnet
    settings = make_settings(
        servers,
        ray_namespace=fuzz_namespace,
        chain_rpc_url=rpc_url,
        chain_id=deployment.chain_id,
        registry_address=deployment.registry,
        chain_start_block=deployment.start_block,
        # A deployment that signs attestations (without a key the verifier answers 503).
        verifier_private_key=SecretStr(DEV_VERIFIER_PRIVATE_KEY),
        indexer_enabled=False,
        legal_acceptance_mode="strict",
        # One client sends thousands of requests a minute; the limiter still runs, it just
        # must not turn the run into a study of 429s.
        rate_limit_default="1000000/60",
    )
    asyncio.run(reset_state(servers))
    app = LiveApp(settings)
    try:
        app.start()
        yield app
    finally:
        app.stop()


@dataclass
class Caller:
    """The user the fuzzers act as, and what it owns."""

    user_id: str
    token: str
    wallet: str
    api_key: str
    api_key_id: str
    intent_id: str

    @property
    def session_headers(self) -> dict[str, str]:
        return bearer(self.token)

    @property
    def agent_headers(self) -> dict[str, str]:
        return {"x-agent-api-key": self.api_key}


async def _json(resp: aiohttp.ClientResponse, status: int) -> dict[str, Any]:
    body = await resp.json()
    assert resp.status == status, body
    return dict(body)


async def _make_caller(base_url: str, database_url: str) -> Caller:
    token = make_token(CALLER_USER_ID, ttl=TOKEN_TTL_SECONDS)
    headers = bearer(token)
    wallet = Account.from_key(CALLER_WALLET_KEY)
    async with aiohttp.ClientSession(base_url) as http:
        docs = await _json(await http.get("/v1/legal/documents", headers=headers), 200)
        for ref in docs["requiredVersions"]:
            await _json(await http.post("/v1/legal/acceptances", json=ref, headers=headers), 200)
        issued = await _json(
            await http.post(
                "/v1/wallet-links/challenge",
                json={"walletAddress": wallet.address, "chainId": 31337},
                headers=headers,
            ),
            200,
        )
        await _json(
            await http.post(
                "/v1/wallet-links/verify",
                json={
                    "challengeId": issued["challengeId"],
                    "walletAddress": wallet.address,
                    "signature": wallet.sign_message(
                        encode_defunct(text=issued["message"])
                    ).signature.to_0x_hex(),
                },
                headers=headers,
            ),
            200,
        )
        key = await _json(
            await http.post(
                "/v1/api-keys",
                json={"name": "fuzzer", "userId": str(CALLER_USER_ID)},
                headers=headers,
            ),
            201,
        )
        intent = await _json(
            await http.post("/v1/projects/create-intents", json={}, headers=headers), 201
        )
    owner = wallet.address.lower()
    conn = await asyncpg.connect(database_url)
    try:
        await seed_project(conn, project_address=PROJECTS["owned_bidding"], owner_address=owner)
        await seed_project(
            conn, project_address=PROJECTS["owned_draft"], owner_address=owner, status="draft"
        )
        await seed_project(
            conn, project_address=PROJECTS["invite_only"], bidding_access="invite_only"
        )
        await seed_project(
            conn,
            project_address=PROJECTS["challenge"],
            project_mode="challenge",
            challenge_submission_count=3,
        )
        await seed_dispute(conn, owner, OTHER_WALLET, project_address=PROJECTS["owner_in_dispute"])
        await seed_dispute(conn, OTHER_WALLET, owner, project_address=PROJECTS["worker_in_dispute"])
    finally:
        await conn.close()
    return Caller(
        user_id=str(CALLER_USER_ID),
        token=token,
        wallet=wallet.address,
        api_key=key["secret"],
        api_key_id=key["id"],
        intent_id=intent["intentId"],
    )


@pytest.fixture(scope="package")
def caller(live_app: LiveApp) -> Caller:
    return live_app.run(_make_caller(live_app.base_url, live_app.settings.database_url))

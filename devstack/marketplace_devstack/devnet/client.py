"""Drive the marketplace contracts on a devnet as a client would.

:class:`DevnetClient` sends transactions from accounts the node signs for (anvil's ten unlocked
dev accounts, or any address it impersonates), waits for the receipt and decodes custom-error
reverts. It speaks raw JSON-RPC (:class:`RawRpc`, one keep-alive HTTP connection, batches) with
the ABI helpers of :mod:`marketplace.chain.abi`, so it stays cheap enough for the seeder that
shares it. :func:`locate_devnet` finds the devnet ``marketplace up`` runs for a data dir.

Amounts are TestUSDC base units (6 decimals: ``USDC`` = 1 token) unless a name says otherwise.
"""

from __future__ import annotations

import functools
import http.client
import itertools
import json
import secrets
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from eth_abi import decode
from eth_utils import keccak, to_checksum_address

from marketplace.chain.abi import AbiFunction, ContractAbi, abi_type
from marketplace.chain.artifacts import artifact_names, load_artifact
from marketplace.chain.eip712 import bytes32, sign_attestation
from marketplace.chain.enums import (
    DisputeOutcome,
    DisputeReason,
    ProjectMode,
)
from marketplace_devstack.devnet.deploy import (
    ANVIL_PRIVATE_KEYS,
    DEV_VERIFIER_PRIVATE_KEY,
    Deployment,
    DeploymentError,
    dev_address,
    read_manifest,
)
from marketplace_devstack.devnet.node import MANIFEST_FILE, RPC_URL_FILE

USDC = 10**6
HOUR = 3600
DAY = 24 * HOUR
ZERO_ADDRESS = "0x" + "00" * 20
ZERO_HASH = b"\x00" * 32
MAX_UINT256 = 2**256 - 1


class DevnetError(RuntimeError):
    """Something a devnet command cannot do; the message is meant for the user."""


class DevnetNotRunning(DevnetError):
    """No reachable devnet for the given data dir / RPC URL."""


class DevnetRpcError(DevnetError):
    """A JSON-RPC error answer to a devnet command (the service's own client raises
    :class:`marketplace.chain.rpc.RpcError`)."""

    def __init__(self, method: str, error: dict[str, Any]) -> None:
        super().__init__(f"{method}: {error.get('message')}")
        self.method = method
        self.code = error.get("code")
        self.data = error.get("data")


class TransactionFailed(DevnetError):
    """A transaction would revert (or did): ``error`` is the decoded custom error, if known."""

    def __init__(
        self,
        action: str,
        error: tuple[str, tuple[Any, ...]] | None,
        tx_hash: str | None = None,
        detail: str = "",
    ) -> None:
        self.action = action
        self.error = error
        self.tx_hash = tx_hash
        if error is not None:
            args = ", ".join(_show(a) for a in error[1])
            reason = f"{error[0]}({args})"
        else:
            reason = detail or "reverted without a known error"
        where = f" (tx {tx_hash})" if tx_hash else ""
        super().__init__(f"{action} reverted: {reason}{where}")


def _show(value: Any) -> str:
    if isinstance(value, bytes):
        return "0x" + value.hex()
    return str(value)


# --- JSON-RPC -----------------------------------------------------------------------------------


class RawRpc:
    """Synchronous JSON-RPC over one keep-alive HTTP connection (standard library only)."""

    def __init__(self, url: str, *, timeout: float = 60.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise DevnetError(f"unsupported RPC URL {url!r} (http:// or https:// expected)")
        self.url = url
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._path = parts.path or "/"
        self._https = parts.scheme == "https"
        self._timeout = timeout
        self._conn: http.client.HTTPConnection | None = None
        self._ids = itertools.count(1)

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            self._conn = cls(self._host, self._port, timeout=self._timeout)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> RawRpc:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _post(self, payload: Any) -> Any:
        body = json.dumps(payload).encode()
        headers = {"Content-Type": "application/json"}
        for attempt in (1, 2):
            conn = self._connection()
            try:
                conn.request("POST", self._path, body, headers)
                response = conn.getresponse()
                data = response.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                # The server closed an idle keep-alive connection: reconnect once.
                self.close()
                if attempt == 2:
                    raise
                continue
            except OSError:
                self.close()
                raise
            if response.status != 200:
                raise DevnetError(f"HTTP {response.status} from {self.url}: {data[:200]!r}")
            return json.loads(data)
        raise AssertionError("unreachable")

    def call(self, method: str, params: Sequence[Any] = ()) -> Any:
        reply = self._post(
            {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": list(params)}
        )
        if "error" in reply:
            raise DevnetRpcError(method, reply["error"])
        return reply.get("result")

    def batch_raw(
        self, calls: Sequence[tuple[str, Sequence[Any]]], *, chunk: int = 250
    ) -> list[dict[str, Any]]:
        """The raw response objects (``result`` or ``error``) of ``calls``, in call order."""
        out: list[dict[str, Any]] = []
        for start in range(0, len(calls), chunk):
            part = calls[start : start + chunk]
            ids = [next(self._ids) for _ in part]
            replies = self._post(
                [
                    {"jsonrpc": "2.0", "id": i, "method": m, "params": list(p)}
                    for i, (m, p) in zip(ids, part, strict=True)
                ]
            )
            if not isinstance(replies, list):
                raise DevnetError(f"batch answered with {replies!r:.200}")
            by_id = {r.get("id"): r for r in replies}
            out.extend(by_id[i] for i in ids)
        return out

    def batch(self, calls: Sequence[tuple[str, Sequence[Any]]], *, chunk: int = 250) -> list[Any]:
        """Results of ``calls`` in order; the first error raises :class:`DevnetRpcError`."""
        results = []
        for (method, _), reply in zip(calls, self.batch_raw(calls, chunk=chunk), strict=True):
            if "error" in reply:
                raise DevnetRpcError(method, reply["error"])
            results.append(reply.get("result"))
        return results


# --- ABI helpers ----------------------------------------------------------------------------------


@functools.cache
def contract_abi(name: str) -> ContractAbi:
    return ContractAbi.load(name)


@functools.cache
def _error_selectors() -> dict[bytes, tuple[str, list[str]]]:
    selectors: dict[bytes, tuple[str, list[str]]] = {}
    for name in artifact_names():
        for item in load_artifact(name)["abi"]:
            if item["type"] == "error":
                types = [abi_type(i) for i in item["inputs"]]
                selectors[keccak(text=f"{item['name']}({','.join(types)})")[:4]] = (
                    item["name"],
                    types,
                )
    # Solidity's built-in Error(string) and Panic(uint256).
    selectors[bytes.fromhex("08c379a0")] = ("Error", ["string"])
    selectors[bytes.fromhex("4e487b71")] = ("Panic", ["uint256"])
    return selectors


def decode_revert(data: str | bytes | None) -> tuple[str, tuple[Any, ...]] | None:
    """``(ErrorName, args)`` of revert data from any marketplace contract, else None."""
    if not data:
        return None
    raw = bytes.fromhex(data.removeprefix("0x")) if isinstance(data, str) else bytes(data)
    known = _error_selectors().get(raw[:4])
    if known is None:
        return None
    name, types = known
    try:
        values = decode(types, raw[4:])
    except Exception:
        return None
    return name, tuple(
        to_checksum_address(v) if t == "address" else v for t, v in zip(types, values, strict=True)
    )


def revert_data_of(error: DevnetRpcError) -> str | None:
    data = error.data
    if isinstance(data, dict):  # some nodes nest it
        data = data.get("data")
    return data if isinstance(data, str) and data.startswith("0x") else None


def decode_struct(param: dict[str, Any], value: Any) -> Any:
    """A tuple value decoded by web3/eth_abi as nested dicts keyed by component name."""
    kind = param["type"]
    if kind == "tuple":
        return {
            c["name"]: decode_struct(c, v) for c, v in zip(param["components"], value, strict=True)
        }
    if kind == "tuple[]":
        element = dict(param, type="tuple")
        return [decode_struct(element, v) for v in value]
    return value


def label_hash(label: str) -> bytes:
    """A deterministic non-zero bytes32 derived from a text label."""
    return keccak(text=label)


def parse_hash(value: str | None, *, default_label: str) -> bytes:
    """A ``0x``-prefixed bytes32, or keccak256 of free text; ``default_label`` when absent."""
    if value is None:
        return label_hash(default_label)
    if value.startswith("0x") and len(value) == 66:
        return bytes32(value)
    return label_hash(value)


# --- locating the devnet ------------------------------------------------------------------------


def devnet_dir(data_dir: Path) -> Path:
    return Path(data_dir) / "devnet"


@dataclass(frozen=True)
class DevnetLocation:
    rpc_url: str
    deployment: Deployment
    manifest: Path | None


def locate_devnet(
    data_dir: Path, *, rpc_url: str | None = None, registry: str | None = None
) -> DevnetLocation:
    """The devnet of ``marketplace up --data-dir data_dir``: ``<data-dir>/devnet/deployment.json``
    and the RPC URL ``up`` wrote next to it (``rpc_url`` overrides that). Without a manifest but
    with ``registry`` and ``rpc_url``, the deployment is read from the registry itself.

    Raises :class:`DevnetNotRunning` with a message saying what is missing.
    """
    directory = devnet_dir(data_dir)
    manifest = directory / MANIFEST_FILE
    url = rpc_url
    if url is None:
        try:
            url = (directory / RPC_URL_FILE).read_text(encoding="utf-8").strip() or None
        except FileNotFoundError:
            url = None
    if url is None:
        raise DevnetNotRunning(
            f"no devnet is running for data dir {data_dir} (no {directory / RPC_URL_FILE}); "
            f"start one with `marketplace up --data-dir {data_dir}` or pass --rpc-url"
        )
    rpc = RawRpc(url, timeout=5.0)
    try:
        try:
            chain_id = int(rpc.call("eth_chainId"), 16)
        except (OSError, DevnetError, ValueError) as exc:
            raise DevnetNotRunning(
                f"the devnet at {url} does not answer ({exc.__class__.__name__}: {exc}); "
                f"is `marketplace up --data-dir {data_dir}` running?"
            ) from exc
        if manifest.exists():
            try:
                deployment = read_manifest(manifest)
            except DeploymentError as exc:
                raise DevnetError(f"invalid manifest {manifest}: {exc}") from exc
        elif registry:
            deployment = _deployment_from_registry(rpc, chain_id, registry)
        else:
            raise DevnetNotRunning(
                f"no deployment manifest at {manifest}; start the devnet with `marketplace up`"
            )
        if deployment.chain_id != chain_id:
            raise DevnetNotRunning(
                f"{url} is chain {chain_id}, but the manifest is for chain {deployment.chain_id}"
            )
        if rpc.call("eth_getCode", [deployment.registry, "latest"]) in (None, "0x"):
            raise DevnetNotRunning(
                f"no registry contract at {deployment.registry} on {url} (devnet state lost?); "
                "restart `marketplace up` to redeploy"
            )
    finally:
        rpc.close()
    return DevnetLocation(url, deployment, manifest if manifest.exists() else None)


def _deployment_from_registry(rpc: RawRpc, chain_id: int, registry: str) -> Deployment:
    fns = contract_abi("MarketplaceRegistry").functions
    names = [
        "usdc",
        "escrow",
        "projectImplementation",
        "verifierSigner",
        "disputeMultisig",
        "treasury",
        "feeRateBps",
    ]
    results = rpc.batch(
        [("eth_call", [{"to": registry, "data": fns[n].encode_call()}, "latest"]) for n in names]
    )
    values = {n: fns[n].decode_result(r) for n, r in zip(names, results, strict=True)}
    return Deployment(
        chain_id=chain_id,
        usdc=values["usdc"],
        escrow=values["escrow"],
        registry=to_checksum_address(registry),
        project_implementation=values["projectImplementation"],
        start_block=0,
        verifier_signer=values["verifierSigner"],
        dispute_multisig=values["disputeMultisig"],
        treasury=values["treasury"],
        fee_rate_bps=int(values["feeRateBps"]),
    )


# --- the client -----------------------------------------------------------------------------------


@dataclass
class TxResult:
    """What one transaction did: hash, block, gas, and the project it created or acted on."""

    action: str
    tx_hash: str
    block_number: int
    gas_used: int
    sender: str
    project: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    receipt: dict[str, Any] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "action": self.action,
            "txHash": self.tx_hash,
            "blockNumber": self.block_number,
            "gasUsed": self.gas_used,
            "from": self.sender,
        }
        if self.project:
            out["project"] = self.project
        out.update(self.extra)
        return out


class DevnetClient:
    """Client-side driver of one deployment. Senders are given as an anvil dev-account index
    (0..9) or an address; an address the node does not unlock is impersonated (anvil only).

    Every action method sends one transaction (after any funding it needs: TestUSDC is
    minted when a payer's balance is short, and the escrow is approved for exactly the amount),
    waits for its receipt and returns a :class:`TxResult`; a revert raises
    :class:`TransactionFailed` naming the contract's custom error.
    """

    def __init__(self, rpc_url: str, deployment: Deployment, *, timeout: float = 60.0) -> None:
        self.rpc = RawRpc(rpc_url, timeout=timeout)
        self.rpc_url = rpc_url
        self.deployment = deployment
        self.chain_id = deployment.chain_id
        self.registry = deployment.registry
        self.usdc = deployment.usdc
        self.escrow = deployment.escrow
        self.receipt_timeout = timeout
        self.registry_abi = contract_abi("MarketplaceRegistry")
        self.project_abi = contract_abi("MarketplaceProject")
        self.usdc_abi = contract_abi("TestUSDC")
        self.escrow_abi = contract_abi("MarketplaceEscrow")
        self._unlocked: set[str] | None = None
        #: The manifest this client was located through, if any.
        self.manifest: Path | None = None

    @classmethod
    def from_data_dir(
        cls, data_dir: Path, *, rpc_url: str | None = None, registry: str | None = None
    ) -> DevnetClient:
        location = locate_devnet(data_dir, rpc_url=rpc_url, registry=registry)
        client = cls(location.rpc_url, location.deployment)
        client.manifest = location.manifest
        return client

    def close(self) -> None:
        self.rpc.close()

    def __enter__(self) -> DevnetClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- accounts -------------------------------------------------------------------------

    @staticmethod
    def dev_account(index: int) -> str:
        if not 0 <= index < len(ANVIL_PRIVATE_KEYS):
            raise DevnetError(f"dev account index must be 0..{len(ANVIL_PRIVATE_KEYS) - 1}")
        return dev_address(index)

    def account(self, spec: int | str) -> str:
        """Checksummed address of ``spec``: a dev-account index (int or decimal text) or an
        address."""
        if isinstance(spec, int) or (isinstance(spec, str) and spec.isdigit()):
            return self.dev_account(int(spec))
        try:
            return to_checksum_address(spec)
        except ValueError as exc:
            raise DevnetError(f"not an account index or address: {spec!r}") from exc

    def ensure_sender(self, address: str) -> str:
        """Make sure the node signs for ``address`` (impersonating it if needed)."""
        address = to_checksum_address(address)
        if self._unlocked is None:
            self._unlocked = {a.lower() for a in self.rpc.call("eth_accounts")}
        if address.lower() not in self._unlocked:
            self.rpc.call("anvil_impersonateAccount", [address])
            balance = int(self.rpc.call("eth_getBalance", [address, "latest"]), 16)
            if balance < 10**18:
                self.rpc.call("anvil_setBalance", [address, hex(1_000 * 10**18)])
            self._unlocked.add(address.lower())
        return address

    # --- plumbing -------------------------------------------------------------------------

    def eth_call(self, to: str, fn: AbiFunction, *args: Any, block: str = "latest") -> Any:
        return fn.decode_result(
            self.rpc.call("eth_call", [{"to": to, "data": fn.encode_call(*args)}, block])
        )

    def head(self) -> dict[str, Any]:
        block = self.rpc.call("eth_getBlockByNumber", ["latest", False])
        return {
            "number": int(block["number"], 16),
            "timestamp": int(block["timestamp"], 16),
            "hash": block["hash"],
        }

    def now(self) -> int:
        return self.head()["timestamp"]

    def automine(self) -> bool | None:
        try:
            return bool(self.rpc.call("anvil_getAutomine"))
        except DevnetRpcError:
            return None

    def transact(
        self,
        action: str,
        sender: str,
        to: str,
        fn: AbiFunction,
        *args: Any,
        project: str | None = None,
    ) -> TxResult:
        """Send ``fn(*args)`` to ``to`` from ``sender``; gas is estimated first, so a revert is
        reported (decoded) before anything is sent."""
        sender = self.ensure_sender(sender)
        tx = {"from": sender, "to": to, "data": fn.encode_call(*args)}
        try:
            gas = int(self.rpc.call("eth_estimateGas", [tx]), 16)
        except DevnetRpcError as exc:
            raise TransactionFailed(
                action, decode_revert(revert_data_of(exc)), detail=str(exc)
            ) from None
        tx["gas"] = hex(gas * 5 // 4 + 30_000)
        tx_hash = self.rpc.call("eth_sendTransaction", [tx])
        receipt = self.wait_for_receipt(tx_hash)
        if int(receipt["status"], 16) != 1:
            raise TransactionFailed(action, None, tx_hash)
        return TxResult(
            action=action,
            tx_hash=tx_hash,
            block_number=int(receipt["blockNumber"], 16),
            gas_used=int(receipt["gasUsed"], 16),
            sender=sender,
            project=project,
            receipt=receipt,
        )

    def wait_for_receipt(self, tx_hash: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.receipt_timeout
        delay = 0.002
        while True:
            receipt = self.rpc.call("eth_getTransactionReceipt", [tx_hash])
            if receipt is not None:
                return receipt
            if time.monotonic() > deadline:
                hint = ""
                if self.automine() is False:
                    hint = " (automine is off: `marketplace devnet mine --automine on`)"
                raise DevnetError(f"no receipt for {tx_hash} after {self.receipt_timeout}s{hint}")
            time.sleep(delay)
            delay = min(delay * 2, 0.2)

    def _project_call(
        self, action: str, sender: str, project: str, fn_name: str, *args: Any
    ) -> TxResult:
        project = to_checksum_address(project)
        return self.transact(
            action,
            sender,
            project,
            self.project_abi.functions[fn_name],
            *args,
            project=project,
        )

    # --- reads ----------------------------------------------------------------------------

    def state(self, project: str) -> dict[str, Any]:
        """``getProjectState()`` as a dict keyed by the struct's field names (enums as ints,
        bytes32 as ``0x`` hex, addresses checksummed)."""
        return self.eth_call(
            to_checksum_address(project), self.project_abi.functions["getProjectState"]
        )

    def states(self, projects: Sequence[str], *, block: str = "latest") -> list[dict[str, Any]]:
        """:meth:`state` of many projects in JSON-RPC batches."""
        fn = self.project_abi.functions["getProjectState"]
        data = fn.encode_call()
        results = self.rpc.batch([("eth_call", [{"to": p, "data": data}, block]) for p in projects])
        return [fn.decode_result(r) for r in results]

    def allowlist(self, project: str) -> list[str]:
        return list(self.eth_call(project, self.project_abi.functions["allowlist"]))

    def owner_of(self, project: str) -> str:
        return str(self.eth_call(project, self.project_abi.functions["owner"]))

    def project_count(self) -> int:
        return int(self.eth_call(self.registry, self.registry_abi.functions["projectCount"]))

    def usdc_balance(self, account: str) -> int:
        return int(self.eth_call(self.usdc, self.usdc_abi.functions["balanceOf"], account))

    def escrow_allowance(self, account: str) -> int:
        return int(
            self.eth_call(self.usdc, self.usdc_abi.functions["allowance"], account, self.escrow)
        )

    def bid_total(self, project: str, bidder: str) -> int:
        bid = self.eth_call(project, self.project_abi.functions["getBid"], bidder)
        return int(bid["totalPayout"])

    # --- funding --------------------------------------------------------------------------

    def ensure_funds(self, account: str, amount: int) -> list[TxResult]:
        """Mint TestUSDC when ``account`` holds less than ``amount`` and approve the escrow for
        ``amount`` when its allowance is short (the escrow pulls every payment)."""
        done: list[TxResult] = []
        if amount <= 0:
            return done
        account = to_checksum_address(account)
        balance = self.usdc_balance(account)
        if balance < amount:
            done.append(self.mint(account, amount - balance, sender=account))
        if self.escrow_allowance(account) < amount:
            done.append(
                self.transact(
                    "approve (escrow allowance)",
                    account,
                    self.usdc,
                    self.usdc_abi.functions["approve"],
                    self.escrow,
                    amount,
                )
            )
        return done

    def mint(self, to: str, amount: int, *, sender: str | None = None) -> TxResult:
        """TestUSDC ``mint`` (open to anyone on the devnet token)."""
        return self.transact(
            "mint",
            sender or to,
            self.usdc,
            self.usdc_abi.functions["mint"],
            to_checksum_address(to),
            amount,
        )

    # --- creation -------------------------------------------------------------------------

    def _created(self, result: TxResult) -> TxResult:
        event = self.registry_abi.events["ProjectCreated"]
        for log in result.receipt.get("logs", []):
            if log["address"].lower() == self.registry.lower() and log["topics"][0] == (
                event.topic0
            ):
                result.project = str(event.decode_log(log)["project"])
                return result
        raise DevnetError(f"{result.tx_hash} emitted no ProjectCreated")

    def create_standard(
        self,
        owner: str,
        *,
        config_hash: bytes,
        invite_only: bool = False,
        bid_bond: int = 0,
        milestones: int = 1,
    ) -> TxResult:
        result = self.transact(
            "createProject",
            owner,
            self.registry,
            self.registry_abi.functions["createProject"],
            bytes32(config_hash),
            invite_only,
            bid_bond,
            milestones,
        )
        return self._created(result)

    def create_challenge(
        self,
        owner: str,
        *,
        config_hash: bytes,
        payout: int,
        submission_window: int,
        response_window: int,
        open_now: bool = True,
    ) -> list[TxResult]:
        """A challenge project, funded and opened at once unless ``open_now`` is false (then a
        draft, funded by :meth:`open_bidding`). The last result carries the project."""
        done: list[TxResult] = []
        name = "createChallengeProjectAndOpen" if open_now else "createChallengeProject"
        if open_now:
            done += self.ensure_funds(owner, payout)
        result = self.transact(
            name,
            owner,
            self.registry,
            self.registry_abi.functions[name],
            bytes32(config_hash),
            payout,
            submission_window,
            response_window,
        )
        done.append(self._created(result))
        return done

    # --- standard-mode and shared operations ----------------------------------------------

    def open_bidding(self, project: str, *, sender: str | None = None) -> list[TxResult]:
        """``openBidding``; a challenge draft's payout is funded first."""
        state = self.state(project)
        owner = sender or state["owner"]
        done: list[TxResult] = []
        if state["mode"] == ProjectMode.CHALLENGE:
            done += self.ensure_funds(owner, int(state["challengePayout"]))
        done.append(self._project_call("openBidding", owner, project, "openBidding"))
        return done

    def add_to_allowlist(
        self, project: str, accounts: Iterable[str], *, sender: str | None = None
    ) -> TxResult:
        addresses = [to_checksum_address(a) for a in accounts]
        return self._project_call(
            "addToAllowlist", sender or self.owner_of(project), project, "addToAllowlist", addresses
        )

    def remove_from_allowlist(
        self, project: str, accounts: Iterable[str], *, sender: str | None = None
    ) -> TxResult:
        addresses = [to_checksum_address(a) for a in accounts]
        return self._project_call(
            "removeFromAllowlist",
            sender or self.owner_of(project),
            project,
            "removeFromAllowlist",
            addresses,
        )

    def post_bid(
        self,
        project: str,
        bidder: str,
        *,
        payouts: Sequence[int],
        durations: Sequence[int],
        bid_hash: bytes,
    ) -> list[TxResult]:
        done = self.ensure_funds(bidder, int(self.state(project)["bidBond"]))
        done.append(
            self._project_call(
                "postBid",
                bidder,
                project,
                "postBid",
                list(payouts),
                list(durations),
                bytes32(bid_hash),
            )
        )
        return done

    def select_bid(self, project: str, bidder: str, *, sender: str | None = None) -> list[TxResult]:
        """``selectBid``: the owner funds the bid's total payout."""
        owner = sender or self.owner_of(project)
        done = self.ensure_funds(owner, self.bid_total(project, bidder))
        done.append(
            self._project_call(
                "selectBid", owner, project, "selectBid", to_checksum_address(bidder)
            )
        )
        return done

    def submit_milestone(
        self, project: str, index: int, *, delivery_ref: bytes, sender: str | None = None
    ) -> TxResult:
        worker = sender or self.state(project)["selectedBuilder"]
        if not sender and worker == ZERO_ADDRESS:
            raise DevnetError(f"{project} has no selected builder")
        return self._project_call(
            "submitMilestone", worker, project, "submitMilestone", index, bytes32(delivery_ref)
        )

    def approve_milestone(self, project: str, index: int, *, sender: str | None = None) -> TxResult:
        return self._project_call(
            "approveMilestone", sender or self.owner_of(project), project, "approveMilestone", index
        )

    def raise_dispute(
        self,
        project: str,
        index: int,
        reason: DisputeReason,
        *,
        reason_hash: bytes,
        sender: str | None = None,
    ) -> TxResult:
        """Owner for DeadlineMissed/LowQuality, the selected builder for OwnerInaction, unless
        ``sender`` says otherwise."""
        if sender is None:
            state = self.state(project)
            sender = (
                state["selectedBuilder"]
                if reason == DisputeReason.OWNER_INACTION
                else state["owner"]
            )
        return self._project_call(
            "raiseDispute",
            sender,
            project,
            "raiseDispute",
            index,
            int(reason),
            bytes32(reason_hash),
        )

    def submit_dispute_evidence(
        self, project: str, index: int, *, evidence_hash: bytes, sender: str
    ) -> TxResult:
        return self._project_call(
            "submitDisputeEvidence",
            sender,
            project,
            "submitDisputeEvidence",
            index,
            bytes32(evidence_hash),
        )

    def attest(
        self,
        project: str,
        index: int,
        passes: bool,
        *,
        evidence_hash: bytes,
        key: str = DEV_VERIFIER_PRIVATE_KEY,
        deadline: int | None = None,
        nonce: int | None = None,
        sender: str | None = None,
    ) -> TxResult:
        """``attestMilestone`` with an attestation signed by ``key`` (default: the dev verifier
        key). ``deadline`` defaults to an hour after the latest block, ``nonce`` to a random
        128-bit value (nonces are single use per signer). Anyone may relay it: ``sender``
        defaults to dev account 9 (the verifier's own address)."""
        project = to_checksum_address(project)
        deadline = deadline if deadline is not None else self.now() + HOUR
        nonce = nonce if nonce is not None else secrets.randbits(128)
        signature = sign_attestation(
            key,
            chain_id=self.chain_id,
            registry=self.registry,
            project=project,
            milestone_index=index,
            passes=passes,
            evidence_hash=evidence_hash,
            deadline=deadline,
            nonce=nonce,
        )
        result = self._project_call(
            "attestMilestone",
            sender or self.dev_account(9),
            project,
            "attestMilestone",
            index,
            passes,
            bytes32(evidence_hash),
            deadline,
            nonce,
            self.chain_id,
            signature,
        )
        result.extra.update(
            {"passes": passes, "nonce": str(nonce), "deadline": deadline, "milestone": index}
        )
        return result

    def resolve_dispute(
        self,
        project: str,
        outcome: DisputeOutcome,
        *,
        slash: int = 0,
        sender: str | None = None,
    ) -> TxResult:
        """``resolveDispute`` from the dispute multisig the project snapshotted (by default)."""
        sender = sender or self.state(project)["disputeMultisig"]
        return self._project_call(
            "resolveDispute", sender, project, "resolveDispute", int(outcome), slash
        )

    def finalize_dispute(self, project: str, *, sender: str | None = None) -> TxResult:
        return self._project_call(
            "finalizeDispute", sender or self.dev_account(0), project, "finalizeDispute"
        )

    # --- challenge mode -------------------------------------------------------------------

    def submit_challenge(self, project: str, submitter: str, *, submission_hash: bytes) -> TxResult:
        return self._project_call(
            "submitChallengeSubmission",
            submitter,
            project,
            "submitChallengeSubmission",
            bytes32(submission_hash),
        )

    def enter_selection_phase(self, project: str, *, sender: str | None = None) -> TxResult:
        return self._project_call(
            "enterChallengeSelectionPhase",
            sender or self.owner_of(project),
            project,
            "enterChallengeSelectionPhase",
        )

    def select_challenge_winner(
        self, project: str, winner: str, *, decision_hash: bytes, sender: str | None = None
    ) -> TxResult:
        return self._project_call(
            "selectChallengeWinner",
            sender or self.owner_of(project),
            project,
            "selectChallengeWinner",
            to_checksum_address(winner),
            bytes32(decision_hash),
        )

    def cancel_before_selection(self, project: str, *, sender: str | None = None) -> TxResult:
        return self._project_call(
            "cancelBeforeSelection",
            sender or self.owner_of(project),
            project,
            "cancelBeforeSelection",
        )

    # --- time and blocks ------------------------------------------------------------------

    def advance_time(self, seconds: int) -> dict[str, Any]:
        """``evm_increaseTime`` + ``evm_mine``; the new head block."""
        if seconds < 0:
            raise DevnetError("cannot move time backwards")
        self.rpc.call("evm_increaseTime", [seconds])
        self.rpc.call("evm_mine")
        return self.head()

    def mine(self, blocks: int = 1) -> dict[str, Any]:
        for _ in range(blocks):
            self.rpc.call("evm_mine")
        return self.head()

    def set_automine(self, enabled: bool) -> None:
        self.rpc.call("evm_setAutomine", [enabled])

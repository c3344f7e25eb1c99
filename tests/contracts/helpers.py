"""Support code for the contract tests: a thin synchronous driver over web3 + anvil.

Reverts are checked with ``eth_call`` at an exact block timestamp (anvil block overrides), so a
"should revert at T" check neither mines a block nor moves time. Successful steps are mined as
real transactions, optionally at an exact timestamp (``evm_setNextBlockTimestamp``), with a fixed
gas limit so no gas estimation runs at a different time.

The enums and EIP-712 signing helpers (``marketplace.chain``) and the amounts and revert
decoding (``marketplace_devstack.devnet.client``) live in the packages and are re-exported here;
what stays is test-only: the ``Chain`` driver (exact timestamps, fixed gas, ``reverts`` assertions),
``Actors`` and ``h``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from eth_account import Account
from eth_utils import keccak, to_checksum_address
from web3 import Web3
from web3.contract import Contract
from web3.logs import DISCARD
from web3.types import RPCEndpoint, TxReceipt

from marketplace.chain import hashes
from marketplace.chain.abi import abi_type
from marketplace.chain.artifacts import load_artifact
from marketplace.chain.eip712 import (
    ATTESTATION_TYPES,
    CHALLENGE_FALLBACK_TYPES,
    PERMIT_TYPES,
    VERIFIER_DOMAIN_NAME,
    VERIFIER_DOMAIN_VERSION,
    ranked_submitters_hash,
    sign_attestation,
    sign_fallback,
    sign_permit,
    verifier_domain,
)
from marketplace.chain.enums import (
    BiddingAccess,
    DisputeOutcome,
    DisputePhase,
    DisputeReason,
    MilestoneStatus,
    ProjectMode,
    ProjectStatus,
)
from marketplace_devstack.devnet.client import (
    DAY,
    HOUR,
    USDC,
    ZERO_ADDRESS,
    ZERO_HASH,
    decode_revert,
    decode_struct,
)
from marketplace_devstack.devnet.deploy import (
    ANVIL_PRIVATE_KEYS,
    DEV_VERIFIER_PRIVATE_KEY,
    Deployment,
    contract_at,
)

__all__ = [  # re-exported for the contract, indexer, claims and records tests
    "ANONYMOUS",
    "ATTESTATION_TYPES",
    "CHALLENGE_FALLBACK_TYPES",
    "DAY",
    "GAS",
    "HOUR",
    "KEYS",
    "PERMIT_TYPES",
    "USDC",
    "VERIFIER_DOMAIN_NAME",
    "VERIFIER_DOMAIN_VERSION",
    "ZERO_ADDRESS",
    "ZERO_HASH",
    "Actors",
    "BiddingAccess",
    "Chain",
    "DisputeOutcome",
    "DisputePhase",
    "DisputeReason",
    "MilestoneStatus",
    "ProjectMode",
    "ProjectStatus",
    "direct_config_hash",
    "h",
    "ranked_submitters_hash",
    "sign_attestation",
    "sign_fallback",
    "verifier_domain",
]

GAS = 8_000_000
# Any address that never signs anything: the on-chain equivalent of an anonymous caller.
ANONYMOUS = to_checksum_address("0x" + "5a" * 20)


def h(label: str) -> bytes:
    """A deterministic non-zero bytes32 for test data."""
    return keccak(text=label)


def direct_config_hash(
    title: str, description: str, repo_url: str, project_mode: str, bidding_access: str
) -> bytes:
    """Spec "Hash rules", direct mode, as raw bytes (marketplace.chain.hashes gives hex)."""
    return bytes.fromhex(
        hashes.direct_config_hash(title, description, repo_url, project_mode, bidding_access)[2:]
    )


@dataclass(frozen=True)
class Actors:
    admin: str
    multisig: str
    treasury: str
    owner: str
    worker: str
    bidder2: str
    bidder3: str
    submitter: str
    stranger: str
    verifier: str

    @classmethod
    def from_dev_keys(cls) -> Actors:
        a = [Account.from_key(k).address for k in ANVIL_PRIVATE_KEYS]
        return cls(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9])


KEYS = {Account.from_key(k).address: k for k in ANVIL_PRIVATE_KEYS}


class Chain:
    """Test driver bound to one deployment."""

    def __init__(self, w3: Web3, deployment: Deployment) -> None:
        self.w3 = w3
        self.dep = deployment
        self.chain_id = deployment.chain_id
        self.usdc = contract_at(w3, "TestUSDC", deployment.usdc)
        self.escrow = contract_at(w3, "MarketplaceEscrow", deployment.escrow)
        self.registry = contract_at(w3, "MarketplaceRegistry", deployment.registry)
        self.a = Actors.from_dev_keys()
        self._project_abi = load_artifact("MarketplaceProject")["abi"]
        self._state_abi: dict[str, Any] = dict(
            next(
                i["outputs"][0]
                for i in self._project_abi
                if i["type"] == "function" and i["name"] == "getProjectState"
            )
        )
        self._nonces = itertools.count(1)

    # ---------------------------------------------------------------- plumbing

    def rpc(self, method: str, *params: Any) -> Any:
        response = self.w3.provider.make_request(RPCEndpoint(method), list(params))
        if "error" in response:
            raise RuntimeError(f"{method}: {response['error']}")
        return response["result"]

    def now(self) -> int:
        return int(self.w3.eth.get_block("latest")["timestamp"])

    def mine_at(self, timestamp: int) -> None:
        self.rpc("evm_mine", timestamp)

    def nonce(self) -> int:
        return next(self._nonces)

    def send(self, sender: str, fn: Any, *, at: int | None = None) -> TxReceipt:
        if at is not None:
            self.rpc("evm_setNextBlockTimestamp", at)
        tx_hash = fn.transact({"from": sender, "gas": GAS})
        return self.w3.eth.wait_for_transaction_receipt(tx_hash)

    def ok(self, sender: str, fn: Any, *, at: int | None = None) -> TxReceipt:
        """Mine ``fn`` from ``sender`` (at timestamp ``at``) and require success."""
        before = self.now()
        receipt = self.send(sender, fn, at=at)
        if receipt["status"] != 1:
            error = self.simulate(sender, fn, at=at or before + 1)
            raise AssertionError(f"{fn.fn_name} from {sender} reverted: {error}")
        return receipt

    def simulate(self, sender: str, fn: Any, *, at: int | None = None) -> tuple[str, tuple] | None:
        """eth_call at timestamp ``at`` (default: latest + 1); the decoded custom error or None."""
        tx = {
            "from": sender,
            "to": fn.address,
            "data": fn._encode_transaction_data(),
            "gas": hex(GAS),
        }
        time = at if at is not None else self.now() + 1
        response = self.w3.provider.make_request(
            RPCEndpoint("eth_call"), [tx, "latest", {}, {"time": hex(time)}]
        )
        if "error" not in response:
            return None
        data = response["error"].get("data") or "0x"
        decoded = decode_revert(data)
        return decoded if decoded is not None else (f"<unknown revert {data}>", ())

    def reverts(
        self,
        sender: str,
        fn: Any,
        error: str,
        *,
        at: int | None = None,
        args: tuple | None = None,
    ) -> tuple:
        """Assert that ``fn`` from ``sender`` reverts with custom error ``error``."""
        result = self.simulate(sender, fn, at=at)
        assert result is not None, f"{fn.fn_name} from {sender} did not revert (expected {error})"
        name, decoded = result
        assert name == error, f"{fn.fn_name} reverted with {name}{decoded}, expected {error}"
        if args is not None:
            assert decoded == args, f"{error} args {decoded} != {args}"
        return decoded

    def events(self, receipt: TxReceipt, contract: Contract, name: str) -> list[dict[str, Any]]:
        """Decoded args of every ``name`` event emitted by ``contract`` in ``receipt``."""
        logs = getattr(contract.events, name)().process_receipt(receipt, errors=DISCARD)
        return [dict(log["args"]) for log in logs if log["address"] == contract.address]

    def event_names(self, receipt: TxReceipt, contract: Contract) -> list[str]:
        topic_to_name = {
            keccak(text=f"{e['name']}({','.join(abi_type(i) for i in e['inputs'])})"): e["name"]
            for e in contract.abi
            if e["type"] == "event"
        }
        return [
            topic_to_name.get(bytes(log["topics"][0]), "?")
            for log in receipt["logs"]
            if log["address"] == contract.address
        ]

    # ------------------------------------------------------------------ tokens

    def balance(self, account: str) -> int:
        return int(self.usdc.functions.balanceOf(account).call())

    def escrow_balance(self, project: Contract | str) -> int:
        address = project if isinstance(project, str) else project.address
        return int(self.escrow.functions.balanceOf(address).call())

    def mint(self, account: str, amount: int) -> None:
        self.ok(self.a.admin, self.usdc.functions.mint(account, amount))

    def fund_and_approve(self, account: str, amount: int, spender: str | None = None) -> None:
        """Mint ``amount`` to ``account`` and approve ``spender`` (default: the escrow)."""
        self.mint(account, amount)
        self.ok(account, self.usdc.functions.approve(spender or self.escrow.address, amount))

    def permit(
        self, owner: str, value: int, *, spender: str | None = None, deadline: int | None = None
    ) -> tuple[int, int, bytes, bytes]:
        """(deadline, v, r, s) of an EIP-2612 permit signed by ``owner``."""
        deadline = deadline if deadline is not None else self.now() + DAY
        v, r, s = sign_permit(
            KEYS[owner],
            chain_id=self.chain_id,
            token=self.usdc.address,
            owner=owner,
            spender=spender or self.escrow.address,
            value=value,
            nonce=int(self.usdc.functions.nonces(owner).call()),
            deadline=deadline,
        )
        return deadline, v, r, s

    # ---------------------------------------------------------------- projects

    def project(self, address: str) -> Contract:
        return self.w3.eth.contract(address=to_checksum_address(address), abi=self._project_abi)

    def state(self, project: Contract) -> dict[str, Any]:
        return decode_struct(self._state_abi, project.functions.getProjectState().call())

    def created_project(self, receipt: TxReceipt) -> Contract:
        (event,) = self.events(receipt, self.registry, "ProjectCreated")
        return self.project(event["project"])

    def create_standard(
        self,
        *,
        owner: str | None = None,
        invite_only: bool = False,
        bid_bond: int = 50 * USDC,
        milestones: int = 2,
        config_hash: bytes | None = None,
    ) -> Contract:
        owner = owner or self.a.owner
        config_hash = config_hash or h(f"config-{self.nonce()}")
        receipt = self.ok(
            owner,
            self.registry.functions.createProject(config_hash, invite_only, bid_bond, milestones),
        )
        return self.created_project(receipt)

    def open_standard(self, **kwargs: Any) -> Contract:
        project = self.create_standard(**kwargs)
        self.ok(self.owner_of(project), project.functions.openBidding())
        return project

    def owner_of(self, project: Contract) -> str:
        return project.functions.owner().call()

    def post_bid(
        self,
        project: Contract,
        bidder: str,
        payouts: Sequence[int],
        durations: Sequence[int],
        bid_hash: bytes | None = None,
    ) -> TxReceipt:
        bond = int(self.state(project)["bidBond"])
        if bond:
            self.fund_and_approve(bidder, bond)
        return self.ok(
            bidder,
            project.functions.postBid(
                list(payouts), list(durations), bid_hash or h(f"bid-{bidder}")
            ),
        )

    def select(self, project: Contract, bidder: str) -> TxReceipt:
        total = int(project.functions.getBid(bidder).call()[4])
        owner = self.owner_of(project)
        self.fund_and_approve(owner, total)
        return self.ok(owner, project.functions.selectBid(bidder))

    def building(
        self,
        *,
        payouts: Sequence[int] = (300 * USDC, 700 * USDC),
        durations: Sequence[int] = (3 * DAY, 5 * DAY),
        bid_bond: int = 50 * USDC,
        invite_only: bool = False,
    ) -> Contract:
        """A standard project in Building with ``a.worker`` selected."""
        project = self.open_standard(
            milestones=len(payouts), bid_bond=bid_bond, invite_only=invite_only
        )
        if invite_only:
            self.ok(self.a.owner, project.functions.addToAllowlist([self.a.worker]))
        self.post_bid(project, self.a.worker, payouts, durations)
        self.select(project, self.a.worker)
        return project

    def submit(
        self,
        project: Contract,
        index: int,
        *,
        at: int | None = None,
        delivery_ref: str | None = None,
    ) -> TxReceipt:
        """``a.worker`` submits milestone ``index``: its deliveryRefHash is keccak256 of
        ``delivery_ref``'s UTF-8 bytes (as a verifier job checks), or a made-up hash."""
        ref_hash = (
            keccak(delivery_ref.encode("utf-8"))
            if delivery_ref is not None
            else h(f"delivery-{index}")
        )
        return self.ok(self.a.worker, project.functions.submitMilestone(index, ref_hash), at=at)

    def dispute(
        self,
        project: Contract,
        index: int = 0,
        reason: DisputeReason = DisputeReason.LOW_QUALITY,
        *,
        delivery_ref: str | None = None,
    ) -> TxReceipt:
        """Raise a LowQuality dispute on submitted milestone ``index`` (submits it if pending,
        with ``delivery_ref``)."""
        m = self.state(project)["milestones"][index]
        if m["status"] == MilestoneStatus.PENDING:
            self.submit(project, index, delivery_ref=delivery_ref)
        return self.ok(
            self.a.owner, project.functions.raiseDispute(index, int(reason), h("reason"))
        )

    def attest(
        self,
        project: Contract,
        index: int,
        passes: bool,
        *,
        at: int | None = None,
        key: str = DEV_VERIFIER_PRIVATE_KEY,
    ) -> TxReceipt:
        nonce = self.nonce()
        deadline = (at or self.now()) + HOUR
        signature = sign_attestation(
            key,
            chain_id=self.chain_id,
            registry=self.registry.address,
            project=project.address,
            milestone_index=index,
            passes=passes,
            evidence_hash=h("verifier-evidence"),
            deadline=deadline,
            nonce=nonce,
        )
        fn = project.functions.attestMilestone(
            index, passes, h("verifier-evidence"), deadline, nonce, self.chain_id, signature
        )
        return self.ok(self.a.stranger, fn, at=at)

    def create_challenge(
        self,
        *,
        owner: str | None = None,
        payout: int = 1_000 * USDC,
        submission_window: int = 3 * DAY,
        response_window: int = 2 * DAY,
    ) -> Contract:
        owner = owner or self.a.owner
        self.fund_and_approve(owner, payout)
        receipt = self.ok(
            owner,
            self.registry.functions.createChallengeProjectAndOpen(
                h(f"challenge-{self.nonce()}"), payout, submission_window, response_window
            ),
        )
        return self.created_project(receipt)

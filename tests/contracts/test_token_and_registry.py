"""TestUSDC, MarketplaceRegistry (creation, config, EIP-712 domain) and escrow access rules."""

from __future__ import annotations

import pytest
from eth_abi import encode
from eth_account import Account
from eth_account.messages import encode_typed_data
from eth_utils import keccak

from marketplace_devstack.devnet.deploy import DEV_VERIFIER_PRIVATE_KEY
from tests.contracts.helpers import (
    ANONYMOUS,
    ATTESTATION_TYPES,
    CHALLENGE_FALLBACK_TYPES,
    DAY,
    USDC,
    ZERO_ADDRESS,
    BiddingAccess,
    Chain,
    ProjectMode,
    ProjectStatus,
    direct_config_hash,
    h,
    ranked_submitters_hash,
    sign_attestation,
    verifier_domain,
)

# --------------------------------------------------------------------- USDC


def test_usdc_metadata_and_open_mint(chain: Chain) -> None:
    usdc = chain.usdc.functions
    assert usdc.decimals().call() == 6
    assert usdc.symbol().call() == "USDC"
    chain.ok(chain.a.stranger, usdc.mint(chain.a.worker, 5 * USDC))
    assert chain.balance(chain.a.worker) == 5 * USDC
    assert usdc.totalSupply().call() == 5 * USDC


def test_usdc_permit(chain: Chain) -> None:
    a, usdc = chain.a, chain.usdc.functions
    deadline, v, r, s = chain.permit(a.owner, 7 * USDC)
    # Wrong value for the signature -> invalid.
    chain.reverts(
        a.stranger,
        usdc.permit(a.owner, chain.escrow.address, 8 * USDC, deadline, v, r, s),
        "PermitInvalidSignature",
    )
    chain.reverts(
        a.stranger,
        usdc.permit(a.owner, chain.escrow.address, 7 * USDC, deadline, v, r, s),
        "PermitExpired",
        at=deadline + 1,
    )
    chain.ok(a.stranger, usdc.permit(a.owner, chain.escrow.address, 7 * USDC, deadline, v, r, s))
    assert usdc.allowance(a.owner, chain.escrow.address).call() == 7 * USDC
    assert usdc.nonces(a.owner).call() == 1
    chain.reverts(
        a.stranger,
        usdc.permit(a.owner, chain.escrow.address, 7 * USDC, deadline, v, r, s),
        "PermitInvalidSignature",
    )


def test_usdc_transfer_from_requires_allowance(chain: Chain) -> None:
    a, usdc = chain.a, chain.usdc.functions
    chain.mint(a.owner, 10 * USDC)
    chain.reverts(
        a.stranger,
        usdc.transferFrom(a.owner, a.stranger, 1),
        "ERC20InsufficientAllowance",
        args=(a.stranger, 0, 1),
    )


# ----------------------------------------------------------------- creation


def test_create_project_emits_project_created_exactly(chain: Chain) -> None:
    a = chain.a
    config_hash = direct_config_hash("Title", "Desc", "https://x", "standard", "open")
    receipt = chain.ok(
        a.owner, chain.registry.functions.createProject(config_hash, False, 10 * USDC, 3)
    )
    block = chain.w3.eth.get_block(receipt["blockNumber"])
    registry_logs = [log for log in receipt["logs"] if log["address"] == chain.registry.address]
    assert chain.event_names(receipt, chain.registry) == ["ProjectCreated"]
    assert len(registry_logs) == 1
    (event,) = chain.events(receipt, chain.registry, "ProjectCreated")
    project = chain.project(event["project"])
    assert event == {
        "project": project.address,
        "owner": a.owner,
        "configHash": config_hash,
        "timestamp": block["timestamp"],
    }
    # Exact topic layout: signature, indexed project, indexed owner; data = configHash, timestamp.
    log = registry_logs[0]
    assert bytes(log["topics"][0]) == keccak(text="ProjectCreated(address,address,bytes32,uint256)")
    assert bytes(log["topics"][1])[12:] == bytes.fromhex(project.address[2:])
    assert bytes(log["topics"][2])[12:] == bytes.fromhex(a.owner[2:])
    assert bytes(log["data"]) == encode(["bytes32", "uint256"], [config_hash, block["timestamp"]])

    assert chain.registry.functions.isProject(project.address).call()
    assert chain.registry.functions.projectCount().call() == 1
    assert chain.registry.functions.projectAt(0).call() == project.address
    state = chain.state(project)
    assert state["owner"] == a.owner
    assert state["registry"] == chain.registry.address
    assert state["status"] == ProjectStatus.DRAFT
    assert state["mode"] == ProjectMode.STANDARD
    assert state["biddingAccess"] == BiddingAccess.OPEN
    assert state["configHash"] == config_hash
    assert state["createdAt"] == block["timestamp"]
    assert state["milestoneCount"] == 3
    assert state["bidBond"] == 10 * USDC
    assert len(state["milestones"]) == 3
    assert state["feeRateBps"] == 0 and state["verifierSigner"] == ZERO_ADDRESS  # not yet opened
    assert chain.event_names(receipt, project) == ["ProjectInitialized"]


def test_project_is_eip1167_clone(chain: Chain) -> None:
    project = chain.create_standard()
    code = chain.w3.eth.get_code(project.address).to_0x_hex()
    impl = chain.dep.project_implementation[2:].lower()
    assert code == f"0x363d3d373d3d3d363d73{impl}5af43d82803e903d91602b57fd5bf3"


@pytest.mark.parametrize("count", [0, 101])
def test_create_project_rejects_milestone_count(chain: Chain, count: int) -> None:
    chain.reverts(
        chain.a.owner,
        chain.registry.functions.createProject(h("c"), False, 0, count),
        "InvalidMilestoneCount",
        args=(count,),
    )


def test_create_project_accepts_hundred_milestones(chain: Chain) -> None:
    project = chain.create_standard(milestones=100)
    assert len(chain.state(project)["milestones"]) == 100


def test_projects_cannot_be_reinitialized(chain: Chain) -> None:
    a = chain.a
    project = chain.create_standard()
    chain.reverts(
        a.stranger,
        project.functions.initializeStandard(a.stranger, h("x"), False, 0, 1),
        "AlreadyInitialized",
    )
    implementation = chain.project(chain.dep.project_implementation)
    chain.reverts(
        a.stranger,
        implementation.functions.initializeStandard(a.stranger, h("x"), False, 0, 1),
        "AlreadyInitialized",
    )
    chain.reverts(
        a.stranger,
        implementation.functions.initializeChallenge(a.stranger, h("x"), 1, 1, 1),
        "AlreadyInitialized",
    )


# ------------------------------------------------------------------- config


@pytest.mark.parametrize("caller", ["owner", "stranger", "multisig"])
def test_config_setters_admin_only(chain: Chain, caller: str) -> None:
    a, reg = chain.a, chain.registry.functions
    who = getattr(a, caller)
    for fn in (
        reg.setFeeRateBps(10),
        reg.setDisputeMultisig(a.stranger),
        reg.setVerifierSigner(a.stranger),
        reg.setTreasury(a.stranger),
        reg.setConfig((10, a.stranger, a.stranger, a.stranger)),
        reg.transferAdmin(a.stranger),
    ):
        chain.reverts(who, fn, "NotAdmin")
        chain.reverts(ANONYMOUS, fn, "NotAdmin")


def test_config_validation_and_admin_transfer(chain: Chain) -> None:
    a, reg = chain.a, chain.registry.functions
    chain.reverts(a.admin, reg.setFeeRateBps(2_001), "FeeRateTooHigh", args=(2_001,))
    chain.ok(a.admin, reg.setFeeRateBps(2_000))
    chain.reverts(a.admin, reg.setTreasury(ZERO_ADDRESS), "ZeroAddress")
    chain.reverts(a.admin, reg.transferAdmin(ZERO_ADDRESS), "ZeroAddress")
    receipt = chain.ok(a.admin, reg.transferAdmin(a.stranger))
    assert chain.events(receipt, chain.registry, "AdminTransferred") == [
        {"previousAdmin": a.admin, "newAdmin": a.stranger}
    ]
    chain.reverts(a.admin, reg.setFeeRateBps(1), "NotAdmin")
    receipt = chain.ok(a.stranger, reg.setFeeRateBps(1))
    assert chain.events(receipt, chain.registry, "ConfigUpdated") == [
        {
            "feeRateBps": 1,
            "disputeMultisig": a.multisig,
            "verifierSigner": a.verifier,
            "treasury": a.treasury,
        }
    ]


def test_config_changes_only_affect_projects_not_yet_open(chain: Chain) -> None:
    a, reg = chain.a, chain.registry.functions
    opened = chain.open_standard()
    draft = chain.create_standard()
    chain.ok(a.admin, reg.setConfig((500, a.bidder3, a.submitter, a.stranger)))
    chain.ok(a.owner, draft.functions.openBidding())
    old, new = chain.state(opened), chain.state(draft)
    assert (old["feeRateBps"], old["disputeMultisig"], old["verifierSigner"], old["treasury"]) == (
        250,
        a.multisig,
        a.verifier,
        a.treasury,
    )
    assert (new["feeRateBps"], new["disputeMultisig"], new["verifierSigner"], new["treasury"]) == (
        500,
        a.bidder3,
        a.submitter,
        a.stranger,
    )


# ----------------------------------------------------------- EIP-712 domain


def test_eip712_hashing_matches_eth_account(chain: Chain) -> None:
    reg = chain.registry.functions
    domain = dict(verifier_domain(chain.chain_id, chain.registry.address))
    project = chain.create_standard()
    message = {
        "project": project.address,
        "milestoneIndex": 3,
        "passes": True,
        "evidenceHash": h("e"),
        "deadline": 123,
        "nonce": 9,
        "chainId": chain.chain_id,
    }
    signable = encode_typed_data(domain, ATTESTATION_TYPES, message)
    assert bytes(signable.header) == reg.domainSeparator().call()
    type_hash = keccak(
        text="Attestation(address project,uint16 milestoneIndex,bool passes,bytes32 evidenceHash,"
        "uint256 deadline,uint256 nonce,uint256 chainId)"
    )
    assert project.functions.ATTESTATION_TYPEHASH().call() == type_hash
    struct_hash = keccak(
        encode(
            ["bytes32", "address", "uint16", "bool", "bytes32", "uint256", "uint256", "uint256"],
            [type_hash, project.address, 3, True, h("e"), 123, 9, chain.chain_id],
        )
    )
    assert bytes(signable.body) == struct_hash
    digest = keccak(b"\x19\x01" + bytes(signable.header) + bytes(signable.body))
    assert reg.hashTypedData(struct_hash).call() == digest
    signature = sign_attestation(
        DEV_VERIFIER_PRIVATE_KEY,
        chain_id=chain.chain_id,
        registry=chain.registry.address,
        project=project.address,
        milestone_index=3,
        passes=True,
        evidence_hash=h("e"),
        deadline=123,
        nonce=9,
    )
    assert Account.recover_message(signable, signature=signature) == chain.a.verifier

    fallback_type = keccak(
        text="ChallengeFallback(address project,bytes32 rankedSubmittersHash,bytes32 rankingHash,"
        "uint256 deadline,uint256 nonce,uint256 chainId)"
    )
    assert project.functions.CHALLENGE_FALLBACK_TYPEHASH().call() == fallback_type
    ranked = [chain.a.worker, chain.a.bidder2]
    fallback = encode_typed_data(
        domain,
        CHALLENGE_FALLBACK_TYPES,
        {
            "project": project.address,
            "rankedSubmittersHash": ranked_submitters_hash(ranked),
            "rankingHash": h("r"),
            "deadline": 1,
            "nonce": 2,
            "chainId": chain.chain_id,
        },
    )
    assert bytes(fallback.body) == keccak(
        encode(
            ["bytes32", "address", "bytes32", "bytes32", "uint256", "uint256", "uint256"],
            [fallback_type, project.address, ranked_submitters_hash(ranked), h("r"), 1, 2, 31337],
        )
    )
    # The ranked-submitters hash equals the EIP-712 encoding of an address[] value.
    as_array = encode_typed_data(
        domain,
        {"L": [{"name": "a", "type": "address[]"}]},
        {"a": ranked},
    )
    l_type = keccak(text="L(address[] a)")
    assert bytes(as_array.body) == keccak(l_type + ranked_submitters_hash(ranked))


def test_consume_verifier_signature_is_project_only(chain: Chain) -> None:
    a = chain.a
    fn = chain.registry.functions.consumeVerifierSignature(a.verifier, h("s"), 1, b"\x00" * 65)
    for caller in (a.stranger, a.verifier, a.admin, ANONYMOUS):
        chain.reverts(caller, fn, "NotProject", args=(caller,))


# ------------------------------------------------------------------- escrow


def test_escrow_is_project_only(chain: Chain) -> None:
    a, esc = chain.a, chain.escrow.functions
    chain.fund_and_approve(a.owner, 10 * USDC)
    for caller in (a.owner, a.stranger, a.admin, ANONYMOUS):
        chain.reverts(caller, esc.deposit(a.owner, 1), "NotProject", args=(caller,))
        chain.reverts(caller, esc.release(caller, 1), "NotProject", args=(caller,))
        chain.reverts(
            caller,
            esc.depositWithPermit(a.owner, 1, (0, 0, b"\x00" * 32, b"\x00" * 32)),
            "NotProject",
        )


def test_escrow_tracks_balance_per_project(chain: Chain) -> None:
    a = chain.a
    first = chain.open_standard(bid_bond=10 * USDC)
    second = chain.open_standard(bid_bond=25 * USDC)
    chain.post_bid(first, a.worker, [USDC, USDC], [DAY, DAY])
    chain.post_bid(second, a.worker, [USDC, USDC], [DAY, DAY])
    chain.post_bid(second, a.bidder2, [USDC, USDC], [DAY, DAY])
    assert chain.escrow_balance(first) == 10 * USDC
    assert chain.escrow_balance(second) == 50 * USDC
    assert chain.balance(chain.escrow.address) == 60 * USDC

"""The log fold's pieces as plain function calls: argument positions against the ABI, the hex
decoder against the ABI decoder, and the rules a devnet does not reach (a resolution whose
transaction logs no time, logs of unknown events). The fold against a real chain, field by field
against ``getProjectState()``, is tests/integration/indexer/test_log_state.py."""

from __future__ import annotations

import copy
import random
from datetime import UTC, datetime
from typing import Any

import pytest
from eth_abi import encode

from marketplace.chain.abi import ContractAbi, abi_type
from marketplace.chain.loghex import HexEvent
from marketplace.chain.rpc import RpcLog
from marketplace.events.types import (
    BidChanges,
    MilestoneChanges,
    ProjectChangedPayload,
    ProjectCreatedPayload,
)
from marketplace.indexer.changes import snapshot_events, with_bid_events
from marketplace.indexer.engine import IndexerConfig, IndexerEngine
from marketplace.indexer.logstate import LogFolder, ProjectFold, check_layout
from marketplace.storage.read_model_rows import ProjectCreation

PROJECT_ABI = ContractAbi.load("MarketplaceProject")
REGISTRY_ABI = ContractAbi.load("MarketplaceRegistry")
PROJECT = "0x" + "ab" * 20
OWNER = "0x" + "11" * 20
WORKER = "0x" + "22" * 20


def value_of(kind: str, rng: random.Random) -> Any:
    if kind.endswith("[]"):
        return [value_of(kind[:-2], rng) for _ in range(rng.randint(0, 4))]
    if kind == "address":
        return "0x" + rng.randbytes(20).hex()
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "bytes32":
        return rng.randbytes(32)
    bits = int(kind[4:])
    return rng.choice([0, 1, 2**bits - 1, rng.getrandbits(bits)])


def make_log(abi: ContractAbi, name: str, rng: random.Random, **fixed: Any) -> RpcLog:
    event = abi.events[name]
    topics = [event.topic0]
    plain_types, plain_values = [], []
    for param in event.abi["inputs"]:
        kind = abi_type(param)
        value = fixed.get(param["name"], value_of(kind, rng))
        if param["indexed"]:
            topics.append("0x" + encode([kind], [value]).hex())
        else:
            plain_types.append(kind)
            plain_values.append(value)
    return {
        "address": PROJECT,
        "topics": topics,
        "data": "0x" + encode(plain_types, plain_values).hex(),
        "blockNumber": "0x10",
        "blockHash": "0x" + "ab" * 32,
        "logIndex": "0x1",
        "transactionIndex": "0x0",
        "transactionHash": fixed.get("tx", "0x" + "cd" * 32),
    }


@pytest.mark.parametrize(
    ("abi", "name"),
    [(PROJECT_ABI, name) for name in PROJECT_ABI.events]
    + [(REGISTRY_ABI, name) for name in REGISTRY_ABI.events],
)
def test_hex_decoder_reads_what_the_abi_decoder_reads(abi: ContractAbi, name: str) -> None:
    rng = random.Random(name)
    decoder = HexEvent(abi.events[name])
    for _ in range(20):
        entry = make_log(abi, name, rng)
        assert decoder.decode(entry) == abi.events[name].decode_log(entry, checksum_addresses=False)


def test_hex_decoder_refuses_short_data() -> None:
    entry = make_log(PROJECT_ABI, "BidPosted", random.Random(1), payouts=[1, 2], durations=[3, 4])
    entry["data"] = entry["data"][:-64]
    with pytest.raises(ValueError, match="too short"):
        HexEvent(PROJECT_ABI.events["BidPosted"]).decode(entry)


def test_the_argument_positions_match_the_abi_and_a_moved_one_is_refused() -> None:
    check_layout(PROJECT_ABI)
    moved = copy.deepcopy(PROJECT_ABI)
    inputs = moved.events["StatusChanged"].abi["inputs"]
    inputs[0], inputs[1] = inputs[1], inputs[0]
    with pytest.raises(ValueError, match=r"StatusChanged\.newStatus"):
        check_layout(moved)


def test_project_created_is_read_in_place() -> None:
    engine = IndexerEngine(IndexerConfig(1, "http://unused", "0x" + "00" * 20, 0), None, None)  # type: ignore[arg-type]
    entry = make_log(REGISTRY_ABI, "ProjectCreated", random.Random(3))
    entry["blockNumber"], entry["logIndex"] = "0x2a", "0x7"
    args = REGISTRY_ABI.events["ProjectCreated"].decode_log(entry, checksum_addresses=False)
    assert engine._creation(entry) == ProjectCreation(
        project_address=str(args["project"]),
        owner_address=str(args["owner"]),
        config_hash=str(args["configHash"]),
        block_number=42,
        log_index=7,
    )


def created(folder: LogFolder) -> ProjectFold:
    creation = ProjectCreation(PROJECT, OWNER, "0x" + "ee" * 32, 5, 0)
    fold = ProjectFold.created(creation, 1_700_000_000)
    rng = random.Random(4)
    folder.apply(
        fold,
        make_log(
            PROJECT_ABI,
            "ProjectInitialized",
            rng,
            mode=0,
            biddingAccess=1,
            bidBond=50 * 10**6,
            milestoneCount=2,
            challengePayout=0,
            challengeSubmissionWindowSeconds=0,
            challengeOwnerResponseWindowSeconds=0,
        ),
    )
    return fold


def test_a_resolution_without_a_logged_time_is_reported_for_the_block_time() -> None:
    folder = LogFolder(PROJECT_ABI)
    fold = created(folder)
    rng = random.Random(5)
    folder.apply(fold, make_log(PROJECT_ABI, "DisputeRaised", rng, milestoneIndex=1, reason=1))
    assert fold.project["dispute_phase"] == "challenged"
    resolved = make_log(PROJECT_ABI, "DisputeResolved", rng, milestoneIndex=1, tx="0x" + "01" * 32)
    folder.apply(fold, resolved)
    # A time logged by another transaction does not count.
    folder.apply(
        fold, make_log(PROJECT_ABI, "ProjectFailed", rng, failedAt=99, tx="0x" + "02" * 32)
    )
    assert fold.project["dispute_phase"] is None and fold.project["dispute_reason"] is None
    fold.close_pending()
    assert fold.unresolved == [(1, resolved)]
    fold.resolve(1, 1_700_000_500)
    _, milestones = fold.rows()
    assert milestones[1].resolved_at == datetime.fromtimestamp(1_700_000_500, UTC)
    assert milestones[0].resolved_at is None


def test_the_time_of_the_same_transaction_stamps_the_resolution() -> None:
    folder = LogFolder(PROJECT_ABI)
    fold = created(folder)
    rng = random.Random(6)
    tx = "0x" + "03" * 32
    folder.apply(fold, make_log(PROJECT_ABI, "DisputeRaised", rng, milestoneIndex=0, reason=0))
    folder.apply(fold, make_log(PROJECT_ABI, "DisputeFinalized", rng, milestoneIndex=0, tx=tx))
    folder.apply(
        fold,
        make_log(PROJECT_ABI, "MilestoneApproved", rng, milestoneIndex=0, approvedAt=77, tx=tx),
    )
    fold.close_pending()
    assert fold.unresolved == []
    _, milestones = fold.rows()
    assert milestones[0].status == "approved"
    assert milestones[0].resolved_at == milestones[0].approved_at == datetime.fromtimestamp(77, UTC)


def test_bid_logs_and_unknown_events_change_no_row() -> None:
    folder = LogFolder(PROJECT_ABI)
    fold = created(folder)
    before = fold.rows()
    rng = random.Random(7)
    for name in ("BidPosted", "BidUpdated", "BidCancelled", "BondReclaimed", "BondReturned"):
        folder.apply(fold, make_log(PROJECT_ABI, name, rng))
    folder.apply(fold, {**make_log(PROJECT_ABI, "BidCancelled", rng), "topics": ["0x" + "99" * 32]})
    assert fold.rows() == before


def test_a_fold_resumes_from_stored_rows() -> None:
    folder = LogFolder(PROJECT_ABI)
    fold = created(folder)
    rng = random.Random(8)
    folder.apply(fold, make_log(PROJECT_ABI, "StatusChanged", rng, previousStatus=0, newStatus=1))
    project, milestones = fold.rows()
    stored = {**vars(project), "bid_bond_usdc": __import__("decimal").Decimal(50)}
    resumed = ProjectFold.from_rows(stored, [vars(m) for m in reversed(milestones)])
    assert resumed.rows() == (project, milestones)
    selected = make_log(
        PROJECT_ABI,
        "BidSelected",
        rng,
        builder=WORKER,
        payouts=[3 * 10**6, 0],
        deadlines=[1_700_001_000, 1_700_002_000],
    )
    for target in (fold, resumed):
        folder.apply(target, selected)
    assert resumed.rows() == fold.rows()
    project, milestones = resumed.rows()
    assert project.selected_builder_address == WORKER
    assert [m.payout_usdc for m in milestones] == [3, None]


def test_constructed_payloads_are_what_validation_would_give() -> None:
    folder = LogFolder(PROJECT_ABI)
    fold = created(folder)
    project, milestones = fold.rows()
    creation = ProjectCreation(PROJECT, OWNER, "0x" + "ee" * 32, 5, 0)
    events = snapshot_events({}, {}, [(project, milestones, creation)], {PROJECT}, block=9)
    before = {PROJECT: {**vars(project), "status": "bidding"}}
    changed_events = snapshot_events(
        before,
        {
            (PROJECT, 0): {**vars(milestones[0]), "status": "submitted"},
            (PROJECT, 1): vars(milestones[1]),
        },
        [(project, milestones, creation)],
        {PROJECT},
        block=9,
    )
    events += with_bid_events(
        changed_events,
        {PROJECT: [BidChanges.model_construct(bidderAddress=WORKER, changes={"status": None})]},
        block=9,
    )
    assert [type(e.payload) for e in events] == [ProjectCreatedPayload, ProjectChangedPayload]
    for event in events:
        payload = event.payload
        again = type(payload).model_validate_json(event.payload_json())
        assert again.model_dump_json(exclude_unset=True) == event.payload_json()
    changed = events[1].payload
    assert isinstance(changed, ProjectChangedPayload)
    assert changed.changes == {"status": "draft"}
    assert changed.milestones == [MilestoneChanges(milestoneIndex=0, changes={"status": "pending"})]
    assert changed.bids == [BidChanges(bidderAddress=WORKER, changes={"status": None})]

"""Shard commands and their results cross the Ray boundary by pickle: each must come back equal,
with its key, and the commands must carry what the routes meant."""

from __future__ import annotations

import importlib
import pickle
import pkgutil
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from marketplace.chain.hashes import direct_config_hash, intent_config_hash
from marketplace.messaging.chat import PostChatMessage
from marketplace.projects.claims import (
    UNCHANGED,
    ClaimIntent,
    ClaimMetadata,
    ClaimOutcome,
    ClaimProject,
    PatchMetadata,
)
from marketplace.records.bid_drafts import StoredBidDraft, UpsertBidDraft
from marketplace.records.challenge_submissions import UpsertChallengeSubmission
from marketplace.records.dispute_evidence import StoredDisputeEvidence, SubmitDisputeEvidence
from marketplace.shards import ProjectCommand, ShardFamily, UserCommand
from marketplace.storage.repositories.claims import MetadataChanges
from marketplace.storage.repositories.messages import MessageRow

PROJECT = "0x" + "ab" * 20
WALLET = "0x" + "cd" * 20
HASH = "0x" + "12" * 32
USER = uuid.UUID("3fa85f64-5717-4562-b3fc-2c963f66afa6")
METADATA = ClaimMetadata(
    title="Indexer",
    description=None,
    repo_url="https://example.org/repo",
    image_url="ipfs://bafy",
    project_mode="standard",
    bidding_access="open",
)
INTENT = ClaimIntent(uuid.UUID("7c9e6679-7425-40de-944b-e07fc1f90ae7"), "0x" + "34" * 32)

COMMANDS: list[ProjectCommand] = [
    UpsertBidDraft(PROJECT, USER, WALLET, HASH, "ipfs://draft", "notes"),
    UpsertChallengeSubmission(PROJECT, USER, WALLET, HASH, None, None),
    SubmitDisputeEvidence(PROJECT, USER, HASH, {"why": ["late", 3]}, 2, WALLET),
    SubmitDisputeEvidence(PROJECT, USER, HASH, None),
    ClaimProject(PROJECT, USER, "v1_intent", HASH, METADATA, INTENT),
    ClaimProject(PROJECT, USER, "v1_direct", HASH, METADATA),
    PatchMetadata(PROJECT, USER, "New title", description=None),
    PatchMetadata(PROJECT, USER, "New title", image_url="https://example.org/i.png"),
    PostChatMessage(PROJECT, uuid.uuid4(), USER, WALLET, "hello"),
]


# Every domain package (where commands live).
DOMAIN_PACKAGES = (
    "identity",
    "projects",
    "records",
    "events",
    "jobs",
    "legal",
    "messaging",
    "moderation",
    "notifications",
    "leaderboards",
    "verifier",
)


def commands_in_the_package(base: type) -> set[type]:
    """The command classes deriving from ``base`` in the domain packages, imported whole."""
    for package in DOMAIN_PACKAGES:
        root = importlib.import_module(f"marketplace.{package}")
        for module in pkgutil.walk_packages(root.__path__, f"{root.__name__}."):
            if not module.name.endswith("__main__"):
                importlib.import_module(module.name)

    def subclasses(cls: type) -> set[type]:
        direct: set[type] = set(cls.__subclasses__())
        return direct.union(*(subclasses(sub) for sub in direct))

    return {cls for cls in subclasses(base) if cls.__module__.startswith("marketplace.")}


def project_commands_in_the_package() -> set[type]:
    return commands_in_the_package(ProjectCommand)


@pytest.mark.parametrize(
    ("family", "base"),
    [(ShardFamily.PROJECT, ProjectCommand), (ShardFamily.USER, UserCommand)],
    ids=["project", "user"],
)
def test_each_family_lists_exactly_the_modules_of_its_commands(
    family: ShardFamily, base: type
) -> None:
    # A shard imports these as it starts; a module left out would be imported by its first
    # command, under the call timeout (marketplace/shards.py, COMMAND_MODULES).
    modules = {cls.__module__ for cls in commands_in_the_package(base)}
    assert modules, f"no {family} commands found: the walk is broken"
    assert set(family.command_modules) == modules
    assert len(family.command_modules) == len(modules)


def test_every_command_class_is_covered_here() -> None:
    # A new command must be added to COMMANDS, so its pickling is checked too.
    assert project_commands_in_the_package() == {type(command) for command in COMMANDS}


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: type(c).__name__)
def test_commands_pickle_round_trip(command: ProjectCommand) -> None:
    restored = pickle.loads(pickle.dumps(command))
    assert restored == command
    assert type(restored) is type(command)
    assert restored.key == PROJECT
    assert type(restored).family is ShardFamily.PROJECT


def test_patch_metadata_keeps_omitted_and_cleared_fields_apart_across_pickle() -> None:
    cleared = pickle.loads(pickle.dumps(PatchMetadata(PROJECT, USER, "t", description=None)))
    assert cleared.image_url is UNCHANGED
    assert cleared.changes() == MetadataChanges(description=None, description_sent=True)
    both = PatchMetadata(PROJECT, USER, "t", description="d", image_url=None)
    assert pickle.loads(pickle.dumps(both)).changes() == MetadataChanges(
        description="d", description_sent=True, image_url=None, image_url_sent=True
    )
    assert PatchMetadata(PROJECT, USER, "t").changes() == MetadataChanges()
    policies = PatchMetadata(PROJECT, USER, "t", milestone_policies=((0, "address-smoke"),))
    assert policies.changes() == MetadataChanges(
        milestone_policies=[{"milestoneIndex": 0, "checkPolicyId": "address-smoke"}]
    )
    assert PatchMetadata(PROJECT, USER, "t", milestone_policies=()).changes() == MetadataChanges(
        milestone_policies=[]
    )


def test_claim_mode_and_config_hash_follow_the_intent() -> None:
    fields = ("Indexer", None, "https://example.org/repo", "standard", "open")
    intent_claim = pickle.loads(pickle.dumps(COMMANDS[4]))
    assert intent_claim.mode == "intent"
    assert intent_claim.expected_config_hash() == intent_config_hash(
        *fields, user_id=USER, intent_id=INTENT.intent_id, intent_nonce=INTENT.intent_nonce
    )
    direct_claim = pickle.loads(pickle.dumps(COMMANDS[5]))
    assert direct_claim.mode == "direct"
    assert direct_claim.expected_config_hash() == direct_config_hash(*fields)
    # image_url is not part of the preimage.
    no_image = replace(direct_claim, metadata=replace(METADATA, image_url=None))
    assert no_image.expected_config_hash() == direct_claim.expected_config_hash()


def test_results_pickle_round_trip() -> None:
    now = datetime.now(UTC)
    results: list[Any] = [
        ClaimOutcome("claimed", "queued", PROJECT, WALLET),
        StoredBidDraft(
            draft_id=uuid.uuid4(),
            project_address=PROJECT,
            bidder_address=WALLET,
            draft_hash=HASH,
            artifact_uri=None,
            notes="n",
            created_at=now,
            updated_at=now,
        ),
        StoredDisputeEvidence(
            evidence_id=uuid.uuid4(),
            project_address=PROJECT,
            milestone_index=0,
            submitter_address=WALLET,
            submitter_role="owner",
            evidence_hash=HASH,
            evidence_payload={"a": {"b": [1, None]}},
            created_at=now,
        ),
        MessageRow(
            id=uuid.uuid4(),
            seq=7,
            kind="project_chat",
            project_address=PROJECT,
            thread_id=None,
            sender_user_id=USER,
            sender_wallet_address=WALLET,
            recipient_user_id=None,
            body="hello",
            body_status="visible",
            created_at=now,
        ),
    ]
    for result in results:
        assert pickle.loads(pickle.dumps(result)) == result

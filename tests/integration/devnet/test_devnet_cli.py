"""``marketplace devnet ...`` against a running devnet; every effect is checked on chain."""

from __future__ import annotations

from pathlib import Path

from eth_utils import keccak

from marketplace.chain import hashes
from marketplace.chain.enums import (
    BiddingAccess,
    DisputePhase,
    MilestoneStatus,
    ProjectMode,
    ProjectStatus,
)
from marketplace_devstack.devnet.client import USDC, DevnetClient
from marketplace_devstack.devnet.node import PersistentAnvil
from tests.integration.devnet.conftest import Devnet


def _dev(client: DevnetClient, index: int) -> str:
    return client.dev_account(index)


def test_up_records_the_rpc_url_and_removes_it_on_stop(devnet: Devnet, tmp_path: Path) -> None:
    assert (devnet.data_dir / "devnet" / "rpc_url").read_text().strip() == devnet.rpc_url
    anvil = PersistentAnvil(tmp_path / "devnet", silent=True)
    url = anvil.start()
    try:
        assert (tmp_path / "devnet" / "rpc_url").read_text().strip() == url
    finally:
        anvil.stop()
    assert not (tmp_path / "devnet" / "rpc_url").exists()


def test_commands_fail_clearly_without_a_devnet(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    missing = cli("info", data_dir=tmp_path)
    assert missing.code == 2
    assert "no devnet is running" in missing.err
    assert "marketplace up" in missing.err

    # A URL left behind by a crashed `up`, nothing listening there any more.
    (tmp_path / "devnet").mkdir()
    (tmp_path / "devnet" / "rpc_url").write_text("http://127.0.0.1:9\n")
    stale = cli("info", data_dir=tmp_path)
    assert stale.code == 2
    assert "does not answer" in stale.err


def test_info_shows_manifest_and_head(cli, devnet: Devnet) -> None:  # type: ignore[no-untyped-def]
    result = cli("info")
    assert result.code == 0, result.err
    info = result.json
    assert info["rpcUrl"] == devnet.rpc_url
    assert info["deployment"]["registry"] == devnet.client.registry
    assert info["head"]["number"] == devnet.client.head()["number"]
    assert info["automine"] is True
    assert [a["index"] for a in info["devAccounts"]] == list(range(10))

    text = cli("info", as_json=False)
    assert text.code == 0
    assert f"registry: {devnet.client.registry}" in text.out
    assert "head: block" in text.out


def test_standard_lifecycle_through_the_cli(cli, devnet: Devnet) -> None:  # type: ignore[no-untyped-def]
    chain = devnet.client
    created = cli(
        "create",
        "--owner", "3",
        "--milestones", "2",
        "--invite-only",
        "--bond", "25",
        "--title", "Port the indexer",
        "--description", "Rust, please",
        "--repo-url", "https://github.com/example/indexer",
    )  # fmt: skip
    assert created.code == 0, created.err
    project = created.json["project"]
    assert created.json["transactions"][0]["txHash"].startswith("0x")
    state = chain.state(project)
    assert state["owner"] == _dev(chain, 3)
    assert state["status"] == ProjectStatus.DRAFT
    assert state["biddingAccess"] == BiddingAccess.INVITE_ONLY
    assert state["bidBond"] == 25 * USDC
    assert state["configHash"] == hashes.direct_config_hash(
        "Port the indexer",
        "Rust, please",
        "https://github.com/example/indexer",
        "standard",
        "invite_only",
    )

    assert cli("allowlist", "add", project, "4", "5").code == 0
    assert chain.allowlist(project) == [_dev(chain, 4), _dev(chain, 5)]
    assert cli("allowlist", "remove", project, "5").code == 0
    assert chain.allowlist(project) == [_dev(chain, 4)]

    opened = cli("open", project)
    assert opened.code == 0, opened.err
    assert opened.json["status"] == "bidding"

    bid = cli("bid", project, "--from", "4", "--payouts", "300,700", "--durations", "3d,5d")
    assert bid.code == 0, bid.err
    assert chain.bid_total(project, _dev(chain, 4)) == 1000 * USDC

    assert cli("select", project, "4").code == 0
    state = chain.state(project)
    assert state["status"] == ProjectStatus.BUILDING
    assert state["selectedBuilder"] == _dev(chain, 4)

    assert cli("submit", project).code == 0  # defaults: current milestone, selected builder
    approved = cli("approve", project)
    assert approved.code == 0
    assert approved.json["milestone"] == 0
    assert cli("submit", project, "--milestone", "1").code == 0
    assert chain.state(project)["milestones"][1]["status"] == MilestoneStatus.SUBMITTED

    disputed = cli("dispute", project, "--reason", "low-quality")
    assert disputed.code == 0, disputed.err
    assert disputed.json["disputePhase"] == "challenged"
    assert cli("evidence", project, "--from", "4", "--evidence-hash", "worker says done").code == 0
    state = chain.state(project)
    assert state["disputePhase"] == DisputePhase.CHALLENGED
    assert state["disputeWorkerEvidenceHash"] == "0x" + keccak(text="worker says done").hex()

    attested = cli("attest", project, "--passes")
    assert attested.code == 0, attested.err
    state = chain.state(project)
    assert state["disputePhase"] == DisputePhase.VERIFIER_VERDICT
    assert state["disputeVerdictPasses"] is True
    assert state["milestones"][1]["attested"] is True

    # Finalizing inside the 48-hour override window reverts; after advancing time it passes.
    early = cli("finalize", project)
    assert early.code == 1
    assert "finalizeDispute reverted" in early.err
    before = chain.now()
    advanced = cli("advance-time", "--seconds", "49h")
    assert advanced.code == 0
    assert advanced.json["head"]["timestamp"] >= before + 49 * 3600
    assert cli("finalize", project).code == 0
    state = chain.state(project)
    assert state["status"] == ProjectStatus.COMPLETE
    assert state["milestones"][1]["status"] == MilestoneStatus.APPROVED


def test_reverts_are_reported_with_the_custom_error(cli, devnet: Devnet) -> None:  # type: ignore[no-untyped-def]
    project = cli("create", "--milestones", "1").json["project"]
    result = cli("approve", project, "--milestone", "0", as_json=False)
    assert result.code == 1
    assert "approveMilestone reverted: WrongStatus" in result.err
    assert devnet.client.state(project)["status"] == ProjectStatus.DRAFT


def test_challenge_through_the_cli(cli, devnet: Devnet) -> None:  # type: ignore[no-untyped-def]
    chain = devnet.client
    created = cli(
        "create", "--mode", "challenge", "--owner", "6", "--payout", "500",
        "--submission-window", "10m", "--response-window", "2d",
    )  # fmt: skip
    assert created.code == 0, created.err
    project = created.json["project"]
    state = chain.state(project)
    assert state["mode"] == ProjectMode.CHALLENGE
    assert state["status"] == ProjectStatus.BIDDING
    assert state["escrowBalance"] == 500 * USDC

    assert cli("submit", project).code == 2  # a challenge entry needs --from
    assert cli("submit", project, "--from", "7").code == 0
    assert cli("submit", project, "--from", "8").code == 0
    assert chain.state(project)["challengeSubmissionCount"] == 2

    early = cli("select", project, "7")
    assert early.code == 1
    assert "SubmissionWindowOpen" in early.err
    assert cli("advance-time", "--seconds", "11m").code == 0
    assert cli("select", project, "7").code == 0
    state = chain.state(project)
    assert state["status"] == ProjectStatus.COMPLETE
    assert state["challengeWinner"] == _dev(chain, 7)


def test_dispute_resolved_by_the_multisig(cli, devnet: Devnet) -> None:  # type: ignore[no-untyped-def]
    chain = devnet.client
    project = cli("create", "--milestones", "1", "--bond", "40").json["project"]
    for args in (
        ("open", project),
        ("bid", project, "--from", "5"),
        ("select", project, "5"),
        ("submit", project),
        ("dispute", project),
    ):
        result = cli(*args)
        assert result.code == 0, (args, result.err)
    resolved = cli("resolve", project, "--outcome", "reject", "--slash", "10")
    assert resolved.code == 0, resolved.err
    assert resolved.json["transactions"][0]["from"] == chain.deployment.dispute_multisig
    assert chain.state(project)["status"] == ProjectStatus.FAILED


def test_seed_creates_every_status_on_chain(cli, devnet: Devnet) -> None:  # type: ignore[no-untyped-def]
    chain = devnet.client
    count_before = chain.project_count()
    result = cli("seed", "--projects", "20", "--milestones", "3", "--seed", "7", "--quiet")
    assert result.code == 0, result.err
    seeded = result.json
    assert seeded["projects"] == 20
    assert seeded["mismatches"] == []
    items = seeded["items"]
    assert len({i["address"] for i in items}) == 20
    assert chain.project_count() == count_before + 20

    states = chain.states([i["address"] for i in items])
    statuses = {ProjectStatus(s["status"]) for s in states}
    assert statuses == set(ProjectStatus)
    assert {ProjectMode(s["mode"]) for s in states} == set(ProjectMode)
    phases = {DisputePhase(s["disputePhase"]) for s in states if s["status"] == 3}
    assert phases == {DisputePhase.CHALLENGED, DisputePhase.VERIFIER_VERDICT}
    assert any(s["biddingAccess"] == BiddingAccess.INVITE_ONLY for s in states)
    for item, state in zip(items, states, strict=True):
        assert ProjectStatus(state["status"]).name.lower() == item["expectedStatus"], item
        assert ProjectMode(state["mode"]).name.lower() == item["mode"]
        assert state["configHash"] == item["configHash"]
        if state["mode"] == ProjectMode.STANDARD:
            assert len(state["milestones"]) == 3
        if state["status"] == ProjectStatus.BUILDING and state["mode"] == ProjectMode.STANDARD:
            approved = [m["status"] == MilestoneStatus.APPROVED for m in state["milestones"]]
            assert approved != [True] * 3
    complete = [s for s in states if s["status"] == ProjectStatus.COMPLETE and s["mode"] == 0]
    assert all(m["status"] == MilestoneStatus.APPROVED for s in complete for m in s["milestones"])

    # The seed leaves the devnet as it found it: automine on, the usual block gas limit already
    # in the latest block (a second seed starts from there and must raise it again).
    assert chain.automine() is True
    latest = chain.rpc.call("eth_getBlockByNumber", ["latest", False])
    assert int(latest["gasLimit"], 16) == 30_000_000
    mined = cli("mine", "--blocks", "1")
    assert mined.code == 0, mined.err
    assert mined.json["head"]["number"] == int(latest["number"], 16) + 1
    # A second, larger seed on the same chain (more than one 30M-gas block per phase).
    table = cli("seed", "--projects", "150", "--milestones", "2", "--quiet", as_json=False)
    assert table.code == 0, table.err
    assert "status" in table.out and "challenge" in table.out
    assert "150 projects" in table.out
    assert "WARNING" not in table.out

"""``marketplace devnet create`` in both hash modes: the configHash it puts on chain, checked
against hashes computed here from the spec's preimages, and the claim body it prints."""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path

import pytest
from eth_abi import encode
from eth_utils import keccak

from marketplace.cli import main
from tests.integration.devnet.conftest import Devnet

USER_ID = "6f1c2a9e-3b4d-4e5f-8a7b-9c0d1e2f3a4b"
INTENT_ID = "0b5e8c3d-2f1a-4c6b-9d8e-7f6a5b4c3d2e"
NONCE = "0x" + "ab" * 32


def _intent_config_hash(
    title: str, description: str, repo_url: str, mode: str, access: str, nonce: str = NONCE
) -> str:
    """Written out from the spec's rules and docs/chain.md's ABI types, not with hashes.py."""
    meta = keccak(
        encode(["string"] * 5, [title, description, repo_url, mode, access]),
    )
    intent = keccak(
        encode(
            ["string", "string", "string", "bytes32"],
            ["service.project_create_intent_v1", USER_ID, INTENT_ID, bytes.fromhex(nonce[2:])],
        )
    )
    return "0x" + keccak(encode(["bytes32", "bytes32"], [meta, intent])).hex()


def _intent_response(tmp_path: Path, **changes: object) -> Path:
    body = {
        "intentId": INTENT_ID,
        "intentNonce": NONCE,
        "expiresAt": "2099-01-01T00:00:00Z",
        "version": "project_create_intent_v1",
    } | changes
    path = tmp_path / "intent.json"
    path.write_text(json.dumps(body))
    return path


def test_intent_json_file_puts_the_intent_hash_on_chain_and_prints_the_claim(  # type: ignore[no-untyped-def]
    cli, devnet: Devnet, tmp_path: Path
) -> None:
    intent_file = _intent_response(tmp_path)
    created = cli(
        "create",
        "--owner", "3",
        "--title", "Index the registry",
        "--description", "Postgres read models",
        "--intent-json", str(intent_file),
        "--user-id", USER_ID,
    )  # fmt: skip
    assert created.code == 0, created.err
    out = created.json
    expected = _intent_config_hash(
        "Index the registry", "Postgres read models", "", "standard", "open"
    )
    assert out["configHash"] == expected
    assert out["hashMode"] == "intent"
    assert devnet.client.state(out["project"])["configHash"] == expected
    direct = (
        "0x"
        + keccak(
            encode(
                ["string"] * 5,
                ["Index the registry", "Postgres read models", "", "standard", "open"],
            )
        ).hex()
    )
    assert out["metadataHash"] == direct
    assert expected != direct
    assert out["claim"] == {
        "mode": "intent",
        "hashVersion": "v1_intent",
        "intentId": INTENT_ID,
        "intentNonce": NONCE,
        "txHash": out["transactions"][-1]["txHash"],
        "metadata": {
            "title": "Index the registry",
            "description": "Postgres read models",
            "projectMode": "standard",
            "biddingAccess": "open",
        },
    }

    text = cli(
        "create",
        "--title", "Index the registry",
        "--intent-json", str(intent_file),
        "--user-id", USER_ID,
        as_json=False,
    )  # fmt: skip
    assert text.code == 0, text.err
    assert "intent configHash 0x" in text.out
    claim_line = next(line for line in text.out.splitlines() if line.startswith("claim body: "))
    assert json.loads(claim_line.removeprefix("claim body: "))["mode"] == "intent"


def test_intent_json_from_stdin_and_separate_options_give_the_same_hash(  # type: ignore[no-untyped-def]
    cli, devnet: Devnet, monkeypatch: pytest.MonkeyPatch
) -> None:
    response = {"intentId": INTENT_ID, "intentNonce": NONCE.upper().replace("0X", "0x")}
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(response)))
    common = ["create", "--mode", "challenge", "--title", "Fastest parser", "--user-id", USER_ID]
    from_stdin = cli(*common, "--intent-json", "-")
    assert from_stdin.code == 0, from_stdin.err
    from_options = cli(*common, "--intent-id", INTENT_ID, "--intent-nonce", NONCE)
    assert from_options.code == 0, from_options.err
    expected = _intent_config_hash("Fastest parser", "", "", "challenge", "open")
    for result in (from_stdin, from_options):
        project = result.json["project"]
        assert devnet.client.state(project)["configHash"] == expected
        # The creation is the last transaction (funding the payout comes first).
        assert result.json["claim"]["txHash"] == result.json["transactions"][-1]["txHash"]
        assert result.json["claim"]["intentNonce"] == NONCE


def test_default_is_the_direct_hash_with_a_direct_claim_body(cli, devnet: Devnet) -> None:  # type: ignore[no-untyped-def]
    created = cli("create", "--title", "Direct one", "--repo-url", "https://example.org/r")
    assert created.code == 0, created.err
    expected = (
        "0x"
        + keccak(
            encode(["string"] * 5, ["Direct one", "", "https://example.org/r", "standard", "open"])
        ).hex()
    )
    assert created.json["configHash"] == expected
    assert devnet.client.state(created.json["project"])["configHash"] == expected
    assert created.json["hashMode"] == "direct"
    assert created.json["claim"] == {
        "mode": "direct",
        "hashVersion": "v1_direct",
        "txHash": created.json["transactions"][-1]["txHash"],
        "metadata": {
            "title": "Direct one",
            "repoUrl": "https://example.org/r",
            "projectMode": "standard",
            "biddingAccess": "open",
        },
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--intent-id", INTENT_ID, "--intent-nonce", NONCE], "missing --user-id"),
        (["--user-id", USER_ID], "missing --intent-id (or --intent-json), --intent-nonce"),
        (["--user-id", USER_ID, "--intent-id", INTENT_ID], "missing --intent-nonce"),
        (
            ["--user-id", "not-a-uuid", "--intent-id", INTENT_ID, "--intent-nonce", NONCE],
            "--user-id: not a uuid",
        ),
        (
            ["--user-id", USER_ID, "--intent-id", INTENT_ID, "--intent-nonce", "0x1234"],
            "--intent-nonce: not a 0x bytes32",
        ),
        (
            ["--user-id", USER_ID, "--intent-json", "INTENT", "--intent-id", INTENT_ID],
            "not both",
        ),
        (
            ["--config-hash", "0x" + "11" * 32, "--user-id", USER_ID],
            "--config-hash is the whole hash",
        ),
        (["--user-id", USER_ID, "--intent-json", "MISSING"], "cannot read"),
    ],
)
def test_incomplete_or_contradicting_intent_options_send_nothing(  # type: ignore[no-untyped-def]
    cli, devnet: Devnet, tmp_path: Path, args: list[str], message: str
) -> None:
    intent_file = _intent_response(tmp_path)
    args = [
        str(intent_file) if a == "INTENT" else str(tmp_path / "nope.json") if a == "MISSING" else a
        for a in args
    ]
    before = devnet.client.project_count()
    result = cli("create", *args)
    assert result.code == 2
    assert message in result.err
    assert devnet.client.project_count() == before


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "is not JSON"),
        ("[1, 2]", "expected the create-intent response object"),
        (json.dumps({"intentId": INTENT_ID}), "no intentId and intentNonce"),
        (
            json.dumps({"error": "unauthorized", "message": "token expired"}),
            "the create-intent request failed: unauthorized: token expired",
        ),
        (
            json.dumps({"intentId": INTENT_ID, "intentNonce": NONCE, "version": "v2"}),
            "is not 'project_create_intent_v1'",
        ),
    ],
)
def test_a_bad_intent_json_is_a_usage_error(  # type: ignore[no-untyped-def]
    cli, devnet: Devnet, tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "intent.json"
    path.write_text(content)
    before = devnet.client.project_count()
    result = cli("create", "--intent-json", str(path), "--user-id", str(uuid.uuid4()))
    assert result.code == 2
    assert message in result.err
    assert devnet.client.project_count() == before


def test_help_says_which_mode_the_default_hash_is_for(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["devnet", "create", "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    assert "By default it is the DIRECT-mode hash" in text
    assert "A session user must claim\nin INTENT mode" in text
    assert "--intent-json FILE" in text

"""docs/hashes.md's worked example, recomputed with the server's code: the page cannot drift."""

from __future__ import annotations

import contextlib
import io
import json
import re
import uuid
from pathlib import Path
from typing import Any

from marketplace.chain.hashes import (
    INTENT_DOMAIN,
    direct_config_hash,
    intent_config_hash,
    intent_hash,
    metadata_hash,
)

DOC = Path(__file__).resolve().parents[3] / "docs" / "hashes.md"


def section(text: str, heading: str) -> str:
    start = text.index(f"\n{heading}\n")
    end = text.find("\n#", start + len(heading) + 2)
    return text[start : end if end != -1 else len(text)]


def fenced(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.DOTALL)


def results(text: str) -> dict[str, str]:
    """The `| `name` | `0x...` |` rows of a section's table."""
    return dict(re.findall(r"^\| `(\w+)` \| `(0x[0-9a-f]{64})` \|$", text, re.MULTILINE))


def metadata_args(meta: dict[str, Any]) -> tuple[str, str | None, str | None, str, str]:
    return (
        meta["title"],
        meta.get("description"),
        meta.get("repoUrl"),
        meta["projectMode"],
        meta["biddingAccess"],
    )


def test_intent_mode_example_matches_the_server() -> None:
    part = section(DOC.read_text(), "### Intent mode")
    (inputs,) = [json.loads(block) for block in fenced(part, "json")]
    stated = results(part)
    assert set(stated) == {"metadataHash", "intentHash", "configHash"}
    user_id, intent_id = uuid.UUID(inputs["userId"]), uuid.UUID(inputs["intentId"])
    args = metadata_args(inputs["metadata"])
    assert metadata_hash(*args) == stated["metadataHash"]
    assert intent_hash(user_id, intent_id, inputs["intentNonce"]) == stated["intentHash"]
    computed = intent_config_hash(
        *args, user_id=user_id, intent_id=intent_id, intent_nonce=inputs["intentNonce"]
    )
    assert computed == stated["configHash"]
    # Every input matters: another user, or a description left out, gives another hash.
    other = intent_config_hash(
        *args, user_id=uuid.uuid4(), intent_id=intent_id, intent_nonce=inputs["intentNonce"]
    )
    assert other != stated["configHash"]
    assert metadata_hash(args[0], None, *args[2:]) != stated["metadataHash"]


def test_direct_mode_example_matches_the_server() -> None:
    part = section(DOC.read_text(), "### Direct mode")
    (inputs,) = [json.loads(block) for block in fenced(part, "json")]
    stated = results(part)
    meta = inputs["metadata"]
    assert "description" not in meta and "repoUrl" not in meta  # the page's point: absent is ""
    assert direct_config_hash(*metadata_args(meta)) == stated["configHash"]
    assert stated["metadataHash"] == stated["configHash"]
    assert (
        metadata_hash(meta["title"], "", "", meta["projectMode"], meta["biddingAccess"])
        == (stated["configHash"])
    )


def test_the_pages_python_snippet_prints_the_pages_values() -> None:
    text = DOC.read_text()
    (snippet,) = fenced(section(text, "## Checking it yourself"), "python")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(snippet, str(DOC), "exec"), {})  # the page's own code, as a reader runs it
    values = dict(line.rsplit(" ", 1) for line in printed.getvalue().splitlines())
    intent, direct = (
        results(section(text, "### Intent mode")),
        results(section(text, "### Direct mode")),
    )
    assert values == {
        "metadataHash": intent["metadataHash"],
        "intentHash": intent["intentHash"],
        "configHash": intent["configHash"],
        "direct metadataHash": direct["metadataHash"],
        "direct configHash": direct["configHash"],
    }


def test_rules_table_names_the_domain_and_types_the_code_uses() -> None:
    rules = section(DOC.read_text(), "## The rules")
    assert f'string "{INTENT_DOMAIN}", string userId, string intentId, bytes32 intentNonce' in rules
    assert "string title, string description, string repoUrl, string projectMode" in rules
    assert "abi.encode(bytes32 metadataHash, bytes32 intentHash)" in rules


def test_api_reference_claim_examples_are_this_worked_example() -> None:
    from marketplace.http.routes import project_claims

    text = DOC.read_text()
    intent_part, direct_part = section(text, "### Intent mode"), section(text, "### Direct mode")
    (intent_inputs,) = [json.loads(block) for block in fenced(intent_part, "json")]
    (direct_inputs,) = [json.loads(block) for block in fenced(direct_part, "json")]
    example = project_claims.EXAMPLE_INTENT_CLAIM
    assert intent_inputs["userId"] == project_claims.EXAMPLE_USER_ID
    assert example["intentId"] == intent_inputs["intentId"]
    assert example["intentNonce"] == intent_inputs["intentNonce"]
    assert example["metadata"] == intent_inputs["metadata"]
    assert project_claims.EXAMPLE_DIRECT_CLAIM["metadata"] == direct_inputs["metadata"]
    hashes = project_claims.EXAMPLE_HASHES
    intent, direct = results(intent_part), results(direct_part)
    assert {k: hashes[k] for k in intent} == intent
    assert hashes["directConfigHash"] == direct["configHash"]
    for value in (*intent.values(), direct["configHash"]):
        assert value in project_claims.CLAIM_DESCRIPTION

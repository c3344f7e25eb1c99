"""``marketplace token``: the claims of the session JWT it prints (``--email`` puts the `email`
claim in, ``--email-verified`` sets `email_verified`, true unless ``--no-email-verified``), the
service's verifier reads them back, and every flag's help names its default."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import jwt
import pytest

from marketplace.auth import SessionVerifier
from marketplace.cli import main
from marketplace.config import Settings

SECRET = "token-cli-test-secret-" + "s" * 32
USER = uuid.UUID("c2a4e7f0-5b9d-4e21-8f6a-3d1b0c9e8a77")


@pytest.fixture(autouse=True)
def shared_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MARKETPLACE_JWT_PUBLIC_KEY", "MARKETPLACE_JWKS_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MARKETPLACE_JWT_SECRET", SECRET)


def printed(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    capsys.readouterr()
    assert main(["token", "--user-id", str(USER), *args]) == 0
    return capsys.readouterr().out.strip()


def token(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, object]:
    claims: dict[str, object] = jwt.decode(printed(capsys, *args), SECRET, algorithms=["HS256"])
    return claims


def test_email_puts_the_claim_in_and_the_service_reads_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = int(time.time())
    claims = token(capsys, "--email", "walter@example.com")
    assert claims["sub"] == str(USER)
    assert claims["email"] == "walter@example.com"
    assert claims["email_verified"] is True
    assert before <= claims["iat"] <= int(time.time())  # type: ignore[operator]
    assert claims["exp"] == claims["iat"] + 3600  # type: ignore[operator]

    verifier = SessionVerifier(Settings(jwt_secret=SECRET))  # type: ignore[arg-type]
    session = asyncio.run(verifier.verify(printed(capsys, "--email", "walter@example.com")))
    assert (session.user_id, session.email, session.email_verified) == (
        USER,
        "walter@example.com",
        True,
    )


def test_without_email_there_is_no_claim(capsys: pytest.CaptureFixture[str]) -> None:
    claims = token(capsys)
    assert "email" not in claims
    assert claims["email_verified"] is True


def test_email_verified_is_what_it_was(capsys: pytest.CaptureFixture[str]) -> None:
    assert token(capsys, "--email", "a@example.com", "--email-verified")["email_verified"] is True
    unverified = token(capsys, "--email", "a@example.com", "--no-email-verified", "--ttl", "60")
    assert unverified["email_verified"] is False
    assert unverified["email"] == "a@example.com"
    assert unverified["exp"] == unverified["iat"] + 60  # type: ignore[operator]


@pytest.mark.parametrize("address", ["walter", "walter@", "@example.com", "wal ter@example.com"])
def test_an_address_the_service_would_ignore_is_refused(
    capsys: pytest.CaptureFixture[str], address: str
) -> None:
    capsys.readouterr()
    assert main(["token", "--user-id", str(USER), "--email", address]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"--email {address!r} is not an address" in captured.err


def test_the_dev_secret_of_a_data_dir_signs_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("MARKETPLACE_JWT_SECRET")
    (tmp_path / "dev-jwt-secret").write_text(SECRET + "\n")
    claims = token(capsys, "--data-dir", str(tmp_path), "--email", "olivia@example.com")
    assert claims["email"] == "olivia@example.com"


def test_every_flag_has_help_with_its_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["token", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--user-id UUID the user the token signs in (its sub claim); required" in text
    assert "--email ADDRESS the user's e-mail address" in text
    assert "(default: none, so no e-mail is sent)" in text
    assert "(default: --email-verified)" in text
    assert "--ttl SECONDS lifetime of the token, in seconds (default: 3600)" in text
    assert "--data-dir DATA_DIR data dir of `marketplace up` (default:" in text

"""docs/walkthrough.md as written: its ``sh`` blocks run in order in one bash against a fresh
``marketplace up`` started here (a subprocess in a temporary data dir on a free port), and the
end state is checked through the API and in ``<data-dir>/mail/`` (the direct message's e-mail,
whose link answers its recipient). ``marketplace devnet link-wallet`` is tested against the same
server.

The two blocks marked ``<!-- walkthrough-test: skip -->`` (``./scripts/up`` and activating the
virtualenv) are what this module does itself: it starts ``up`` and puts a ``marketplace`` and a
``python`` that run this checkout first on ``PATH``.
"""

from __future__ import annotations

import email
import email.policy
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
from eth_account import Account
from eth_account.messages import encode_defunct

from marketplace.auth import issue_session_token
from marketplace.chain import hashes
from marketplace.cli import main
from marketplace_devstack.devnet.deploy import ANVIL_PRIVATE_KEYS, dev_address
from marketplace_devstack.devnet.wallet_link import sign_challenge

REPO = Path(__file__).resolve().parents[3]
WALKTHROUGH = REPO / "docs" / "walkthrough.md"
SKIP_MARK = "<!-- walkthrough-test: skip -->"
UP_START_TIMEOUT = 180.0
SCRIPT_TIMEOUT = 300.0

_FENCE = re.compile(r"^```(\S*)\n(.*?)^```\n", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Block:
    language: str
    code: str
    skipped: bool


def doc_blocks(text: str) -> list[Block]:
    """Every fenced block of the page, and whether the skip mark is the line before it."""
    blocks = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        blocks.append(Block(match.group(1), match.group(2), before.strip() == SKIP_MARK))
    return blocks


def walkthrough_script() -> str:
    """The page's ``sh`` blocks in order, as one script that stops at the first failure."""
    blocks = [b for b in doc_blocks(WALKTHROUGH.read_text(encoding="utf-8")) if b.language == "sh"]
    run = [b.code for b in blocks if not b.skipped]
    return "set -euo pipefail\n" + "\n".join(run)


@dataclass
class Up:
    data_dir: Path
    port: int
    state_home: Path
    log: Path
    seconds_to_healthy: float

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def token(self, user_id: uuid.UUID | str) -> str:
        secret = (self.data_dir / "dev-jwt-secret").read_text().strip()
        return issue_session_token(
            secret,
            uuid.UUID(str(user_id)),
            email_verified=True,
            ttl_seconds=600,
            now=int(time.time()),
        )

    def env(self) -> dict[str, str]:
        """The environment of a shell a user opens next to ``up``: no settings of the suite, the
        data dir named explicitly (so it works whether or not commands find it by themselves)."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("MARKETPLACE_") and k != "RAY_ADDRESS"
        }
        env["MARKETPLACE_DATA_DIR"] = str(self.data_dir)
        env["XDG_STATE_HOME"] = str(self.state_home)
        return env


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str, headers: dict[str, str] | None = None, method: str = "GET") -> tuple[int, Any]:
    request = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Ctrl-C for the whole process group (what a user does), then SIGKILL what is left."""
    for sig, wait in ((signal.SIGINT, 60.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="module")
def up() -> Iterator[Up]:
    # Not pytest's tmp_path: run as root, up starts PostgreSQL as `nobody`, which must be able to
    # search every parent of the data dir (pytest's base directory is 0700).
    base = Path(tempfile.mkdtemp(prefix="mkt-walkthrough-", dir="/tmp"))
    os.chmod(base, 0o755)
    port = _free_port()
    log = base / "up.log"
    instance = Up(base / "data", port, base / "state", log, 0.0)
    started = time.perf_counter()
    with log.open("wb") as log_file:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "marketplace",
                "up",
                "--data-dir",
                str(instance.data_dir),
                "--port",
                str(port),
            ],
            cwd=REPO,
            env=instance.env(),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = started + UP_START_TIMEOUT
        while True:
            if process.poll() is not None:
                pytest.fail(
                    f"`marketplace up` exited with {process.returncode}:\n{log.read_text()}"
                )
            try:
                if _get(f"{instance.api}/v1/health")[0] == 200:
                    break
            except OSError:
                pass
            if time.perf_counter() > deadline:
                pytest.fail(
                    f"`marketplace up` not healthy in {UP_START_TIMEOUT} s:\n{log.read_text()}"
                )
            time.sleep(0.2)
        instance.seconds_to_healthy = time.perf_counter() - started
        yield instance
    finally:
        _stop(process)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def bin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``marketplace`` and ``python`` of this checkout and interpreter, as an activated
    virtualenv would provide them."""
    directory = tmp_path_factory.mktemp("bin")
    wrapper = directory / "marketplace"
    wrapper.write_text(
        f'#!/bin/sh\nPYTHONPATH="{REPO}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" '
        '-m marketplace "$@"\n'
    )
    wrapper.chmod(0o755)
    for name in ("python", "python3"):
        # A wrapper, not a symlink: a symlinked venv interpreter does not find its packages.
        interpreter = directory / name
        interpreter.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        interpreter.chmod(0o755)
    return directory


# --- the walkthrough ------------------------------------------------------------------------------


def test_the_page_has_the_blocks_the_test_relies_on() -> None:
    blocks = doc_blocks(WALKTHROUGH.read_text(encoding="utf-8"))
    skipped = [b.code.strip() for b in blocks if b.skipped]
    assert skipped == ["./scripts/up", "source .venv/bin/activate"]
    script = walkthrough_script()
    for step in (
        "marketplace token",
        "marketplace devnet link-wallet",
        "/v1/projects/create-intents",
        "--intent-json -",
        "/claim",
        "marketplace devnet open",
        "/v1/api-keys",
        "/v1/wallet-links/verify",
        "to_0x_hex()",
        "/bid-drafts",
        "marketplace devnet bid",
        "marketplace devnet select",
        "marketplace token --user-id $WORKER_ID --email walter@example.com",
        "/v1/messages/dm",
        '"$MAIL_DIR"/*.eml',
        "Open the conversation",
    ):
        assert step in script, step


# Starting `up` (Ray, PostgreSQL, anvil) and about a dozen CLI processes: on a loaded 2-core
# machine this nears the suite's 300 s default.
@pytest.mark.timeout(600)
def test_walkthrough_runs_as_written(
    up: Up, bin_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = up.env()
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    env["API"] = up.api
    # What the shell knows at the end, for the checks below (the page itself prints it too).
    epilogue = (
        '\nprintf "\\nWALKTHROUGH %s %s %s %s %s %s\\n" "$PROJECT" "$OWNER_ID" "$WORKER_ID" '
        '"$DRAFT_HASH" "$(echo "$INTENT" | json .intentId)" '
        '"$(echo "$INTENT" | json .intentNonce)"\n'
        'printf "WALKTHROUGH_MAIL %s %s %s\\n" "$(echo "$DM" | json .threadId)" "$EML" "$LINK"\n'
    )
    started = time.perf_counter()
    result = subprocess.run(
        ["bash", "-c", walkthrough_script() + epilogue],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT,
    )
    seconds = time.perf_counter() - started
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    line = next(x for x in result.stdout.splitlines() if x.startswith("WALKTHROUGH "))
    project, owner_id, worker_id, draft_hash, intent_id, intent_nonce = line.split()[1:]
    with capsys.disabled():
        print(
            f"\nwalkthrough: up healthy after {up.seconds_to_healthy:.1f} s, commands "
            f"{seconds:.1f} s, fresh up to selected bid {up.seconds_to_healthy + seconds:.1f} s"
        )

    # The end state, read independently of the script.
    owner, worker = dev_address(3), dev_address(4)
    status, read = _get(f"{up.api}/v1/projects/{project}")
    assert status == 200, read
    assert read["title"] == "Indexer for the marketplace registry"
    assert read["description"].startswith("Index ProjectCreated")
    assert read["ownerAddress"] == owner
    assert read["status"] == "building"
    assert read["selectedBuilderAddress"] == worker
    assert read["milestoneCount"] == 2
    # Created with the intent-mode hash of the claimed metadata and Olivia's intent ...
    assert read["configHash"] == hashes.intent_config_hash(
        read["title"],
        read["description"],
        "https://github.com/example/registry-indexer",
        "standard",
        "open",
        user_id=uuid.UUID(owner_id),
        intent_id=uuid.UUID(intent_id),
        intent_nonce=intent_nonce,
    )
    owner_auth = {"Authorization": f"Bearer {up.token(owner_id)}"}
    # ... which the claim bound: it can no longer be withdrawn.
    status, cancel = _get(
        f"{up.api}/v1/projects/create-intents/{intent_id}", owner_auth, method="DELETE"
    )
    assert (status, cancel["error"]) == (409, "project_create_intent_not_pending")

    status, drafts = _get(f"{up.api}/v1/projects/{project}/bid-drafts", owner_auth)
    assert status == 200, drafts
    assert drafts["count"] == 1
    assert drafts["items"][0]["bidderWalletAddress"] == worker
    assert drafts["items"][0]["draftHash"] == draft_hash
    # The worker cannot read them (owner only); nobody without a credential either.
    worker_auth = {"Authorization": f"Bearer {up.token(worker_id)}"}
    assert _get(f"{up.api}/v1/projects/{project}/bid-drafts", worker_auth)[0] == 403
    assert _get(f"{up.api}/v1/projects/{project}/bid-drafts")[0] == 401

    # Each actor's wallet is linked to that actor only.
    for user_id, wallet in ((owner_id, owner), (worker_id, worker)):
        auth = {"Authorization": f"Bearer {up.token(user_id)}"}
        status, links = _get(f"{up.api}/v1/wallet-links", auth)
        assert status == 200
        assert [item["walletAddress"] for item in links["items"]] == [wallet]
    assert '"mode": "intent"' in result.stdout
    assert '"status":"claimed"' in result.stdout

    # Step 9: Olivia's direct message reached Walter's address as an .eml file of up's mail dir,
    # and its link is the thread, which answers him (the page's own curl already needed a 2xx).
    line = next(x for x in result.stdout.splitlines() if x.startswith("WALKTHROUGH_MAIL "))
    thread_id, eml, link = line.split()[1:]
    path = Path(eml)
    assert path.parent == (up.data_dir / "mail").resolve()
    parsed = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
    assert isinstance(parsed, EmailMessage)
    assert parsed["To"] == "walter@example.com"
    assert parsed["Subject"] == "New direct message from a marketplace user"
    text = parsed.get_body(("plain",))
    assert text is not None
    assert link == f"{up.api}/v1/messages/dm/threads/{thread_id}/messages"
    assert f"Open the conversation: {link}" in text.get_content()
    assert "> Welcome aboard: milestone 1 first, please." in text.get_content()
    status, thread = _get(link, worker_auth)
    assert status == 200, thread
    assert [m["body"] for m in thread["items"]] == ["Welcome aboard: milestone 1 first, please."]
    # Only the direct message mailed: nobody else had an address.
    assert [p.name for p in (up.data_dir / "mail").glob("*.eml")] == [path.name]


# --- marketplace devnet link-wallet ---------------------------------------------------------------


def _link(up: Up, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["devnet", "link-wallet", "--data-dir", str(up.data_dir), *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_link_wallet_proves_the_dev_account_through_the_api(
    up: Up, capsys: pytest.CaptureFixture[str]
) -> None:
    user = uuid.uuid4()
    code, out, err = _link(
        up, capsys, "--user-id", str(user), "--account", "5", "--api-url", up.api, "--json"
    )
    assert code == 0, err
    result = json.loads(out)
    assert result["walletAddress"] == dev_address(5)
    assert result["userId"] == str(user)
    assert result["chainId"] == 31337
    assert result["verificationMethod"] == "eip191_sign_message"

    status, links = _get(f"{up.api}/v1/wallet-links", {"Authorization": f"Bearer {up.token(user)}"})
    assert status == 200
    assert [(i["walletAddress"], i["chainId"]) for i in links["items"]] == [(dev_address(5), 31337)]

    # Proving it again refreshes the link; text output names wallet, user and chain.
    code, out, err = _link(
        up, capsys, "--user-id", str(user), "--account", "5", "--api-url", up.api
    )
    assert code == 0, err
    assert f"linked {dev_address(5)} (dev account 5) to user {user} on chain 31337" in out
    status, again = _get(f"{up.api}/v1/wallet-links", {"Authorization": f"Bearer {up.token(user)}"})
    assert again["count"] == 1
    assert datetime.fromisoformat(again["items"][0]["verifiedAt"]) > datetime.fromisoformat(
        links["items"][0]["verifiedAt"]
    )

    # Another user proving the same wallet supersedes the first link (docs/identity.md).
    other = uuid.uuid4()
    code, _, err = _link(up, capsys, "--user-id", str(other), "--account", "5", "--api-url", up.api)
    assert code == 0, err
    assert (
        _get(f"{up.api}/v1/wallet-links", {"Authorization": f"Bearer {up.token(user)}"})[1]["count"]
        == 0
    )


def test_link_wallet_signature_is_what_the_server_accepts() -> None:
    message = "localhost wants you to sign in with your Ethereum account:\n0x..."
    signature = sign_challenge(message, ANVIL_PRIVATE_KEYS[6])
    assert re.fullmatch(r"0x[0-9a-f]{130}", signature)
    recovered = Account.recover_message(encode_defunct(text=message), signature=signature)
    assert recovered == dev_address(6)


def test_link_wallet_refusals(up: Up, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    user = str(uuid.uuid4())
    code, _, err = _link(up, capsys, "--user-id", user, "--account", "10", "--api-url", up.api)
    assert code == 2
    assert "--account is a dev account index 0..9" in err

    # Nothing listens there: exit 2 naming the URL and the option.
    dead = f"http://127.0.0.1:{_free_port()}"
    code, _, err = _link(up, capsys, "--user-id", user, "--account", "3", "--api-url", dead)
    assert code == 2
    assert f"the API at {dead} does not answer" in err
    assert "--api-url" in err

    # A data dir without the dev secret: no token is minted (and no secret created).
    (tmp_path / "devnet").mkdir()
    for name in ("rpc_url", "deployment.json"):
        shutil.copy(up.data_dir / "devnet" / name, tmp_path / "devnet" / name)
    capsys.readouterr()
    code = main(["devnet", "link-wallet", "--data-dir", str(tmp_path), "--user-id", user,
                 "--account", "3", "--api-url", up.api])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert f"no dev JWT secret at {tmp_path / 'dev-jwt-secret'}" in err
    assert not (tmp_path / "dev-jwt-secret").exists()

    # A secret the server does not know: the API's refusal is exit 1 with its code.
    (tmp_path / "dev-jwt-secret").write_text("not-the-secret-of-this-server-" + "z" * 20)
    capsys.readouterr()
    code = main(["devnet", "link-wallet", "--data-dir", str(tmp_path), "--user-id", user,
                 "--account", "3", "--api-url", up.api])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1
    assert "POST /v1/wallet-links/challenge answered 401 unauthorized" in err
    # ... and nothing was linked for the user.
    assert (
        _get(f"{up.api}/v1/wallet-links", {"Authorization": f"Bearer {up.token(user)}"})[1]["count"]
        == 0
    )

"""A running `up`: what it exposes to the network, how it survives its dependencies dying."""

from __future__ import annotations

import email
import email.policy
import ipaddress
import json
import signal
import smtplib
import socket
import uuid
from pathlib import Path

import psutil
import pytest

from tests.integration.up.conftest import UpRun, alive, http, name_of
from tests.support.waiting import eventually_sync

pytestmark = pytest.mark.timeout(600)


def is_loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip.split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def listening_sockets(run: UpRun) -> list[tuple[int, str, str, int]]:
    """(pid, name, ip, port) of every listening TCP socket in up's process tree."""
    found = []
    for proc in [psutil.Process(run.proc.pid), *run.descendants()]:
        try:
            connections = proc.net_connections(kind="tcp")
            name = proc.name()
        except psutil.NoSuchProcess:
            continue
        for conn in connections:
            if conn.status == psutil.CONN_LISTEN:
                found.append((proc.pid, name, conn.laddr.ip, conn.laddr.port))
    return found


def listening_ports(proc: psutil.Process) -> list[int]:
    return [c.laddr.port for c in proc.net_connections(kind="tcp") if c.status == "LISTEN"]


def test_is_loopback_tells_wildcards_from_loopback() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("::ffff:127.0.0.1")
    assert not any(is_loopback(ip) for ip in ("0.0.0.0", "::", "192.0.2.2", "::ffff:10.0.0.1"))


def test_everything_up_started_listens_on_loopback_only(running_up: UpRun) -> None:
    sockets = listening_sockets(running_up)
    names = {name for _, name, _, _ in sockets}
    # The check covers the pieces that listen: the frontend, the servers and Ray's daemons.
    assert {"postgres", "redis-server", "anvil", "gcs_server", "raylet"} <= names, sockets
    exposed = [s for s in sockets if not is_loopback(s[2])]
    assert not exposed, f"listening beyond loopback: {exposed}"
    # The private Ray runtime also demands its token (inherited by its daemons).
    raylet = next(p for p in running_up.tree if name_of(p) == "raylet")
    assert raylet.environ().get("RAY_AUTH_MODE") == "token"
    assert raylet.environ().get("RAY_AUTH_TOKEN")


def test_http_parser_errors_are_json_under_up(running_up: UpRun) -> None:
    # aiohttp's own parser answers these before any middleware: JSON only through server.serve.
    request = (
        f"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: {'a' * 20000}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", running_up.port), timeout=30) as conn:
        conn.sendall(request)
        response = b""
        while chunk := conn.recv(65536):
            response += chunk
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.split(b" ", 2)[1] == b"431", head
    assert b"application/json" in head
    assert json.loads(body)["error"] == "request_header_fields_too_large"


def test_a_dependency_that_dies_is_restarted_on_its_port(running_up: UpRun) -> None:
    redis = next(p for p in running_up.descendants() if name_of(p) == "redis-server")
    [port] = listening_ports(redis)
    redis.send_signal(signal.SIGKILL)

    def restarted() -> psutil.Process | None:
        for proc in running_up.descendants():
            if name_of(proc) == "redis-server" and proc.pid != redis.pid and alive(proc):
                return proc
        return None

    replacement = eventually_sync(restarted, within=30, what="a new redis-server")
    assert replacement is not None
    ports = eventually_sync(
        lambda: listening_ports(replacement), within=30, what="the new redis to listen"
    )
    assert ports == [port]
    eventually_sync(
        lambda: http(f"{running_up.url}/v1/health/ready")[0] == 200, within=60, what="readiness"
    )
    assert "embedded redis exited; restarting it" in running_up.log_messages()
    # The supervisor logs the restart when the new server's start() returns; the app can be
    # ready again (it reconnects as soon as the port answers) before that.
    eventually_sync(
        lambda: "embedded redis restarted" in running_up.log_messages(),
        within=30,
        what="the restart's log",
    )


def test_lost_ray_runtime_degrades_to_503_and_recovers(running_up: UpRun) -> None:
    user = str(uuid.uuid4())
    token = running_up.cli("token", "--user-id", user, "--data-dir", str(running_up.data_dir))
    headers = {"Authorization": f"Bearer {token.stdout.strip()}"}
    project = "0x" + "ab" * 20
    draft = {"bidderWalletAddress": "0x" + "cd" * 20, "draftHash": "0x" + "11" * 32}

    def write() -> tuple[int, dict[str, str], dict[str, str]]:
        # Validated inside the project's shard actor: an answer proves the actor was reached.
        return http(f"{running_up.url}/v1/projects/{project}/bid-drafts", "POST", draft, headers)

    def read() -> int:
        return http(f"{running_up.url}/v1/projects?limit=5")[0]

    baseline_status, _, baseline = write()
    assert baseline_status in (403, 404), baseline
    head = [p for p in running_up.descendants() if name_of(p) in ("gcs_server", "raylet")]
    assert len(head) == 2
    for proc in head:
        proc.send_signal(signal.SIGKILL)

    reads: list[int] = []
    degraded: list[tuple[int, dict[str, str], dict[str, str]]] = []

    def answers_503() -> bool:
        reads.append(read())
        status, response_headers, body = write()
        if status == 503:
            degraded.append((status, response_headers, body))
        return bool(degraded)

    eventually_sync(answers_503, within=60, what="writes to answer 503", interval=0.25)
    _, response_headers, body = degraded[0]
    assert body["error"] == "service_unavailable" and body["message"]
    assert int(response_headers["Retry-After"]) >= 1

    def recovered() -> bool:
        reads.append(read())
        status, _, body = write()
        return (status, body.get("error")) == (baseline_status, baseline["error"])

    eventually_sync(recovered, within=240, what="writes to reach the actors again", interval=0.25)
    assert reads and set(reads) == {200}, reads  # Postgres-only reads never stopped
    assert running_up.proc.poll() is None
    messages = running_up.log_messages()
    assert "ray runtime lost; actor-backed routes answer 503 until it is back" in messages
    assert "ray runtime reconnected" in messages
    new_head = [p for p in running_up.descendants() if name_of(p) in ("gcs_server", "raylet")]
    assert len(new_head) == 2 and not {p.pid for p in new_head} & {p.pid for p in head}
    # The runtime started by the reconnect is as private as the first one.
    exposed = [s for s in listening_sockets(running_up) if not is_loopback(s[2])]
    assert not exposed, exposed


def test_status_prints_what_runs_where(running_up: UpRun) -> None:
    text = running_up.cli("status")
    assert f"marketplace up (pid {running_up.proc.pid})" in text.stdout
    assert f"url:       {running_up.url}/v1/ (ok)" in text.stdout
    assert f"data dir:  {running_up.data_dir}" in text.stdout

    [record] = json.loads(running_up.cli("status", "--json").stdout)
    assert record["dataDir"] == str(running_up.data_dir)
    assert record["url"] == f"{running_up.url}/v1/"
    assert record["health"] == "ok"
    rpc_file = running_up.data_dir / "devnet" / "rpc_url"
    assert record["chainRpcUrl"] == rpc_file.read_text().strip()
    assert f"chain RPC: {record['chainRpcUrl']}" in text.stdout
    live = {name_of(p): p.pid for p in running_up.descendants()}
    assert record["pids"]["up"] == running_up.proc.pid
    # Still true after the restart of redis above: the record follows restarts.
    assert record["pids"]["redis"] == live["redis-server"]
    assert record["pids"]["anvil"] == live["anvil"]
    assert record["pids"]["postgres"] in {
        p.pid for p in running_up.tree if name_of(p) == "postgres"
    }


def test_mail_goes_to_the_embedded_smtp_server_and_lands_in_the_data_dir(
    running_up: UpRun,
) -> None:
    entries = [json.loads(line) for line in running_up.log().splitlines() if line.startswith("{")]
    mail_dir = running_up.data_dir / "mail"
    [banner] = [e for e in entries if e.get("msg") == "up"]
    assert banner["mail_dir"] == str(mail_dir)
    [smtp] = [e for e in entries if e.get("msg") == "embedded smtp listening"]
    assert "pids" in banner and "smtp" in banner["pids"]
    with smtplib.SMTP("127.0.0.1", smtp["port"], timeout=30) as client:
        client.sendmail(
            "marketplace@localhost",
            ["erin@example.com"],
            b"Subject: hello from the up test\r\nTo: erin@example.com\r\n\r\nbody\r\n",
        )
    [path] = list(mail_dir.glob("*.eml"))
    stored = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
    assert stored["Subject"] == "hello from the up test"
    assert stored["Delivered-To"] == "erin@example.com"


def test_commands_find_the_running_up_from_any_directory(running_up: UpRun, tmp_path: Path) -> None:
    user = str(uuid.uuid4())
    token = running_up.cli("token", "--user-id", user, cwd=tmp_path).stdout.strip()
    status, _, body = http(
        f"{running_up.url}/v1/auth/permissions", headers={"Authorization": f"Bearer {token}"}
    )
    assert status == 200, body  # signed with the running server's secret
    info = json.loads(running_up.cli("devnet", "info", "--json", cwd=tmp_path).stdout)
    assert info["rpcUrl"] == (running_up.data_dir / "devnet" / "rpc_url").read_text().strip()
    # admin reaches the embedded PostgreSQL of that run (its DSN read from the data dir).
    flags = json.loads(running_up.cli("admin", "show", "--user-id", user, cwd=tmp_path).stdout)
    assert flags == {"userId": user, "moderationAdmin": False, "verifierAdmin": False}
    assert list(tmp_path.iterdir()) == []  # nothing created where the commands ran

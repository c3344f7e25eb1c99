"""``marketplace devnet ...``: drive the devnet of ``marketplace up`` from the command line.

Every sub-command finds the running devnet through ``<data-dir>/devnet/deployment.json`` and the
RPC URL ``up`` records in ``<data-dir>/devnet/rpc_url`` (``--data-dir`` defaults to
``$MARKETPLACE_DATA_DIR``, else the running ``up``'s, else an existing ``./.data``; ``--rpc-url``
overrides the recorded URL). Accounts
are anvil dev-account indexes (0 deployer, 1 dispute multisig, 2 treasury, 3-8 free, 9 the dev
verifier) or addresses (impersonated). Amounts are whole USDC (decimals allowed), durations
``90``, ``90s``, ``15m``, ``2h`` or ``3d``. Hash options take a ``0x`` bytes32 or any text (hashed
with keccak256).

    marketplace devnet info
    marketplace devnet create [--mode standard|challenge] [--owner 3] [--milestones 2]
                              [--invite-only] [--bond 50] [--payout 1000] [--draft]
                              [--submission-window 3d] [--response-window 2d]
                              [--config-hash 0x.. | --title T [--description D] [--repo-url U]]
                              [--user-id U (--intent-json FILE|- | --intent-id I --intent-nonce N)]
                              (default hash: direct mode; with the intent options: intent mode)
    marketplace devnet open PROJECT
    marketplace devnet allowlist add|remove PROJECT ACCOUNT...
    marketplace devnet bid PROJECT --from 4 [--payouts 300,700] [--durations 3d,5d]
    marketplace devnet select PROJECT BIDDER          (challenge: the winner)
    marketplace devnet submit PROJECT [--milestone I]  (challenge: --from the submitter)
    marketplace devnet approve PROJECT [--milestone I]
    marketplace devnet dispute PROJECT [--milestone I] [--reason low-quality]
    marketplace devnet evidence PROJECT --from 3 [--milestone I] [--evidence-hash H]
    marketplace devnet attest PROJECT (--passes | --fails) [--milestone I]
    marketplace devnet resolve PROJECT --outcome approve|reject [--slash 10]
    marketplace devnet finalize PROJECT
    marketplace devnet show PROJECT
    marketplace devnet link-wallet --user-id U --account N [--api-url http://127.0.0.1:8080]
    marketplace devnet advance-time --seconds N
    marketplace devnet mine [--blocks N] [--automine on|off]
    marketplace devnet seed --projects N --milestones M [--accounts K] [--seed S]

``link-wallet`` mints a short session token for the user (like ``marketplace token``), asks the
API for a wallet-link challenge on the devnet's chain, signs it with the dev account's well-known
key and submits it. Each prints what it did (transaction hashes, blocks, the project address;
``--json`` for one JSON object instead). Exit status: 0 done, 1 a transaction reverted (the
contract's custom error is named) or the API refused (its error code is named), 2 no running
devnet or API, or a usage error.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from marketplace.auth import issue_session_token
from marketplace.chain import hashes
from marketplace.chain.enums import (
    DisputeOutcome,
    DisputePhase,
    DisputeReason,
    MilestoneStatus,
    ProjectMode,
    ProjectStatus,
    label,
)
from marketplace.cli_commands import plain_text
from marketplace.config.data_dir import DATA_DIR_HELP, DataDirNotFound, locate_data_dir
from marketplace_devstack.devnet.client import (
    USDC,
    ZERO_ADDRESS,
    DevnetClient,
    DevnetError,
    DevnetNotRunning,
    TransactionFailed,
    TxResult,
    parse_hash,
)
from marketplace_devstack.devnet.deploy import ANVIL_PRIVATE_KEYS
from marketplace_devstack.devnet.seed import (
    DEFAULT_ACCOUNTS,
    DEFAULT_BLOCK_GAS,
    Seeder,
    format_summary,
)
from marketplace_devstack.devnet.wallet_link import ApiRefused, link_wallet

DEV_ROLES = {
    0: "deployer / registry admin",
    1: "dispute multisig",
    2: "treasury",
    9: "dev verifier signer",
}


class UsageError(DevnetError):
    """Bad command-line input."""


# --- argument parsing helpers ---------------------------------------------------------------------


def usdc_amount(text: str) -> int:
    """Whole USDC (decimals allowed, at most 6 places) -> base units."""
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"not an amount: {text!r}") from None
    units = value * USDC
    if value < 0 or units != units.to_integral_value():
        raise argparse.ArgumentTypeError(f"not a USDC amount (>= 0, 6 decimals): {text!r}")
    return int(units)


_DURATION = re.compile(r"^(\d+)\s*([smhd]?)$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> int:
    match = _DURATION.match(text.strip().lower())
    if not match:
        raise argparse.ArgumentTypeError(f"not a duration (90, 90s, 15m, 2h, 3d): {text!r}")
    return int(match.group(1)) * _UNITS[match.group(2)]


def _list_of(kind: Callable[[str], int]) -> Callable[[str], list[int]]:
    def parse(text: str) -> list[int]:
        return [kind(part) for part in text.split(",") if part.strip()]

    return parse


def _data_dir(args: argparse.Namespace) -> Path:
    try:
        return locate_data_dir(args.data_dir)
    except DataDirNotFound as exc:
        raise DevnetNotRunning(str(exc)) from None


# --- output -------------------------------------------------------------------------------------


class Output:
    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.transactions: list[dict[str, Any]] = []
        self.fields: dict[str, Any] = {}

    def tx(self, result: TxResult | list[TxResult]) -> None:
        for r in result if isinstance(result, list) else [result]:
            self.transactions.append(r.to_dict())
            if not self.as_json:
                target = f" project {r.project}" if r.project else ""
                print(f"{r.action}:{target}")
                print(f"  tx {r.tx_hash} block {r.block_number} gas {r.gas_used} from {r.sender}")

    def field(self, name: str, value: Any, text: str | None = None) -> None:
        self.fields[name] = value
        if not self.as_json:
            print(text if text is not None else f"{name}: {value}")

    def done(self) -> None:
        if self.as_json:
            payload = dict(self.fields)
            payload["transactions"] = self.transactions
            print(json.dumps(payload, indent=2, default=str))


def _client(args: argparse.Namespace) -> DevnetClient:
    return DevnetClient.from_data_dir(_data_dir(args), rpc_url=args.rpc_url)


# --- commands -------------------------------------------------------------------------------------


def cmd_info(args: argparse.Namespace, client: DevnetClient, out: Output) -> None:
    head = client.head()
    when = datetime.fromtimestamp(head["timestamp"], UTC).isoformat()
    out.field("rpcUrl", client.rpc_url)
    out.field("manifest", str(client.manifest) if client.manifest else None)
    out.field("deployment", client.deployment.to_dict(), _deployment_text(client))
    out.field(
        "head",
        head,
        f"head: block {head['number']} at {when} ({head['hash']})",
    )
    out.field("automine", client.automine())
    out.field("projectCount", client.project_count())
    accounts = [
        {"index": i, "address": client.dev_account(i), "role": DEV_ROLES.get(i, "")}
        for i in range(10)
    ]
    lines = "\n".join(f"  {a['index']}  {a['address']}  {a['role']}".rstrip() for a in accounts)
    out.field("devAccounts", accounts, "dev accounts:\n" + lines)


def _deployment_text(client: DevnetClient) -> str:
    d = client.deployment
    return "\n".join(
        [
            f"chain id: {d.chain_id}",
            f"registry: {d.registry} (start block {d.start_block})",
            f"escrow:   {d.escrow}",
            f"usdc:     {d.usdc}",
            f"verifier signer: {d.verifier_signer}; dispute multisig: {d.dispute_multisig}; "
            f"treasury: {d.treasury}; fee {d.fee_rate_bps} bps",
        ]
    )


INTENT_VERSION = "project_create_intent_v1"


@dataclass(frozen=True)
class Intent:
    """What the intent-mode hash needs besides the metadata (spec section 2, "Hash rules")."""

    user_id: uuid.UUID
    intent_id: uuid.UUID
    intent_nonce: str


def _read_intent_json(source: str) -> dict[str, Any]:
    """The create-intent response, from a file or ``-`` (stdin)."""
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--intent-json: cannot read {source}: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except ValueError:
        raise UsageError(
            f"--intent-json: {source} is not JSON (expected the create-intent response "
            '{"intentId", "intentNonce", "expiresAt", "version"})'
        ) from None
    if not isinstance(data, dict):
        raise UsageError("--intent-json: expected the create-intent response object")
    if "error" in data:
        # An error body piped on from a failed POST /v1/projects/create-intents.
        raise UsageError(
            f"--intent-json: the create-intent request failed: {data['error']}: "
            f"{data.get('message', '')}"
        )
    version = data.get("version", INTENT_VERSION)
    if version != INTENT_VERSION:
        raise UsageError(f"--intent-json: version {version!r} is not {INTENT_VERSION!r}")
    return data


def _uuid(value: Any, option: str) -> uuid.UUID:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise UsageError(f"{option}: not a uuid: {value!r}") from None


_BYTES32 = re.compile(r"^0x[0-9a-fA-F]{64}$")


def _intent(args: argparse.Namespace) -> Intent | None:
    """The intent of ``--intent-json`` or ``--intent-id``/``--intent-nonce``, with
    ``--user-id``; ``None`` for direct mode."""
    given = [
        name
        for name, value in (
            ("--intent-json", args.intent_json),
            ("--intent-id", args.intent_id),
            ("--intent-nonce", args.intent_nonce),
            ("--user-id", args.user_id),
        )
        if value is not None
    ]
    if not given:
        return None
    if args.config_hash:
        raise UsageError(f"--config-hash is the whole hash: it takes no {', '.join(given)}")
    intent_id: Any = args.intent_id
    nonce: Any = args.intent_nonce
    if args.intent_json is not None:
        if intent_id is not None or nonce is not None:
            raise UsageError("give --intent-json or --intent-id and --intent-nonce, not both")
        data = _read_intent_json(args.intent_json)
        intent_id, nonce = data.get("intentId"), data.get("intentNonce")
        if intent_id is None or nonce is None:
            raise UsageError("--intent-json: the object has no intentId and intentNonce")
    missing = [
        name
        for name, value in (
            ("--intent-id (or --intent-json)", intent_id),
            ("--intent-nonce (or --intent-json)", nonce),
            ("--user-id", args.user_id),
        )
        if value is None
    ]
    if missing:
        raise UsageError(
            "the intent-mode hash needs the user id and the create intent: missing "
            + ", ".join(missing)
        )
    if not isinstance(nonce, str) or not _BYTES32.match(nonce):
        raise UsageError(f"--intent-nonce: not a 0x bytes32: {nonce!r}")
    return Intent(
        user_id=_uuid(args.user_id, "--user-id"),
        intent_id=_uuid(intent_id, "--intent-id"),
        intent_nonce=nonce.lower(),
    )


def cmd_create(args: argparse.Namespace, client: DevnetClient, out: Output) -> None:
    owner = client.account(args.owner)
    challenge = args.mode == "challenge"
    if challenge and args.invite_only:
        raise UsageError("challenge projects are always open (no --invite-only)")
    access = "invite_only" if args.invite_only else "open"
    intent = _intent(args)
    metadata: dict[str, str] | None = None
    if args.config_hash:
        if args.title:
            raise UsageError("give --config-hash or --title, not both")
        config_hash = parse_hash(args.config_hash, default_label="")
    else:
        title = args.title or f"Devnet {args.mode} project {time.strftime('%Y-%m-%d %H:%M:%S')}"
        metadata = {"title": title}
        if args.description is not None:
            metadata["description"] = args.description
        if args.repo_url is not None:
            metadata["repoUrl"] = args.repo_url
        metadata |= {"projectMode": args.mode, "biddingAccess": access}
        fields = (title, args.description, args.repo_url, args.mode, access)
        meta_hex = hashes.metadata_hash(*fields)
        if intent is None:
            config_hex = hashes.direct_config_hash(*fields)
            how = f"direct configHash {config_hex}"
        else:
            intent_hex = hashes.intent_hash(intent.user_id, intent.intent_id, intent.intent_nonce)
            config_hex = hashes.intent_config_hash(
                *fields,
                user_id=intent.user_id,
                intent_id=intent.intent_id,
                intent_nonce=intent.intent_nonce,
            )
            how = f"intent configHash {config_hex}"
        config_hash = bytes.fromhex(config_hex[2:])
        out.field(
            "metadata",
            metadata,
            f"metadata ({how}): title={title!r} "
            f"description={args.description or ''!r} repoUrl={args.repo_url or ''!r} "
            f"projectMode={args.mode} biddingAccess={access}",
        )
        if intent is not None:
            out.field("metadataHash", meta_hex)
            out.field("intentHash", intent_hex)
    if challenge:
        results = client.create_challenge(
            owner,
            config_hash=config_hash,
            payout=args.payout,
            submission_window=args.submission_window,
            response_window=args.response_window,
            open_now=not args.draft,
        )
    else:
        if args.milestones < 1:
            raise UsageError("--milestones must be at least 1 for a standard project")
        results = [
            client.create_standard(
                owner,
                config_hash=config_hash,
                invite_only=args.invite_only,
                bid_bond=args.bond,
                milestones=args.milestones,
            )
        ]
    out.tx(results)
    created = results[-1]
    out.field("project", created.project, f"project: {created.project}")
    out.field("configHash", "0x" + config_hash.hex())
    out.field("hashMode", "intent" if intent else "direct" if metadata else None)
    if metadata is not None:
        claim = _claim_body(created.tx_hash, metadata, intent)
        out.field("claim", claim, "claim body: " + json.dumps(claim))


def _claim_body(tx_hash: str, metadata: dict[str, str], intent: Intent | None) -> dict[str, Any]:
    """The body of ``POST /v1/projects/{project}/claim`` that matches this creation."""
    if intent is None:
        return {
            "mode": "direct",
            "hashVersion": "v1_direct",
            "txHash": tx_hash,
            "metadata": metadata,
        }
    return {
        "mode": "intent",
        "hashVersion": "v1_intent",
        "intentId": str(intent.intent_id),
        "intentNonce": intent.intent_nonce,
        "txHash": tx_hash,
        "metadata": metadata,
    }


CREATE_HELP = """\
Create a project on the devnet and print the matching claim body.

The configHash binds the creation to the metadata a claim later submits (docs/chain.md, "Hash
rules"). By default it is the DIRECT-mode hash, H(title, description, repoUrl, projectMode,
biddingAccess): what an agent-key caller claims with (mode "direct"). A session user must claim
in INTENT mode: first POST /v1/projects/create-intents, then pass that response with
--intent-json FILE (or - for stdin), or --intent-id and --intent-nonce, together with --user-id
(the session's user); the hash is then H(metadataHash, intentHash). --config-hash sets the hash
verbatim (no claim body then).

The output names the hash mode and, under "claim" (--json), the body to POST to
/v1/projects/{project}/claim once the creation is mined.
"""


def _milestone(
    client: DevnetClient, project: str, given: int | None, *, dispute: bool = False
) -> int:
    if given is not None:
        return given
    state = client.state(project)
    if dispute and state["disputePhase"] != DisputePhase.NONE:
        return int(state["disputeMilestoneIndex"])
    return int(state["currentMilestone"])


def cmd_open(args: argparse.Namespace, client: DevnetClient, out: Output) -> None:
    sender = client.account(args.sender) if args.sender is not None else None
    out.tx(client.open_bidding(args.project, sender=sender))
    _status(client, args.project, out)


def cmd_allowlist(args: argparse.Namespace, client: DevnetClient, out: Output) -> None:
    accounts = [client.account(a) for a in args.accounts]
    sender = client.account(args.sender) if args.sender is not None else None
    if args.allowlist_command == "add":
        out.tx(client.add_to_allowlist(args.project, accounts, sender=sender))
    else:
        out.tx(client.remove_from_allowlist(args.project, accounts, sender=sender))
    out.field("allowlist", client.allowlist(args.project))


def cmd_bid(args: argparse.Namespace, client: DevnetClient, out: Output) -> None:
    bidder = client.account(args.sender)
    state = client.state(args.project)
    count = int(state["milestoneCount"])
    payouts = args.payouts or [100 * USDC] * count
    durations = args.durations or [7 * 86400] * count
    if len(payouts) != count or len(durations) != count:
        raise UsageError(
            f"the project has {count} milestones: give {count} payouts and {count} durations"
        )
    bid_hash = parse_hash(
        args.bid_hash, default_label=f"bid:{args.project}:{bidder}:{time.time_ns()}"
    )
    out.tx(
        client.post_bid(
            args.project, bidder, payouts=payouts, durations=durations, bid_hash=bid_hash
        )
    )
    out.field("bidder", bidder)
    out.field("bidHash", "0x" + bid_hash.hex())
    out.field("totalPayoutUSDC", str(Decimal(sum(payouts)) / USDC))


def cmd_select(args: argparse.Namespace, client: DevnetClient, out: Output) -> None:
    chosen = client.account(args.bidder)
    sender = client.account(args.sender) if args.sender is not None else None
    state = client.state(args.project)
    if state["mode"] == ProjectMode.CHALLENGE:
        decision = parse_hash(args.decision_hash, default_label=f"decision:{args.project}:{chosen}")
        out.tx(
            client.select_challenge_winner(
                args.project, chosen, decision_hash=decision, sender=sender
            )
        )
    else:
        out.tx(client.select_bid(args.project, chosen, sender=sender))
    _status(client, args.project, out)


def cmd_submit(args: argparse.Namespace, client: DevnetClient, out: Output) -> None:
    state = client.state(args.project)
    sender = client.account(args.sender) if args.sender is not None else None
    if state["mode"] == ProjectMode.CHALLENGE:
        if sender is None:
            raise UsageError("challenge submissions need --from (the submitter)")
        submission = parse_hash(
            args.hash, default_label=f"submission:{args.project}:{sender}:{time.time_ns()}"
        )
        out.tx(client.submit_challenge(args.project, sender, submission_hash=submission))
    else:
        index = _milestone(client, args.project, args.milestone)
        ref = parse_hash(args.hash, default_label=f"delivery:{args.project}:{index}")
        out.tx(client.submit_milestone(args.project, index, delivery_ref=ref, sender=sender))
        out.field("milestone", index)
    _status(client, args.project, out)


def cmd_approve(args: argparse.Namespace, client: DevnetClient, out: Output) -> None:
    index = _milestone(client, args.project, args.milestone)
    sender = client.account(args.sender) if args.sender is not None else None
    out.tx(client.approve_milestone(args.project, index, sender=sender))
    out.field("milestone", index)
    _status(client, args.project, out)


_REASONS = {label(r).replace("_", "-"): r for r in DisputeReason}


def cmd_dispute(args: argparse.Namespace, client: DevnetClient, out: Output) -> None:
    index = _milestone(client, args.project, args.milestone)
    reason = _REASONS[args.reason]
    sender = client.account(args.sender) if args.sender is not None else None
    reason_hash = parse_hash(args.reason_hash, default_label=f"reason:{args.project}:{index}")
    out.tx(
        client.raise_dispute(args.project, index, reason, reason_hash=reason_hash, sender=sender)
    )
    out.field("milestone", index)
    _status(client, args.project, out)


def cmd_evidence(args: argparse.Namespace, client: DevnetClient, out: Output) -> None:
    index = _milestone(client, args.project, args.milestone, dispute=True)
    sender = client.account(args.sender)
    evidence = parse_hash(args.evidence_hash, default_label=f"evidence:{args.project}:{sender}")
    out.tx(
        client.submit_dispute_evidence(args.project, index, evidence_hash=evidence, sender=sender)
    )
    out.field("milestone", index)


def cmd_attest(args: argparse.Namespace, client: DevnetClient, out: Output) -> None:
    index = _milestone(client, args.project, args.milestone, dispute=True)
    evidence = parse_hash(
        args.evidence_hash, default_label=f"verifier-evidence:{args.project}:{index}"
    )
    sender = client.account(args.sender) if args.sender is not None else None
    deadline = client.now() + args.deadline_seconds
    result = client.attest(
        args.project,
        index,
        args.passes,
        evidence_hash=evidence,
        deadline=deadline,
        nonce=args.nonce,
        sender=sender,
    )
    out.tx(result)
    out.field("milestone", index)
    out.field("passes", args.passes)
    out.field("nonce", result.extra["nonce"])
    _status(client, args.project, out)


def cmd_resolve(args: argparse.Namespace, client: DevnetClient, out: Output) -> None:
    outcome = DisputeOutcome[args.outcome.upper()]
    sender = client.account(args.sender) if args.sender is not None else None
    out.tx(client.resolve_dispute(args.project, outcome, slash=args.slash, sender=sender))
    _status(client, args.project, out)


def cmd_finalize(args: argparse.Namespace, client: DevnetClient, out: Output) -> None:
    sender = client.account(args.sender) if args.sender is not None else None
    out.tx(client.finalize_dispute(args.project, sender=sender))
    _status(client, args.project, out)


def _status(client: DevnetClient, project: str, out: Output) -> None:
    state = client.state(project)
    status = label(ProjectStatus(state["status"]))
    phase = label(DisputePhase(state["disputePhase"]))
    text = f"status: {status}" + (f" (dispute phase {phase})" if phase != "none" else "")
    out.field("status", status, text)
    if phase != "none":
        out.fields["disputePhase"] = phase


def cmd_show(args: argparse.Namespace, client: DevnetClient, out: Output) -> None:
    state = client.state(args.project)
    if out.as_json:
        out.fields.update({"project": args.project, "state": state})
        return
    mode = label(ProjectMode(state["mode"]))
    print(f"project: {args.project}")
    print(
        f"status: {label(ProjectStatus(state['status']))}  mode: {mode}  "
        f"access: {'open' if state['biddingAccess'] else 'invite_only'}"
    )
    print(f"owner: {state['owner']}")
    if state["selectedBuilder"] != ZERO_ADDRESS:
        print(f"selected builder: {state['selectedBuilder']}")
    if state["mode"] == ProjectMode.CHALLENGE:
        print(
            f"challenge payout {Decimal(state['challengePayout']) / USDC} USDC, "
            f"{state['challengeSubmissionCount']} submissions, "
            f"deadline {state['challengeSubmissionDeadline']}, "
            f"owner response until {state['challengeOwnerResponseDeadline']}"
        )
    else:
        print(f"bid bond {Decimal(state['bidBond']) / USDC} USDC")
    if state["disputePhase"] != DisputePhase.NONE:
        print(
            f"dispute: {label(DisputePhase(state['disputePhase']))} on milestone "
            f"{state['disputeMilestoneIndex']} ({label(DisputeReason(state['disputeReason']))}, "
            f"raised by {state['disputeRaisedBy']})"
        )
    for i, m in enumerate(state["milestones"]):
        print(
            f"  milestone {i}: {label(MilestoneStatus(m['status']))}, payout "
            f"{Decimal(m['payout']) / USDC} USDC"
        )
    print(f"escrow balance: {Decimal(state['escrowBalance']) / USDC} USDC")


LINK_TOKEN_TTL_SECONDS = 600


def _session_token(args: argparse.Namespace, user_id: uuid.UUID) -> tuple[str, str]:
    """A short session token for ``user_id`` signed like ``marketplace token``'s (the configured
    HS256 secret, else the dev secret of the data dir), and the API URL of that server. Never
    creates a secret: one the running server does not know would only earn a 401."""
    from marketplace.config import load_settings

    settings = load_settings(**({"data_dir": args.data_dir} if args.data_dir else {}))
    if settings.jwt_secret is not None:
        secret = settings.jwt_secret.get_secret_value()
    elif settings.jwt_public_key or settings.jwks_url:
        raise UsageError(
            "link-wallet mints a session token, which needs the shared HS256 secret "
            "(MARKETPLACE_JWT_SECRET); this configuration verifies tokens with a public key"
        )
    else:
        path = settings.dev_secret_path
        try:
            secret = path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            raise UsageError(
                f"no dev JWT secret at {path}: point --data-dir (or MARKETPLACE_DATA_DIR) at the "
                "data dir of the running `marketplace up`"
            ) from None
    token = issue_session_token(
        secret,
        user_id,
        email_verified=True,
        ttl_seconds=LINK_TOKEN_TTL_SECONDS,
        now=int(time.time()),
    )
    api_url = args.api_url or f"http://{settings.listen_address}"
    return token, api_url


def cmd_link_wallet(args: argparse.Namespace, client: DevnetClient, out: Output) -> None:
    if not 0 <= args.account < len(ANVIL_PRIVATE_KEYS):
        raise UsageError(
            f"--account is a dev account index 0..{len(ANVIL_PRIVATE_KEYS) - 1} (its key is "
            "needed to sign)"
        )
    token, api_url = _session_token(args, args.user_id)
    result = link_wallet(
        api_url, token, private_key=ANVIL_PRIVATE_KEYS[args.account], chain_id=client.chain_id
    )
    verified = result.verified
    wallet = verified["walletAddress"]
    out.fields.update(
        {
            "userId": str(args.user_id),
            "account": args.account,
            "walletAddress": wallet,
            "chainId": client.chain_id,
            "challengeId": result.challenge["challengeId"],
            "verifiedAt": verified["verifiedAt"],
        }
    )
    out.field(
        "verificationMethod",
        verified["verificationMethod"],
        f"linked {wallet} (dev account {args.account}) to user {args.user_id} on chain "
        f"{client.chain_id}: verified at {verified['verifiedAt']} "
        f"({verified['verificationMethod']}) through {api_url}",
    )


def cmd_advance_time(args: argparse.Namespace, client: DevnetClient, out: Output) -> None:
    before = client.head()
    head = client.advance_time(args.seconds)
    when = datetime.fromtimestamp(head["timestamp"], UTC).isoformat()
    out.field(
        "head",
        head,
        f"advanced chain time by {args.seconds}s: block {head['number']} at {when} "
        f"(+{head['timestamp'] - before['timestamp']}s since block {before['number']})",
    )


def cmd_mine(args: argparse.Namespace, client: DevnetClient, out: Output) -> None:
    if args.automine is not None:
        client.set_automine(args.automine == "on")
        out.field("automine", args.automine == "on")
    if args.blocks:
        head = client.mine(args.blocks)
        out.field("head", head, f"mined {args.blocks} block(s): head {head['number']}")


def cmd_seed(args: argparse.Namespace, client: DevnetClient, out: Output) -> None:

    seeder = Seeder(
        client,
        accounts=args.accounts,
        rng_seed=args.seed,
        show_progress=not args.quiet,
        block_gas=args.block_gas,
    )
    result = seeder.run(args.projects, args.milestones)
    if out.as_json:
        out.fields.update(result.to_dict())
    else:
        print(format_summary(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8")
        if not out.as_json:
            print(f"project list written to {args.out}")
    if result.mismatches:
        raise DevnetError(f"{len(result.mismatches)} projects did not reach their planned status")


# --- wiring -------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    out = Output(args.json)
    try:
        client = _client(args)
    except DevnetNotRunning as exc:
        print(f"marketplace devnet: {exc}", file=sys.stderr)
        return 2
    except DevnetError as exc:
        print(f"marketplace devnet: error: {exc}", file=sys.stderr)
        return 2
    try:
        args.devnet_func(args, client, out)
    except (TransactionFailed, ApiRefused) as exc:
        out.done()
        print(f"marketplace devnet: {exc}", file=sys.stderr)
        return 1
    except (DevnetError, OSError) as exc:
        print(f"marketplace devnet: error: {exc}", file=sys.stderr)
        return 2
    finally:
        client.close()
    out.done()
    return 0


def configure(devnet: argparse.ArgumentParser) -> None:
    """``marketplace devnet``'s sub-commands (declared in :mod:`marketplace_devstack.commands`)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--data-dir", type=Path, help=DATA_DIR_HELP)
    common.add_argument(
        "--rpc-url",
        help="the devnet's JSON-RPC URL (default: the one `marketplace up` recorded)",
    )
    common.add_argument(
        "--json", action="store_true", help="print one JSON object (default: text lines)"
    )

    devnet.description = plain_text(__doc__ or "")
    devnet.formatter_class = argparse.RawDescriptionHelpFormatter
    sub = devnet.add_subparsers(dest="devnet_command", required=True)

    def command(name: str, func: Callable[..., None], help_: str) -> argparse.ArgumentParser:
        parser = sub.add_parser(name, parents=[common], help=help_, description=help_)
        parser.set_defaults(func=run, devnet_func=func)
        return parser

    def sender(parser: argparse.ArgumentParser, required: bool = False, who: str = "") -> None:
        parser.add_argument(
            "--from",
            dest="sender",
            required=required,
            help=f"account index or address{f' (default: {who})' if who else ''}",
        )

    def milestone(parser: argparse.ArgumentParser, default: str) -> None:
        parser.add_argument("--milestone", type=int, help=f"index (default: {default})")

    command("info", cmd_info, "show the deployment, head block and dev accounts")

    p = command("create", cmd_create, "create a project (standard, or challenge funded+opened)")
    p.description = CREATE_HELP
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument(
        "--mode",
        choices=("standard", "challenge"),
        default="standard",
        help="the project's mode (default: %(default)s)",
    )
    p.add_argument("--owner", default="3", help="account index or address (default: 3)")
    p.add_argument("--milestones", type=int, default=2, help="standard: 1..100 (default: 2)")
    p.add_argument(
        "--invite-only",
        action="store_true",
        help="standard only: bidders must be on the allowlist (default: anyone may bid)",
    )
    p.add_argument(
        "--bond", type=usdc_amount, default=50 * USDC, help="bid bond, USDC (default: 50)"
    )
    p.add_argument(
        "--payout",
        type=usdc_amount,
        default=1000 * USDC,
        help="challenge: the prize, USDC (default: 1000)",
    )
    p.add_argument(
        "--submission-window",
        type=duration,
        default=3 * 86400,
        help="challenge: how long entries may be submitted (default: 3d)",
    )
    p.add_argument(
        "--response-window",
        type=duration,
        default=2 * 86400,
        help="challenge: how long the owner has to respond to entries (default: 2d)",
    )
    p.add_argument(
        "--draft",
        action="store_true",
        help="challenge: create without funding and opening (default: funded and opened)",
    )
    p.add_argument(
        "--config-hash",
        help="bytes32 configHash, verbatim (default: computed from --title, --description, "
        "--repo-url)",
    )
    p.add_argument("--title", help="the project's title, hashed into configHash (default: none)")
    p.add_argument("--description", help="its description, hashed likewise (default: none)")
    p.add_argument("--repo-url", help="its repository URL, hashed likewise (default: none)")
    intent = p.add_argument_group(
        "intent mode (session users)",
        "with these the configHash is the intent-mode hash; without them, the direct-mode one",
    )
    intent.add_argument(
        "--intent-json",
        metavar="FILE",
        help="the create-intent response (a file, or - for stdin): intentId and intentNonce",
    )
    intent.add_argument("--intent-id", help="uuid of the create intent")
    intent.add_argument("--intent-nonce", help="bytes32 intentNonce of the create intent")
    intent.add_argument("--user-id", help="uuid of the user who created the intent (required)")

    def project(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("project", help="the project's address")

    p = command("open", cmd_open, "open bidding (a challenge draft is funded first)")
    project(p)
    sender(p, who="the owner")

    allowlist = sub.add_parser("allowlist", help="edit an invite-only project's allowlist")
    allowlist_sub = allowlist.add_subparsers(dest="allowlist_command", required=True)
    for name in ("add", "remove"):
        p = allowlist_sub.add_parser(name, parents=[common], help=f"{name} accounts")
        p.set_defaults(func=run, devnet_func=cmd_allowlist)
        project(p)
        p.add_argument("accounts", nargs="+", help="account indexes or addresses")
        sender(p, who="the owner")

    p = command("bid", cmd_bid, "post a bid (the bond is minted/approved as needed)")
    project(p)
    sender(p, required=True)
    p.add_argument(
        "--payouts",
        type=_list_of(usdc_amount),
        help="USDC per milestone, comma-separated (default: 100 each)",
    )
    p.add_argument(
        "--durations",
        type=_list_of(duration),
        help="duration per milestone, comma-separated (default: 7d each)",
    )
    p.add_argument(
        "--bid-hash", help="the bid's reference hash (default: one derived from the project)"
    )

    p = command("select", cmd_select, "select a bid (standard) or the winner (challenge)")
    project(p)
    p.add_argument("bidder", help="account index or address")
    p.add_argument(
        "--decision-hash",
        help="challenge only: the decision's hash (default: one derived from the project)",
    )
    sender(p, who="the owner")

    p = command("submit", cmd_submit, "submit a milestone (standard) or a challenge entry")
    project(p)
    milestone(p, "the current one")
    p.add_argument(
        "--hash",
        help="delivery reference / submission hash (default: one derived from the project)",
    )
    sender(p, who="the selected builder")

    p = command("approve", cmd_approve, "approve a submitted milestone")
    project(p)
    milestone(p, "the current one")
    sender(p, who="the owner")

    p = command("dispute", cmd_dispute, "raise a dispute on a milestone")
    project(p)
    milestone(p, "the current one")
    p.add_argument(
        "--reason",
        choices=sorted(_REASONS),
        default="low-quality",
        help="why (default: %(default)s)",
    )
    p.add_argument(
        "--reason-hash", help="the reason's reference hash (default: one derived from the project)"
    )
    sender(p, who="owner; the builder for owner-inaction")

    p = command("evidence", cmd_evidence, "submit dispute evidence")
    project(p)
    milestone(p, "the disputed one")
    p.add_argument(
        "--evidence-hash", help="the evidence's hash (default: one derived from the project)"
    )
    sender(p, required=True)

    p = command("attest", cmd_attest, "attest a disputed milestone, signed by the dev verifier key")
    project(p)
    verdict = p.add_mutually_exclusive_group(required=True)
    verdict.add_argument(
        "--passes", dest="passes", action="store_true", help="the milestone passes"
    )
    verdict.add_argument("--fails", dest="passes", action="store_false", help="the milestone fails")
    milestone(p, "the disputed one")
    p.add_argument(
        "--evidence-hash", help="the evidence's hash (default: one derived from the project)"
    )
    p.add_argument(
        "--deadline-seconds",
        type=duration,
        default=3600,
        help="how long the attestation stays valid (default: 1h)",
    )
    p.add_argument("--nonce", type=int, help="default: random (single use per signer)")
    sender(p, who="account 9")

    p = command("resolve", cmd_resolve, "resolve a dispute as the dispute multisig")
    project(p)
    p.add_argument(
        "--outcome",
        choices=("approve", "reject"),
        required=True,
        help="approve or reject the milestone (required)",
    )
    p.add_argument(
        "--slash", type=usdc_amount, default=0, help="USDC of the builder's bond (default: 0)"
    )
    sender(p, who="the project's dispute multisig")

    p = command("finalize", cmd_finalize, "finalize a dispute after its window")
    project(p)
    sender(p, who="account 0")

    p = command("show", cmd_show, "print a project's on-chain state")
    project(p)

    p = command(
        "link-wallet",
        cmd_link_wallet,
        "link a dev account's wallet to a user through the API (challenge, sign, verify)",
    )
    p.add_argument("--user-id", type=uuid.UUID, required=True, help="the user to link it to")
    p.add_argument("--account", type=int, required=True, help="dev account index 0..9")
    p.add_argument(
        "--api-url",
        help="the API of `marketplace up` (default: http:// + MARKETPLACE_HOST:MARKETPLACE_PORT)",
    )

    p = command("advance-time", cmd_advance_time, "evm_increaseTime + evm_mine")
    p.add_argument(
        "--seconds", type=duration, required=True, help="how far, e.g. 90, 15m, 3d (required)"
    )

    p = command("mine", cmd_mine, "mine blocks and/or switch automine")
    p.add_argument("--blocks", type=int, default=1, help="blocks to mine (default: 1)")
    p.add_argument(
        "--automine",
        choices=("on", "off"),
        help="switch automining on or off (default: left as it is)",
    )

    p = command("seed", cmd_seed, "fill the chain with projects in every status, quickly")
    p.add_argument(
        "--projects", type=int, default=200, help="projects to create (default: %(default)s)"
    )
    p.add_argument(
        "--milestones",
        type=int,
        default=5,
        help="per standard project, 1..100 (default: %(default)s)",
    )
    p.add_argument(
        "--accounts",
        type=int,
        default=DEFAULT_ACCOUNTS,
        help="participating accounts, >= 4 (default: %(default)s)",
    )
    p.add_argument("--seed", type=int, help="random seed (default: random)")
    p.add_argument(
        "--block-gas",
        type=int,
        default=DEFAULT_BLOCK_GAS,
        help="gas sealed per block while seeding (default 300M; the block gas limit is "
        "raised to twice this during the seed and restored after)",
    )
    p.add_argument("--out", help="also write the project list (JSON) to this file")
    p.add_argument("--quiet", action="store_true", help="no progress bar")

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
    marketplace devnet advance-time --seconds N
    marketplace devnet mine [--blocks N] [--automine on|off]
    marketplace devnet seed --projects N --milestones M [--accounts K] [--seed S]

Each prints what it did (transaction hashes, blocks, the project address; ``--json`` for one
JSON object instead). Exit status: 0 done, 1 a transaction reverted (the contract's custom error
is named), 2 no running devnet or a usage error.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from marketplace.chain import hashes
from marketplace.chain.devnet_client.client import (
    USDC,
    ZERO_ADDRESS,
    DevnetClient,
    DevnetError,
    DevnetNotRunning,
    TransactionFailed,
    TxResult,
    parse_hash,
)
from marketplace.chain.devnet_client.seed import (
    DEFAULT_ACCOUNTS,
    DEFAULT_BLOCK_GAS,
    Seeder,
    format_summary,
)
from marketplace.chain.enums import (
    DisputeOutcome,
    DisputePhase,
    DisputeReason,
    MilestoneStatus,
    ProjectMode,
    ProjectStatus,
    label,
)
from marketplace.embedded.state import DATA_DIR_HELP, DataDirNotFound, locate_data_dir

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


def cmd_create(args: argparse.Namespace, client: DevnetClient, out: Output) -> None:
    owner = client.account(args.owner)
    challenge = args.mode == "challenge"
    if challenge and args.invite_only:
        raise UsageError("challenge projects are always open (no --invite-only)")
    access = "invite_only" if args.invite_only else "open"
    if args.config_hash:
        if args.title:
            raise UsageError("give --config-hash or --title, not both")
        config_hash = parse_hash(args.config_hash, default_label="")
    else:
        title = args.title or f"Devnet {args.mode} project {time.strftime('%Y-%m-%d %H:%M:%S')}"
        config_hex = hashes.direct_config_hash(
            title, args.description, args.repo_url, args.mode, access
        )
        config_hash = bytes.fromhex(config_hex[2:])
        out.field(
            "metadata",
            {
                "title": title,
                "description": args.description or "",
                "repoUrl": args.repo_url or "",
                "projectMode": args.mode,
                "biddingAccess": access,
            },
            f"metadata (direct configHash {config_hex}): title={title!r} "
            f"description={args.description or ''!r} repoUrl={args.repo_url or ''!r} "
            f"projectMode={args.mode} biddingAccess={access}",
        )
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
    out.field("project", results[-1].project, f"project: {results[-1].project}")
    out.field("configHash", "0x" + config_hash.hex())


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
    except TransactionFailed as exc:
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


def register_cli(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--data-dir", type=Path, help=DATA_DIR_HELP)
    common.add_argument("--rpc-url", help="default: the URL `marketplace up` recorded")
    common.add_argument("--json", action="store_true", help="print one JSON object")

    devnet = subparsers.add_parser(
        "devnet",
        help="drive the devnet of `marketplace up` (create, bid, dispute, seed, ...)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
    p.add_argument("--mode", choices=("standard", "challenge"), default="standard")
    p.add_argument("--owner", default="3", help="account index or address (default 3)")
    p.add_argument("--milestones", type=int, default=2, help="standard: 1..100 (default 2)")
    p.add_argument("--invite-only", action="store_true", help="standard only")
    p.add_argument("--bond", type=usdc_amount, default=50 * USDC, help="bid bond, USDC (50)")
    p.add_argument("--payout", type=usdc_amount, default=1000 * USDC, help="challenge, USDC")
    p.add_argument("--submission-window", type=duration, default=3 * 86400, help="default 3d")
    p.add_argument("--response-window", type=duration, default=2 * 86400, help="default 2d")
    p.add_argument("--draft", action="store_true", help="challenge: create without opening")
    p.add_argument("--config-hash", help="bytes32 (else computed from --title ...)")
    p.add_argument("--title")
    p.add_argument("--description")
    p.add_argument("--repo-url")

    p = command("open", cmd_open, "open bidding (a challenge draft is funded first)")
    p.add_argument("project")
    sender(p, who="the owner")

    allowlist = sub.add_parser("allowlist", help="edit an invite-only project's allowlist")
    allowlist_sub = allowlist.add_subparsers(dest="allowlist_command", required=True)
    for name in ("add", "remove"):
        p = allowlist_sub.add_parser(name, parents=[common], help=f"{name} accounts")
        p.set_defaults(func=run, devnet_func=cmd_allowlist)
        p.add_argument("project")
        p.add_argument("accounts", nargs="+", help="account indexes or addresses")
        sender(p, who="the owner")

    p = command("bid", cmd_bid, "post a bid (the bond is minted/approved as needed)")
    p.add_argument("project")
    sender(p, required=True)
    p.add_argument("--payouts", type=_list_of(usdc_amount), help="USDC per milestone (100 each)")
    p.add_argument("--durations", type=_list_of(duration), help="per milestone (7d each)")
    p.add_argument("--bid-hash")

    p = command("select", cmd_select, "select a bid (standard) or the winner (challenge)")
    p.add_argument("project")
    p.add_argument("bidder", help="account index or address")
    p.add_argument("--decision-hash", help="challenge only")
    sender(p, who="the owner")

    p = command("submit", cmd_submit, "submit a milestone (standard) or a challenge entry")
    p.add_argument("project")
    milestone(p, "the current one")
    p.add_argument("--hash", help="delivery reference / submission hash")
    sender(p, who="the selected builder")

    p = command("approve", cmd_approve, "approve a submitted milestone")
    p.add_argument("project")
    milestone(p, "the current one")
    sender(p, who="the owner")

    p = command("dispute", cmd_dispute, "raise a dispute on a milestone")
    p.add_argument("project")
    milestone(p, "the current one")
    p.add_argument("--reason", choices=sorted(_REASONS), default="low-quality")
    p.add_argument("--reason-hash")
    sender(p, who="owner; the builder for owner-inaction")

    p = command("evidence", cmd_evidence, "submit dispute evidence")
    p.add_argument("project")
    milestone(p, "the disputed one")
    p.add_argument("--evidence-hash")
    sender(p, required=True)

    p = command("attest", cmd_attest, "attest a disputed milestone, signed by the dev verifier key")
    p.add_argument("project")
    verdict = p.add_mutually_exclusive_group(required=True)
    verdict.add_argument("--passes", dest="passes", action="store_true")
    verdict.add_argument("--fails", dest="passes", action="store_false")
    milestone(p, "the disputed one")
    p.add_argument("--evidence-hash")
    p.add_argument("--deadline-seconds", type=duration, default=3600, help="validity (1h)")
    p.add_argument("--nonce", type=int, help="default: random (single use per signer)")
    sender(p, who="account 9")

    p = command("resolve", cmd_resolve, "resolve a dispute as the dispute multisig")
    p.add_argument("project")
    p.add_argument("--outcome", choices=("approve", "reject"), required=True)
    p.add_argument("--slash", type=usdc_amount, default=0, help="USDC of the builder's bond")
    sender(p, who="the project's dispute multisig")

    p = command("finalize", cmd_finalize, "finalize a dispute after its window")
    p.add_argument("project")
    sender(p, who="account 0")

    p = command("show", cmd_show, "print a project's on-chain state")
    p.add_argument("project")

    p = command("advance-time", cmd_advance_time, "evm_increaseTime + evm_mine")
    p.add_argument("--seconds", type=duration, required=True)

    p = command("mine", cmd_mine, "mine blocks and/or switch automine")
    p.add_argument("--blocks", type=int, default=1)
    p.add_argument("--automine", choices=("on", "off"))

    p = command("seed", cmd_seed, "fill the chain with projects in every status, quickly")
    p.add_argument("--projects", type=int, default=200)
    p.add_argument("--milestones", type=int, default=5, help="per standard project (1..100)")
    p.add_argument(
        "--accounts", type=int, default=DEFAULT_ACCOUNTS, help="participating accounts (>= 4)"
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

"""Fill a devnet with realistic projects in every status, quickly.

How it is fast: every project gets a *plan*, a list of steps (a step is one or more mutually
independent transactions, e.g. the bids of several bidders); phase ``i`` runs step ``i`` of every
plan. Within a phase nothing waits for a receipt: transactions go out as JSON-RPC batches of
``eth_sendTransaction`` from node-unlocked (or impersonated) accounts with locally managed nonces,
anvil's automine is off, and one ``evm_mine`` seals each chunk of ``block_gas`` (300M by default;
the block gas limit is raised to twice that for the seed, so blocks stay under the base-fee
target and the fee never climbs, and restored afterwards). Success is read from the phase's
``eth_getLogs`` (every call the seeder makes emits an event; only hashes without logs get a
receipt lookup). Gas is estimated once per kind of call, on the first transaction of that kind
(whose prerequisites the earlier phases have mined), which also reports a would-be revert with
the contract's custom error before anything of that kind is sent.

Why these choices (measured on a 2-core machine, 2,000 projects x 5 milestones, ~15,800
transactions): with automine, batches whose nonces arrive out of order left transactions stuck
in anvil's queue for good; with manual mining at mainnet-sized blocks (13M gas, ~450 blocks) the
seed took 67 s, because anvil's cost per mined block grows with the chain's state (about 100 ms
per block at that size), whereas 300M-gas blocks (~32 blocks) take about 7 s; and anvil's
receipt lookups (``eth_getTransactionReceipt``, even ``eth_getBlockReceipts``) get slower with
every transaction in the block, while ``eth_getLogs`` over the same blocks stays cheap.

Time: challenge projects meant to reach selection get a 10-minute submission window; after all
other phases the seeder advances chain time just past the latest of those deadlines
(``evm_increaseTime``) and runs the selection phase. Nothing else depends on time (standard
milestones have deadlines days ahead), so the chain ends at most about ten minutes ahead of wall
clock.

Accounts: anvil dev accounts 3..8 plus deterministic extra addresses (``keccak("marketplace-devnet-
seed:<i>")``, impersonated, no private key), each given ETH, 10^9 test USDC and an unlimited
escrow allowance. Account 1 (the dispute multisig) resolves disputes; the dev verifier key signs
attestations.
"""

from __future__ import annotations

import contextlib
import random
import secrets
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from eth_utils import keccak, to_checksum_address

from marketplace.chain import hashes
from marketplace.chain.abi import AbiFunction
from marketplace.chain.eip712 import sign_attestation
from marketplace.chain.enums import (
    DisputeOutcome,
    DisputePhase,
    DisputeReason,
    ProjectMode,
    ProjectStatus,
    label,
)
from marketplace_devstack.devnet.client import (
    DAY,
    MAX_UINT256,
    USDC,
    DevnetClient,
    DevnetError,
    DevnetRpcError,
    decode_revert,
    revert_data_of,
)
from marketplace_devstack.devnet.deploy import DEV_VERIFIER_PRIVATE_KEY, dev_address

SEED_ACCOUNT_USDC = 10**9 * USDC
SEED_ACCOUNT_ETH = 10_000 * 10**18
SHORT_SUBMISSION_WINDOW = 600
DEFAULT_ACCOUNTS = 24
#: Gas (sum of transaction gas limits) sealed per block while seeding; see Seeder.
DEFAULT_BLOCK_GAS = 300_000_000
DEV_PARTICIPANTS = range(3, 9)


class SeedError(DevnetError):
    """The seed could not complete; the message names the step and the revert."""


@dataclass(frozen=True)
class Scenario:
    name: str
    mode: ProjectMode
    status: ProjectStatus
    weight: int
    dispute_phase: DisputePhase = DisputePhase.NONE


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("standard/draft", ProjectMode.STANDARD, ProjectStatus.DRAFT, 6),
    Scenario("standard/bidding", ProjectMode.STANDARD, ProjectStatus.BIDDING, 14),
    Scenario("standard/building", ProjectMode.STANDARD, ProjectStatus.BUILDING, 18),
    Scenario(
        "standard/dispute-challenged",
        ProjectMode.STANDARD,
        ProjectStatus.DISPUTE,
        6,
        DisputePhase.CHALLENGED,
    ),
    Scenario(
        "standard/dispute-verdict",
        ProjectMode.STANDARD,
        ProjectStatus.DISPUTE,
        6,
        DisputePhase.VERIFIER_VERDICT,
    ),
    Scenario("standard/complete", ProjectMode.STANDARD, ProjectStatus.COMPLETE, 12),
    Scenario("standard/failed", ProjectMode.STANDARD, ProjectStatus.FAILED, 8),
    Scenario("challenge/draft", ProjectMode.CHALLENGE, ProjectStatus.DRAFT, 3),
    Scenario("challenge/bidding", ProjectMode.CHALLENGE, ProjectStatus.BIDDING, 9),
    Scenario("challenge/building", ProjectMode.CHALLENGE, ProjectStatus.BUILDING, 5),
    Scenario("challenge/complete", ProjectMode.CHALLENGE, ProjectStatus.COMPLETE, 8),
    Scenario("challenge/failed", ProjectMode.CHALLENGE, ProjectStatus.FAILED, 5),
)

_VERBS = ("Build", "Audit", "Port", "Design", "Benchmark", "Document", "Harden", "Prototype")
_OBJECTS = (
    "an ERC-20 payment splitter",
    "a subgraph for escrow events",
    "a React dashboard for milestones",
    "a Rust indexer for project logs",
    "a CLI wallet for agents",
    "gas-optimised Merkle airdrop contracts",
    "a Telegram bot for bid alerts",
    "an IPFS pinning service",
    "a fuzzing harness for the registry",
    "a Python SDK for the marketplace API",
    "an on-chain reputation score",
    "a zk proof of delivery",
)


# --- plans -------------------------------------------------------------------------------------

Args = tuple[Any, ...] | Callable[["ProjectPlan", int], tuple[Any, ...]]


@dataclass
class Call:
    """One transaction of a plan. ``to=None`` targets the plan's project; ``args`` may be a
    function of (plan, latest block timestamp), evaluated when the phase runs."""

    sender: str
    fn: AbiFunction
    args: Args
    to: str | None = None
    gas_tag: str = ""


@dataclass
class ProjectPlan:
    index: int
    scenario: Scenario
    owner: str
    title: str
    description: str
    repo_url: str
    config_hash: str
    invite_only: bool = False
    bond: int = 0
    milestones: int = 0
    payout: int = 0
    steps: list[list[Call]] = field(default_factory=list)
    after_time: list[list[Call]] = field(default_factory=list)
    address: str | None = None
    create_tx: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "address": self.address,
            "scenario": self.scenario.name,
            "mode": label(self.scenario.mode),
            "expectedStatus": label(self.scenario.status),
            "owner": self.owner,
            "inviteOnly": self.invite_only,
            "milestones": self.milestones,
            "title": self.title,
            "description": self.description,
            "repoUrl": self.repo_url,
            "configHash": self.config_hash,
            "createTx": self.create_tx,
        }


def seed_accounts(count: int) -> list[str]:
    """Dev accounts 3..8, then deterministic impersonated addresses, ``count`` in all."""
    accounts = [dev_address(i) for i in DEV_PARTICIPANTS][:count]
    i = 0
    while len(accounts) < count:
        accounts.append(to_checksum_address(keccak(text=f"marketplace-devnet-seed:{i}")[12:]))
        i += 1
    return accounts


def choose_scenarios(count: int, rng: random.Random) -> list[Scenario]:
    """Every scenario once first (so a small seed still covers all), then weighted draws."""
    chosen = list(SCENARIOS[:count])
    weights = [s.weight for s in SCENARIOS]
    chosen += rng.choices(SCENARIOS, weights=weights, k=max(0, count - len(SCENARIOS)))
    return chosen


class Planner:
    def __init__(self, client: DevnetClient, accounts: Sequence[str], rng: random.Random) -> None:
        self.client = client
        self.accounts = list(accounts)
        self.rng = rng
        reg = client.registry_abi.functions
        prj = client.project_abi.functions
        self.f_create = reg["createProject"]
        self.f_create_challenge = reg["createChallengeProject"]
        self.f_create_challenge_open = reg["createChallengeProjectAndOpen"]
        self.prj = prj
        self.multisig = client.deployment.dispute_multisig
        self.relayer = dev_address(9)

    def _h(self, *parts: object) -> bytes:
        return keccak(text=":".join(str(p) for p in (*parts, self.rng.random())))

    def plan(self, index: int, scenario: Scenario, milestones: int) -> ProjectPlan:
        rng = self.rng
        owner = rng.choice(self.accounts)
        others = [a for a in self.accounts if a != owner]
        verb, obj = rng.choice(_VERBS), rng.choice(_OBJECTS)
        title = f"{verb} {obj}"
        slug = f"{verb}-{obj}".lower().replace(" ", "-").replace(",", "")
        description = (
            f"{title}. Seeded devnet project #{index}: deliverables are reviewed per milestone; "
            "tests and documentation required."
        )
        repo_url = f"https://github.com/example-org/{slug}-{index}"
        challenge = scenario.mode == ProjectMode.CHALLENGE
        invite_only = not challenge and rng.random() < 0.2
        config_hash = hashes.direct_config_hash(
            title,
            description,
            repo_url,
            label(scenario.mode),
            "invite_only" if invite_only else "open",
        )
        plan = ProjectPlan(
            index=index,
            scenario=scenario,
            owner=owner,
            title=title,
            description=description,
            repo_url=repo_url,
            config_hash=config_hash,
            invite_only=invite_only,
        )
        if challenge:
            self._challenge(plan, others)
        else:
            self._standard(plan, others, milestones)
        return plan

    def _standard(self, plan: ProjectPlan, others: list[str], milestones: int) -> None:
        rng, prj, s = self.rng, self.prj, plan.scenario
        plan.milestones = milestones
        plan.bond = rng.choice((0, 10, 25, 50, 100)) * USDC
        owner = plan.owner
        plan.steps.append(
            [
                Call(
                    owner,
                    self.f_create,
                    (bytes.fromhex(plan.config_hash[2:]), plan.invite_only, plan.bond, milestones),
                    to=self.client.registry,
                )
            ]
        )
        if s.status == ProjectStatus.DRAFT:
            if plan.invite_only and rng.random() < 0.5:
                plan.steps.append(
                    [Call(owner, prj["addToAllowlist"], (rng.sample(others, 2),), gas_tag="2")]
                )
            return
        selected = s.status != ProjectStatus.BIDDING
        bidders = rng.sample(others, rng.randint(1 if selected else 0, 3))
        opening = []
        if plan.invite_only:
            extra = rng.sample([a for a in others if a not in bidders], rng.randint(0, 2))
            allowed = bidders + extra
            opening.append(
                Call(owner, prj["addToAllowlist"], (allowed,), gas_tag=str(len(allowed)))
            )
        opening.append(Call(owner, prj["openBidding"], ()))
        plan.steps.append(opening)
        if bidders:
            bids = []
            for bidder in bidders:
                payouts = [rng.randint(5, 200) * 10 * USDC for _ in range(milestones)]
                durations = [rng.randint(2, 21) * DAY for _ in range(milestones)]
                bids.append(
                    Call(bidder, prj["postBid"], (payouts, durations, self._h("bid", bidder)))
                )
            plan.steps.append(bids)
        if not selected:
            return
        worker = bidders[0]
        plan.steps.append([Call(owner, prj["selectBid"], (worker,))])

        def deliver(index: int, approve: bool) -> None:
            plan.steps.append(
                [Call(worker, prj["submitMilestone"], (index, self._h("delivery", index)))]
            )
            if approve:
                tag = "last" if index == milestones - 1 else ""
                plan.steps.append([Call(owner, prj["approveMilestone"], (index,), gas_tag=tag)])

        if s.status == ProjectStatus.COMPLETE:
            for index in range(milestones):
                deliver(index, approve=True)
            return
        approved = rng.randint(0, milestones - 1)
        for index in range(approved):
            deliver(index, approve=True)
        if s.status == ProjectStatus.BUILDING:
            if rng.random() < 0.5:
                deliver(approved, approve=False)
            return
        # dispute / failed: the owner disputes the submitted milestone as low quality
        deliver(approved, approve=False)
        reason = (approved, int(DisputeReason.LOW_QUALITY), self._h("reason"))
        plan.steps.append([Call(owner, prj["raiseDispute"], reason)])
        evidence = []
        if rng.random() < 0.6:
            evidence.append(
                Call(owner, prj["submitDisputeEvidence"], (approved, self._h("owner-evidence")))
            )
        if rng.random() < 0.6:
            evidence.append(
                Call(worker, prj["submitDisputeEvidence"], (approved, self._h("worker-evidence")))
            )
        if evidence:
            plan.steps.append(evidence)
        attest = s.dispute_phase == DisputePhase.VERIFIER_VERDICT or (
            s.status == ProjectStatus.FAILED and rng.random() < 0.5
        )
        if attest:
            plan.steps.append([self._attestation(plan, approved, rng.random() < 0.5)])
        if s.status == ProjectStatus.FAILED:
            slash = rng.choice((0, plan.bond // 2, plan.bond))
            plan.steps.append(
                [Call(self.multisig, prj["resolveDispute"], (int(DisputeOutcome.REJECT), slash))]
            )

    def _attestation(self, plan: ProjectPlan, index: int, passes: bool) -> Call:
        client = self.client
        evidence = self._h("verifier-evidence", index)

        def args(p: ProjectPlan, now: int) -> tuple[Any, ...]:
            assert p.address is not None
            deadline, nonce = now + DAY, secrets.randbits(128)
            signature = sign_attestation(
                DEV_VERIFIER_PRIVATE_KEY,
                chain_id=client.chain_id,
                registry=client.registry,
                project=p.address,
                milestone_index=index,
                passes=passes,
                evidence_hash=evidence,
                deadline=deadline,
                nonce=nonce,
            )
            return (index, passes, evidence, deadline, nonce, client.chain_id, signature)

        return Call(self.relayer, self.prj["attestMilestone"], args)

    def _challenge(self, plan: ProjectPlan, others: list[str]) -> None:
        rng, prj, s = self.rng, self.prj, plan.scenario
        owner = plan.owner
        plan.payout = rng.randint(5, 100) * 100 * USDC
        short = s.status in (ProjectStatus.BUILDING, ProjectStatus.COMPLETE)
        window = SHORT_SUBMISSION_WINDOW if short else rng.randint(3, 14) * DAY
        response = rng.randint(2, 7) * DAY
        config = bytes.fromhex(plan.config_hash[2:])
        create = (
            self.f_create_challenge
            if s.status == ProjectStatus.DRAFT
            else (self.f_create_challenge_open)
        )
        plan.steps.append(
            [Call(owner, create, (config, plan.payout, window, response), to=self.client.registry)]
        )
        if s.status == ProjectStatus.DRAFT:
            return
        if s.status == ProjectStatus.FAILED:
            plan.steps.append([Call(owner, prj["cancelBeforeSelection"], ())])
            return
        submitters = rng.sample(others, rng.randint(1 if short else 0, 4))
        if submitters:
            plan.steps.append(
                [
                    Call(a, prj["submitChallengeSubmission"], (self._h("submission", a),))
                    for a in submitters
                ]
            )
        if s.status == ProjectStatus.BUILDING:
            sender = rng.choice((owner, submitters[0]))
            plan.after_time.append([Call(sender, prj["enterChallengeSelectionPhase"], ())])
        elif s.status == ProjectStatus.COMPLETE:
            winner = rng.choice(submitters)
            plan.after_time.append(
                [
                    Call(
                        owner,
                        prj["selectChallengeWinner"],
                        (winner, self._h("decision", winner)),
                    )
                ]
            )


# --- progress ----------------------------------------------------------------------------------


class ProgressBar:
    """A plain-text progress bar: redrawn in place on a terminal (at most 10 times a second),
    else a line per 10 %."""

    def __init__(self, total: int, stream: IO[str] | None = None, *, width: int = 30) -> None:
        self.total = max(1, total)
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.started = time.perf_counter()
        self._last_draw = 0.0
        self._last_decile = -1
        self._last_written = -1
        self.label = ""

    def advance(self, n: int, label: str | None = None) -> None:
        self.done = min(self.total, self.done + n)
        if label is not None:
            self.label = label
        self._draw()

    def _line(self) -> str:
        fraction = self.done / self.total
        filled = int(self.width * fraction)
        elapsed = time.perf_counter() - self.started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        bar = "#" * filled + "." * (self.width - filled)
        return (
            f"[{bar}] {fraction:4.0%} {self.done}/{self.total} tx  {rate:,.0f} tx/s"
            f"  {elapsed:5.1f}s  {self.label}"
        )

    def _draw(self, force: bool = False) -> None:
        now = time.perf_counter()
        if self.tty:
            if force or now - self._last_draw >= 0.1:
                self.stream.write("\r" + self._line().ljust(100)[:120])
                self.stream.flush()
                self._last_draw = now
            return
        decile = int(10 * self.done / self.total)
        if decile > self._last_decile or (force and self.done != self._last_written):
            self._last_decile = decile
            self._last_written = self.done
            self.stream.write(self._line() + "\n")
            self.stream.flush()

    def close(self) -> None:
        self._draw(force=True)
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


# --- execution ---------------------------------------------------------------------------------


@dataclass
class SeedResult:
    projects: list[ProjectPlan]
    statuses: dict[str, dict[str, Any]]
    transactions: int
    blocks: int
    seconds: float
    time_advanced: int
    first_block: int
    last_block: int
    mismatches: list[str]

    def counts(self) -> dict[tuple[str, str], int]:
        counter: Counter[tuple[str, str]] = Counter()
        for plan in self.projects:
            assert plan.address is not None
            st = self.statuses[plan.address]
            counter[(st["status"], st["mode"])] += 1
        return dict(counter)

    def to_dict(self, *, include_projects: bool = True) -> dict[str, Any]:
        counts = self.counts()
        out: dict[str, Any] = {
            "projects": len(self.projects),
            "transactions": self.transactions,
            "blocks": self.blocks,
            "firstBlock": self.first_block,
            "lastBlock": self.last_block,
            "seconds": round(self.seconds, 3),
            "projectsPerSecond": round(len(self.projects) / self.seconds, 1),
            "transactionsPerSecond": round(self.transactions / self.seconds, 1),
            "timeAdvancedSeconds": self.time_advanced,
            "counts": [
                {"status": s, "mode": m, "count": counts.get((s, m), 0)}
                for s in (label(x) for x in ProjectStatus)
                for m in (label(x) for x in ProjectMode)
            ],
            "mismatches": self.mismatches,
        }
        if include_projects:
            out["items"] = [
                dict(p.to_dict(), **(self.statuses.get(p.address or "") or {}))
                for p in self.projects
            ]
        return out


def format_summary(result: SeedResult) -> str:
    counts = result.counts()
    modes = [label(m) for m in ProjectMode]
    header = f"{'status':<10}" + "".join(f"{m:>11}" for m in modes) + f"{'total':>9}"
    lines = [header, "-" * len(header)]
    for status in (label(s) for s in ProjectStatus):
        row = [counts.get((status, m), 0) for m in modes]
        lines.append(f"{status:<10}" + "".join(f"{n:>11}" for n in row) + f"{sum(row):>9}")
    lines.append("-" * len(header))
    totals = [sum(n for (_, m), n in counts.items() if m == mode) for mode in modes]
    lines.append(f"{'total':<10}" + "".join(f"{n:>11}" for n in totals) + f"{sum(totals):>9}")
    phases = Counter(
        result.statuses[p.address]["disputePhase"]
        for p in result.projects
        if p.address and result.statuses[p.address]["status"] == "dispute"
    )
    invite_only = sum(1 for p in result.projects if p.invite_only)
    lines.append("")
    lines.append(
        "dispute phases: "
        + (", ".join(f"{k} {v}" for k, v in sorted(phases.items())) or "none")
        + f"; invite-only projects: {invite_only}"
    )
    n = len(result.projects)
    lines.append(
        f"{n} projects, {result.transactions} transactions in {result.blocks} blocks "
        f"({result.first_block}..{result.last_block}) in {result.seconds:.1f}s: "
        f"{n / result.seconds:,.1f} projects/s, {result.transactions / result.seconds:,.0f} tx/s"
        + (f"; chain time advanced {result.time_advanced}s" if result.time_advanced else "")
    )
    if result.mismatches:
        lines.append(f"WARNING: {len(result.mismatches)} projects not in their planned status:")
        lines.extend(f"  {m}" for m in result.mismatches[:10])
    return "\n".join(lines)


class Seeder:
    def __init__(
        self,
        client: DevnetClient,
        *,
        accounts: int = DEFAULT_ACCOUNTS,
        rng_seed: int | None = None,
        progress: IO[str] | None = None,
        show_progress: bool = True,
        block_gas: int = DEFAULT_BLOCK_GAS,
    ) -> None:
        if accounts < 4:
            raise SeedError("seed needs at least 4 accounts")
        self.client = client
        self.rpc = client.rpc
        self.rng = random.Random(rng_seed)
        self.accounts = seed_accounts(accounts)
        self.progress_stream = progress
        self.show_progress = show_progress
        self._nonces: dict[str, int] = {}
        self._gas: dict[tuple[str, str], int] = {}
        self._budget = block_gas
        self._tx_count = 0
        self._bar: ProgressBar | None = None
        self._impersonated: list[str] = []

    # --- driver ---------------------------------------------------------------------------

    def run(self, projects: int, milestones: int) -> SeedResult:
        if projects < 1:
            raise SeedError("--projects must be at least 1")
        if not 1 <= milestones <= 100:
            raise SeedError("--milestones must be 1..100 (standard projects)")
        started = time.perf_counter()
        try:
            automine = bool(self.rpc.call("anvil_getAutomine"))
        except DevnetRpcError as exc:
            raise SeedError(f"seed needs an anvil devnet ({exc})") from exc
        head = self.client.head()
        gas_limit = int(self.rpc.call("eth_getBlockByNumber", ["latest", False])["gasLimit"], 16)
        planner = Planner(self.client, self.accounts, self.rng)
        plans = [
            planner.plan(i, scenario, milestones)
            for i, scenario in enumerate(choose_scenarios(projects, self.rng))
        ]
        setup = self._setup_calls()
        total = len(setup) + sum(len(step) for p in plans for step in (*p.steps, *p.after_time))
        self._bar = ProgressBar(total, self.progress_stream) if self.show_progress else None
        time_advanced = 0
        self.rpc.call("evm_setAutomine", [False])
        # Blocks are filled to at most half their gas limit (the base-fee target), so the base
        # fee never rises; the limit is raised for the seed and restored after it.
        raised = 2 * self._budget > gas_limit
        try:
            if raised:
                self.rpc.call("evm_setBlockGasLimit", [hex(2 * self._budget)])
            self._prepare_accounts()
            self._run_phase("setup accounts", [(None, c) for c in setup])
            for index in range(max(len(p.steps) for p in plans)):
                batch = [(p, c) for p in plans if index < len(p.steps) for c in p.steps[index]]
                self._run_phase(f"phase {index + 1}", batch, creation=index == 0)
            later = [p for p in plans if p.after_time]
            if later:
                time_advanced = self._advance_past_deadlines(later)
                for index in range(max(len(p.after_time) for p in later)):
                    batch = [
                        (p, c)
                        for p in later
                        if index < len(p.after_time)
                        for c in p.after_time[index]
                    ]
                    self._run_phase(f"after time {index + 1}", batch)
        finally:
            try:
                self._drain()
            finally:
                if raised:
                    # The limit applies from the next block: seal one, so the latest block shows
                    # the original limit again (a later seed reads its starting limit there).
                    self.rpc.call("evm_setBlockGasLimit", [hex(gas_limit)])
                    self.rpc.call("evm_mine")
                if automine:
                    self.rpc.call("evm_setAutomine", [True])
                self._stop_impersonating()
                if self._bar is not None:
                    self._bar.close()
        statuses = self._final_states(plans)
        mismatches = [
            f"#{p.index} {p.address} {p.scenario.name}: {statuses[p.address]['status']}"
            for p in plans
            if p.address and statuses[p.address]["status"] != label(p.scenario.status)
        ]
        last = self.client.head()
        return SeedResult(
            projects=plans,
            statuses=statuses,
            transactions=self._tx_count,
            blocks=last["number"] - head["number"],
            seconds=time.perf_counter() - started,
            time_advanced=time_advanced,
            first_block=head["number"] + 1,
            last_block=last["number"],
            mismatches=mismatches,
        )

    # --- accounts -------------------------------------------------------------------------

    def _prepare_accounts(self) -> None:
        unlocked = {a.lower() for a in self.rpc.call("eth_accounts")}
        senders = {*self.accounts, self.client.deployment.dispute_multisig, dev_address(9)}
        self._impersonated = [a for a in senders if a.lower() not in unlocked]
        calls: list[tuple[str, list[Any]]] = []
        for address in self._impersonated:
            calls.append(("anvil_impersonateAccount", [address]))
            calls.append(("anvil_setBalance", [address, hex(SEED_ACCOUNT_ETH)]))
        if calls:
            self.rpc.batch(calls)
        ordered = sorted(senders)
        counts = self.rpc.batch([("eth_getTransactionCount", [a, "pending"]) for a in ordered])
        self._nonces = {a: int(n, 16) for a, n in zip(ordered, counts, strict=True)}

    def _stop_impersonating(self) -> None:
        calls = [("anvil_stopImpersonatingAccount", [a]) for a in self._impersonated]
        if calls:
            with contextlib.suppress(DevnetError, OSError):
                self.rpc.batch(calls)

    def _setup_calls(self) -> list[Call]:
        usdc = self.client.usdc_abi.functions
        calls = []
        for account in self.accounts:
            calls.append(
                Call(account, usdc["mint"], (account, SEED_ACCOUNT_USDC), to=self.client.usdc)
            )
            calls.append(
                Call(
                    account,
                    usdc["approve"],
                    (self.client.escrow, MAX_UINT256),
                    to=self.client.usdc,
                )
            )
        return calls

    # --- phases ---------------------------------------------------------------------------

    def _run_phase(
        self,
        name: str,
        batch: Sequence[tuple[ProjectPlan | None, Call]],
        *,
        creation: bool = False,
    ) -> None:
        if not batch:
            return
        if self._bar is not None:
            self._bar.label = name
        head = self.client.head()
        now = head["timestamp"]
        txs: list[dict[str, Any]] = []
        for plan, call in batch:
            to = call.to or (plan.address if plan is not None else None)
            if to is None:
                raise SeedError(f"{call.fn.abi['name']}: project address unknown")
            args = call.args(plan, now) if callable(call.args) else call.args  # type: ignore[arg-type]
            tx = {"from": call.sender, "to": to, "data": call.fn.encode_call(*args)}
            tx["gas"] = hex(self._gas_for(call, tx, plan))
            txs.append(tx)
        hashes_: list[str] = []
        chunk: list[dict[str, Any]] = []
        chunk_gas = 0
        for tx in txs:
            gas = int(tx["gas"], 16)
            if chunk and chunk_gas + gas > self._budget:
                hashes_ += self._send_and_mine(chunk, name)
                chunk, chunk_gas = [], 0
            chunk.append(tx)
            chunk_gas += gas
        if chunk:
            hashes_ += self._send_and_mine(chunk, name)
        self._drain()
        tx_by_hash = dict(zip(hashes_, txs, strict=True))
        logs = self._logs_by_tx(head["number"] + 1)
        # Every call the seeder makes emits an event, so a hash with logs succeeded; only the
        # others need a receipt (anvil's receipt lookups slow down as blocks grow).
        unseen = [h for h in hashes_ if h not in logs]
        fetched = self.rpc.batch([("eth_getTransactionReceipt", [h]) for h in unseen])
        receipts = dict(zip(unseen, fetched, strict=True))
        failures = []
        created_event = self.client.registry_abi.events["ProjectCreated"]
        registry = self.client.registry.lower()
        for (plan, call), tx_hash in zip(batch, hashes_, strict=True):
            if tx_hash in receipts:
                receipt = receipts[tx_hash]
                if receipt is None:
                    failures.append((plan, call, "not mined"))
                    continue
                if int(receipt["status"], 16) != 1:
                    used, limit = int(receipt["gasUsed"], 16), int(tx_by_hash[tx_hash]["gas"], 16)
                    why = "out of gas" if used >= limit else "reverted"
                    failures.append((plan, call, f"{why} (tx {tx_hash}, gas {used}/{limit})"))
                    continue
            if creation and plan is not None:
                for log in logs.get(tx_hash, ()):
                    if (
                        log["address"].lower() == registry
                        and log["topics"][0] == created_event.topic0
                    ):
                        plan.address = str(created_event.decode_log(log)["project"])
                        plan.create_tx = tx_hash
                        break
                else:
                    failures.append((plan, call, f"no ProjectCreated event (tx {tx_hash})"))
        if failures:
            lines = [
                f"#{p.index if p else '-'} {p.scenario.name if p else 'setup'} "
                f"{c.fn.abi['name']} from {c.sender}: " + why
                for p, c, why in failures[:5]
            ]
            raise SeedError(
                f"{len(failures)} transactions of {name} failed:\n  " + "\n  ".join(lines)
            )

    def _logs_by_tx(self, first_block: int) -> dict[str, list[dict[str, Any]]]:
        """Every log of the blocks mined since ``first_block``, grouped by transaction hash."""
        last = self.client.head()["number"]
        by_tx: dict[str, list[dict[str, Any]]] = {}
        step = 50
        for start in range(first_block, last + 1, step):
            logs = self.rpc.call(
                "eth_getLogs",
                [{"fromBlock": hex(start), "toBlock": hex(min(last, start + step - 1))}],
            )
            for log in logs:
                by_tx.setdefault(log["transactionHash"], []).append(log)
        return by_tx

    def _gas_for(self, call: Call, tx: dict[str, Any], plan: ProjectPlan | None) -> int:
        key = (call.fn.signature, call.gas_tag)
        gas = self._gas.get(key)
        if gas is None:
            try:
                estimate = int(self.rpc.call("eth_estimateGas", [tx]), 16)
            except DevnetRpcError as exc:
                error = decode_revert(revert_data_of(exc))
                reason = f"{error[0]}{error[1]}" if error else str(exc)
                where = f"project #{plan.index} ({plan.scenario.name})" if plan else "setup"
                raise SeedError(
                    f"{call.fn.abi['name']} for {where} would revert: {reason}"
                ) from None
            gas = estimate * 5 // 4 + 40_000
            self._gas[key] = gas
        return gas

    def _send_and_mine(self, chunk: list[dict[str, Any]], name: str) -> list[str]:
        calls = []
        for tx in chunk:
            sender = tx["from"]
            tx["nonce"] = hex(self._nonces[sender])
            self._nonces[sender] += 1
            calls.append(("eth_sendTransaction", [tx]))
        replies = self.rpc.batch_raw(calls, chunk=len(calls))
        hashes_ = []
        for tx, reply in zip(chunk, replies, strict=True):
            if "error" in reply:
                raise SeedError(
                    f"{name}: eth_sendTransaction from {tx['from']} to {tx['to']} refused: "
                    f"{reply['error'].get('message')}"
                )
            hashes_.append(reply["result"])
        self.rpc.call("evm_mine")
        self._tx_count += len(chunk)
        if self._bar is not None:
            self._bar.advance(len(chunk))
        return hashes_

    def _drain(self, attempts: int = 50) -> None:
        """Mine until the pool is empty (queued transactions wait for a nonce gap to close)."""
        for _ in range(attempts):
            status = self.rpc.call("txpool_status")
            if int(status["pending"], 16) == 0 and int(status["queued"], 16) == 0:
                return
            self.rpc.call("evm_mine")
        raise SeedError(
            f"transactions stuck in the pool after {attempts} blocks: {status} (a nonce gap: "
            "anvil drops what does not fit the block gas limit)"
        )

    def _advance_past_deadlines(self, plans: list[ProjectPlan]) -> int:
        addresses = [p.address for p in plans if p.address]
        states = self.client.states(addresses)
        deadline = max(int(s["challengeSubmissionDeadline"]) for s in states)
        now = self.client.now()
        seconds = max(0, deadline - now + 1)
        if seconds:
            self.rpc.call("evm_increaseTime", [seconds])
            self.rpc.call("evm_mine")
        return seconds

    def _final_states(self, plans: list[ProjectPlan]) -> dict[str, dict[str, Any]]:
        addresses = [p.address for p in plans if p.address]
        out = {}
        for address, state in zip(addresses, self.client.states(addresses), strict=True):
            out[address] = {
                "status": label(ProjectStatus(state["status"])),
                "mode": label(ProjectMode(state["mode"])),
                "disputePhase": label(DisputePhase(state["disputePhase"])),
                "milestoneStatuses": [int(m["status"]) for m in state["milestones"]],
            }
        return out

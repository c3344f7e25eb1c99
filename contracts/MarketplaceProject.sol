// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {
    AuthorityConfig,
    IMarketplaceEscrow,
    IMarketplaceRegistry,
    PermitSignature
} from "./Interfaces.sol";

/// @notice Stored project status; the numeric order matches the read model enum.
enum ProjectStatus {
    Draft,
    Bidding,
    Building,
    Dispute,
    Complete,
    Failed
}

/// @notice Milestone status; the numeric order matches the read model enum.
enum MilestoneStatus {
    Pending,
    Submitted,
    Approved,
    Rejected,
    Disputed,
    Attested
}

enum ProjectMode {
    Standard,
    Challenge
}

enum BiddingAccess {
    InviteOnly,
    Open
}

enum DisputePhase {
    None,
    Challenged,
    VerifierVerdict,
    MultisigOverride,
    Finalized
}

enum DisputeReason {
    DeadlineMissed,
    LowQuality,
    OwnerInaction
}

/// @notice Outcome passed to `resolveDispute`; 0 is invalid on purpose.
enum DisputeOutcome {
    None,
    Approve,
    Reject
}

/// @notice One milestone of a standard-mode project.
struct Milestone {
    MilestoneStatus status;
    uint256 payout;
    uint64 deadline;
    uint64 submittedAt;
    uint64 approvedAt;
    uint64 resolvedAt;
    bytes32 deliveryRefHash;
    bytes32 latestEvidenceHash;
    bool attested;
}

/// @notice A bid of a standard-mode project.
struct Bid {
    bool active;
    bytes32 bidHash;
    uint64 postedAt;
    uint64 updatedAt;
    uint256 totalPayout;
    uint256[] payouts;
    uint64[] durations;
}

/// @notice The whole project state, returned by `getProjectState()` in one call.
struct ProjectState {
    address owner;
    address registry;
    address escrow;
    address usdc;
    ProjectStatus status;
    ProjectMode mode;
    BiddingAccess biddingAccess;
    bytes32 configHash;
    uint64 createdAt;
    uint64 openedAt;
    address selectedBuilder;
    uint16 milestoneCount;
    uint16 currentMilestone;
    uint256 bidBond;
    uint256 selectedBuilderBond;
    uint256 challengePayout;
    uint256 challengeSubmissionCount;
    uint64 challengeSubmissionWindowSeconds;
    uint64 challengeOwnerResponseWindowSeconds;
    uint64 challengeSubmissionDeadline;
    uint64 challengeOwnerResponseDeadline;
    bool challengeSelectionPhase;
    address challengeWinner;
    DisputePhase disputePhase;
    DisputeReason disputeReason;
    address disputeRaisedBy;
    uint16 disputeMilestoneIndex;
    uint64 disputeOpenedAt;
    uint64 disputeVerdictSubmittedAt;
    bytes32 disputeReasonHash;
    bytes32 disputeOwnerEvidenceHash;
    bytes32 disputeWorkerEvidenceHash;
    bool disputeVerdictPasses;
    uint16 feeRateBps;
    address disputeMultisig;
    address verifierSigner;
    address treasury;
    uint256 escrowBalance;
    Milestone[] milestones;
}

/// @title MarketplaceProject
/// @notice One marketplace project (an EIP-1167 clone created by MarketplaceRegistry).
///         Standard mode: owner opens bidding, bidders post bonded bids, the owner selects one
///         and funds its milestones, the selected builder delivers milestones in order, the owner
///         approves them (or a dispute runs: verifier attestation, 48 h multisig override window,
///         5 day escape timeout). Challenge mode: a funded payout, a wallet-keyed submission
///         window, owner selection, and a verifier-signed fallback if the owner stays silent.
///         All funds sit in MarketplaceEscrow; the payer always approves/permits the escrow.
///         Fee rate, dispute multisig, verifier signer and treasury are snapshotted from the
///         registry when bidding opens and govern the whole lifecycle.
contract MarketplaceProject {
    /// @notice Owner silence after a submission before the worker may raise OwnerInaction.
    uint64 public constant OWNER_INACTION_PERIOD = 48 hours;
    /// @notice Multisig override window after a verifier verdict.
    uint64 public constant DISPUTE_OVERRIDE_WINDOW = 48 hours;
    /// @notice Time after a dispute opens after which a still-Challenged dispute can be finalized.
    uint64 public constant DISPUTE_CHALLENGED_ESCAPE_TIMEOUT = 5 days;
    /// @notice Verifier-signed fallback window after the challenge owner response deadline.
    uint64 public constant CHALLENGE_FALLBACK_WINDOW = 5 days;
    /// @notice Upper bound for a challenge window or a single milestone duration.
    uint64 public constant MAX_WINDOW_SECONDS = 365 days;
    uint256 private constant BPS = 10_000;

    /// @notice EIP-712 type hash of a verifier milestone attestation.
    bytes32 public constant ATTESTATION_TYPEHASH = keccak256(
        "Attestation(address project,uint16 milestoneIndex,bool passes,bytes32 evidenceHash,uint256 deadline,uint256 nonce,uint256 chainId)"
    );
    /// @notice EIP-712 type hash of a verifier challenge fallback ranking.
    bytes32 public constant CHALLENGE_FALLBACK_TYPEHASH = keccak256(
        "ChallengeFallback(address project,bytes32 rankedSubmittersHash,bytes32 rankingHash,uint256 deadline,uint256 nonce,uint256 chainId)"
    );

    bool private _initialized;
    uint256 private _locked;
    ProjectState private _state;

    // standard mode
    mapping(address => bool) private _allowed;
    address[] private _allowlist;
    mapping(address => uint256) private _allowlistPos; // index + 1
    mapping(address => Bid) private _bids;
    address[] private _bidders;
    mapping(address => bool) private _hasBid;
    /// @notice Bond currently held in escrow for each bidder.
    mapping(address => uint256) public bondOf;
    /// @notice Sum of all bonds currently held in escrow.
    uint256 public totalBondsHeld;

    // challenge mode
    mapping(address => bytes32) private _submissionOf;
    address[] private _submitters;

    // ----------------------------------------------------------------- events

    event ProjectInitialized(
        address indexed owner,
        ProjectMode mode,
        BiddingAccess biddingAccess,
        uint256 bidBond,
        uint16 milestoneCount,
        uint256 challengePayout,
        uint64 challengeSubmissionWindowSeconds,
        uint64 challengeOwnerResponseWindowSeconds
    );
    event StatusChanged(ProjectStatus previousStatus, ProjectStatus newStatus);
    event BiddingOpened(
        uint64 openedAt,
        uint16 feeRateBps,
        address disputeMultisig,
        address verifierSigner,
        address treasury,
        uint256 fundedAmount,
        uint64 challengeSubmissionDeadline,
        uint64 challengeOwnerResponseDeadline
    );
    event AllowlistUpdated(address indexed account, bool allowed);
    event BidPosted(
        address indexed bidder, bytes32 bidHash, uint256[] payouts, uint64[] durations, uint256 totalPayout, uint256 bond
    );
    event BidUpdated(address indexed bidder, bytes32 bidHash, uint256[] payouts, uint64[] durations, uint256 totalPayout);
    event BidCancelled(address indexed bidder, uint256 bondRefunded);
    event BidSelected(
        address indexed builder, bytes32 bidHash, uint256 totalPayout, uint256[] payouts, uint64[] deadlines
    );
    event BondReclaimed(address indexed bidder, uint256 amount);
    event BondReturned(address indexed builder, uint256 amount);
    event BondSlashed(address indexed builder, uint256 amount, address indexed recipient);
    event MilestoneSubmitted(uint16 indexed milestoneIndex, address indexed worker, bytes32 deliveryRefHash, uint64 submittedAt);
    event MilestoneApproved(
        uint16 indexed milestoneIndex, address indexed worker, uint256 workerAmount, uint256 feeAmount, uint64 approvedAt
    );
    event MilestoneRejected(uint16 indexed milestoneIndex, uint64 resolvedAt);
    event DisputeRaised(
        uint16 indexed milestoneIndex, DisputeReason reason, address indexed raisedBy, bytes32 reasonHash, uint64 openedAt
    );
    event DisputeEvidenceSubmitted(
        uint16 indexed milestoneIndex, address indexed submitter, bool byOwner, bytes32 evidenceHash
    );
    event MilestoneAttested(
        uint16 indexed milestoneIndex,
        bool passes,
        bytes32 evidenceHash,
        address signer,
        uint256 nonce,
        uint64 verdictSubmittedAt
    );
    event DisputeResolved(
        uint16 indexed milestoneIndex, DisputeOutcome outcome, uint256 slashAmount, address indexed multisig
    );
    event DisputeFinalized(
        uint16 indexed milestoneIndex, DisputePhase fromPhase, bool milestoneApproved, bool projectFailed
    );
    event ChallengeSubmitted(address indexed submitter, bytes32 submissionHash, bool replaced, uint256 submissionCount);
    event ChallengeSelectionPhaseEntered(uint256 submissionCount, uint64 enteredAt);
    event ChallengeWinnerSelected(address indexed winner, bytes32 decisionHash, uint256 winnerAmount, uint256 feeAmount);
    event ChallengeCancelled(uint256 submissionCount, uint256 refundAmount);
    event ChallengeFallbackSettled(
        address indexed winner,
        bytes32 rankedSubmittersHash,
        bytes32 rankingHash,
        bool verifierSigned,
        uint256 winnerAmount,
        uint256 feeAmount
    );
    event ProjectCompleted(uint64 completedAt);
    event ProjectFailed(uint64 failedAt, uint256 ownerRefund);

    // ----------------------------------------------------------------- errors

    error AlreadyInitialized();
    error NotRegistry();
    error NotOwner();
    error NotSelectedBuilder();
    error NotDisputeMultisig();
    error NotDisputeParty();
    error WrongStatus(ProjectStatus status);
    error WrongMode(ProjectMode mode);
    error WrongDisputePhase(DisputePhase phase);
    error InvalidMilestoneIndex(uint16 milestoneIndex);
    error WrongMilestoneStatus(uint16 milestoneIndex, MilestoneStatus status);
    error ZeroHash();
    error ZeroAddress();
    error InvalidAmount();
    error InvalidWindow();
    error LengthMismatch();
    error NotInviteOnly();
    error NotAllowlisted(address account);
    error OwnerCannotParticipate();
    error BidAlreadyActive();
    error NoActiveBid(address bidder);
    error NothingToReclaim();
    error SelectedBuilderBond();
    error NoFundingRequired();
    error InvalidDisputeReason(uint8 reason);
    error DeadlineNotPassed(uint64 deadline);
    error OwnerInactionPeriodNotElapsed(uint64 availableAt);
    error EvidenceAlreadySubmitted();
    error SignatureExpired(uint256 deadline);
    error WrongChainId(uint256 chainId);
    error OverrideWindowClosed(uint64 closedAt);
    error OverrideWindowOpen(uint64 closesAt);
    error EscapeTimeoutNotReached(uint64 availableAt);
    error InvalidOutcome(uint8 outcome);
    error SlashExceedsBond(uint256 slashAmount, uint256 bond);
    error SubmissionWindowClosed(uint64 deadline);
    error SubmissionWindowOpen(uint64 deadline);
    error OwnerResponseWindowClosed(uint64 deadline);
    error NoSubmissions();
    error NotSubmitter(address account);
    error CannotCancel();
    error FallbackNotAvailable(uint64 availableAfter);
    error EmptyRanking();
    error Reentrancy();

    // -------------------------------------------------------------- modifiers

    modifier onlyOwner() {
        if (msg.sender != _state.owner) revert NotOwner();
        _;
    }

    modifier onlyRegistry() {
        if (msg.sender != _state.registry) revert NotRegistry();
        _;
    }

    modifier inStatus(ProjectStatus expected) {
        if (_state.status != expected) revert WrongStatus(_state.status);
        _;
    }

    modifier inMode(ProjectMode expected) {
        if (_state.mode != expected) revert WrongMode(_state.mode);
        _;
    }

    modifier nonReentrant() {
        if (_locked != 0) revert Reentrancy();
        _locked = 1;
        _;
        _locked = 0;
    }

    /// @dev Locks the implementation itself; clones start uninitialized.
    constructor() {
        _initialized = true;
    }

    // ========================================================= initialization

    /// @notice Initializes a standard-mode clone in Draft. Called once by the registry, in the
    ///         transaction that creates the clone; the caller becomes the registry.
    /// @param owner_ Project owner.
    /// @param configHash Off-chain configuration hash.
    /// @param inviteOnly True for invite-only bidding.
    /// @param bidBond Bond per bid in USDC base units.
    /// @param milestoneCount Number of milestones (validated by the registry, 1..100).
    function initializeStandard(
        address owner_,
        bytes32 configHash,
        bool inviteOnly,
        uint256 bidBond,
        uint16 milestoneCount
    ) external {
        _initialize(owner_, configHash, ProjectMode.Standard);
        _state.biddingAccess = inviteOnly ? BiddingAccess.InviteOnly : BiddingAccess.Open;
        _state.bidBond = bidBond;
        _state.milestoneCount = milestoneCount;
        for (uint256 i = 0; i < milestoneCount; ++i) {
            _state.milestones.push();
        }
        emit ProjectInitialized(owner_, ProjectMode.Standard, _state.biddingAccess, bidBond, milestoneCount, 0, 0, 0);
    }

    /// @notice Initializes a challenge-mode clone in Draft. Called once by the registry.
    /// @param owner_ Project owner (the payer when the project opens).
    /// @param configHash Off-chain configuration hash.
    /// @param payout Challenge payout in USDC base units (> 0).
    /// @param submissionWindowSeconds Submission window, 1..MAX_WINDOW_SECONDS.
    /// @param ownerResponseWindowSeconds Owner response window, 1..MAX_WINDOW_SECONDS.
    function initializeChallenge(
        address owner_,
        bytes32 configHash,
        uint256 payout,
        uint64 submissionWindowSeconds,
        uint64 ownerResponseWindowSeconds
    ) external {
        if (payout == 0) revert InvalidAmount();
        if (
            submissionWindowSeconds == 0 || submissionWindowSeconds > MAX_WINDOW_SECONDS
                || ownerResponseWindowSeconds == 0 || ownerResponseWindowSeconds > MAX_WINDOW_SECONDS
        ) revert InvalidWindow();
        _initialize(owner_, configHash, ProjectMode.Challenge);
        _state.biddingAccess = BiddingAccess.Open;
        _state.challengePayout = payout;
        _state.challengeSubmissionWindowSeconds = submissionWindowSeconds;
        _state.challengeOwnerResponseWindowSeconds = ownerResponseWindowSeconds;
        emit ProjectInitialized(
            owner_,
            ProjectMode.Challenge,
            BiddingAccess.Open,
            0,
            0,
            payout,
            submissionWindowSeconds,
            ownerResponseWindowSeconds
        );
    }

    // ============================================================== opening

    /// @notice Opens the project (owner, from Draft) and snapshots fee rate, dispute multisig,
    ///         verifier signer and treasury from the registry. Standard mode moves no funds.
    ///         Challenge mode funds the payout: the escrow pulls it from the owner (prior
    ///         approval of the ESCROW for `challengePayout`).
    function openBidding() external onlyOwner inStatus(ProjectStatus.Draft) nonReentrant {
        _open(false, PermitSignature(0, 0, 0, 0));
    }

    /// @notice Challenge mode only: `openBidding` funded through an EIP-2612 permit signed by the
    ///         owner with spender = escrow and value = `challengePayout`. Standard projects need
    ///         no funding to open and revert with NoFundingRequired.
    /// @param permitDeadline Permit deadline.
    /// @param v Permit signature v.
    /// @param r Permit signature r.
    /// @param s Permit signature s.
    function openBiddingWithPermit(uint256 permitDeadline, uint8 v, bytes32 r, bytes32 s)
        external
        onlyOwner
        inStatus(ProjectStatus.Draft)
        nonReentrant
    {
        if (_state.mode != ProjectMode.Challenge) revert NoFundingRequired();
        _open(true, PermitSignature(permitDeadline, v, r, s));
    }

    /// @notice Registry-only: opens a freshly created challenge project on behalf of its owner
    ///         (createChallengeProjectAndOpen[WithPermit]).
    /// @param usePermit Whether to submit `permit` before pulling the payout.
    /// @param permit The owner's permit fields (ignored when usePermit is false).
    function openFromRegistry(bool usePermit, PermitSignature calldata permit)
        external
        onlyRegistry
        inStatus(ProjectStatus.Draft)
        inMode(ProjectMode.Challenge)
        nonReentrant
    {
        _open(usePermit, permit);
    }

    // ============================================================ allowlist

    /// @notice Adds accounts to the bidding allowlist (owner, invite-only projects).
    ///         Already-listed accounts are skipped.
    /// @param accounts Accounts to allow.
    function addToAllowlist(address[] calldata accounts) external onlyOwner {
        if (_state.biddingAccess != BiddingAccess.InviteOnly) revert NotInviteOnly();
        for (uint256 i = 0; i < accounts.length; ++i) {
            address account = accounts[i];
            if (account == address(0)) revert ZeroAddress();
            if (_allowed[account]) continue;
            _allowed[account] = true;
            _allowlist.push(account);
            _allowlistPos[account] = _allowlist.length;
            emit AllowlistUpdated(account, true);
        }
    }

    /// @notice Removes accounts from the bidding allowlist (owner, invite-only projects).
    ///         Unlisted accounts are skipped. Existing bids stay; removed accounts cannot post
    ///         or update bids but may still cancel them.
    /// @param accounts Accounts to remove.
    function removeFromAllowlist(address[] calldata accounts) external onlyOwner {
        if (_state.biddingAccess != BiddingAccess.InviteOnly) revert NotInviteOnly();
        for (uint256 i = 0; i < accounts.length; ++i) {
            address account = accounts[i];
            if (!_allowed[account]) continue;
            uint256 pos = _allowlistPos[account] - 1;
            address last = _allowlist[_allowlist.length - 1];
            _allowlist[pos] = last;
            _allowlistPos[last] = pos + 1;
            _allowlist.pop();
            delete _allowlistPos[account];
            _allowed[account] = false;
            emit AllowlistUpdated(account, false);
        }
    }

    // =============================================================== bidding

    /// @notice Posts a bid (standard mode, Bidding). The escrow pulls `bidBond` from the caller
    ///         (prior approval of the ESCROW). Invite-only projects require the allowlist.
    /// @param payouts Payout per milestone in USDC base units (length milestoneCount, each > 0).
    /// @param durations Duration per milestone in seconds (each 1..MAX_WINDOW_SECONDS).
    /// @param bidHash Hash of the off-chain bid document.
    function postBid(uint256[] calldata payouts, uint64[] calldata durations, bytes32 bidHash)
        external
        nonReentrant
    {
        uint256 bond = _recordNewBid(payouts, durations, bidHash);
        if (bond > 0) _escrow().deposit(msg.sender, bond);
    }

    /// @notice `postBid` funded through an EIP-2612 permit (spender = escrow, value = bidBond).
    /// @param payouts Payout per milestone.
    /// @param durations Duration per milestone in seconds.
    /// @param bidHash Hash of the off-chain bid document.
    /// @param permitDeadline Permit deadline.
    /// @param v Permit signature v.
    /// @param r Permit signature r.
    /// @param s Permit signature s.
    function postBidWithPermit(
        uint256[] calldata payouts,
        uint64[] calldata durations,
        bytes32 bidHash,
        uint256 permitDeadline,
        uint8 v,
        bytes32 r,
        bytes32 s
    ) external nonReentrant {
        uint256 bond = _recordNewBid(payouts, durations, bidHash);
        if (bond > 0) _escrow().depositWithPermit(msg.sender, bond, PermitSignature(permitDeadline, v, r, s));
    }

    /// @notice Replaces the caller's active bid (Bidding). The bond is unchanged.
    /// @param payouts Payout per milestone.
    /// @param durations Duration per milestone in seconds.
    /// @param bidHash Hash of the off-chain bid document.
    function updateBid(uint256[] calldata payouts, uint64[] calldata durations, bytes32 bidHash)
        external
        inStatus(ProjectStatus.Bidding)
    {
        Bid storage bid = _bids[msg.sender];
        if (!bid.active) revert NoActiveBid(msg.sender);
        _requireMayBid(msg.sender);
        uint256 total = _validateBid(payouts, durations);
        bid.bidHash = bidHash;
        bid.updatedAt = uint64(block.timestamp);
        bid.totalPayout = total;
        bid.payouts = payouts;
        bid.durations = durations;
        emit BidUpdated(msg.sender, bidHash, payouts, durations, total);
    }

    /// @notice Withdraws the caller's active bid (Bidding) and refunds its bond.
    function cancelBid() external inStatus(ProjectStatus.Bidding) nonReentrant {
        Bid storage bid = _bids[msg.sender];
        if (!bid.active) revert NoActiveBid(msg.sender);
        bid.active = false;
        uint256 bond = _takeBond(msg.sender);
        emit BidCancelled(msg.sender, bond);
        if (bond > 0) _escrow().release(msg.sender, bond);
    }

    /// @notice Selects `bidder`'s active bid (owner, Bidding). The escrow pulls the bid's total
    ///         milestone payouts from the owner (prior approval of the ESCROW). Milestone payouts
    ///         and deadlines (now + cumulative durations) are fixed; status becomes Building.
    /// @param bidder The bidder to select.
    function selectBid(address bidder) external onlyOwner inStatus(ProjectStatus.Bidding) nonReentrant {
        uint256 total = _selectBid(bidder);
        _escrow().deposit(msg.sender, total);
    }

    /// @notice `selectBid` funded through an EIP-2612 permit signed by the owner
    ///         (spender = escrow, value = the bid's total payouts).
    /// @param bidder The bidder to select.
    /// @param permitDeadline Permit deadline.
    /// @param v Permit signature v.
    /// @param r Permit signature r.
    /// @param s Permit signature s.
    function selectBidWithPermit(address bidder, uint256 permitDeadline, uint8 v, bytes32 r, bytes32 s)
        external
        onlyOwner
        inStatus(ProjectStatus.Bidding)
        nonReentrant
    {
        uint256 total = _selectBid(bidder);
        _escrow().depositWithPermit(msg.sender, total, PermitSignature(permitDeadline, v, r, s));
    }

    /// @notice Returns the caller's bond after a bid was selected (any status after Bidding).
    ///         The selected builder's bond is not reclaimable: it is returned when the project
    ///         completes or fails (minus any multisig slash).
    function reclaimBond() external nonReentrant {
        ProjectStatus current = _state.status;
        if (current == ProjectStatus.Draft || current == ProjectStatus.Bidding) revert WrongStatus(current);
        if (msg.sender == _state.selectedBuilder) revert SelectedBuilderBond();
        uint256 bond = _takeBond(msg.sender);
        if (bond == 0) revert NothingToReclaim();
        _bids[msg.sender].active = false;
        emit BondReclaimed(msg.sender, bond);
        _escrow().release(msg.sender, bond);
    }

    // ============================================================ milestones

    /// @notice Submits milestone `milestoneIndex` (selected builder, Building). Milestones are
    ///         submitted in order: the index must be the first not-yet-approved milestone, and it
    ///         must be Pending. Late submission is allowed while no DeadlineMissed dispute exists.
    /// @param milestoneIndex The current milestone.
    /// @param deliveryRefHash keccak256 of the delivery reference (non-zero).
    function submitMilestone(uint16 milestoneIndex, bytes32 deliveryRefHash)
        external
        inStatus(ProjectStatus.Building)
    {
        if (msg.sender != _state.selectedBuilder) revert NotSelectedBuilder();
        if (deliveryRefHash == bytes32(0)) revert ZeroHash();
        Milestone storage m = _currentMilestone(milestoneIndex);
        if (m.status != MilestoneStatus.Pending) revert WrongMilestoneStatus(milestoneIndex, m.status);
        m.status = MilestoneStatus.Submitted;
        m.submittedAt = uint64(block.timestamp);
        m.deliveryRefHash = deliveryRefHash;
        emit MilestoneSubmitted(milestoneIndex, msg.sender, deliveryRefHash, uint64(block.timestamp));
    }

    /// @notice Approves a submitted milestone (owner, Building): pays payout minus fee to the
    ///         builder and the fee to the treasury. The last approval completes the project and
    ///         returns the builder's bond.
    /// @param milestoneIndex The submitted milestone.
    function approveMilestone(uint16 milestoneIndex)
        external
        onlyOwner
        inStatus(ProjectStatus.Building)
        nonReentrant
    {
        Milestone storage m = _currentMilestone(milestoneIndex);
        if (m.status != MilestoneStatus.Submitted) revert WrongMilestoneStatus(milestoneIndex, m.status);
        _approveAndPay(milestoneIndex);
    }

    // ============================================================== disputes

    /// @notice Raises a dispute on the current milestone (Building).
    ///         DeadlineMissed: owner, milestone Pending and its deadline passed.
    ///         LowQuality: owner, milestone Submitted.
    ///         OwnerInaction: selected builder, milestone Submitted at least 48 h ago.
    ///         Project -> Dispute, milestone -> Disputed, phase -> Challenged.
    /// @param milestoneIndex The current milestone.
    /// @param reason DisputeReason as uint8 (0 DeadlineMissed, 1 LowQuality, 2 OwnerInaction).
    /// @param reasonHash Hash of the off-chain reason text (may be zero).
    function raiseDispute(uint16 milestoneIndex, uint8 reason, bytes32 reasonHash)
        external
        inStatus(ProjectStatus.Building)
    {
        if (reason > uint8(DisputeReason.OwnerInaction)) revert InvalidDisputeReason(reason);
        Milestone storage m = _currentMilestone(milestoneIndex);
        DisputeReason r = DisputeReason(reason);
        if (r == DisputeReason.OwnerInaction) {
            if (msg.sender != _state.selectedBuilder) revert NotSelectedBuilder();
            if (m.status != MilestoneStatus.Submitted) revert WrongMilestoneStatus(milestoneIndex, m.status);
            uint64 availableAt = m.submittedAt + OWNER_INACTION_PERIOD;
            if (block.timestamp < availableAt) revert OwnerInactionPeriodNotElapsed(availableAt);
        } else {
            if (msg.sender != _state.owner) revert NotOwner();
            if (r == DisputeReason.DeadlineMissed) {
                if (m.status != MilestoneStatus.Pending) revert WrongMilestoneStatus(milestoneIndex, m.status);
                if (block.timestamp <= m.deadline) revert DeadlineNotPassed(m.deadline);
            } else if (m.status != MilestoneStatus.Submitted) {
                revert WrongMilestoneStatus(milestoneIndex, m.status);
            }
        }

        m.status = MilestoneStatus.Disputed;
        _state.disputePhase = DisputePhase.Challenged;
        _state.disputeReason = r;
        _state.disputeRaisedBy = msg.sender;
        _state.disputeMilestoneIndex = milestoneIndex;
        _state.disputeOpenedAt = uint64(block.timestamp);
        _state.disputeVerdictSubmittedAt = 0;
        _state.disputeReasonHash = reasonHash;
        _state.disputeOwnerEvidenceHash = bytes32(0);
        _state.disputeWorkerEvidenceHash = bytes32(0);
        _state.disputeVerdictPasses = false;
        _setStatus(ProjectStatus.Dispute);
        emit DisputeRaised(milestoneIndex, r, msg.sender, reasonHash, uint64(block.timestamp));
    }

    /// @notice Records the caller's dispute evidence hash (owner or selected builder, once
    ///         each, phase Challenged). The payload itself is stored off-chain.
    /// @param milestoneIndex The disputed milestone.
    /// @param evidenceHash Non-zero evidence hash.
    function submitDisputeEvidence(uint16 milestoneIndex, bytes32 evidenceHash) external {
        _requireDisputePhase(DisputePhase.Challenged, milestoneIndex);
        if (evidenceHash == bytes32(0)) revert ZeroHash();
        bool byOwner;
        if (msg.sender == _state.owner) {
            if (_state.disputeOwnerEvidenceHash != bytes32(0)) revert EvidenceAlreadySubmitted();
            _state.disputeOwnerEvidenceHash = evidenceHash;
            byOwner = true;
        } else if (msg.sender == _state.selectedBuilder) {
            if (_state.disputeWorkerEvidenceHash != bytes32(0)) revert EvidenceAlreadySubmitted();
            _state.disputeWorkerEvidenceHash = evidenceHash;
        } else {
            revert NotDisputeParty();
        }
        _state.milestones[milestoneIndex].latestEvidenceHash = evidenceHash;
        emit DisputeEvidenceSubmitted(milestoneIndex, msg.sender, byOwner, evidenceHash);
    }

    /// @notice Submits the verifier's verdict on the disputed milestone (anyone may relay it;
    ///         phase Challenged). The signature is EIP-712 by the snapshotted verifier signer over
    ///         Attestation(project,milestoneIndex,passes,evidenceHash,deadline,nonce,chainId) in
    ///         the registry's "MarketplaceVerifier" domain. The nonce is consumed per signer in the
    ///         registry. Phase -> VerifierVerdict, milestone -> Attested, 48 h override window.
    /// @param milestoneIndex The disputed milestone.
    /// @param passes The verdict.
    /// @param evidenceHash Hash of the verifier's evidence (recorded when non-zero).
    /// @param deadline Last timestamp the signature is valid.
    /// @param nonce Signer nonce (single use).
    /// @param chainId Must equal block.chainid.
    /// @param signature 65-byte r || s || v signature.
    function attestMilestone(
        uint16 milestoneIndex,
        bool passes,
        bytes32 evidenceHash,
        uint256 deadline,
        uint256 nonce,
        uint256 chainId,
        bytes calldata signature
    ) external {
        _requireDisputePhase(DisputePhase.Challenged, milestoneIndex);
        _checkSignatureEnvelope(deadline, chainId);
        bytes32 structHash = keccak256(
            abi.encode(
                ATTESTATION_TYPEHASH, address(this), milestoneIndex, passes, evidenceHash, deadline, nonce, chainId
            )
        );
        // Trusted registry (same deployment); reverts on a bad signature or a used nonce.
        _registry().consumeVerifierSignature(_state.verifierSigner, structHash, nonce, signature);

        Milestone storage m = _state.milestones[milestoneIndex];
        m.status = MilestoneStatus.Attested;
        m.attested = true;
        if (evidenceHash != bytes32(0)) m.latestEvidenceHash = evidenceHash;
        _state.disputePhase = DisputePhase.VerifierVerdict;
        _state.disputeVerdictSubmittedAt = uint64(block.timestamp);
        _state.disputeVerdictPasses = passes;
        emit MilestoneAttested(
            milestoneIndex, passes, evidenceHash, _state.verifierSigner, nonce, uint64(block.timestamp)
        );
    }

    /// @notice Multisig override (snapshotted dispute multisig only). Allowed in phase
    ///         Challenged at any time and in phase VerifierVerdict within 48 h of the verdict.
    ///         Approve: milestone approved and paid (the last one completes the project).
    ///         Reject: milestone rejected and the project fails (remaining escrow to the owner).
    ///         `slashAmount` (<= the builder's bond) is taken from the builder's bond and paid to
    ///         the owner; only this function ever slashes. Phase -> MultisigOverride.
    /// @param outcome DisputeOutcome as uint8 (1 Approve, 2 Reject).
    /// @param slashAmount Amount of the builder's bond to slash, in USDC base units.
    function resolveDispute(uint8 outcome, uint256 slashAmount) external inStatus(ProjectStatus.Dispute) nonReentrant {
        if (msg.sender != _state.disputeMultisig) revert NotDisputeMultisig();
        DisputePhase phase = _state.disputePhase;
        if (phase == DisputePhase.VerifierVerdict) {
            uint64 closesAt = _state.disputeVerdictSubmittedAt + DISPUTE_OVERRIDE_WINDOW;
            if (block.timestamp > closesAt) revert OverrideWindowClosed(closesAt);
        } else if (phase != DisputePhase.Challenged) {
            revert WrongDisputePhase(phase);
        }
        if (outcome != uint8(DisputeOutcome.Approve) && outcome != uint8(DisputeOutcome.Reject)) {
            revert InvalidOutcome(outcome);
        }
        address builder = _state.selectedBuilder;
        uint256 bond = bondOf[builder];
        if (slashAmount > bond) revert SlashExceedsBond(slashAmount, bond);

        uint16 index = _state.disputeMilestoneIndex;
        _state.disputePhase = DisputePhase.MultisigOverride;
        _state.milestones[index].resolvedAt = uint64(block.timestamp);
        emit DisputeResolved(index, DisputeOutcome(outcome), slashAmount, msg.sender);

        if (slashAmount > 0) {
            bondOf[builder] = bond - slashAmount;
            totalBondsHeld -= slashAmount;
            emit BondSlashed(builder, slashAmount, _state.owner);
            _escrow().release(_state.owner, slashAmount);
        }
        if (DisputeOutcome(outcome) == DisputeOutcome.Approve) {
            _approveAndPay(index);
        } else {
            _rejectAndFail(index);
        }
    }

    /// @notice Finalizes a dispute without override (anyone, never slashes).
    ///         Phase VerifierVerdict, more than 48 h after the verdict: passes -> milestone
    ///         approved and paid; fails -> milestone rejected and the project fails (remaining
    ///         escrow refunded to the owner, builder bond returned).
    ///         Phase Challenged, at least DISPUTE_CHALLENGED_ESCAPE_TIMEOUT (5 days) after the
    ///         dispute opened -> the project fails the same way (milestone left Disputed).
    function finalizeDispute() external inStatus(ProjectStatus.Dispute) nonReentrant {
        DisputePhase phase = _state.disputePhase;
        uint16 index = _state.disputeMilestoneIndex;
        bool approved;
        if (phase == DisputePhase.VerifierVerdict) {
            uint64 closesAt = _state.disputeVerdictSubmittedAt + DISPUTE_OVERRIDE_WINDOW;
            if (block.timestamp <= closesAt) revert OverrideWindowOpen(closesAt);
            approved = _state.disputeVerdictPasses;
        } else if (phase == DisputePhase.Challenged) {
            uint64 availableAt = _state.disputeOpenedAt + DISPUTE_CHALLENGED_ESCAPE_TIMEOUT;
            if (block.timestamp < availableAt) revert EscapeTimeoutNotReached(availableAt);
        } else {
            revert WrongDisputePhase(phase);
        }

        _state.disputePhase = DisputePhase.Finalized;
        _state.milestones[index].resolvedAt = uint64(block.timestamp);
        emit DisputeFinalized(index, phase, approved, !approved);
        if (approved) {
            _approveAndPay(index);
        } else if (phase == DisputePhase.VerifierVerdict) {
            _rejectAndFail(index);
        } else {
            _fail();
        }
    }

    // ======================================================== challenge mode

    /// @notice Registers or replaces the caller's challenge submission (Bidding, until the
    ///         submission deadline inclusive). Keyed by wallet; the owner cannot submit.
    /// @param submissionHash Non-zero hash of the submission artifact.
    function submitChallengeSubmission(bytes32 submissionHash)
        external
        inMode(ProjectMode.Challenge)
        inStatus(ProjectStatus.Bidding)
    {
        if (block.timestamp > _state.challengeSubmissionDeadline) {
            revert SubmissionWindowClosed(_state.challengeSubmissionDeadline);
        }
        if (submissionHash == bytes32(0)) revert ZeroHash();
        if (msg.sender == _state.owner) revert OwnerCannotParticipate();
        bool replaced = _submissionOf[msg.sender] != bytes32(0);
        if (!replaced) {
            _submitters.push(msg.sender);
            _state.challengeSubmissionCount = _submitters.length;
        }
        _submissionOf[msg.sender] = submissionHash;
        emit ChallengeSubmitted(msg.sender, submissionHash, replaced, _submitters.length);
    }

    /// @notice Moves the challenge into its selection phase (anyone, after the submission
    ///         deadline, at least one submission). Status Bidding -> Building.
    function enterChallengeSelectionPhase() external inMode(ProjectMode.Challenge) inStatus(ProjectStatus.Bidding) {
        if (block.timestamp <= _state.challengeSubmissionDeadline) {
            revert SubmissionWindowOpen(_state.challengeSubmissionDeadline);
        }
        if (_state.challengeSubmissionCount == 0) revert NoSubmissions();
        _enterSelectionPhase();
    }

    /// @notice Owner picks the winner after the submission deadline and no later than the owner
    ///         response deadline (entering the selection phase implicitly if needed). Pays the
    ///         payout minus fee to the winner and the fee to the treasury; status Complete.
    /// @param winner A wallet that submitted.
    /// @param decisionHash Hash of the off-chain decision record.
    function selectChallengeWinner(address winner, bytes32 decisionHash)
        external
        onlyOwner
        inMode(ProjectMode.Challenge)
        nonReentrant
    {
        _requireChallengeOpen();
        if (block.timestamp <= _state.challengeSubmissionDeadline) {
            revert SubmissionWindowOpen(_state.challengeSubmissionDeadline);
        }
        if (block.timestamp > _state.challengeOwnerResponseDeadline) {
            revert OwnerResponseWindowClosed(_state.challengeOwnerResponseDeadline);
        }
        if (_submissionOf[winner] == bytes32(0)) revert NotSubmitter(winner);
        if (_state.status == ProjectStatus.Bidding) _enterSelectionPhase();
        (uint256 net, uint256 fee) = _split(_state.challengePayout);
        _state.challengeWinner = winner;
        emit ChallengeWinnerSelected(winner, decisionHash, net, fee);
        _complete();
        _payWithFee(winner, net, fee);
    }

    /// @notice Owner cancels the challenge and gets the payout back: before the submission
    ///         deadline, or at any later time while there are zero submissions. Status Failed.
    function cancelBeforeSelection() external onlyOwner inMode(ProjectMode.Challenge) nonReentrant {
        _requireChallengeOpen();
        if (block.timestamp > _state.challengeSubmissionDeadline && _state.challengeSubmissionCount != 0) {
            revert CannotCancel();
        }
        emit ChallengeCancelled(_state.challengeSubmissionCount, _escrow().balanceOf(address(this)));
        _fail();
    }

    /// @notice Settles a challenge whose owner missed the response deadline.
    ///         Within (ownerResponseDeadline, ownerResponseDeadline + 5 days], with at least one
    ///         submission: requires an EIP-712 ChallengeFallback signature by the snapshotted
    ///         verifier signer and pays rankedSubmitters[0] (who must have submitted); Complete.
    ///         After that window: anyone, no signature (pass empty bytes; other arguments are
    ///         ignored): the project fails and the escrow is refunded to the owner.
    /// @param rankedSubmitters Ranking, best first; hashed as keccak256 of the concatenated
    ///        32-byte left-padded addresses (= EIP-712 encoding of address[]).
    /// @param rankingHash Hash of the off-chain ranking record.
    /// @param deadline Last timestamp the signature is valid.
    /// @param nonce Signer nonce (single use).
    /// @param chainId Must equal block.chainid.
    /// @param signature 65-byte r || s || v signature, or empty after the window.
    function settleChallengeFallback(
        address[] calldata rankedSubmitters,
        bytes32 rankingHash,
        uint256 deadline,
        uint256 nonce,
        uint256 chainId,
        bytes calldata signature
    ) external inMode(ProjectMode.Challenge) nonReentrant {
        _requireChallengeOpen();
        uint64 responseDeadline = _state.challengeOwnerResponseDeadline;
        if (block.timestamp <= responseDeadline) revert FallbackNotAvailable(responseDeadline);

        if (block.timestamp > responseDeadline + CHALLENGE_FALLBACK_WINDOW) {
            emit ChallengeFallbackSettled(address(0), bytes32(0), rankingHash, false, 0, 0);
            _fail();
            return;
        }

        if (_state.challengeSubmissionCount == 0) revert NoSubmissions();
        if (rankedSubmitters.length == 0) revert EmptyRanking();
        address winner = rankedSubmitters[0];
        if (_submissionOf[winner] == bytes32(0)) revert NotSubmitter(winner);
        _checkSignatureEnvelope(deadline, chainId);
        bytes32 rankedSubmittersHash = keccak256(abi.encodePacked(rankedSubmitters));
        bytes32 structHash = keccak256(
            abi.encode(
                CHALLENGE_FALLBACK_TYPEHASH, address(this), rankedSubmittersHash, rankingHash, deadline, nonce, chainId
            )
        );
        _registry().consumeVerifierSignature(_state.verifierSigner, structHash, nonce, signature);

        if (_state.status == ProjectStatus.Bidding) _enterSelectionPhase();
        (uint256 net, uint256 fee) = _split(_state.challengePayout);
        _state.challengeWinner = winner;
        emit ChallengeFallbackSettled(winner, rankedSubmittersHash, rankingHash, true, net, fee);
        _complete();
        _payWithFee(winner, net, fee);
    }

    // ================================================================= views

    /// @notice The whole project state in one call (milestones included).
    /// @return state The ProjectState struct, with the live escrow balance.
    function getProjectState() external view returns (ProjectState memory state) {
        state = _state;
        state.selectedBuilderBond = bondOf[_state.selectedBuilder];
        state.escrowBalance = _state.escrow == address(0) ? 0 : _escrow().balanceOf(address(this));
    }

    /// @notice The project owner.
    /// @return The owner address.
    function owner() external view returns (address) {
        return _state.owner;
    }

    /// @notice The stored project status.
    /// @return The status.
    function status() external view returns (ProjectStatus) {
        return _state.status;
    }

    /// @notice One milestone.
    /// @param milestoneIndex Milestone index.
    /// @return The milestone struct.
    function getMilestone(uint16 milestoneIndex) external view returns (Milestone memory) {
        if (milestoneIndex >= _state.milestones.length) revert InvalidMilestoneIndex(milestoneIndex);
        return _state.milestones[milestoneIndex];
    }

    /// @notice A bidder's current (or last) bid.
    /// @param bidder The bidder.
    /// @return The bid struct (active = false when cancelled, reclaimed or never posted).
    function getBid(address bidder) external view returns (Bid memory) {
        return _bids[bidder];
    }

    /// @notice Every address that ever posted a bid, in first-bid order.
    /// @return The bidder list.
    function bidders() external view returns (address[] memory) {
        return _bidders;
    }

    /// @notice The invite-only allowlist (order not stable across removals).
    /// @return The allowed addresses.
    function allowlist() external view returns (address[] memory) {
        return _allowlist;
    }

    /// @notice Whether `account` may bid: always true for open projects, allowlist membership
    ///         for invite-only projects.
    /// @param account The account.
    /// @return True when allowed.
    function isAllowed(address account) public view returns (bool) {
        return _state.biddingAccess == BiddingAccess.Open || _allowed[account];
    }

    /// @notice The current challenge submission hash of `submitter` (zero when none).
    /// @param submitter The wallet.
    /// @return The submission hash.
    function challengeSubmissionOf(address submitter) external view returns (bytes32) {
        return _submissionOf[submitter];
    }

    /// @notice Every wallet that submitted to the challenge, in first-submission order.
    /// @return The submitter list.
    function challengeSubmitters() external view returns (address[] memory) {
        return _submitters;
    }

    // ============================================================== internal

    function _initialize(address owner_, bytes32 configHash, ProjectMode mode) private {
        if (_initialized) revert AlreadyInitialized();
        if (owner_ == address(0)) revert ZeroAddress();
        _initialized = true;
        IMarketplaceRegistry registry = IMarketplaceRegistry(msg.sender);
        _state.owner = owner_;
        _state.registry = msg.sender;
        _state.escrow = registry.escrow();
        _state.usdc = registry.usdc();
        _state.mode = mode;
        _state.configHash = configHash;
        _state.createdAt = uint64(block.timestamp);
    }

    function _open(bool usePermit, PermitSignature memory permit) private {
        AuthorityConfig memory config = _registry().currentConfig();
        uint64 openedAt = uint64(block.timestamp);
        _state.openedAt = openedAt;
        _state.feeRateBps = config.feeRateBps;
        _state.disputeMultisig = config.disputeMultisig;
        _state.verifierSigner = config.verifierSigner;
        _state.treasury = config.treasury;
        uint256 funded;
        if (_state.mode == ProjectMode.Challenge) {
            funded = _state.challengePayout;
            _state.challengeSubmissionDeadline = openedAt + _state.challengeSubmissionWindowSeconds;
            _state.challengeOwnerResponseDeadline =
                _state.challengeSubmissionDeadline + _state.challengeOwnerResponseWindowSeconds;
        }
        _setStatus(ProjectStatus.Bidding);
        emit BiddingOpened(
            openedAt,
            config.feeRateBps,
            config.disputeMultisig,
            config.verifierSigner,
            config.treasury,
            funded,
            _state.challengeSubmissionDeadline,
            _state.challengeOwnerResponseDeadline
        );
        if (funded > 0) {
            if (usePermit) _escrow().depositWithPermit(_state.owner, funded, permit);
            else _escrow().deposit(_state.owner, funded);
        }
    }

    function _recordNewBid(uint256[] calldata payouts, uint64[] calldata durations, bytes32 bidHash)
        private
        returns (uint256 bond)
    {
        if (_state.status != ProjectStatus.Bidding) revert WrongStatus(_state.status);
        if (_state.mode != ProjectMode.Standard) revert WrongMode(_state.mode);
        if (msg.sender == _state.owner) revert OwnerCannotParticipate();
        _requireMayBid(msg.sender);
        Bid storage bid = _bids[msg.sender];
        if (bid.active) revert BidAlreadyActive();
        uint256 total = _validateBid(payouts, durations);
        if (!_hasBid[msg.sender]) {
            _hasBid[msg.sender] = true;
            _bidders.push(msg.sender);
        }
        bid.active = true;
        bid.bidHash = bidHash;
        bid.postedAt = uint64(block.timestamp);
        bid.updatedAt = uint64(block.timestamp);
        bid.totalPayout = total;
        bid.payouts = payouts;
        bid.durations = durations;
        bond = _state.bidBond;
        bondOf[msg.sender] = bond;
        totalBondsHeld += bond;
        emit BidPosted(msg.sender, bidHash, payouts, durations, total, bond);
    }

    function _validateBid(uint256[] calldata payouts, uint64[] calldata durations)
        private
        view
        returns (uint256 total)
    {
        if (payouts.length != _state.milestoneCount || durations.length != payouts.length) revert LengthMismatch();
        for (uint256 i = 0; i < payouts.length; ++i) {
            if (payouts[i] == 0) revert InvalidAmount();
            if (durations[i] == 0 || durations[i] > MAX_WINDOW_SECONDS) revert InvalidWindow();
            total += payouts[i];
        }
    }

    function _requireMayBid(address account) private view {
        if (!isAllowed(account)) revert NotAllowlisted(account);
    }

    function _selectBid(address bidder) private returns (uint256 total) {
        Bid storage bid = _bids[bidder];
        if (!bid.active) revert NoActiveBid(bidder);
        total = bid.totalPayout;
        uint256 n = bid.payouts.length;
        uint64[] memory deadlines = new uint64[](n);
        uint64 cursor = uint64(block.timestamp);
        for (uint256 i = 0; i < n; ++i) {
            cursor += bid.durations[i];
            deadlines[i] = cursor;
            Milestone storage m = _state.milestones[i];
            m.payout = bid.payouts[i];
            m.deadline = cursor;
        }
        _state.selectedBuilder = bidder;
        _setStatus(ProjectStatus.Building);
        emit BidSelected(bidder, bid.bidHash, total, bid.payouts, deadlines);
    }

    function _takeBond(address bidder) private returns (uint256 bond) {
        bond = bondOf[bidder];
        if (bond > 0) {
            bondOf[bidder] = 0;
            totalBondsHeld -= bond;
        }
    }

    /// @dev Returns the milestone when `milestoneIndex` is the current (first unapproved) one.
    function _currentMilestone(uint16 milestoneIndex) private view returns (Milestone storage) {
        if (milestoneIndex != _state.currentMilestone || milestoneIndex >= _state.milestoneCount) {
            revert InvalidMilestoneIndex(milestoneIndex);
        }
        return _state.milestones[milestoneIndex];
    }

    function _requireDisputePhase(DisputePhase expected, uint16 milestoneIndex) private view {
        if (_state.status != ProjectStatus.Dispute) revert WrongStatus(_state.status);
        if (_state.disputePhase != expected) revert WrongDisputePhase(_state.disputePhase);
        if (milestoneIndex != _state.disputeMilestoneIndex) revert InvalidMilestoneIndex(milestoneIndex);
    }

    function _checkSignatureEnvelope(uint256 deadline, uint256 chainId) private view {
        if (chainId != block.chainid) revert WrongChainId(chainId);
        if (block.timestamp > deadline) revert SignatureExpired(deadline);
    }

    function _requireChallengeOpen() private view {
        ProjectStatus s = _state.status;
        if (s != ProjectStatus.Bidding && s != ProjectStatus.Building) revert WrongStatus(s);
    }

    function _enterSelectionPhase() private {
        _state.challengeSelectionPhase = true;
        _setStatus(ProjectStatus.Building);
        emit ChallengeSelectionPhaseEntered(_state.challengeSubmissionCount, uint64(block.timestamp));
    }

    /// @dev Marks the milestone approved, pays it, advances to the next milestone and completes
    ///      the project after the last one (returning the builder bond). Status ends Building
    ///      or Complete.
    function _approveAndPay(uint16 index) private {
        Milestone storage m = _state.milestones[index];
        address builder = _state.selectedBuilder;
        (uint256 net, uint256 fee) = _split(m.payout);
        m.status = MilestoneStatus.Approved;
        m.approvedAt = uint64(block.timestamp);
        _state.currentMilestone = index + 1;
        emit MilestoneApproved(index, builder, net, fee, uint64(block.timestamp));
        bool last = index + 1 == _state.milestoneCount;
        if (last) {
            _complete();
        } else if (_state.status != ProjectStatus.Building) {
            _setStatus(ProjectStatus.Building);
        }
        _payWithFee(builder, net, fee);
        if (last) _returnBuilderBond();
    }

    function _rejectAndFail(uint16 index) private {
        Milestone storage m = _state.milestones[index];
        m.status = MilestoneStatus.Rejected;
        m.resolvedAt = uint64(block.timestamp);
        emit MilestoneRejected(index, uint64(block.timestamp));
        _fail();
    }

    function _complete() private {
        _setStatus(ProjectStatus.Complete);
        emit ProjectCompleted(uint64(block.timestamp));
    }

    /// @dev Fails the project: everything in escrow except bonds goes back to the owner, and the
    ///      selected builder's remaining bond goes back to the builder. Non-selected bidders
    ///      keep reclaiming their bonds with reclaimBond.
    function _fail() private {
        IMarketplaceEscrow escrow = _escrow();
        uint256 refund = escrow.balanceOf(address(this)) - totalBondsHeld;
        _setStatus(ProjectStatus.Failed);
        emit ProjectFailed(uint64(block.timestamp), refund);
        if (refund > 0) escrow.release(_state.owner, refund);
        _returnBuilderBond();
    }

    function _returnBuilderBond() private {
        address builder = _state.selectedBuilder;
        if (builder == address(0)) return;
        uint256 bond = _takeBond(builder);
        if (bond == 0) return;
        emit BondReturned(builder, bond);
        _escrow().release(builder, bond);
    }

    function _split(uint256 gross) private view returns (uint256 net, uint256 fee) {
        fee = (gross * _state.feeRateBps) / BPS;
        net = gross - fee;
    }

    function _payWithFee(address to, uint256 net, uint256 fee) private {
        IMarketplaceEscrow escrow = _escrow();
        if (net > 0) escrow.release(to, net);
        if (fee > 0) escrow.release(_state.treasury, fee);
    }

    function _setStatus(ProjectStatus newStatus) private {
        ProjectStatus previous = _state.status;
        _state.status = newStatus;
        emit StatusChanged(previous, newStatus);
    }

    function _escrow() private view returns (IMarketplaceEscrow) {
        return IMarketplaceEscrow(_state.escrow);
    }

    function _registry() private view returns (IMarketplaceRegistry) {
        return IMarketplaceRegistry(_state.registry);
    }
}

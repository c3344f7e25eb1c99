// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {AuthorityConfig, PermitSignature} from "./Interfaces.sol";
import {MarketplaceProject} from "./MarketplaceProject.sol";

/// @title MarketplaceRegistry
/// @notice Creates marketplace projects as EIP-1167 minimal-proxy clones of one
///         MarketplaceProject implementation, records which addresses are projects (the escrow
///         asks it), holds the current authority configuration that projects snapshot when
///         bidding opens, and is the EIP-712 verifying contract for verifier-signer messages
///         (domain name "MarketplaceVerifier", version "1"), so one signer key signs for every
///         project. Verifier nonces are tracked here, per signer, across all projects.
contract MarketplaceRegistry {
    /// @notice Upper bound for `feeRateBps` (20%).
    uint16 public constant MAX_FEE_RATE_BPS = 2_000;
    /// @notice Milestones per standard project: 1..MAX_MILESTONES.
    uint16 public constant MAX_MILESTONES = 100;

    bytes32 private constant _EIP712_DOMAIN_TYPEHASH =
        keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)");
    bytes32 private constant _NAME_HASH = keccak256("MarketplaceVerifier");
    bytes32 private constant _VERSION_HASH = keccak256("1");
    uint256 private constant _HALF_CURVE_ORDER =
        0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0;

    /// @notice USDC token (fixed at deployment).
    address public immutable usdc;
    /// @notice The escrow holding all project funds (fixed at deployment).
    address public immutable escrow;
    /// @notice The MarketplaceProject implementation every project clones.
    address public immutable projectImplementation;

    /// @notice Account allowed to change the authority configuration.
    address public admin;
    /// @notice Marketplace fee in basis points, taken from every payout.
    uint16 public feeRateBps;
    /// @notice Dispute multisig (resolveDispute, slashing).
    address public disputeMultisig;
    /// @notice Verifier signer (EIP-712 attestations and challenge fallbacks).
    address public verifierSigner;
    /// @notice Receiver of marketplace fees.
    address public treasury;

    /// @notice True for every project created by this registry.
    mapping(address => bool) public isProject;
    address[] private _projects;
    mapping(address => mapping(uint256 => bool)) private _nonceUsed;

    uint256 private immutable _cachedChainId;
    bytes32 private immutable _cachedDomainSeparator;

    /// @notice A project was created. `configHash` is computed off-chain per the spec hash rules.
    event ProjectCreated(address indexed project, address indexed owner, bytes32 configHash, uint256 timestamp);
    /// @notice The authority configuration changed (affects projects that open bidding later).
    event ConfigUpdated(uint16 feeRateBps, address disputeMultisig, address verifierSigner, address treasury);
    /// @notice The admin role moved.
    event AdminTransferred(address indexed previousAdmin, address indexed newAdmin);
    /// @notice A verifier-signed message was accepted and its nonce consumed.
    event VerifierNonceUsed(address indexed signer, uint256 indexed nonce, address indexed project);

    error NotAdmin();
    error NotProject(address caller);
    error ZeroAddress();
    error FeeRateTooHigh(uint16 feeRateBps);
    error InvalidMilestoneCount(uint16 milestoneCount);
    error CloneFailed();
    error InvalidSignature();
    error WrongSigner(address recovered, address expected);
    error NonceAlreadyUsed(address signer, uint256 nonce);

    modifier onlyAdmin() {
        if (msg.sender != admin) revert NotAdmin();
        _;
    }

    /// @param usdc_ USDC token.
    /// @param escrow_ MarketplaceEscrow (must be bound to this registry with setRegistry).
    /// @param projectImplementation_ Deployed MarketplaceProject implementation.
    /// @param config Initial authority configuration.
    constructor(
        address usdc_,
        address escrow_,
        address projectImplementation_,
        AuthorityConfig memory config
    ) {
        if (usdc_ == address(0) || escrow_ == address(0) || projectImplementation_ == address(0)) {
            revert ZeroAddress();
        }
        usdc = usdc_;
        escrow = escrow_;
        projectImplementation = projectImplementation_;
        admin = msg.sender;
        _cachedChainId = block.chainid;
        _cachedDomainSeparator = _buildDomainSeparator();
        emit AdminTransferred(address(0), msg.sender);
        _setConfig(config);
    }

    // ------------------------------------------------------------------ admin

    /// @notice Replaces the whole authority configuration. Projects that already opened
    ///         bidding keep their snapshot.
    /// @param config New fee rate, dispute multisig, verifier signer and treasury.
    function setConfig(AuthorityConfig calldata config) external onlyAdmin {
        _setConfig(config);
    }

    /// @notice Updates the fee rate (basis points, at most MAX_FEE_RATE_BPS).
    /// @param newFeeRateBps New fee rate.
    function setFeeRateBps(uint16 newFeeRateBps) external onlyAdmin {
        _setConfig(AuthorityConfig(newFeeRateBps, disputeMultisig, verifierSigner, treasury));
    }

    /// @notice Updates the dispute multisig.
    /// @param newMultisig New multisig address.
    function setDisputeMultisig(address newMultisig) external onlyAdmin {
        _setConfig(AuthorityConfig(feeRateBps, newMultisig, verifierSigner, treasury));
    }

    /// @notice Updates the verifier signer.
    /// @param newSigner New signer address.
    function setVerifierSigner(address newSigner) external onlyAdmin {
        _setConfig(AuthorityConfig(feeRateBps, disputeMultisig, newSigner, treasury));
    }

    /// @notice Updates the treasury.
    /// @param newTreasury New treasury address.
    function setTreasury(address newTreasury) external onlyAdmin {
        _setConfig(AuthorityConfig(feeRateBps, disputeMultisig, verifierSigner, newTreasury));
    }

    /// @notice Moves the admin role.
    /// @param newAdmin New admin address.
    function transferAdmin(address newAdmin) external onlyAdmin {
        if (newAdmin == address(0)) revert ZeroAddress();
        emit AdminTransferred(admin, newAdmin);
        admin = newAdmin;
    }

    // --------------------------------------------------------------- creation

    /// @notice Creates a standard-mode project in Draft, owned by the caller.
    /// @param configHash Off-chain configuration hash (spec "Hash rules"); stored and emitted.
    /// @param inviteOnly True for invite-only bidding (allowlist), false for open bidding.
    /// @param bidBond Bond in USDC base units every bidder posts (may be 0).
    /// @param milestoneCount Number of milestones, 1..100.
    /// @return project The new project address.
    function createProject(bytes32 configHash, bool inviteOnly, uint256 bidBond, uint16 milestoneCount)
        external
        returns (address project)
    {
        if (milestoneCount == 0 || milestoneCount > MAX_MILESTONES) {
            revert InvalidMilestoneCount(milestoneCount);
        }
        project = _create(configHash);
        MarketplaceProject(project).initializeStandard(msg.sender, configHash, inviteOnly, bidBond, milestoneCount);
    }

    /// @notice Creates a challenge-mode project in Draft, owned by the caller. Opening it later
    ///         (`openBidding` / `openBiddingWithPermit` on the project) funds the payout.
    /// @param configHash Off-chain configuration hash.
    /// @param payout Challenge payout in USDC base units (> 0).
    /// @param submissionWindowSeconds Submission window length, counted from opening.
    /// @param ownerResponseWindowSeconds Owner response window after the submission deadline.
    /// @return project The new project address.
    function createChallengeProject(
        bytes32 configHash,
        uint256 payout,
        uint64 submissionWindowSeconds,
        uint64 ownerResponseWindowSeconds
    ) external returns (address project) {
        project = _createChallenge(configHash, payout, submissionWindowSeconds, ownerResponseWindowSeconds);
    }

    /// @notice Creates, funds and opens a challenge-mode project atomically. The escrow pulls
    ///         `payout` from the caller, who must have approved the ESCROW for it.
    /// @param configHash Off-chain configuration hash.
    /// @param payout Challenge payout in USDC base units (> 0).
    /// @param submissionWindowSeconds Submission window length, counted from now.
    /// @param ownerResponseWindowSeconds Owner response window after the submission deadline.
    /// @return project The new project address.
    function createChallengeProjectAndOpen(
        bytes32 configHash,
        uint256 payout,
        uint64 submissionWindowSeconds,
        uint64 ownerResponseWindowSeconds
    ) external returns (address project) {
        project = _createChallenge(configHash, payout, submissionWindowSeconds, ownerResponseWindowSeconds);
        MarketplaceProject(project).openFromRegistry(false, PermitSignature(0, 0, 0, 0));
    }

    /// @notice Like `createChallengeProjectAndOpen`, funding through an EIP-2612 permit signed by
    ///         the caller with spender = escrow and value = `payout`.
    /// @param configHash Off-chain configuration hash.
    /// @param payout Challenge payout in USDC base units (> 0); also the permit value.
    /// @param submissionWindowSeconds Submission window length, counted from now.
    /// @param ownerResponseWindowSeconds Owner response window after the submission deadline.
    /// @param permitDeadline Permit deadline.
    /// @param v Permit signature v.
    /// @param r Permit signature r.
    /// @param s Permit signature s.
    /// @return project The new project address.
    function createChallengeProjectAndOpenWithPermit(
        bytes32 configHash,
        uint256 payout,
        uint64 submissionWindowSeconds,
        uint64 ownerResponseWindowSeconds,
        uint256 permitDeadline,
        uint8 v,
        bytes32 r,
        bytes32 s
    ) external returns (address project) {
        project = _createChallenge(configHash, payout, submissionWindowSeconds, ownerResponseWindowSeconds);
        MarketplaceProject(project).openFromRegistry(true, PermitSignature(permitDeadline, v, r, s));
    }

    // ------------------------------------------------------------------ views

    /// @notice Number of projects created.
    /// @return The count.
    function projectCount() external view returns (uint256) {
        return _projects.length;
    }

    /// @notice Project address by creation index.
    /// @param index 0-based creation index.
    /// @return The project address.
    function projectAt(uint256 index) external view returns (address) {
        return _projects[index];
    }

    /// @notice The configuration a project opening bidding now would snapshot.
    /// @return The current authority configuration.
    function currentConfig() external view returns (AuthorityConfig memory) {
        return AuthorityConfig(feeRateBps, disputeMultisig, verifierSigner, treasury);
    }

    /// @notice EIP-712 domain separator of the "MarketplaceVerifier" domain.
    /// @return The separator for the current chain id.
    function domainSeparator() public view returns (bytes32) {
        return block.chainid == _cachedChainId ? _cachedDomainSeparator : _buildDomainSeparator();
    }

    /// @notice The EIP-712 digest a verifier signs for a given struct hash.
    /// @param structHash hashStruct of an Attestation or ChallengeFallback message.
    /// @return keccak256("\x19\x01" || domainSeparator || structHash).
    function hashTypedData(bytes32 structHash) public view returns (bytes32) {
        return keccak256(abi.encodePacked("\x19\x01", domainSeparator(), structHash));
    }

    /// @notice Whether `signer` already used `nonce`.
    /// @param signer Verifier signer.
    /// @param nonce Nonce.
    /// @return True when consumed.
    function isNonceUsed(address signer, uint256 nonce) external view returns (bool) {
        return _nonceUsed[signer][nonce];
    }

    // ------------------------------------------------------- project callback

    /// @notice Checks a verifier EIP-712 signature over `structHash` and consumes the signer's
    ///         nonce. Only projects may call; they pass their snapshotted signer.
    /// @param expectedSigner The signer the calling project trusts.
    /// @param structHash hashStruct of the signed message (built by the project).
    /// @param nonce The message nonce (unique per signer across all projects).
    /// @param signature 65-byte r || s || v signature.
    function consumeVerifierSignature(
        address expectedSigner,
        bytes32 structHash,
        uint256 nonce,
        bytes calldata signature
    ) external {
        if (!isProject[msg.sender]) revert NotProject(msg.sender);
        address recovered = _recover(hashTypedData(structHash), signature);
        if (recovered != expectedSigner) revert WrongSigner(recovered, expectedSigner);
        if (_nonceUsed[expectedSigner][nonce]) revert NonceAlreadyUsed(expectedSigner, nonce);
        _nonceUsed[expectedSigner][nonce] = true;
        emit VerifierNonceUsed(expectedSigner, nonce, msg.sender);
    }

    // --------------------------------------------------------------- internal

    function _setConfig(AuthorityConfig memory config) private {
        if (config.feeRateBps > MAX_FEE_RATE_BPS) revert FeeRateTooHigh(config.feeRateBps);
        if (
            config.disputeMultisig == address(0) || config.verifierSigner == address(0)
                || config.treasury == address(0)
        ) revert ZeroAddress();
        feeRateBps = config.feeRateBps;
        disputeMultisig = config.disputeMultisig;
        verifierSigner = config.verifierSigner;
        treasury = config.treasury;
        emit ConfigUpdated(config.feeRateBps, config.disputeMultisig, config.verifierSigner, config.treasury);
    }

    function _createChallenge(
        bytes32 configHash,
        uint256 payout,
        uint64 submissionWindowSeconds,
        uint64 ownerResponseWindowSeconds
    ) private returns (address project) {
        project = _create(configHash);
        MarketplaceProject(project).initializeChallenge(
            msg.sender, configHash, payout, submissionWindowSeconds, ownerResponseWindowSeconds
        );
    }

    /// @dev Deploys an EIP-1167 clone, registers it and emits ProjectCreated. The caller
    ///      initializes it in the same transaction, so nobody can initialize it first.
    function _create(bytes32 configHash) private returns (address project) {
        address impl = projectImplementation;
        assembly ("memory-safe") {
            // EIP-1167: 3d602d80600a3d3981f3 363d3d373d3d3d363d73 <impl> 5af43d82803e903d91602b57fd5bf3
            let ptr := mload(0x40)
            mstore(ptr, 0x3d602d80600a3d3981f3363d3d373d3d3d363d73000000000000000000000000)
            mstore(add(ptr, 0x14), shl(0x60, impl))
            mstore(add(ptr, 0x28), 0x5af43d82803e903d91602b57fd5bf30000000000000000000000000000000000)
            project := create(0, ptr, 0x37)
        }
        if (project == address(0)) revert CloneFailed();
        isProject[project] = true;
        _projects.push(project);
        emit ProjectCreated(project, msg.sender, configHash, block.timestamp);
    }

    function _buildDomainSeparator() private view returns (bytes32) {
        return keccak256(abi.encode(_EIP712_DOMAIN_TYPEHASH, _NAME_HASH, _VERSION_HASH, block.chainid, address(this)));
    }

    function _recover(bytes32 digest, bytes calldata signature) private pure returns (address) {
        if (signature.length != 65) revert InvalidSignature();
        bytes32 r = bytes32(signature[0:32]);
        bytes32 s = bytes32(signature[32:64]);
        uint8 v = uint8(signature[64]);
        if (v < 27) v += 27;
        if ((v != 27 && v != 28) || uint256(s) > _HALF_CURVE_ORDER) revert InvalidSignature();
        address recovered = ecrecover(digest, v, r, s);
        if (recovered == address(0)) revert InvalidSignature();
        return recovered;
    }
}

// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @notice The subset of ERC-20 + EIP-2612 the marketplace uses.
interface IERC20Permit {
    function balanceOf(address account) external view returns (uint256);
    function allowance(address owner, address spender) external view returns (uint256);
    function transfer(address to, uint256 amount) external returns (bool);
    function transferFrom(address from, address to, uint256 amount) external returns (bool);
    function permit(
        address owner,
        address spender,
        uint256 value,
        uint256 deadline,
        uint8 v,
        bytes32 r,
        bytes32 s
    ) external;
}

/// @notice EIP-2612 permit signature fields, passed through to the token by the escrow.
struct PermitSignature {
    uint256 deadline;
    uint8 v;
    bytes32 r;
    bytes32 s;
}

/// @notice Registry configuration that projects snapshot when bidding opens.
struct AuthorityConfig {
    uint16 feeRateBps;
    address disputeMultisig;
    address verifierSigner;
    address treasury;
}

/// @notice What the escrow and the projects need from the registry.
interface IMarketplaceRegistry {
    function isProject(address account) external view returns (bool);
    function usdc() external view returns (address);
    function escrow() external view returns (address);
    function currentConfig() external view returns (AuthorityConfig memory);
    function consumeVerifierSignature(
        address expectedSigner,
        bytes32 structHash,
        uint256 nonce,
        bytes calldata signature
    ) external;
}

/// @notice What the projects need from the escrow.
interface IMarketplaceEscrow {
    function deposit(address payer, uint256 amount) external;
    function depositWithPermit(address payer, uint256 amount, PermitSignature calldata permit) external;
    function release(address to, uint256 amount) external;
    function balanceOf(address project) external view returns (uint256);
}

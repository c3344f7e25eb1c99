// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {IERC20Permit, IMarketplaceRegistry, PermitSignature} from "./Interfaces.sol";

/// @title MarketplaceEscrow
/// @notice Holds the USDC of every marketplace project and keeps a balance per project.
///         Payers (owners funding payouts, bidders posting bonds) approve or permit THIS
///         contract as the spender, never a project address. Only contracts that the registry
///         reports as projects may pull funds into the escrow or release funds out of it, and a
///         project can only release what it deposited.
contract MarketplaceEscrow {
    /// @notice The token held (USDC, 6 decimals).
    IERC20Permit public immutable usdc;
    /// @notice The account allowed to bind the escrow to its registry, once.
    address public immutable deployer;
    /// @notice The registry that says which addresses are projects (set once).
    IMarketplaceRegistry public registry;

    mapping(address => uint256) private _balances;
    uint256 private _locked;

    /// @notice The escrow was bound to its registry.
    event RegistrySet(address indexed registry);
    /// @notice `amount` was pulled from `payer` into `project`'s escrow balance.
    event Deposited(address indexed project, address indexed payer, uint256 amount);
    /// @notice `amount` was paid out of `project`'s escrow balance to `to`.
    event Released(address indexed project, address indexed to, uint256 amount);

    error NotDeployer();
    error RegistryAlreadySet();
    error ZeroAddress();
    error NotProject(address caller);
    error InsufficientProjectBalance(address project, uint256 balance, uint256 needed);
    error TokenTransferFailed();
    error Reentrancy();

    modifier onlyProject() {
        IMarketplaceRegistry reg = registry;
        if (address(reg) == address(0) || !reg.isProject(msg.sender)) revert NotProject(msg.sender);
        _;
    }

    modifier nonReentrant() {
        if (_locked != 0) revert Reentrancy();
        _locked = 1;
        _;
        _locked = 0;
    }

    /// @param usdc_ The USDC token held by the escrow.
    constructor(address usdc_) {
        if (usdc_ == address(0)) revert ZeroAddress();
        usdc = IERC20Permit(usdc_);
        deployer = msg.sender;
    }

    /// @notice Binds the escrow to its registry. Callable once, by the deployer.
    /// @param registry_ The MarketplaceRegistry whose projects may use this escrow.
    function setRegistry(address registry_) external {
        if (msg.sender != deployer) revert NotDeployer();
        if (address(registry) != address(0)) revert RegistryAlreadySet();
        if (registry_ == address(0)) revert ZeroAddress();
        registry = IMarketplaceRegistry(registry_);
        emit RegistrySet(registry_);
    }

    /// @notice Pulls `amount` from `payer` (who must have approved the escrow) into the calling
    ///         project's balance. Only registered projects may call.
    /// @param payer The account whose USDC is pulled (the project authenticates it).
    /// @param amount Amount in base units.
    function deposit(address payer, uint256 amount) external onlyProject nonReentrant {
        _deposit(payer, amount);
    }

    /// @notice Like `deposit`, but first submits the payer's EIP-2612 permit naming the escrow as
    ///         spender for exactly `amount`. If the permit was already used (e.g. front-run), the
    ///         call still succeeds when the existing allowance covers `amount`.
    /// @param payer The account whose USDC is pulled.
    /// @param amount Amount in base units; also the permit value.
    /// @param permit The payer's permit signature fields.
    function depositWithPermit(address payer, uint256 amount, PermitSignature calldata permit)
        external
        onlyProject
        nonReentrant
    {
        try usdc.permit(payer, address(this), amount, permit.deadline, permit.v, permit.r, permit.s) {}
        catch {
            // Fall through: transferFrom below reverts if the allowance is insufficient.
        }
        _deposit(payer, amount);
    }

    /// @notice Pays `amount` from the calling project's balance to `to`. Only registered
    ///         projects may call.
    /// @param to Receiver.
    /// @param amount Amount in base units.
    function release(address to, uint256 amount) external onlyProject nonReentrant {
        if (to == address(0)) revert ZeroAddress();
        uint256 bal = _balances[msg.sender];
        if (bal < amount) revert InsufficientProjectBalance(msg.sender, bal, amount);
        unchecked {
            _balances[msg.sender] = bal - amount;
        }
        emit Released(msg.sender, to, amount);
        if (!usdc.transfer(to, amount)) revert TokenTransferFailed();
    }

    /// @notice The escrowed balance of `project`.
    /// @param project A project address.
    /// @return Balance in base units.
    function balanceOf(address project) external view returns (uint256) {
        return _balances[project];
    }

    function _deposit(address payer, uint256 amount) private {
        _balances[msg.sender] += amount;
        emit Deposited(msg.sender, payer, amount);
        if (!usdc.transferFrom(payer, address(this), amount)) revert TokenTransferFailed();
    }
}

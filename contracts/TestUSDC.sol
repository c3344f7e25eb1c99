// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @title TestUSDC
/// @notice DEVNET-ONLY stand-in for USDC: an ERC-20 with 6 decimals and EIP-2612 `permit`.
///         `mint` is callable by ANYONE, so this token has no value and must never be deployed
///         anywhere real funds are expected.
contract TestUSDC {
    string public constant name = "Test USD Coin";
    string public constant symbol = "USDC";
    uint8 public constant decimals = 6;
    /// @notice EIP-712 domain version used by `permit`.
    string public constant version = "1";

    bytes32 private constant _EIP712_DOMAIN_TYPEHASH =
        keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)");
    bytes32 public constant PERMIT_TYPEHASH =
        keccak256("Permit(address owner,address spender,uint256 value,uint256 nonce,uint256 deadline)");
    /// @dev secp256k1n / 2; signatures with a larger `s` are malleable and rejected.
    uint256 private constant _HALF_CURVE_ORDER =
        0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0;

    uint256 public totalSupply;
    mapping(address => uint256) public balanceOf;
    mapping(address => mapping(address => uint256)) public allowance;
    /// @notice EIP-2612 permit nonce per owner.
    mapping(address => uint256) public nonces;

    uint256 private immutable _cachedChainId;
    bytes32 private immutable _cachedDomainSeparator;

    event Transfer(address indexed from, address indexed to, uint256 value);
    event Approval(address indexed owner, address indexed spender, uint256 value);

    error ERC20InsufficientBalance(address account, uint256 balance, uint256 needed);
    error ERC20InsufficientAllowance(address spender, uint256 allowance, uint256 needed);
    error ERC20InvalidReceiver(address receiver);
    error ERC20InvalidSpender(address spender);
    error PermitExpired(uint256 deadline);
    error PermitInvalidSignature();

    constructor() {
        _cachedChainId = block.chainid;
        _cachedDomainSeparator = _buildDomainSeparator();
    }

    /// @notice Mints `amount` base units (6 decimals) to `to`.
    /// @dev Deliberately unrestricted: anyone may mint. Devnet/test token only.
    /// @param to Receiver of the new tokens.
    /// @param amount Amount in base units.
    function mint(address to, uint256 amount) external {
        if (to == address(0)) revert ERC20InvalidReceiver(to);
        totalSupply += amount;
        unchecked {
            balanceOf[to] += amount;
        }
        emit Transfer(address(0), to, amount);
    }

    /// @notice Moves `amount` from the caller to `to`.
    /// @param to Receiver.
    /// @param amount Amount in base units.
    /// @return Always true (reverts on failure).
    function transfer(address to, uint256 amount) external returns (bool) {
        _transfer(msg.sender, to, amount);
        return true;
    }

    /// @notice Sets the caller's allowance for `spender` to `amount`.
    /// @param spender Address allowed to spend.
    /// @param amount New allowance (type(uint256).max = unlimited).
    /// @return Always true.
    function approve(address spender, uint256 amount) external returns (bool) {
        _approve(msg.sender, spender, amount);
        return true;
    }

    /// @notice Moves `amount` from `from` to `to` using the caller's allowance.
    /// @param from Token holder.
    /// @param to Receiver.
    /// @param amount Amount in base units.
    /// @return Always true (reverts on failure).
    function transferFrom(address from, address to, uint256 amount) external returns (bool) {
        uint256 allowed = allowance[from][msg.sender];
        if (allowed != type(uint256).max) {
            if (allowed < amount) revert ERC20InsufficientAllowance(msg.sender, allowed, amount);
            unchecked {
                allowance[from][msg.sender] = allowed - amount;
            }
        }
        _transfer(from, to, amount);
        return true;
    }

    /// @notice EIP-2612: sets `allowance[owner][spender] = value` from an owner signature.
    /// @param owner Token holder who signed.
    /// @param spender Spender being approved.
    /// @param value Allowance value.
    /// @param deadline Last timestamp at which the permit is valid.
    /// @param v Signature recovery id (27 or 28).
    /// @param r Signature r.
    /// @param s Signature s (lower half order).
    function permit(
        address owner,
        address spender,
        uint256 value,
        uint256 deadline,
        uint8 v,
        bytes32 r,
        bytes32 s
    ) external {
        if (block.timestamp > deadline) revert PermitExpired(deadline);
        if (uint256(s) > _HALF_CURVE_ORDER) revert PermitInvalidSignature();
        bytes32 structHash;
        unchecked {
            structHash = keccak256(
                abi.encode(PERMIT_TYPEHASH, owner, spender, value, nonces[owner]++, deadline)
            );
        }
        bytes32 digest = keccak256(abi.encodePacked("\x19\x01", DOMAIN_SEPARATOR(), structHash));
        address signer = ecrecover(digest, v, r, s);
        if (signer == address(0) || signer != owner) revert PermitInvalidSignature();
        _approve(owner, spender, value);
    }

    /// @notice EIP-712 domain separator used by `permit`.
    /// @return The separator for the current chain id.
    function DOMAIN_SEPARATOR() public view returns (bytes32) {
        return block.chainid == _cachedChainId ? _cachedDomainSeparator : _buildDomainSeparator();
    }

    function _buildDomainSeparator() private view returns (bytes32) {
        return keccak256(
            abi.encode(
                _EIP712_DOMAIN_TYPEHASH,
                keccak256(bytes(name)),
                keccak256(bytes(version)),
                block.chainid,
                address(this)
            )
        );
    }

    function _transfer(address from, address to, uint256 amount) private {
        if (to == address(0)) revert ERC20InvalidReceiver(to);
        uint256 bal = balanceOf[from];
        if (bal < amount) revert ERC20InsufficientBalance(from, bal, amount);
        unchecked {
            balanceOf[from] = bal - amount;
            balanceOf[to] += amount;
        }
        emit Transfer(from, to, amount);
    }

    function _approve(address owner, address spender, uint256 amount) private {
        if (spender == address(0)) revert ERC20InvalidSpender(spender);
        allowance[owner][spender] = amount;
        emit Approval(owner, spender, amount);
    }
}

#!/usr/bin/env node
// Compiles every contracts/*.sol with solcjs (standard JSON, optimizer on) and writes one
// marketplace/chain/artifacts/<ContractName>.json per deployable contract
// ({contractName, abi, bytecode, deployedBytecode}) plus marketplace/chain/artifacts/sources.sha256.
//
// Output is deterministic: sorted keys, 2-space indentation, trailing newline. Rebuilding
// unchanged sources with the same solc produces byte-identical files.
//
// Source digest (recomputed by marketplace/chain/artifacts.py:sources_digest):
//   sha256 over, for each contracts/*.sol sorted by file name (code-point order):
//     "<name>\n<byte length>\n<raw bytes>\n"
//   followed by "solc <solc package version>\n".
//
// Usage: node scripts/build_contracts.js [--check]
//   --check  compile and compare with the committed artifacts; exit 1 when they differ.

'use strict';

const crypto = require('crypto');
const fs = require('fs');
const path = require('path');
const solc = require('solc');
const solcVersion = require('solc/package.json').version;

const ROOT = path.resolve(__dirname, '..');
const CONTRACTS_DIR = path.join(ROOT, 'contracts');
const ARTIFACTS_DIR = path.join(ROOT, 'marketplace', 'chain', 'artifacts');
const DIGEST_FILE = 'sources.sha256';

const SETTINGS = {
  optimizer: { enabled: true, runs: 200 },
  // via-IR keeps MarketplaceProject about 2.4 KB under the EIP-170 size limit.
  viaIR: true,
  evmVersion: 'cancun',
  outputSelection: {
    '*': { '*': ['abi', 'evm.bytecode.object', 'evm.deployedBytecode.object'] },
  },
};

function listSources() {
  return fs
    .readdirSync(CONTRACTS_DIR)
    .filter((name) => name.endsWith('.sol'))
    .sort();
}

function sourcesDigest(names) {
  const hash = crypto.createHash('sha256');
  for (const name of names) {
    const content = fs.readFileSync(path.join(CONTRACTS_DIR, name));
    hash.update(`${name}\n${content.length}\n`);
    hash.update(content);
    hash.update('\n');
  }
  hash.update(`solc ${solcVersion}\n`);
  return hash.digest('hex');
}

function sortKeys(value) {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value !== null && typeof value === 'object') {
    const out = {};
    for (const key of Object.keys(value).sort()) out[key] = sortKeys(value[key]);
    return out;
  }
  return value;
}

function stableJson(value) {
  return JSON.stringify(sortKeys(value), null, 2) + '\n';
}

function compile(names) {
  const sources = {};
  for (const name of names) {
    sources[name] = { content: fs.readFileSync(path.join(CONTRACTS_DIR, name), 'utf8') };
  }
  const input = { language: 'Solidity', sources, settings: SETTINGS };
  const findImports = (importPath) => {
    const resolved = path.join(CONTRACTS_DIR, importPath);
    if (!resolved.startsWith(CONTRACTS_DIR + path.sep) || !fs.existsSync(resolved)) {
      return { error: `import not found: ${importPath}` };
    }
    return { contents: fs.readFileSync(resolved, 'utf8') };
  };
  const output = JSON.parse(solc.compile(JSON.stringify(input), { import: findImports }));
  const diagnostics = output.errors || [];
  for (const d of diagnostics) {
    process.stderr.write((d.formattedMessage || d.message) + '\n');
  }
  if (diagnostics.some((d) => d.severity === 'error')) {
    throw new Error('compilation failed');
  }

  const artifacts = {};
  for (const sourceName of Object.keys(output.contracts || {}).sort()) {
    for (const [contractName, contract] of Object.entries(output.contracts[sourceName])) {
      const bytecode = contract.evm.bytecode.object;
      if (!bytecode) continue; // interfaces and abstract contracts are not deployable
      if (artifacts[contractName]) {
        throw new Error(`duplicate contract name ${contractName}`);
      }
      artifacts[contractName] = {
        contractName,
        abi: contract.abi,
        bytecode: '0x' + bytecode,
        deployedBytecode: '0x' + contract.evm.deployedBytecode.object,
      };
    }
  }
  return artifacts;
}

function renderOutputs(names) {
  const files = {};
  const artifacts = compile(names);
  for (const name of Object.keys(artifacts).sort()) {
    files[`${name}.json`] = stableJson(artifacts[name]);
    const size = (artifacts[name].deployedBytecode.length - 2) / 2;
    if (size > 24576) {
      throw new Error(`${name} runtime code is ${size} bytes, above the EIP-170 limit of 24576`);
    }
  }
  files[DIGEST_FILE] =
    '# sha256 of contracts/*.sol and the solc version; written by scripts/build_contracts.js\n' +
    `sha256=${sourcesDigest(names)}\n` +
    `solc=${solcVersion}\n` +
    `files=${names.join(',')}\n`;
  return files;
}

function main() {
  const check = process.argv.includes('--check');
  const names = listSources();
  if (names.length === 0) throw new Error(`no .sol files in ${CONTRACTS_DIR}`);
  const files = renderOutputs(names);
  const existing = fs.existsSync(ARTIFACTS_DIR)
    ? fs.readdirSync(ARTIFACTS_DIR).filter((f) => f.endsWith('.json') || f === DIGEST_FILE)
    : [];

  if (check) {
    const stale = [];
    for (const [file, content] of Object.entries(files)) {
      const target = path.join(ARTIFACTS_DIR, file);
      if (!fs.existsSync(target) || fs.readFileSync(target, 'utf8') !== content) stale.push(file);
    }
    for (const file of existing) if (!(file in files)) stale.push(file);
    if (stale.length) {
      process.stderr.write(`artifacts out of date: ${stale.sort().join(', ')}\n`);
      process.exit(1);
    }
    process.stdout.write('artifacts up to date\n');
    return;
  }

  fs.mkdirSync(ARTIFACTS_DIR, { recursive: true });
  for (const file of existing) {
    if (!(file in files)) fs.unlinkSync(path.join(ARTIFACTS_DIR, file));
  }
  for (const [file, content] of Object.entries(files)) {
    fs.writeFileSync(path.join(ARTIFACTS_DIR, file), content);
  }
  const built = Object.keys(files).filter((f) => f.endsWith('.json'));
  process.stdout.write(`wrote ${built.length} artifacts (${built.join(', ')}) with solc ${solcVersion}\n`);
}

try {
  main();
} catch (err) {
  process.stderr.write(`build_contracts: ${err.message}\n`);
  process.exit(1);
}

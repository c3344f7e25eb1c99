#!/usr/bin/env node
// A native-solc command line over solcjs (the `solc` npm package: the same compiler built to
// WebAssembly), enough for forge: `--version`, and `--standard-json` on stdin with forge's
// `--base-path`, `--include-path` and `--allow-paths`. forge cannot load solcjs itself, and
// the verifier may not download a compiler, so this is how `forge-test` compiles offline.
// Imports are read only under the allowed roots, as native solc does.
"use strict";
const fs = require("fs");
const path = require("path");

const solc = require(process.env.SOLCJS_MODULE || "solc");
const args = process.argv.slice(2);

if (args.includes("--version")) {
  process.stdout.write(
    `solc, the solidity compiler commandline interface\nVersion: ${solc.version()}\n`,
  );
  process.exit(0);
}
if (!args.includes("--standard-json")) {
  process.stderr.write("only --version and --standard-json are supported\n");
  process.exit(2);
}

const roots = [];
for (let i = 0; i < args.length; i++) {
  if (["--base-path", "--include-path", "--allow-paths"].includes(args[i]) && i + 1 < args.length) {
    for (const root of args[++i].split(",")) {
      if (root) roots.push(path.resolve(root));
    }
  }
}
if (roots.length === 0) roots.push(process.cwd());

function inside(file) {
  return roots.some((root) => file === root || file.startsWith(root + path.sep));
}

function findImports(importPath) {
  for (const root of roots) {
    const file = path.resolve(root, importPath);
    if (inside(file) && fs.existsSync(file)) {
      return { contents: fs.readFileSync(file, "utf8") };
    }
  }
  return { error: `File not found inside the allowed paths: ${importPath}` };
}

const input = fs.readFileSync(0, "utf8");
process.stdout.write(solc.compile(input, { import: findImports }));

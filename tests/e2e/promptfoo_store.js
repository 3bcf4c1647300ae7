// Stores a promptfoo results file (``--output results.json``, version 3) in promptfoo's own database the way
// ``promptfoo eval`` stores a run it made (Eval.create, addPrompts, then addResult for each row), so promptfoo's
// commands (export, show eval, view) read it back. Usage: node promptfoo_store.js PROMPTFOO_PACKAGE_DIR FILE;
// prints the eval's id. Run with promptfoo's environment (tests/e2e/promptfoo_cli.py: its config dir holds the
// database).
//
// Why not ``promptfoo import FILE``: in 0.115 it inserts the rows inside an async better-sqlite3 transaction,
// which better-sqlite3 refuses ("Transaction function cannot return a promise"), for promptfoo's own results
// files too; this is the same model code without that transaction.
const fs = require('fs');
const path = require('path');

const src = path.join(process.argv[2], 'dist', 'src');
const { runDbMigrations } = require(path.join(src, 'migrate'));
const Eval = require(path.join(src, 'models', 'eval')).default;

(async () => {
  await runDbMigrations();
  const data = JSON.parse(fs.readFileSync(process.argv[3], 'utf-8'));
  if (!data.results || data.results.version !== 3) {
    throw new Error('expected a version 3 results file (results.version: 3)');
  }
  const record = await Eval.create(data.config, data.results.prompts, { author: 'workbench test' });
  await record.addPrompts(data.results.prompts);
  for (const result of data.results.results) {
    await record.addResult(result);
  }
  console.log(record.id);
})().catch((err) => {
  console.error(err);
  process.exit(1);
});

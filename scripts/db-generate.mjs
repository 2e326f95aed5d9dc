// `npm run db:generate [-- <name>]`: drizzle-kit generate for the service's database and for each subscriber's
// own database (a subscriber is a folder under src/subscribers/ with a tables.ts). With a name, only that one.
// drizzle-kit exits 0 when it cannot load a schema (it prints esbuild's error), so its output is checked as well.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';

/** A line drizzle-kit prints when it failed: a thrown error (`Error: Transform failed…`, `TypeError: …`), esbuild's `ERROR:` or a `✘`. */
const FAILURE = /^(?:\w*Error\b[: ]|\s*[✘×] |.*: ERROR: )/m;

/** `text` without its terminal colours. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: the escape that starts a colour
const plain = (text) => text.replace(/\x1b\[[0-9;]*m/g, '');

const subscribers = readdirSync('src/subscribers', { withFileTypes: true })
  .filter((d) => d.isDirectory() && existsSync(`src/subscribers/${d.name}/tables.ts`))
  .map((d) => d.name);
const all = ['service', ...subscribers];
const asked = process.argv.slice(2);
const unknown = asked.filter((n) => !all.includes(n));
if (unknown.length > 0) {
  console.error(`unknown database ${unknown.join(', ')}; known: ${all.join(', ')}\nusage: npm run db:generate [-- <service|subscriber name>]`);
  process.exit(2);
}
for (const db of asked.length > 0 ? asked : all) {
  console.log(`# ${db}`);
  const run = spawnSync('npx', ['drizzle-kit', 'generate'], { stdio: ['inherit', 'pipe', 'pipe'], encoding: 'utf8', env: { ...process.env, DB: db } });
  process.stdout.write(run.stdout ?? '');
  process.stderr.write(run.stderr ?? '');
  if (run.status !== 0) process.exit(run.status ?? 1);
  if (FAILURE.test(plain(`${run.stdout}\n${run.stderr}`))) {
    console.error(`drizzle-kit generate failed for ${db} (its error is above) though it exited 0`);
    process.exit(1);
  }
}

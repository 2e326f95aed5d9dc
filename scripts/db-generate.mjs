// `npm run db:generate [-- <name>]`: drizzle-kit generate for the service's database and for each subscriber's
// own database (a subscriber is a folder under src/subscribers/ with a tables.ts). With a name, only that one.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';

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
  const run = spawnSync('npx', ['drizzle-kit', 'generate'], { stdio: 'inherit', env: { ...process.env, DB: db } });
  if (run.status !== 0) process.exit(run.status ?? 1);
}

// `npm run db:migrate`: applies pending migrations to DATABASE_URL and exits.
import { loadConfigOrExit, migrateOrExit, MIGRATIONS_FOLDER, openClient } from './boot.ts';

const config = loadConfigOrExit();
const client = await openClient(config.DATABASE_URL, config);
const applied = await migrateOrExit(client, MIGRATIONS_FOLDER);
// the URL without its query and credentials: a libSQL URL may carry an auth token
const where = config.DATABASE_URL.replace(/\?.*$/, '').replace(/\/\/[^@/]*@/, '//');
console.log(`${applied} migration(s) applied to ${where}`);
client.close();

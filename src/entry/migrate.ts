// `npm run db:migrate`: applies pending migrations to DATABASE_URL and exits.
import { loadConfigOrExit, migrateOrExit, MIGRATIONS_FOLDER, openClient } from './boot.ts';

const config = loadConfigOrExit();
const client = await openClient(config.DATABASE_URL, config);
const applied = await migrateOrExit(client, MIGRATIONS_FOLDER);
console.log(`${applied} migration(s) applied to ${config.DATABASE_URL}`);
client.close();

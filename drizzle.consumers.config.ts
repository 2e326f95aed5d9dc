import { defineConfig } from 'drizzle-kit';

/** Migrations of the subscribers' own databases (inbox, dead letters, the example read models). */
export default defineConfig({
  dialect: 'sqlite',
  schema: ['./src/inbox/schema.ts', './src/consumers/reporting/schema.ts', './src/consumers/notifications/schema.ts'],
  out: './db/consumer-migrations',
});

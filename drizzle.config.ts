import { defineConfig } from 'drizzle-kit';

// `npm run db:generate` runs drizzle-kit once per database, choosing it with DB:
//   DB=service (default)   the service's database: the core tables and every context's tables → db/migrations
//   DB=<subscriber name>    one subscriber's own database: the inbox tables and its own tables → db/subscribers/<name>
const target = process.env.DB ?? 'service';

export default target === 'service'
  ? defineConfig({
      dialect: 'sqlite',
      schema: ['./src/outbox/tables.ts', './src/leases/tables.ts', './src/http/tables.ts', './src/contexts/*/tables.ts'],
      out: './db/migrations',
    })
  : defineConfig({
      dialect: 'sqlite',
      schema: ['./src/inbox/tables.ts', './src/leases/tables.ts', `./src/subscribers/${target}/tables.ts`],
      out: `./db/subscribers/${target}`,
    });

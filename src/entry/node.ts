// Node entry: serves the app with @hono/node-server and runs the roles in ROLES.
import { boot, stopOnSignals } from './boot.ts';
import { serveOnNode } from './serve-node.ts';

const started = await boot({ runtime: 'node' });
stopOnSignals(started, serveOnNode(started));

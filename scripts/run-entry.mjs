// Starts the service on the runtime that invoked the npm script: `bun run dev|start` runs Bun on the TypeScript
// entry, `npm run dev` runs Node through tsx, `npm start` runs Node on the built dist/.
import { spawn } from 'node:child_process';

const mode = process.argv[2] ?? 'dev';
const agent = process.env.npm_config_user_agent ?? '';
const onBun = agent.startsWith('bun/') || /bun(\.exe)?$/.test(process.env.npm_execpath ?? '');
const [cmd, args] = onBun
  ? [process.env.npm_execpath ?? 'bun', ['src/entry/bun.ts']]
  : mode === 'start'
    ? [process.execPath, ['--enable-source-maps', 'dist/entry/node.js']]
    : [process.execPath, ['--import', 'tsx', 'src/entry/node.ts']];

const child = spawn(cmd, args, { stdio: 'inherit' });
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => child.kill(sig));
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));

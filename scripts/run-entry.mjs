// Starts src/entry/<name>.ts on the runtime that invoked the npm script: `bun run dev` runs Bun, `npm run dev` Node (tsx).
import { spawn } from 'node:child_process';

const name = process.argv[2] ?? 'node';
const args = process.argv.slice(3);
const agent = process.env.npm_config_user_agent ?? '';
const onBun = agent.startsWith('bun/') || /bun(\.exe)?$/.test(process.env.npm_execpath ?? '');
const entry = `src/entry/${name === 'node' && onBun ? 'bun' : name}.ts`;
const [cmd, cmdArgs] = onBun
  ? [process.env.npm_execpath ?? 'bun', [entry, ...args]]
  : [process.execPath, ['--import', 'tsx', entry, ...args]];

const child = spawn(cmd, cmdArgs, { stdio: 'inherit' });
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => child.kill(sig));
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));

// The service with crash hooks, for crash tests and the torture run only: production entries (src/entry/*) never
// read HONO_OUTBOX_TEST_FAULT, and nothing here is built into dist/ or the image.
//   node --import tsx test/support/fault-entry.ts [node]                like src/entry/node.ts (ROLES from the env)
//   node --import tsx test/support/fault-entry.ts relay                 like src/entry/relay.ts
//   node --import tsx test/support/fault-entry.ts consume <subscriber>  like src/entry/consume.ts
// With --fixture first (`fault-entry.ts --fixture relay`), it runs the test fixture's modules and migrations
// (test/support/fixture) instead of this service's, as test/support/fixture/entry.ts does.
// HONO_OUTBOX_TEST_FAULT holds comma-separated faults:
//   kill-after-puback:<n>                SIGKILL the relay once n rows were acknowledged, before they are marked sent
//   mark-before-puback                   the broken relay: marks rows sent before publishing, then dies on its first pass
//   kill-after-commit:<n>[:<marker>]     SIGKILL a subscriber once n messages committed, before they are acknowledged;
//                                        with a marker file, only the first process that gets there dies
//   announce-write:<file>                append a line to <file> as each write of a subscriber's messages is queued
//   no-inbox                             the broken subscribers: apply events without the inbox
//   uncaught-exception:<ms>              throw from a timer <ms> after start
//   unhandled-rejection:<ms>             reject a promise nobody awaits <ms> after start
import { appendFileSync, existsSync, writeFileSync } from 'node:fs';
import { boot, stopOnSignals, type BootFaults } from '../../src/entry/boot.ts';
import { serveOnNode } from '../../src/entry/serve-node.ts';
import type { ConsumerFaults } from '../../src/inbox/consumer-runner.ts';
import type { RelayFaults } from '../../src/outbox/relay-pass.ts';

type Fault = { name: string; args: string[] };

function parseFaults(spec: string): Fault[] {
  return spec
    .split(',')
    .filter(Boolean)
    .map((f) => {
      const [name, ...args] = f.split(':');
      return { name: name!, args };
    });
}

const KNOWN = ['kill-after-puback', 'mark-before-puback', 'kill-after-commit', 'announce-write', 'no-inbox', 'uncaught-exception', 'unhandled-rejection'];

function relayFaults(faults: Fault[]): RelayFaults | undefined {
  if (faults.some((f) => f.name === 'mark-before-puback')) {
    return {
      markBeforePublish: true,
      beforePublishing(rows) {
        if (rows.length >= 1) process.kill(process.pid, 'SIGKILL');
      },
    };
  }
  const kill = faults.find((f) => f.name === 'kill-after-puback');
  if (!kill) return undefined;
  let acked = 0;
  const after = Number(kill.args[0] ?? 1);
  return {
    afterPubAcks(rows) {
      acked += rows.length;
      if (acked >= after) process.kill(process.pid, 'SIGKILL');
    },
  };
}

function consumerFaults(faults: Fault[]): ConsumerFaults | undefined {
  const announce = faults.find((f) => f.name === 'announce-write')?.args[0];
  const hooks: ConsumerFaults = announce ? { beforeWrite: (msgs) => appendFileSync(announce, `${msgs.length}\n`) } : {};
  const kill = faults.find((f) => f.name === 'kill-after-commit');
  if (!kill) return announce ? hooks : undefined;
  const [arg, marker] = kill.args;
  if (marker && existsSync(marker)) return announce ? hooks : undefined;
  let committed = 0;
  const after = Number(arg ?? 1);
  return {
    ...hooks,
    afterCommit() {
      if (++committed < after) return;
      if (marker) writeFileSync(marker, String(process.pid));
      process.kill(process.pid, 'SIGKILL');
    },
  };
}

const faults = parseFaults(process.env.HONO_OUTBOX_TEST_FAULT ?? '');
const unknown = faults.find((f) => !KNOWN.includes(f.name));
if (unknown) throw new Error(`unknown HONO_OUTBOX_TEST_FAULT ${unknown.name}`);

const relay = relayFaults(faults);
const consumer = consumerFaults(faults);
const hooks: BootFaults = {
  ...(relay ? { relayFaults: relay } : {}),
  ...(consumer ? { consumerFaults: consumer } : {}),
  ...(faults.some((f) => f.name === 'no-inbox') ? { brokenNoInbox: true } : {}),
};

const args = process.argv.slice(2);
const fixture = args[0] === '--fixture';
const [kind = 'node', subscriber] = fixture ? args.slice(1) : args;
let env: Record<string, string> | undefined;
if (kind === 'relay') env = { ROLES: 'relay' };
else if (kind === 'consume' && subscriber) env = { ROLES: 'consumers', CONSUMERS: subscriber };
else if (kind !== 'node') throw new Error('usage: fault-entry.ts [--fixture] node | relay | consume <subscriber>');

// imported only when asked for, so the service's own runs never load the fixture
const composition = fixture ? await import('./fixture/modules.ts').then((m) => ({ modules: m.fixtureModules, migrations: m.FIXTURE_MIGRATIONS })) : {};
const started = await boot({ ...(env ? { env } : {}), ...composition, faults: hooks });
stopOnSignals(started, serveOnNode(started));

for (const f of faults) {
  const ms = Number(f.args[0] ?? 0);
  if (f.name === 'uncaught-exception') {
    setTimeout(() => {
      throw new Error('injected uncaught exception');
    }, ms);
  }
  if (f.name === 'unhandled-rejection') setTimeout(() => void Promise.reject(new Error('injected unhandled rejection')), ms);
}

import { describe, expect, it } from 'vitest';
import { asciiCanonicalFields, canonicalFields, decodedCanonicalFields, type StoredEvent } from '../../src/outbox/row-message.ts';
import { openedEvent } from '../support/accounts.ts';
import { createRandom } from '../support/random.ts';
import { storedRow } from '../support/stored-row.ts';

// Contract under attack: asciiCanonicalFields(row) is undefined or deep-equals decodedCanonicalFields(row).

/** A seeded generator (a failure is reproducible): next() in [0, 1), int(n) in [0, n), pick. */
function rng(seed: number) {
  const r = createRandom(seed);
  return { next: r.next, int: (n: number) => r.int(0, n - 1), pick: r.pick };
}

const enc = new TextEncoder();
type R = ReturnType<typeof rng>;

const pad = (n: number, w: number) => String(n).padStart(w, '0');

function randomText(r: R, maxLen: number): string {
  const kinds = [
    () => String.fromCharCode(0x61 + r.int(26)),
    () => String.fromCharCode(0x20 + r.int(95)), // printable ASCII incl. " and \
    () => String.fromCharCode(r.int(0x20)), // control
    () => '\x7f',
    () => String.fromCharCode(0x80 + r.int(0x80)), // latin-1
    () => String.fromCharCode(0x100 + r.int(0xd700)), // BMP
    () => String.fromCharCode(0xd800 + r.int(0x800)), // lone surrogate
    () => '😀',
    () => '.',
    () => '*',
    () => '>',
    () => ' ',
    () => '\u2028',
  ];
  const len = r.next() < 0.05 ? 0 : r.next() < 0.05 ? 100 + r.int(200) : 1 + r.int(maxLen);
  const ascii = r.next() < 0.6;
  let s = '';
  for (let i = 0; i < len; i++) s += ascii ? kinds[r.int(2)]!() : kinds[r.int(kinds.length)]!();
  return s;
}

function randomVersionText(r: R): string {
  return r.pick([
    () => String(1 + r.int(1000)),
    () => '0',
    () => `0${1 + r.int(99)}`,
    () => '9007199254740991',
    () => '9007199254740992',
    () => '9007199254740993',
    () => '9999999999999999',
    () => '1000000000000000',
    () => '99999999999999999',
    () => '12345678901234567',
    () => '-1',
    () => '1.5',
    () => '1e3',
    () => '1E3',
    () => ' 1',
    () => '1 ',
    () => '',
    () => '"1"',
    () => String(r.int(10)).repeat(1 + r.int(20)),
  ])();
}

function randomTimeText(r: R, ms: number): string {
  if (r.next() < 0.4) {
    const d = new Date(ms);
    if (!Number.isNaN(d.getTime())) return d.toISOString();
  }
  return r.pick([
    () => {
      const y = r.pick([r.int(10000), r.int(200), 9990 + r.int(10), 1970 + r.int(100), 0, 99, 100, 101]);
      const mo = r.pick([r.int(14), 1 + r.int(12)]);
      const d = r.pick([r.int(33), 1 + r.int(28), 29, 30, 31]);
      const h = r.pick([r.int(26), r.int(24), 24]);
      const mi = r.pick([r.int(61), 60]);
      const s = r.pick([r.int(61), 60]);
      const mss = r.int(1000);
      return `${pad(y, 4)}-${pad(mo, 2)}-${pad(d, 2)}T${pad(h, 2)}:${pad(mi, 2)}:${pad(s, 2)}.${pad(mss, 3)}Z`;
    },
    () => new Date(ms).toISOString().replace('Z', '+00:00'),
    () => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z'),
    () => new Date(ms).toISOString().replace('T', ' '),
    () => new Date(ms).toISOString().toLowerCase(),
    () => `+0${new Date(ms).toISOString()}`,
    () => new Date(ms).toISOString().replace(/\d/, '\uff11'),
  ])();
}

/** The instant a column might hold for `time`: its own, off by a little, Date.UTC of its fields, garbage. */
function columnFor(r: R, time: string): number | null {
  const parsed = Date.parse(time);
  const m = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{3})Z$/.exec(time);
  const utc = m ? Date.UTC(+m[1]!, +m[2]! - 1, +m[3]!, +m[4]!, +m[5]!, +m[6]!, +m[7]!) : Number.NaN;
  return r.pick([
    () => parsed,
    () => parsed,
    () => utc,
    () => utc,
    () => parsed + r.pick([1, -1, 1000, 86_400_000, -86_400_000, 3_600_000]),
    () => utc + r.pick([1, -1, 86_400_000]),
    () => null,
    () => Number.NaN,
    () => parsed + 0.5,
    () => -0,
    () => 0,
  ])();
}

type Built = { row: StoredEvent; text: string };

function build(r: R): Built {
  const id = r.next() < 0.5 ? crypto.randomUUID() : randomText(r, 40);
  const type = r.next() < 0.6 ? 'account.opened.v1' : randomText(r, 30);
  const aggType = r.next() < 0.6 ? 'account' : randomText(r, 20);
  const aggId = r.next() < 0.5 ? crypto.randomUUID() : randomText(r, 40);
  const baseMs = r.pick([
    () => Date.UTC(2026, 0, 1) + r.int(1e10),
    () => -62_198_755_200_000 + r.int(1e12), // years 0..~30
    () => Date.UTC(100, 0, 1) - 5000 + r.int(10_000),
    () => Date.UTC(9999, 11, 31, 23, 59, 59, 999) - r.int(1e9),
    () => Date.UTC(2024, 1, 29) + r.int(86_400_000),
    () => 0,
  ])();
  // Date.UTC maps 0..99 to 1900s; build year-100 via setUTCFullYear
  const timeText = randomTimeText(r, baseMs);
  const versionText = randomVersionText(r);
  const data = r.next() < 0.9 ? `{"accountId":${JSON.stringify(aggId)},"owner":"ann"}` : randomText(r, 20);
  const q = (s: string) => (r.next() < 0.85 ? JSON.stringify(s) : `"${s}"`);
  let text = `{"eventId":${q(id)},"type":${q(type)},"aggregateType":${q(aggType)},"aggregateId":${q(aggId)},"aggregateVersion":${versionText},"occurredAt":"${timeText}","data":${data}}`;
  if (r.next() < 0.05) text = `\ufeff${text}`;
  const col = (s: string) => (r.next() < 0.9 ? s : r.pick([`${s}x`, s.slice(1), s.toUpperCase(), `${s}\u0000`, '']));
  const row: StoredEvent = {
    id: col(id),
    message_type: col(type),
    aggregate_type: col(aggType),
    aggregate_id: col(aggId),
    occurred_at: columnFor(r, timeText),
    payload: enc.encode(text),
    payload_validated: 1,
  };
  return { row, text };
}

function mutate(r: R, bytes: Uint8Array): Uint8Array {
  let b = bytes;
  const n = r.int(4);
  for (let k = 0; k < n; k++) {
    const op = r.int(6);
    const envelopeEnd = Math.min(b.length, 400);
    const at = r.int(Math.max(1, envelopeEnd));
    if (op === 0 && b.length > 0) {
      b = b.slice();
      b[at] = r.int(256);
    } else if (op === 1 && b.length > 0) {
      b = b.slice();
      b[at] = r.pick([0x22, 0x5c, 0x30, 0x39, 0x3a, 0x2c, 0x2d, 0x54, 0x5a, 0x2e, 0x7b, 0x7d, 0x80, 0xc3, 0xff, 0xef, 0xbb, 0xbf]);
    } else if (op === 2) {
      b = b.slice(0, r.int(b.length + 1));
    } else if (op === 3) {
      const ins = Uint8Array.from({ length: 1 + r.int(3) }, () => r.int(256));
      b = new Uint8Array([...b.subarray(0, at), ...ins, ...b.subarray(at)]);
    } else if (op === 4 && b.length > 0) {
      b = new Uint8Array([...b.subarray(0, at), ...b.subarray(at + 1)]);
    } else if (op === 5 && b.length > 0 && at + 1 < b.length) {
      // replace an ASCII char by a 2-byte UTF-8 form of the same code point (overlong) or by C0/C1
      b = new Uint8Array([...b.subarray(0, at), 0xc0 | (b[at]! >> 6), 0x80 | (b[at]! & 0x3f), ...b.subarray(at + 1)]);
    }
  }
  return b;
}

function check(row: StoredEvent, label: string, failures: string[]) {
  for (const payload of [row.payload, Buffer.from(row.payload), new Uint8Array([0, ...row.payload]).subarray(1)]) {
    const r2 = { ...row, payload };
    let fast: unknown;
    let slow: unknown;
    try {
      fast = asciiCanonicalFields(r2);
    } catch (e) {
      fast = `THREW ${String(e)}`;
    }
    try {
      slow = decodedCanonicalFields(r2);
    } catch (e) {
      slow = `THREW ${String(e)}`;
    }
    if (fast !== undefined && JSON.stringify(fast) !== JSON.stringify(slow)) {
      failures.push(
        `${label}: ascii=${JSON.stringify(fast)} decoded=${JSON.stringify(slow)} row=${JSON.stringify({ ...row, payload: Buffer.from(row.payload).toString('latin1') })}`,
      );
      return;
    }
    // canonicalFields must equal decoded when the payload ends in }
    if (payload.length >= 2 && payload[payload.length - 1] === 0x7d) {
      const c = canonicalFields(r2);
      if (JSON.stringify(c) !== JSON.stringify(slow)) failures.push(`${label}: canonical=${JSON.stringify(c)} decoded=${JSON.stringify(slow)}`);
    }
  }
}

describe('relay row check - the envelope read off the bytes gives what the decoded text gives, or leaves the row to it', () => {
  it('agrees on random envelopes, ids, versions, times and byte mutations', () => {
    const failures: string[] = [];
    let fastHits = 0;
    for (let seed = 1; seed <= 25_000 && failures.length < 5; seed++) {
      const r = rng(seed * 2654435761);
      const { row } = build(r);
      const mutated = r.next() < 0.5 ? { ...row, payload: mutate(r, row.payload) } : row;
      if (asciiCanonicalFields(mutated) !== undefined) fastHits++;
      check(mutated, `seed ${seed}`, failures);
    }
    expect(failures).toEqual([]);
    // about 1 in 400 of these hostile rows is clean enough for the byte path
    expect(fastHits).toBeGreaterThan(30);
  });

  it('agrees on every time field at and past its limits, with the column at Date.parse, at Date.UTC and 1 ms off', () => {
    const failures: string[] = [];
    const base = storedRow(openedEvent({ version: 7 }));
    const text = new TextDecoder().decode(base.payload);
    const years = [0, 50, 99, 100, 101, 1970, 2024, 9999];
    for (const y of years)
      for (let mo = 0; mo <= 13; mo++)
        for (const d of [0, 1, 28, 29, 30, 31, 32])
          for (const h of [0, 23, 24])
            for (const mi of [0, 60])
              for (const s of [59, 60]) {
                const time = `${pad(y, 4)}-${pad(mo, 2)}-${pad(d, 2)}T${pad(h, 2)}:${pad(mi, 2)}:${pad(s, 2)}.${pad(mo * 7, 3)}Z`;
                const payload = enc.encode(text.replace(/"occurredAt":"[^"]*"/, `"occurredAt":"${time}"`));
                const utc = Date.UTC(y, mo - 1, d, h, mi, s, mo * 7);
                const utcYear = (() => {
                  const dt = new Date(0);
                  dt.setUTCFullYear(y, mo - 1, d);
                  dt.setUTCHours(h, mi, s, mo * 7);
                  return dt.getTime();
                })();
                for (const col of [Date.parse(time), utc, utcYear, utc + 1, Date.parse(time) - 1])
                  check({ ...base, payload, occurred_at: Number.isNaN(col) ? 0 : col }, time, failures);
              }
    expect(failures.slice(0, 5)).toEqual([]);
  });

  it('agrees on envelopes ending around byte 2048, past which the decoded check does not read', () => {
    const failures: string[] = [];
    for (let idLen = 1800; idLen <= 2100; idLen++) {
      const id = 'a'.repeat(idLen);
      const base = storedRow(openedEvent({ version: 3 }));
      const text = new TextDecoder().decode(base.payload).replace(JSON.stringify(base.id), JSON.stringify(id));
      const row = { ...base, id, payload: enc.encode(text) };
      check(row, `idLen ${idLen}`, failures);
      // a multi-byte character in the data right at the cut
      const row2 = { ...row, payload: enc.encode(text.replace('"owner":"ann"', '"owner":"éé😀"')) };
      check(row2, `idLen ${idLen} mb`, failures);
    }
    expect(failures.slice(0, 5)).toEqual([]);
  });

  it('agrees on versions around 2^53 and of 14 to 18 digits', () => {
    const failures: string[] = [];
    const base = storedRow(openedEvent({ version: 3 }));
    const text = new TextDecoder().decode(base.payload);
    const versions: string[] = [];
    for (let d = -20; d <= 20; d++) versions.push((2n ** 53n + BigInt(d)).toString());
    for (let len = 14; len <= 18; len++) versions.push('9'.repeat(len), `1${'0'.repeat(len - 1)}`, `8${'9'.repeat(len - 1)}`);
    for (const v of versions) {
      const payload = enc.encode(text.replace(/"aggregateVersion":\d+/, `"aggregateVersion":${v}`));
      check({ ...base, payload }, `version ${v}`, failures);
    }
    expect(failures).toEqual([]);
  });

  it('leaves rows whose columns hold no strings to the decoded check instead of throwing', () => {
    const base = storedRow(openedEvent({ version: 3 }));
    const outcomes: string[] = [];
    for (const over of [
      { id: 123 },
      { id: undefined },
      { message_type: undefined },
      { aggregate_id: null },
      { occurred_at: undefined },
      { occurred_at: BigInt(base.occurred_at!) },
      { occurred_at: String(base.occurred_at) },
    ] as Array<Record<string, unknown>>) {
      const row = { ...base, ...over } as unknown as StoredEvent;
      let fast: string;
      let slow: string;
      try {
        fast = JSON.stringify(asciiCanonicalFields(row)) ?? 'undefined';
      } catch (e) {
        fast = `threw ${(e as Error).message}`;
      }
      try {
        slow = JSON.stringify(decodedCanonicalFields(row)) ?? 'undefined';
      } catch (e) {
        slow = `threw ${(e as Error).message}`;
      }
      if (fast !== 'undefined' && fast !== slow) outcomes.push(`${JSON.stringify(Object.keys(over))}: ascii ${fast} decoded ${slow}`);
      else if (fast.startsWith('threw') !== slow.startsWith('threw')) outcomes.push(`${JSON.stringify(Object.keys(over))}: ascii ${fast} decoded ${slow}`);
    }
    expect(outcomes).toEqual([]);
  });
});

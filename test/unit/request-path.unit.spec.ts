// The request path's shortcuts keep the answers of what they replace: the body limit read from Content-Length,
// the storable-text check read from the JSON text, the access log's batched stdout writes.
import { Hono } from 'hono';
import { bodyLimit as honoBodyLimit } from 'hono/body-limit';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { bodyLimit } from '../../src/http/body-limit.ts';
import { createStdoutLines } from '../../src/entry/stdout-lines.ts';
import { createLogger } from '../../src/logger.ts';
import { storableJson } from '../../src/outbox/append-to-outbox.ts';

const UNSTORABLE = /[\0\p{Cs}]/u;
const walkFinds = (v: unknown): boolean =>
  typeof v === 'string'
    ? UNSTORABLE.test(v)
    : Array.isArray(v)
      ? v.some(walkFinds)
      : typeof v === 'object' && v !== null
        ? Object.entries(v).some(([k, x]) => UNSTORABLE.test(k) || walkFinds(x))
        : false;

describe('storableJson - the JSON text answers as a walk of the value does', () => {
  it.each([
    ['plain text', { a: 'order-1', b: ['x', 'é', '😀'] }, true],
    ['a NUL in a value', { a: 'x\0y' }, false],
    ['a NUL in a key', { 'k\0': 1 }, false],
    ['a lone high surrogate', { a: ['ok', '\ud83d'] }, false],
    ['a lone low surrogate', { a: '\ude00x' }, false],
    ['a pair', { a: '\ud83d\ude00' }, true],
    ['the text \\u0000 (backslash, u, digits)', { a: '\\u0000' }, true],
    ['a backslash then a NUL', { a: '\\\0' }, false],
    ['other control characters', { a: '\u0001\u001f\t\n' }, true],
  ])('%s', (_name, value, storable) => {
    expect(storableJson(JSON.stringify(value))).toBe(storable);
    expect(!walkFinds(value)).toBe(storable);
  });

  it('agrees with the walk on random text made of the tricky characters', () => {
    const chars = ['a', '\\', '\0', '\ud800', '\udbff', '\udc00', '\udfff', '\ud83d\ude00', 'u', '0', 'd', '8', '"', '\u0001', '\uffff'];
    let seed = 7;
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    for (let i = 0; i < 20_000; i++) {
      let s = '';
      for (let j = rand(7); j > 0; j--) s += chars[rand(chars.length)];
      const value = i % 2 ? { [s]: 1 } : { a: [s] };
      expect(storableJson(JSON.stringify(value)), JSON.stringify(s)).toBe(!walkFinds(value));
    }
  });
});

describe('bodyLimit - as hono/body-limit decides', () => {
  const apps = (maxSize: number) =>
    [bodyLimit, honoBodyLimit].map((limit) => {
      const app = new Hono();
      app.use('*', limit({ maxSize, onError: (c) => c.text('too large', 413) }));
      app.all('*', async (c) => c.text(`ok ${(await c.req.text()).length}`));
      return app;
    });

  const cases: Array<[string, RequestInit & { duplex?: 'half' }]> = [
    ['under the limit with Content-Length', { method: 'POST', body: 'x'.repeat(10), headers: { 'content-length': '10' } }],
    ['at the limit', { method: 'POST', body: 'x'.repeat(16), headers: { 'content-length': '16' } }],
    ['over the limit with Content-Length', { method: 'POST', body: 'x'.repeat(17), headers: { 'content-length': '17' } }],
    ['an empty body', { method: 'POST', body: '', headers: { 'content-length': '0' } }],
    ['no body', { method: 'POST' }],
    ['a GET', { method: 'GET' }],
    [
      'a streamed body over the limit',
      {
        method: 'POST',
        body: new ReadableStream({
          start(c) {
            c.enqueue(new TextEncoder().encode('y'.repeat(40)));
            c.close();
          },
        }),
        duplex: 'half',
      },
    ],
  ];

  it.each(cases)('%s', async (_name, init) => {
    const answers: Array<[number, string]> = [];
    for (const app of apps(16)) {
      // a stream can be read once: a fresh init per app
      const body = init.body instanceof ReadableStream ? new Response('y'.repeat(40)).body : init.body;
      const res = await app.request('/', { ...init, body } as RequestInit);
      answers.push([res.status, await res.text()]);
    }
    expect(answers[0]).toEqual(answers[1]);
  });
});

describe('createStdoutLines - the log output of the service entries', () => {
  afterEach(() => vi.restoreAllMocks());

  it('writes the lines of one event-loop turn in one console.log, in order, at the end of the turn', async () => {
    const out = vi.spyOn(console, 'log').mockImplementation(() => undefined);
    const write = createStdoutLines();
    const log = createLogger('info', write);
    log.info('one', { n: 1 });
    log.warn('two');
    write('three');
    expect(out).not.toHaveBeenCalled();
    await new Promise((r) => setImmediate(r));
    expect(out).toHaveBeenCalledTimes(1);
    const lines = String(out.mock.calls[0]![0]).split('\n');
    expect(lines.map((l) => (l.startsWith('{') ? (JSON.parse(l) as { msg: string }).msg : l))).toEqual(['one', 'two', 'three']);
  });

  it('writes what is pending when the process exits', () => {
    const out = vi.spyOn(console, 'log').mockImplementation(() => undefined);
    createStdoutLines()('last words');
    process.emit('exit', 0);
    expect(out).toHaveBeenCalledWith('last words');
  });
});

describe('createLogger - plain and non-plain lines', () => {
  it('writes plain fields as JSON.stringify does, and still serializes Errors and BigInts', () => {
    const lines: string[] = [];
    const log = createLogger(
      'info',
      (l) => lines.push(l),
      { service: 's' },
      () => undefined,
    );
    log.info('plain', { a: 1, b: 'x', c: null, d: undefined, e: true });
    log.info('rich', { n: 10n, error: new Error('boom'), nested: { inner: new RangeError('deep') } });
    const [plain, rich] = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(plain).toMatchObject({ service: 's', msg: 'plain', a: 1, b: 'x', c: null, e: true });
    expect(plain).not.toHaveProperty('d');
    expect(rich).toMatchObject({ n: '10', error: { type: 'Error', message: 'boom' }, nested: { inner: { type: 'RangeError', message: 'deep' } } });
  });
});

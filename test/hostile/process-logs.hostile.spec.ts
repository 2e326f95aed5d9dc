// The JSON logs of a real service process (the fixture entry, api+relay+consumers): hostile
// bytes on the wire (raw TCP), then every stdout line must be one JSON object with service and version, no line
// forged by a request, and each access line must name the trace of its own request.
import { connect as tcpConnect } from 'node:net';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createTempDir } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { FIXTURE_ENTRY, spawnService, waitForHttp } from '../support/process.ts';
import { useNats } from '../support/use-nats.ts';

const nats = useNats();

/** Sends `raw` bytes over one TCP connection and resolves with whatever came back before it closed (or 3 s). */
function rawRequest(port: number, raw: Buffer | string): Promise<string> {
  return new Promise((resolve) => {
    const sock = tcpConnect(port, '127.0.0.1');
    let out = '';
    const done = () => {
      sock.destroy();
      resolve(out);
    };
    sock.setTimeout(3000, done);
    sock.on('data', (d) => (out += d.toString('latin1')));
    sock.on('end', done);
    sock.on('error', done);
    sock.write(raw);
  });
}

const req = (lines: string[]) => Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1');
const hex = (n: number) => Array.from({ length: n }, () => Math.floor(Math.random() * 16).toString(16)).join('');

describe('logs - a real process under hostile requests', () => {
  it('every stdout line is one JSON object with service and version; no request forges a line; access lines name their own trace', async () => {
    using tmp = createTempDir();
    const url = `file:${join(tmp.dir, 'app.db')}`;
    await using svc = await spawnService('node', FIXTURE_ENTRY, {
      ROLES: 'api,relay,consumers',
      CONSUMERS: 'audit',
      DATABASE_URL: url,
      CONSUMER_DATABASE_URL_TEMPLATE: `file:${join(tmp.dir, '{name}.db')}`,
      NATS_URL: nats().url,
      NATS_STREAM: `ADVLOG_${process.pid}`,
      EVENTS_SUBJECT_PREFIX: `advlog${process.pid}`,
      LOG_LEVEL: 'debug',
      SERVICE_NAME: 'hono-outbox',
    });
    await waitForHttp(`${svc.url}/health`, { child: svc });

    const body = '{"owner":"ann"}';
    const hostile: Buffer[] = [
      req(['GET /x%0A%7B%22msg%22%3A%22forged%22%7D HTTP/1.1', 'Host: x', 'Connection: close']),
      req(['GET /x%0D%0A{"msg":"forged2"} HTTP/1.1', 'Host: x', 'Connection: close']),
      req(['GET /%ED%A0%80/%ZZ/%E0%A4%A HTTP/1.1', 'Host: x', 'Connection: close']),
      req([`GET /${'a'.repeat(15_000)} HTTP/1.1`, 'Host: x', 'Connection: close']),
      Buffer.concat([
        Buffer.from('GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Request-Id: ', 'latin1'),
        Buffer.from([0xff, 0xfe, 0xc3, 0xa9]),
        Buffer.from('\r\ntraceparent: 00-', 'latin1'),
        Buffer.from([0xe9, 0xe9]),
        Buffer.from('\r\n\r\n', 'latin1'),
      ]),
      req(['GET /health HTTP/1.1', 'Host: x', 'Connection: close', 'X-Request-Id: a\x01b', 'traceparent: \x01']),
      req(['GET /health HTTP/1.1', 'Host: x', 'Connection: close', `tracestate: ${'a=b,'.repeat(2000)}`, `X-Correlation-Id: ${'c'.repeat(5000)}`]),
      req(['FOO /health HTTP/1.1', 'Host: x', 'Connection: close']),
      req(['GET /health HTTP/1.1', 'Host: x', 'Connection: close', 'traceparent: a', 'traceparent: b', 'X-Request-Id: r1', 'X-Request-Id: r2']),
      Buffer.from(
        `POST /accounts HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n` +
          `X-Request-Id: "}\r\ntraceparent: ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\ntracestate: \\,"\r\n\r\n${body}`,
        'latin1',
      ),
    ];
    for (const h of hostile) await rawRequest(svc.port, h);

    // concurrent traced requests: each access line names its own trace
    const traces = Array.from({ length: 30 }, () => hex(32));
    await Promise.all(
      traces.map((t, n) =>
        fetch(`${svc.url}/accounts`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', traceparent: `00-${t}-${hex(16)}-01`, 'X-Request-Id': `adv-${n}` },
          body: JSON.stringify({ owner: `o${n}` }),
        }).then((r) => expect(r.status).toBe(201)),
      ),
    );
    await eventually(() => svc.stdout().includes('"request_id":"adv-29"'), { what: 'the last access line' });
    await svc.stop('SIGTERM');

    const lines = svc
      .stdout()
      .split('\n')
      .filter((l) => l.length > 0);
    const bad = lines.filter((l) => {
      try {
        const o = JSON.parse(l) as Record<string, unknown>;
        return typeof o !== 'object' || o === null || o.service !== 'hono-outbox' || typeof o.version !== 'string' || typeof o.msg !== 'string';
      } catch {
        return true;
      }
    });
    expect(bad, 'stdout lines that are not one JSON object with service, version and msg').toEqual([]);
    const parsed = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(parsed.filter((l) => String(l.msg).startsWith('forged'))).toEqual([]);
    traces.forEach((t, n) => {
      const access = parsed.filter((l) => l.msg === 'request' && l.request_id === `adv-${n}`);
      expect(access).toHaveLength(1);
      expect(access[0]!.trace_id).toBe(t);
    });
    // nothing but JSON lines on stderr either, if anything at all
    const errLines = svc
      .stderr()
      .split('\n')
      .filter((l) => l.length > 0);
    expect(errLines.filter((l) => !l.startsWith('{'))).toEqual([]);
  });
});

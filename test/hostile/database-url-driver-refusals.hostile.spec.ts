// DATABASE_URL and CONSUMER_DATABASE_URL_TEMPLATE values that @libsql/client's createClient (and the project's
// createLocalClient) refuse only when they open them, beyond what expandConfig parses: the configuration refuses them,
// at parse time (test/hostile/runtime-config-errors.hostile.spec.ts runs them through every runtime's entry).
import { describe, expect, it } from 'vitest';
import { createClient } from '@libsql/client';
import { libsqlUrlProblem, parseConfig } from '../../src/config.ts';

const REFUSED_BY_DRIVER: [string, string][] = [
  ['a file URL with a host (file://data/app.db)', 'file://data/app.db'],
  ['a file URL with a port (file://localhost:8080/tmp/app.db)', 'file://localhost:8080/tmp/app.db'],
  ['a file URL with userinfo (file://u:p@localhost/tmp/app.db)', 'file://u:p@localhost/tmp/app.db'],
  ['an http URL opting into TLS (http://db.example.com:8080?tls=1)', 'http://db.example.com:8080?tls=1'],
  ['a ws URL opting into TLS (ws://db.example.com:8080?tls=1)', 'ws://db.example.com:8080?tls=1'],
];

describe('libsqlUrlProblem - URLs the libSQL client refuses when it opens them', () => {
  it.each(REFUSED_BY_DRIVER)('%s is reported as a problem, as createClient refuses it', (_label, url) => {
    expect(() => createClient({ url }).close()).toThrow();
    expect(libsqlUrlProblem(url)).toBeTypeOf('string');
  });

  it('a CONSUMER_DATABASE_URL_TEMPLATE with a host in a file URL (file://data/{name}.db) is a configuration error', () => {
    expect(() => parseConfig({ CONSUMER_DATABASE_URL_TEMPLATE: 'file://data/{name}.db' })).toThrow(/CONSUMER_DATABASE_URL_TEMPLATE/);
  });
});

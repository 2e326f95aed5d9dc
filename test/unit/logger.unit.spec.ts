import { describe, expect, it } from 'vitest';
import { createLogger, withFields } from '../../src/logger.ts';

/** A logger at `level` whose lines are kept (parsed) with the level each was written at. */
function capture(level: Parameters<typeof createLogger>[0] = 'debug') {
  const lines: Array<{ line: Record<string, unknown>; level: string; raw: string }> = [];
  const log = createLogger(level, (raw, lvl) => lines.push({ line: JSON.parse(raw) as Record<string, unknown>, level: lvl, raw }), {
    service: 'svc',
    version: '1.2.3',
  });
  return { log, lines };
}

describe('logger - one JSON line per call', () => {
  it('writes time, level, service, version and msg first, then the fields, each line at its own level', () => {
    const { log, lines } = capture();
    log.info('hello', { a: 1 });
    log.warn('careful');
    expect(lines.map((l) => l.level)).toEqual(['info', 'warn']);
    expect(Object.keys(lines[0]!.line)).toEqual(['time', 'level', 'service', 'version', 'msg', 'a']);
    expect(lines[0]!.line).toMatchObject({ level: 'info', service: 'svc', version: '1.2.3', msg: 'hello', a: 1 });
  });

  it('drops lines below its level', () => {
    const { log, lines } = capture('warn');
    log.debug('no');
    log.info('no');
    log.error('yes');
    expect(lines.map((l) => l.line.msg)).toEqual(['yes']);
  });

  it('writes an Error field as its type, message, stack and cause', () => {
    const { log, lines } = capture();
    log.error('failed', { error: new TypeError('bad input', { cause: new RangeError('too big') }) });
    expect(lines[0]!.line.error).toMatchObject({
      type: 'TypeError',
      message: 'bad input',
      stack: expect.stringContaining('TypeError: bad input'),
      cause: { type: 'RangeError', message: 'too big' },
    });
  });

  it('never throws for its fields: a BigInt becomes text, a cycle becomes log_error, and the line is still one JSON line', () => {
    const { log, lines } = capture();
    const cyclic: Record<string, unknown> = { name: 'loop' };
    cyclic.self = cyclic;
    expect(() => log.info('big', { n: 12345678901234567890n })).not.toThrow();
    expect(() => log.info('cyclic', { cyclic })).not.toThrow();
    expect(lines[0]!.line).toMatchObject({ msg: 'big', n: '12345678901234567890' });
    expect(lines[1]!.line).toMatchObject({ msg: 'cyclic', service: 'svc', log_error: expect.stringContaining('not serializable') });
    expect(lines[1]!.line).not.toHaveProperty('cyclic');
  });

  it('keeps a field with line breaks inside its one line', () => {
    const { log, lines } = capture();
    log.info('multi', { text: 'a\nb\r\n{"level":"error"}' });
    expect(lines).toHaveLength(1);
    expect(lines[0]!.raw).not.toMatch(/\n/);
    expect(lines[0]!.line.text).toBe('a\nb\r\n{"level":"error"}');
  });

  it('never lets a field replace time, level, msg or a base field: it is written as field_<name>', () => {
    const { log, lines } = capture();
    log.info('customer upgraded', { level: 'gold', msg: 'upstream', time: 0, service: 'billing', tier: 2 });
    expect(lines[0]!.line).toMatchObject({
      level: 'info',
      msg: 'customer upgraded',
      service: 'svc',
      time: expect.stringMatching(/^\d{4}-/),
      field_level: 'gold',
      field_msg: 'upstream',
      field_time: 0,
      field_service: 'billing',
      tier: 2,
    });
  });

  it('withFields adds its fields to every line, and a line’s own fields win', () => {
    const { log, lines } = capture();
    const scoped = withFields(log, { trace_id: 't1', span_id: 's1' });
    scoped.info('one');
    scoped.error('two', { span_id: 's2' });
    expect(lines.map((l) => [l.line.trace_id, l.line.span_id, l.level])).toEqual([
      ['t1', 's1', 'info'],
      ['t1', 's2', 'error'],
    ]);
  });
});

// isHostHeader (src/http/request-target.ts): a Host that no URL can be made of is no host, whatever characters it uses.
import { describe, expect, it } from 'vitest';
import { isHostHeader } from '../../src/http/request-target.ts';

describe('isHostHeader - a Host no URL can be made of', () => {
  it.each([
    ['an IPv4 address with an octet over 255', '1.2.3.256'],
    ['a number too large for an IPv4 address', '4294967296'],
    ['an IPv4 address with an octet over 255 and a port', '1.2.3.256:8080'],
  ])('%s (%s) is refused, as new URL refuses it', (_label, host) => {
    expect(() => new URL(`http://${host}/`)).toThrow();
    expect(isHostHeader(host)).toBe(false);
  });
});

import { describe, expect, it } from 'vitest';
import { shareOnce } from '../../src/inbox/consumer-session.ts';

describe('shareOnce - one stream-read check per subscriber', () => {
  it('runs only the first probe; its caller gets the outcome and later callers resolve at once without probing', async () => {
    const share = shareOnce();
    let runs = 0;
    const failing = () => {
      runs++;
      return Promise.reject(new Error('no permission'));
    };
    await expect(share(failing)).rejects.toThrow('no permission');
    await expect(share(failing)).resolves.toBeUndefined();
    await expect(share(failing)).resolves.toBeUndefined();
    expect(runs).toBe(1);
  });

  it('keeps separate checks for separate subscribers', async () => {
    const a = shareOnce();
    const b = shareOnce();
    let runs = 0;
    const probe = async () => void runs++;
    await a(probe);
    await b(probe);
    await a(probe);
    expect(runs).toBe(2);
  });
});

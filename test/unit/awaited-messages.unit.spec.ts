import { describe, expect, it } from 'vitest';
import { createAwaitedMessages } from '../../src/inbox/awaited-messages.ts';

describe('awaited messages', () => {
  it('holds back only the later messages of an aggregate with an awaited message, until that one is seen', () => {
    const w = createAwaitedMessages();
    w.add(
      [
        { seq: 5, aggregate: 'account.a' },
        { seq: 9, aggregate: 'account.a' },
      ],
      1000,
    );
    expect(w.holdsBack('account.a', 4)).toBe(false);
    expect(w.holdsBack('account.a', 6)).toBe(true);
    expect(w.holdsBack('account.b', 6)).toBe(false);
    w.see(5);
    expect(w.holdsBack('account.a', 6)).toBe(false);
    expect(w.holdsBack('account.a', 10)).toBe(true);
    w.see(9);
    expect(w.size()).toBe(0);
    expect(w.holdsBack('account.a', 10)).toBe(false);
  });

  it('gives up on a message at its deadline and hands it back', () => {
    const w = createAwaitedMessages();
    w.add([{ seq: 3, aggregate: 'account.a' }], 1000);
    expect(w.expire(999)).toEqual([]);
    expect(w.nextDeadline()).toBe(1000);
    expect(w.expire(1000)).toEqual([{ seq: 3, aggregate: 'account.a' }]);
    expect(w.holdsBack('account.a', 4)).toBe(false);
    expect(w.nextDeadline()).toBeUndefined();
  });

  it('lists the messages whose deadline passed without forgetting them, and extends their wait when they are added again', () => {
    const w = createAwaitedMessages();
    w.add([{ seq: 3, aggregate: 'account.a' }], 1000);
    w.add([{ seq: 7, aggregate: 'account.b' }], 3000);
    expect(w.due(999)).toEqual([]);
    const due = w.due(1000);
    expect(due).toEqual([{ seq: 3, aggregate: 'account.a', extensions: 0 }]);
    expect(w.holdsBack('account.a', 4)).toBe(true);
    w.add(due, 2500);
    expect(w.nextDeadline()).toBe(2500);
    expect(w.expire(2000)).toEqual([]);
    expect(w.holdsBack('account.a', 4)).toBe(true);
  });

  it('waits on until the later deadline for a message a later check finds missing again, and forgets those acknowledged since', () => {
    const w = createAwaitedMessages();
    w.add(
      [
        { seq: 3, aggregate: 'account.a' },
        { seq: 4, aggregate: 'account.b' },
      ],
      1000,
    );
    w.add([{ seq: 4, aggregate: 'account.b' }], 5000);
    w.add([{ seq: 4, aggregate: 'account.b' }], 2000); // an earlier deadline never shortens the wait
    expect(w.lowest()).toBe(3);
    w.forgetUpTo(3);
    expect(w.size()).toBe(1);
    expect(w.holdsBack('account.a', 5)).toBe(false);
    expect(w.holdsBack('account.b', 5)).toBe(true);
    expect(w.expire(1000)).toEqual([]);
    expect(w.expire(5000)).toEqual([{ seq: 4, aggregate: 'account.b' }]);
  });
});

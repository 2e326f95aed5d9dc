import { describe, expect, it } from 'vitest';
import { createLostDeliveryBarrier, createRedeliveryBarrier } from '../../src/inbox/redelivery-barrier.ts';

describe('redelivery barrier - at the start of a run', () => {
  it('stays closed until as many unacknowledged messages at or below its sequence came back, newer ones not counting', () => {
    const b = createRedeliveryBarrier({ upTo: 10, expected: 2, deadline: 1000 });
    b.see(11);
    b.see(12);
    expect(b.isOpen(0)).toBe(false);
    b.see(4);
    b.see(4); // a second copy of the same message
    expect(b.isOpen(0)).toBe(false);
    b.see(9);
    expect(b.isOpen(0)).toBe(true);
  });

  it('opens at its deadline when some never come back', () => {
    const b = createRedeliveryBarrier({ upTo: 10, expected: 3, deadline: 1000 });
    b.see(2);
    expect(b.isOpen(999)).toBe(false);
    expect(b.isOpen(1000)).toBe(true);
  });
});

describe('redelivery barrier - deliveries lost in the middle of a run', () => {
  it('stays closed while older lost deliveries come back, and opens once the last one the consumer delivered arrives', () => {
    const b = createLostDeliveryBarrier({ delivered: 40, deadline: 1000 });
    b.see(37);
    b.see(39);
    expect(b.isOpen(0)).toBe(false);
    b.see(40);
    expect(b.isOpen(0)).toBe(true);
  });

  it('opens at its deadline when the lost deliveries were acknowledged after all', () => {
    const b = createLostDeliveryBarrier({ delivered: 40, deadline: 1000 });
    expect(b.isOpen(999)).toBe(false);
    expect(b.isOpen(1000)).toBe(true);
  });
});

// Seeded randomness for tests whose cases are generated: a failing case is reproducible from its seed.
/** A small seeded PRNG (mulberry32): the same seed gives the same sequence on every machine. */
export type Random = { next(): number; int(min: number, max: number): number; pick<T>(items: readonly T[]): T; chance(p: number): boolean };

/** A mulberry32 generator seeded with `seed`. */
export function createRandom(seed: number): Random {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    int: (min, max) => min + Math.floor(next() * (max - min + 1)),
    pick: (items) => items[Math.floor(next() * items.length)]!,
    chance: (p) => next() < p,
  };
}

/** Byte → two lower-case hex digits. */
const HEX = Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, '0'));
/** Random bytes drawn per getRandomValues call: a call costs about as much as turning a few hundred bytes into hex. */
const POOL_BYTES = 4096;

/** Returns a UUIDv7 generator: time-ordered ids (ms timestamp + random), safe as subject tokens and Nats-Msg-Id. */
export function createUuidV7(now: () => number = Date.now): () => string {
  // each generator draws its randomness in bulk (CSPRNG), ten random bytes per id
  const pool = new Uint8Array(POOL_BYTES);
  let at = POOL_BYTES;
  return () => {
    if (at + 10 > POOL_BYTES) {
      crypto.getRandomValues(pool);
      at = 0;
    }
    const ms = now();
    const hi = Math.floor(ms / 2 ** 16);
    const lo = ms % 2 ** 16;
    const r = (i: number) => pool[at + i]!;
    const hex =
      HEX[(hi >>> 24) & 0xff]! +
      HEX[(hi >>> 16) & 0xff]! +
      HEX[(hi >>> 8) & 0xff]! +
      HEX[hi & 0xff]! +
      '-' +
      HEX[(lo >>> 8) & 0xff]! +
      HEX[lo & 0xff]! +
      '-' +
      HEX[(r(0) & 0x0f) | 0x70]! +
      HEX[r(1)]! +
      '-' +
      HEX[(r(2) & 0x3f) | 0x80]! +
      HEX[r(3)]! +
      '-' +
      HEX[r(4)]! +
      HEX[r(5)]! +
      HEX[r(6)]! +
      HEX[r(7)]! +
      HEX[r(8)]! +
      HEX[r(9)]!;
    at += 10;
    return hex;
  };
}

/** Returns a UUIDv7 generator: time-ordered ids (ms timestamp + random), safe as subject tokens and Nats-Msg-Id. */
export function createUuidV7(now: () => number = Date.now): () => string {
  return () => {
    const bytes = new Uint8Array(16);
    crypto.getRandomValues(bytes);
    const ms = now();
    const hi = Math.floor(ms / 2 ** 16);
    const lo = ms % 2 ** 16;
    bytes[0] = (hi >>> 24) & 0xff;
    bytes[1] = (hi >>> 16) & 0xff;
    bytes[2] = (hi >>> 8) & 0xff;
    bytes[3] = hi & 0xff;
    bytes[4] = (lo >>> 8) & 0xff;
    bytes[5] = lo & 0xff;
    bytes[6] = (bytes[6]! & 0x0f) | 0x70;
    bytes[8] = (bytes[8]! & 0x3f) | 0x80;
    const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
    return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
  };
}

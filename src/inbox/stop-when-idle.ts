import { flushWithin } from '../nats/flush-within.ts';
import { sleep } from '../worker/sleep.ts';
import { unlessStopped } from '../worker/unless-stopped.ts';
import type { StopControl } from '../worker/stop-control.ts';
import type { PullSession } from './pull-messages.ts';

/** How long the check waits for the broker to confirm the run's acknowledgements before it asks again later. */
const FLUSH_MS = 2000;

/**
 * Stops the run once the runner holds and writes nothing and its consumer has nothing pending and nothing awaiting
 * acknowledgement (bounded runs, tests). Asks the broker every `everyMs`, and never sooner than that after the
 * last delivery; a broker that does not answer is asked again later.
 */
export async function stopWhenIdle(
  d: { everyMs: number; session(): PullSession | undefined; busy(): boolean; lastDelivery(): number },
  stop: Pick<StopControl, 'signal' | 'stop'>,
): Promise<void> {
  while (!stop.signal.aborted) {
    await sleep(d.everyMs, stop.signal);
    const session = d.session();
    if (stop.signal.aborted || !session || d.busy() || Date.now() - d.lastDelivery() < d.everyMs) continue;
    const check = async () => {
      // a broker that does not answer would hold the flush until the connection goes stale
      if (!(await flushWithin(session.nc, FLUSH_MS))) return;
      const info = await session.consumer.info();
      if (info.num_pending === 0 && info.num_ack_pending === 0 && !d.busy()) stop.stop();
    };
    // The broker is away or the consumer is being re-created: ask again later. A stop does not wait for the answer.
    await unlessStopped(
      check().catch(() => undefined),
      stop.signal,
    );
  }
}

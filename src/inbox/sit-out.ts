import type { Logger } from '../logger.ts';

/** Whether an instance may hold a subscriber's leases, by whether it can reach the broker (the lease keeper's `eligible`). */
export type SitOut = {
  /** False once the instance was troubled for a TTL, until a probe reached the broker; asked before each claim. */
  eligible(): boolean;
  /** Whether it sits out now (gave its leases up and waits for a probe to succeed). */
  sittingOut(): boolean;
};

export type SitOutDeps = {
  ttlMs: number;
  /** Whether what it works on cannot reach the broker now (only an instance holding partitions is ever troubled). */
  troubled: () => boolean;
  /** Resolves once a fresh connection reached the broker, rejects otherwise. */
  probe: () => Promise<void>;
  log: Logger;
  fields: Record<string, unknown>;
  now?: () => number;
};

/**
 * Keeps an instance that cannot reach the broker from keeping a subscriber's leases for ever: once `troubled` held at
 * every ask for at least `ttlMs`, it answers false (the keeper gives the leases and the membership up) and probes the
 * broker at each later ask (one probe at a time), answering true again only after a probe succeeded, so an
 * instance rejoins once, not at each flicker of its trouble. An instance holding nothing is never troubled.
 */
export function createSitOut(deps: SitOutDeps): SitOut {
  const now = deps.now ?? Date.now;
  let since: number | undefined;
  let out = false;
  let probing = false;

  const probe = () => {
    if (probing) return;
    probing = true;
    Promise.resolve()
      .then(() => deps.probe())
      .then(
        () => {
          probing = false;
          out = false;
          deps.log.info('subscriber: the broker is reachable again; rejoining its instances', deps.fields);
        },
        () => void (probing = false),
      );
  };

  return {
    eligible() {
      if (out) {
        probe();
        return false;
      }
      if (!deps.troubled()) {
        since = undefined;
        return true;
      }
      since ??= now();
      if (now() - since < deps.ttlMs) return true;
      since = undefined;
      out = true;
      deps.log.warn('subscriber: cannot reach the broker for a lease TTL; giving its leases up until it can', { ...deps.fields, ttlMs: deps.ttlMs });
      return false;
    },
    sittingOut: () => out,
  };
}

import type { Subscriber } from '../inbox/subscriber.ts';
import { notifications } from './notifications/notifications.ts';
import { reporting } from './reporting/reporting.ts';

/** Every subscriber this service can run, by name (`CONSUMERS=reporting,notifications`, `npm run consume -- <name>`). */
export const subscribers: Readonly<Record<string, Subscriber>> = Object.freeze({ reporting, notifications });

/** Thrown for a subscriber name nobody registered; the message lists the known ones. */
export class UnknownSubscriberError extends Error {
  override readonly name = 'UnknownSubscriberError';
}

/** The subscriber called `name`; throws UnknownSubscriberError otherwise. */
export function findSubscriber(name: string): Subscriber {
  const found = Object.hasOwn(subscribers, name) ? subscribers[name] : undefined;
  if (!found) throw new UnknownSubscriberError(`Unknown subscriber ${JSON.stringify(name)}; known: ${Object.keys(subscribers).join(', ')}`);
  return found;
}

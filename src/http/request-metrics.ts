import type { Metrics } from '../metrics/metrics.ts';
import { statusClassOf } from './request-route.ts';

/** Upper bounds of http_request_duration_seconds, from 1 ms to 10 s. */
export const HTTP_DURATION_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/** What observes one request: its method, route pattern (`unmatched` for a 404 no route matched), status and duration. */
export type RequestDurations = (method: string, route: string, status: number, seconds: number) => void;

/**
 * Registers `http_request_duration_seconds{method, route, status_class}` and returns what observes a request in it;
 * `route` is the matched pattern, never the raw path.
 */
export function requestDurations(metrics: Metrics): RequestDurations {
  const duration = metrics.histogram(
    'http_request_duration_seconds',
    'Duration of HTTP requests until the response is ready, by method, route pattern and status class.',
    HTTP_DURATION_BUCKETS,
    { labelled: true },
  );
  return (method, route, status, seconds) => duration.observe(seconds, { method, route, status_class: statusClassOf(status) });
}

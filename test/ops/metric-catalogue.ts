// The metrics the service exports (docs/monitoring.md lists them with their meaning and alerts), and the metric
// names a PromQL expression reads, so the ops tests can hold the live /metrics, the alert rules and the dashboards
// to one list.

export type MetricType = 'counter' | 'gauge' | 'histogram';

/** One catalogued metric: its Prometheus type and the label names every one of its series carries. */
export type CatalogueEntry = { type: MetricType; labels: readonly string[] };

const consumer = ['consumer'] as const;

/** Every metric a process of the service exports (with all roles), by name. */
export const METRIC_CATALOGUE: Readonly<Record<string, CatalogueEntry>> = {
  outbox_pending_messages: { type: 'gauge', labels: [] },
  outbox_oldest_pending_age_seconds: { type: 'gauge', labels: [] },
  outbox_failed_messages: { type: 'gauge', labels: [] },
  outbox_published_total: { type: 'counter', labels: [] },
  outbox_duplicates_total: { type: 'counter', labels: [] },
  outbox_publish_errors_total: { type: 'counter', labels: ['reason'] },
  outbox_parked_total: { type: 'counter', labels: [] },
  outbox_publish_lag_seconds: { type: 'histogram', labels: [] },
  outbox_relay_broker_up: { type: 'gauge', labels: [] },
  outbox_relay_last_pass_timestamp_seconds: { type: 'gauge', labels: [] },
  outbox_relay_partitions_owned: { type: 'gauge', labels: [] },
  outbox_relay_lease_acquisitions_total: { type: 'counter', labels: [] },
  outbox_relay_lease_losses_total: { type: 'counter', labels: [] },
  inbox_processed_total: { type: 'counter', labels: consumer },
  inbox_duplicates_total: { type: 'counter', labels: consumer },
  inbox_ignored_total: { type: 'counter', labels: consumer },
  inbox_dead_letters_total: { type: 'counter', labels: consumer },
  inbox_infrastructure_errors_total: { type: 'counter', labels: consumer },
  inbox_database_available: { type: 'gauge', labels: consumer },
  inbox_handler_duration_seconds: { type: 'histogram', labels: consumer },
  inbox_consumer_pending_messages: { type: 'gauge', labels: consumer },
  inbox_consumer_ack_pending_messages: { type: 'gauge', labels: consumer },
  inbox_dead_letter_messages: { type: 'gauge', labels: consumer },
  inbox_partitions_owned: { type: 'gauge', labels: consumer },
  http_request_duration_seconds: { type: 'histogram', labels: ['method', 'route', 'status_class'] },
  hono_outbox_build_info: { type: 'gauge', labels: ['service', 'version', 'runtime'] },
};

/** The catalogued metric a sample or series name belongs to (a histogram's `_bucket`, `_sum`, `_count` included), or undefined. */
export function catalogueNameOf(series: string): string | undefined {
  if (METRIC_CATALOGUE[series]) return series;
  const base = series.replace(/_(?:bucket|sum|count)$/, '');
  return METRIC_CATALOGUE[base]?.type === 'histogram' ? base : undefined;
}

/** Words of PromQL that are neither functions (followed by `(`) nor metric names. */
const KEYWORDS = new Set(['and', 'or', 'unless', 'bool', 'offset', 'by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'inf', 'nan']);

/**
 * The metric names a PromQL expression (or a Grafana `label_values(metric, label)` query) reads: what remains once
 * strings, label matchers, ranges, grouping lists, durations, numbers and function names are taken out.
 */
export function metricNamesIn(expr: string): string[] {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'/g, '""')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ')
    .replace(/\blabel_values\s*\(([^,)]*),[^)]*\)/g, ' $1 ')
    .replace(/\b(?:\d+(?:ms|[smhdwy]))+\b/g, ' ')
    .replace(/\b\d+(?:\.\d+)?(?:e[+-]?\d+)?\b/gi, ' ');
  const names = [...bare.matchAll(/[A-Za-z_:][\w:]*/g)]
    .filter((m) => !/^\s*\(/.test(bare.slice(m.index + m[0].length)) && !KEYWORDS.has(m[0].toLowerCase()))
    .map((m) => m[0]);
  return [...new Set(names)];
}

// The operations artefacts: the Prometheus rules, their unit tests and the scrape config under ops/prometheus (checked
// by promtool), the live /metrics of the fixture service running every role (promtool's linter and the metric
// catalogue), the Grafana provisioning and dashboards under ops/grafana, and the compose `monitoring` profile wiring
// them to the service's processes.
import { createClient } from '@libsql/client';
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { delimiter, join, posix } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { createTempDir } from '../support/db.ts';
import { eventually } from '../support/eventually.ts';
import { postJson } from '../support/http.ts';
import { FIXTURE_ENTRY, overHttp, ROOT, spawnService, waitForHttp, type ServiceHandle } from '../support/process.ts';
import { useNats } from '../support/use-nats.ts';
import { catalogueNameOf, METRIC_CATALOGUE, metricNamesIn } from './metric-catalogue.ts';

const PROMTOOL = [...(process.env.PATH ?? '').split(delimiter).filter(Boolean), '/usr/bin', '/usr/local/bin']
  .map((dir) => join(dir, 'promtool'))
  .find(existsSync);
// skipped: without promtool (Debian package `prometheus`) the promtool cases skip on a developer's machine, so the reason
// shows in the report; .ci/run installs it, and with CI set a missing promtool fails them instead.
const NO_PROMTOOL = !PROMTOOL && !process.env.CI;

/** Runs promtool in the repository root with `input` on stdin; its exit code and everything it printed. */
function promtool(args: string[], input?: string): { code: number | null; output: string } {
  if (!PROMTOOL) throw new Error('promtool is not installed (apt-get install -y prometheus; .ci/run does it)');
  const run = spawnSync(PROMTOOL, args, { cwd: ROOT, input, encoding: 'utf8', timeout: 60_000 });
  if (run.error) throw run.error;
  return { code: run.status, output: `${run.stdout}${run.stderr}` };
}

const readText = (path: string) => readFileSync(join(ROOT, path), 'utf8');
const readYaml = (path: string) => parse(readText(path), { merge: true });

type Rule = { alert?: string; expr: string; for?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
type AlertTest = { alertname: string; exp_alerts: Array<{ exp_labels?: Record<string, string> }> };
const alertRules = (): Rule[] => (readYaml('ops/prometheus/alerts.yml') as { groups: Array<{ rules: Rule[] }> }).groups.flatMap((g) => g.rules);

/** The anchor GitHub gives a Markdown heading. */
const anchorOf = (heading: string) =>
  heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N} _-]/gu, '')
    .replace(/ /g, '-');
const docAnchors = () => new Set([...readText('docs/monitoring.md').matchAll(/^#{1,6} (.+)$/gm)].map((m) => anchorOf(m[1]!)));

describe('ops - Prometheus rules and config', () => {
  it.skipIf(NO_PROMTOOL)('the alert rules pass promtool check rules', () => {
    const run = promtool(['check', 'rules', 'ops/prometheus/alerts.yml']);
    expect(run.code, run.output).toBe(0);
  });

  it.skipIf(NO_PROMTOOL)("every alert's unit tests pass promtool test rules", () => {
    const run = promtool(['test', 'rules', 'ops/prometheus/alerts.test.yml']);
    expect(run.code, run.output).toBe(0);
    expect(run.output).toContain('SUCCESS');
  });

  it.skipIf(NO_PROMTOOL)('the scrape config and the rule files it loads pass promtool check config', () => {
    const run = promtool(['check', 'config', 'ops/prometheus/prometheus.yml']);
    expect(run.code, run.output).toBe(0);
    expect(run.output).toMatch(/SUCCESS: \d+ rules found/);
  });

  it('every alert has a severity, a summary, a description and a runbook section in docs/monitoring.md', () => {
    const anchors = docAnchors();
    for (const rule of alertRules().filter((r) => r.alert)) {
      expect(['critical', 'warning'], rule.alert).toContain(rule.labels?.severity);
      expect(rule.annotations?.summary, rule.alert).toMatch(/\{\{ \$labels\.\w+ \}\}/);
      expect(rule.annotations?.description, rule.alert).toBeTruthy();
      const anchor = /\/docs\/monitoring\.md#([\w-]+)$/.exec(rule.annotations?.runbook_url ?? '')?.[1];
      expect(anchor, `${rule.alert}: runbook_url ${rule.annotations?.runbook_url}`).toBe(rule.alert!.toLowerCase());
      expect(anchors.has(anchor!), `docs/monitoring.md has a section #${anchor}`).toBe(true);
    }
  });

  it('the unit tests fire every alert (each cause of OutboxRelayDown) and hold each one silent in a healthy case', () => {
    const tests = (readYaml('ops/prometheus/alerts.test.yml') as { tests: Array<{ alert_rule_test?: AlertTest[] }> }).tests.flatMap(
      (t) => t.alert_rule_test ?? [],
    );
    for (const rule of alertRules().filter((r) => r.alert)) {
      const mine = tests.filter((t) => t.alertname === rule.alert);
      const fired = mine.flatMap((t) => t.exp_alerts).filter((a) => !rule.labels?.cause || a.exp_labels?.cause === rule.labels.cause);
      expect(fired.length, `a test fires ${rule.alert} ${rule.labels?.cause ?? ''}`).toBeGreaterThan(0);
      expect(
        mine.some((t) => t.exp_alerts.length === 0),
        `a test holds ${rule.alert} silent`,
      ).toBe(true);
    }
  });

  it('the alert rules read only catalogued metrics and up', () => {
    const unknown = alertRules().flatMap((r) => metricNamesIn(r.expr).filter((name) => name !== 'up' && !catalogueNameOf(name)));
    expect(unknown).toEqual([]);
  });
});

describe('ops - the live /metrics of a service running every role', () => {
  const nats = useNats();
  const tmp = createTempDir('ops-metrics-');
  let service: ServiceHandle;
  let exposition = '';
  let openedId = '';

  beforeAll(async () => {
    service = await spawnService('node', FIXTURE_ENTRY, {
      ROLES: 'api,relay,consumers',
      DATABASE_URL: `file:${join(tmp.dir, 'app.db')}`,
      CONSUMER_DATABASE_URL_TEMPLATE: `file:${join(tmp.dir, '{name}.db')}`,
      NATS_URL: nats().url,
      RELAY_POLL_MS: '50',
      LOG_LEVEL: 'warn',
    });
    await waitForHttp(`${service.url}/health`, { child: service });
    const api = overHttp(service.url);
    const opened = async (owner: string) => {
      const res = await postJson(api, '/accounts', { owner });
      expect(res.status).toBe(201);
      return ((await res.json()) as { accountId: string }).accountId;
    };
    openedId = await opened('ops-ann');
    const other = await opened('ops-bob');
    expect((await postJson(api, `/accounts/${openedId}/deposit`, { amountCents: 250 })).status).toBe(200);
    expect((await postJson(api, `/accounts/${other}/close`, '')).status).toBe(200);
    expect((await postJson(api, '/accounts', { owner: '' })).status).toBe(400);
    expect((await fetch(`${service.url}/no-such-route`)).status).toBe(404);
    // four events (two opened, one credited, one closed), each applied once by both subscribers
    for (const name of ['audit', 'balances']) {
      const db = createClient({ url: `file:${join(tmp.dir, `${name}.db`)}` });
      try {
        await eventually(async () => Number((await db.execute('SELECT count(*) AS n FROM inbox').catch(() => ({ rows: [{ n: 0 }] }))).rows[0]!.n) === 4, {
          timeoutMs: 30_000,
          what: `${name} applying the four events`,
        });
      } finally {
        db.close();
      }
    }
    const res = await fetch(`${service.url}/metrics`);
    expect(res.status).toBe(200);
    exposition = await res.text();
  }, 90_000);

  afterAll(async () => {
    await service?.stop();
    tmp[Symbol.dispose]();
  });

  /** `# TYPE` of each metric in the exposition. */
  const typesOf = (text: string) => new Map([...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => [m[1]!, m[2]!]));
  /** Each sample line's series name, label names (without `le`) and labels. */
  const samplesOf = (text: string) =>
    text
      .split('\n')
      .filter((line) => line && !line.startsWith('#'))
      .map((line) => {
        const m = /^([\w:]+)(?:\{(.*)\})? \S+$/.exec(line);
        if (!m) throw new Error(`not a sample line: ${line}`);
        const labels = Object.fromEntries([...(m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((l) => [l[1]!, l[2]!]));
        return {
          name: m[1]!,
          labels,
          labelNames: Object.keys(labels)
            .filter((k) => k !== 'le')
            .sort(),
        };
      });

  it('exports every metric of the catalogue, each with its type', () => {
    const types = typesOf(exposition);
    const missing = Object.keys(METRIC_CATALOGUE).filter((name) => !types.has(name));
    const wrongType = Object.entries(METRIC_CATALOGUE)
      .filter(([name, m]) => types.has(name) && types.get(name) !== m.type)
      .map(([name, m]) => `${name}: ${types.get(name)}, not ${m.type}`);
    expect({ missing, wrongType }).toEqual({ missing: [], wrongType: [] });
  });

  it("labels each catalogued series with the catalogue's labels, routes by their pattern, never an id", () => {
    const samples = samplesOf(exposition);
    const wrong = samples
      .filter((s) => catalogueNameOf(s.name))
      .filter((s) => s.labelNames.length > 0 && s.labelNames.join() !== [...METRIC_CATALOGUE[catalogueNameOf(s.name)!]!.labels].sort().join())
      .map((s) => `${s.name} {${s.labelNames.join(', ')}}`);
    expect(wrong).toEqual([]);

    const http = samples.filter((s) => s.name === 'http_request_duration_seconds_count').map((s) => s.labels);
    expect(http).toEqual(
      expect.arrayContaining([expect.objectContaining({ method: 'POST', status_class: '2xx', route: expect.stringMatching(/^\/accounts/) })]),
    );
    expect(http).toEqual(expect.arrayContaining([expect.objectContaining({ method: 'POST', status_class: '4xx' })]));
    expect(http).toEqual(expect.arrayContaining([expect.objectContaining({ method: 'GET', route: 'unmatched', status_class: '4xx' })]));
    expect(http.filter((l) => l.route?.includes(':id'))).not.toEqual([]);
    expect(exposition).not.toContain(openedId);

    const consumers = (name: string) => samples.filter((s) => s.name === name).map((s) => s.labels.consumer);
    expect(consumers('inbox_processed_total')).toEqual(expect.arrayContaining(['audit', 'balances']));
    expect(consumers('inbox_handler_duration_seconds_count')).toEqual(expect.arrayContaining(['audit', 'balances']));
    expect(samples.filter((s) => s.name === 'hono_outbox_build_info').map((s) => s.labels.runtime)).toEqual(['node']);
    expect(exposition).toMatch(/^hono_outbox_build_info\{[^}]*\} 1$/m);
  });

  it.skipIf(NO_PROMTOOL)('passes promtool check metrics without a finding', () => {
    const run = promtool(['check', 'metrics'], exposition);
    expect(run.output.trim()).toBe('');
    expect(run.code).toBe(0);
  });
});

describe('ops - Grafana dashboards', () => {
  const DASHBOARDS = 'ops/grafana/dashboards';
  type Target = { expr?: string; datasource?: { uid?: string } };
  type Panel = { type: string; title: string; datasource?: { uid?: string }; targets?: Target[]; panels?: Panel[] };
  type Dashboard = { uid: string; title: string; panels: Panel[]; templating?: { list: Array<{ query?: string | { query?: string } }> } };
  const dashboards = () =>
    readdirSync(join(ROOT, DASHBOARDS))
      .filter((f) => f.endsWith('.json'))
      .map((f) => ({ file: f, dashboard: JSON.parse(readText(`${DASHBOARDS}/${f}`)) as Dashboard }));
  const panelsOf = (panels: Panel[]): Panel[] => panels.flatMap((p) => [p, ...panelsOf(p.panels ?? [])]);
  const datasourceUid = () => (readYaml('ops/grafana/provisioning/datasources/prometheus.yml') as { datasources: Array<{ uid: string }> }).datasources[0]!.uid;

  it('each dashboard is valid JSON whose panels all query the provisioned Prometheus', () => {
    expect(dashboards().length).toBeGreaterThan(0);
    for (const { file, dashboard } of dashboards()) {
      expect(dashboard.uid, file).toBeTruthy();
      for (const panel of panelsOf(dashboard.panels).filter((p) => p.type !== 'row')) {
        expect(panel.targets?.length, `${file}: ${panel.title}`).toBeGreaterThan(0);
        for (const target of panel.targets!) {
          expect(target.expr, `${file}: ${panel.title}`).toBeTruthy();
          expect(target.datasource?.uid ?? panel.datasource?.uid, `${file}: ${panel.title}`).toBe(datasourceUid());
        }
      }
    }
  });

  it('panels and variables query only catalogued metrics, and every catalogued metric has a panel', () => {
    const shown = new Set<string>();
    const unknown: string[] = [];
    for (const { file, dashboard } of dashboards()) {
      const exprs = [
        ...panelsOf(dashboard.panels).flatMap((p) => (p.targets ?? []).map((t) => ({ where: p.title, expr: t.expr ?? '' }))),
        ...(dashboard.templating?.list ?? []).map((v) => ({ where: 'variable', expr: typeof v.query === 'string' ? v.query : (v.query?.query ?? '') })),
      ];
      for (const { where, expr } of exprs) {
        for (const name of metricNamesIn(expr)) {
          const catalogued = catalogueNameOf(name);
          if (catalogued) shown.add(catalogued);
          else unknown.push(`${file}: ${where}: ${name}`);
        }
      }
    }
    expect(unknown).toEqual([]);
    expect(Object.keys(METRIC_CATALOGUE).filter((name) => !shown.has(name))).toEqual([]);
  });
});

describe('ops - compose monitoring profile', () => {
  type Service = {
    image?: string;
    profiles?: string[];
    ports?: string[];
    volumes?: string[];
    environment?: Record<string, string>;
  };
  const compose = () => readYaml('compose.yaml') as { services: Record<string, Service> };
  /** A service's bind mounts (`./host:container[:ro]`), host paths relative to the repository. */
  const bindMounts = (s: Service) =>
    (s.volumes ?? [])
      .filter((v) => v.startsWith('./'))
      .map((v) => {
        const [source, target] = v.split(':');
        return { source: posix.normalize(source!), target: target! };
      });

  it('runs Prometheus on :9090 and Grafana on :3030 with anonymous viewers, only in the monitoring profile', () => {
    const services = compose().services;
    const monitoring = Object.entries(services).filter(([, s]) => s.profiles?.includes('monitoring'));
    expect(monitoring.map(([name]) => name).sort()).toEqual(['grafana', 'prometheus']);
    const { prometheus, grafana } = services;
    expect(prometheus!.image).toMatch(/^prom\/prometheus:/);
    expect(prometheus!.ports).toContain('9090:9090');
    expect(grafana!.image).toMatch(/^grafana\/grafana:/);
    expect(grafana!.ports).toContain('3030:3000');
    expect(grafana!.environment).toMatchObject({ GF_AUTH_ANONYMOUS_ENABLED: 'true', GF_AUTH_ANONYMOUS_ORG_ROLE: 'Viewer' });
  });

  it('mounts files that exist: the Prometheus config with its rule files beside it, the Grafana provisioning and dashboards', () => {
    const { prometheus, grafana } = compose().services;
    for (const mount of [...bindMounts(prometheus!), ...bindMounts(grafana!)]) expect(existsSync(join(ROOT, mount.source)), mount.source).toBe(true);

    const config = bindMounts(prometheus!).find((m) => m.target === '/etc/prometheus/prometheus.yml');
    expect(config, 'prometheus.yml mounted at /etc/prometheus/prometheus.yml').toBeDefined();
    const { rule_files } = readYaml(config!.source) as { rule_files: string[] };
    expect(rule_files.length).toBeGreaterThan(0);
    for (const rules of rule_files) {
      const mounted = bindMounts(prometheus!).find((m) => m.target === posix.join('/etc/prometheus', rules));
      expect(mounted?.source, `rule file ${rules} mounted beside the config`).toBe(posix.join(posix.dirname(config!.source), rules));
    }

    const provisioning = bindMounts(grafana!).find((m) => m.target === '/etc/grafana/provisioning');
    expect(provisioning?.source).toBe('ops/grafana/provisioning');
    const { providers } = readYaml('ops/grafana/provisioning/dashboards/dashboards.yml') as { providers: Array<{ options: { path: string } }> };
    for (const provider of providers) {
      const dashboards = bindMounts(grafana!).find((m) => m.target === provider.options.path);
      expect(dashboards?.source, `a mount at ${provider.options.path}`).toBe('ops/grafana/dashboards');
      expect(statSync(join(ROOT, dashboards!.source)).isDirectory()).toBe(true);
    }
    const { datasources } = readYaml('ops/grafana/provisioning/datasources/prometheus.yml') as { datasources: Array<{ url: string }> };
    expect(datasources.map((d) => d.url)).toEqual(['http://prometheus:9090']);
  });

  it('scrapes every process of the service at its port, labelled with its role', () => {
    const services = compose().services;
    const scrape = readYaml('ops/prometheus/prometheus.yml') as {
      scrape_configs: Array<{ job_name: string; static_configs: Array<{ targets: string[]; labels?: Record<string, string> }> }>;
    };
    const targets = new Map(scrape.scrape_configs.flatMap((job) => job.static_configs.flatMap((g) => g.targets.map((t) => [t, g.labels?.role] as const))));
    // the `scaled` profile is a stack of its own (its own volume and NATS cluster); the monitoring profile watches the default one
    const processes = Object.entries(services).filter(([, s]) => s.environment?.ROLES && !s.profiles?.includes('scaled'));
    expect(processes.length).toBeGreaterThan(0);
    for (const [name, s] of processes) {
      const port = s.environment!.METRICS_PORT ?? s.environment!.PORT ?? '3000';
      expect(targets.get(`${name}:${port}`), `${name}:${port} scraped with role ${s.environment!.ROLES}`).toBe(s.environment!.ROLES);
    }
    expect(targets.size).toBe(processes.length);
  });
});

describe('ops - docs/monitoring.md', () => {
  it('lists every catalogued metric in its table', () => {
    const doc = readText('docs/monitoring.md');
    expect(Object.keys(METRIC_CATALOGUE).filter((name) => !doc.includes(`| \`${name}\``))).toEqual([]);
  });
});

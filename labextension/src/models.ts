/**
 * The REST API's shapes (openapi.yaml beside the server extension) and the pure functions the
 * views show them with. Nothing here touches the DOM or JupyterLab, so node's test runner can
 * check it directly.
 */

/** The name the Sandboxed Python kernelspec is installed under (install-kernel adds others). */
export const KERNEL_NAME = 'sandboxed-python';

export type Runtime = 'runsc' | 'runc';

export type SandboxStatus =
  'created' | 'running' | 'paused' | 'restarting' | 'removing' | 'exited' | 'dead';

/** Schema `Sandbox`: one sandbox as `GET /api/sandboxes` lists it. */
export interface ISandbox {
  id: string;
  owner: string;
  status: SandboxStatus;
  runtime: Runtime | string;
  image: string;
  created: string;
  last_activity?: string | null;
  busy?: boolean;
  expires?: string | null;
  metadata?: { [key: string]: string };
  context?: string | null;
  ephemeral?: boolean;
  limits: { [name: string]: number | undefined };
  workspace?: { mode: string; note?: string };
  network: { policy: string };
  kernel: {
    attached: boolean;
    id: string | null;
    notebook: string | null;
    since: string | null;
  };
  exit?: string | null;
}

/** Schema `Stats`: resource use measured now (null: not measured; `notes` says why). */
export interface IStats {
  sandbox_id: string;
  runtime: string;
  measured_at: string;
  cpu_seconds: number | null;
  cpu_percent: number | null;
  memory_bytes: number | null;
  memory_limit_bytes: number | null;
  pids: number | null;
  pids_limit: number | null;
  processes: number | null;
  workspace_bytes: number | null;
  workspace_complete?: boolean;
  notes?: string[];
}

/** Schema `Attestation`: what a probe inside the sandbox measured when it started. */
export interface IAttestation {
  sandbox_id: string;
  measured_at: string;
  ok: boolean;
  probe_ok: boolean;
  error: string | null;
  summary: string;
  measured: { [fact: string]: { value: unknown; source: string } };
  findings: { check: string; expected: unknown; measured: unknown; message: string }[];
  notes: string[];
}

/** A server error: the JSON body `{code, message}` every route answers errors with. */
export interface IServerError {
  code: string;
  message: string;
}

const RUNTIME_LABELS: { [runtime: string]: string } = {
  runsc: 'gVisor',
  runc: 'Docker runc'
};

/** "gVisor" for runsc, "Docker runc" for runc; an unknown runtime shows as it is named. */
export function runtimeLabel(runtime: string): string {
  return RUNTIME_LABELS[runtime] ?? runtime;
}

/** Why this sandbox's isolation is weaker than the default (none: an empty list). */
export function weakenedIsolation(sandbox: ISandbox): string[] {
  const reasons: string[] = [];
  if (sandbox.runtime !== 'runsc') {
    reasons.push(
      `runtime ${sandbox.runtime}: code runs on the host's kernel, not gVisor's (a kernel bug is a way out)`
    );
  }
  const policy = sandbox.network?.policy ?? 'none';
  if (policy === 'open') {
    // Direct egress stays blocked (the attestation says so); what is open is the host's proxy.
    reasons.push(
      'network open: direct egress is blocked, but the host proxy lets the sandbox reach any public address'
    );
  } else if (policy !== 'none' && policy !== 'allowlist' && policy !== 'ask') {
    reasons.push(`network policy '${policy}' is not one this extension knows`);
  }
  if (sandbox.workspace?.mode === 'read-write') {
    reasons.push("workspace read-write: the sandbox's writes reach the host's files");
  }
  return reasons;
}

/** The sandbox whose attached Jupyter kernel is `kernelId`, if it is listed. */
export function sandboxOfKernel(
  sandboxes: readonly ISandbox[],
  kernelId: string | null | undefined
): ISandbox | undefined {
  if (!kernelId) {
    return undefined;
  }
  return sandboxes.find(s => s.kernel?.attached && s.kernel.id === kernelId);
}

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

/** Bytes in binary units with three significant figures: 1536 -> "1.50 KiB". */
export function formatBytes(bytes: number | null | undefined): string {
  if (bytes === null || bytes === undefined || !Number.isFinite(bytes) || bytes < 0) {
    return '—';
  }
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  if (unit === 0) {
    return `${value} B`;
  }
  const digits = value >= 100 ? 0 : value >= 10 ? 1 : 2;
  return `${value.toFixed(digits)} ${UNITS[unit]}`;
}

/** "312 MiB / 2.00 GiB (15%)"; the limit part is left out when there is none. */
export function formatMemory(
  used: number | null | undefined,
  limit: number | null | undefined
): string {
  if (used === null || used === undefined) {
    return '—';
  }
  if (!limit) {
    return formatBytes(used);
  }
  const percent = Math.round((100 * used) / limit);
  return `${formatBytes(used)} / ${formatBytes(limit)} (${percent}%)`;
}

/** The memory limit: the measured one, else the one the sandbox was created with. */
export function memoryLimit(sandbox: ISandbox, stats?: IStats | null): number | null {
  return stats?.memory_limit_bytes ?? sandbox.limits?.memory ?? null;
}

/** "5 s", "3 min", "2 h 05 min", "4 d 3 h" between two instants (milliseconds). */
export function formatDuration(milliseconds: number): string {
  if (!Number.isFinite(milliseconds) || milliseconds < 0) {
    return '—';
  }
  const seconds = Math.floor(milliseconds / 1000);
  if (seconds < 60) {
    return `${seconds} s`;
  }
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) {
    return `${minutes} min`;
  }
  const hours = Math.floor(minutes / 60);
  if (hours < 24) {
    return `${hours} h ${String(minutes % 60).padStart(2, '0')} min`;
  }
  return `${Math.floor(hours / 24)} d ${hours % 24} h`;
}

/** How long the sandbox has existed at `now` (ms since the epoch), from its `created` stamp. */
export function uptime(sandbox: ISandbox, now: number): string {
  const created = Date.parse(sandbox.created);
  return Number.isNaN(created) ? '—' : formatDuration(now - created);
}

/** When the culler removes the sandbox for its age, from `now` (ms since the epoch). */
export function expiresIn(sandbox: ISandbox, now: number): string {
  if (!sandbox.expires) {
    return 'never (only when idle)';
  }
  const expires = Date.parse(sandbox.expires);
  if (Number.isNaN(expires)) {
    return '—';
  }
  const left = expires - now;
  return left > 0
    ? `in ${formatDuration(left)} (${sandbox.expires})`
    : `due now (${sandbox.expires})`;
}

/** The caller's metadata as `key=value, …`; "—" for none. */
export function metadataText(sandbox: ISandbox): string {
  const entries = Object.entries(sandbox.metadata ?? {});
  return entries.length ? entries.map(([key, value]) => `${key}=${value}`).join(', ') : '—';
}

/** "12.5%" of one core; "—" when not measured yet (the first sample has no earlier one). */
export function formatCpu(percent: number | null | undefined): string {
  if (percent === null || percent === undefined || !Number.isFinite(percent)) {
    return '—';
  }
  return `${percent.toFixed(1)}%`;
}

/** Which actions make sense in this state (the server refuses the others with 409). */
export function allowedActions(sandbox: ISandbox): {
  pause: boolean;
  resume: boolean;
  restart: boolean;
  stop: boolean;
  terminal: boolean;
} {
  const live = sandbox.status === 'running';
  return {
    pause: live,
    resume: sandbox.status === 'paused',
    restart: live,
    stop: sandbox.status !== 'removing',
    terminal: live
  };
}

/** The notebook's file name, for a narrow column; the full path goes in the tooltip. */
export function notebookName(path: string | null | undefined): string {
  if (!path) {
    return '';
  }
  const parts = path.split('/');
  return parts[parts.length - 1];
}

/**
 * The label of a sandbox's details tab: its notebook's name when a notebook's kernel uses it
 * (several tabs named by hex ids are hard to tell apart), else its id.
 */
export function detailsTabLabel(sandbox: ISandbox | undefined, sandboxId: string): string {
  const notebook = notebookName(sandbox?.kernel?.notebook);
  return notebook ? `Sandbox: ${notebook}` : `Sandbox ${sandboxId}`;
}

/** The status bar's text: "gVisor · net none · 312 MiB / 2.00 GiB (15%)". */
export function statusText(sandbox: ISandbox, stats?: IStats | null): string {
  const parts = [runtimeLabel(sandbox.runtime), `net ${sandbox.network?.policy ?? 'none'}`];
  if (sandbox.status !== 'running') {
    parts.push(sandbox.status);
  } else if (stats) {
    parts.push(formatMemory(stats.memory_bytes, memoryLimit(sandbox, stats)));
  }
  return parts.join(' · ');
}

/** The status bar's tooltip: every fact shown, and each reason isolation is weaker. */
export function statusTitle(sandbox: ISandbox, stats?: IStats | null): string {
  const lines = [
    `Sandbox ${sandbox.id} (${sandbox.status})`,
    `Runtime: ${runtimeLabel(sandbox.runtime)} (${sandbox.runtime})`,
    `Network: ${sandbox.network?.policy ?? 'none'}`,
    `Memory: ${formatMemory(stats?.memory_bytes, memoryLimit(sandbox, stats))}`
  ];
  const weak = weakenedIsolation(sandbox);
  if (weak.length) {
    lines.push('Weakened isolation:', ...weak.map(reason => `  - ${reason}`));
  }
  lines.push('Click for details');
  return lines.join('\n');
}

/**
 * The error a failed request carries: the server's JSON `message` when it sent one, else the
 * HTTP reason, so a dialog always says something a person can act on.
 */
export function errorMessage(status: number, body: string, statusText = ''): IServerError {
  try {
    const parsed = JSON.parse(body);
    if (parsed && typeof parsed.message === 'string' && parsed.message) {
      return {
        code: typeof parsed.code === 'string' ? parsed.code : `http_${status}`,
        message: parsed.message
      };
    }
  } catch {
    // Not JSON (a proxy's HTML page, an empty body): fall through to the status line.
  }
  const reason = statusText || (status === 0 ? 'no answer from the server' : 'request failed');
  return { code: `http_${status}`, message: `${status} ${reason}`.trim() };
}

/** Rows of an attestation report for a table: fact, measured value, how it was measured. */
export function attestationRows(
  report: IAttestation
): { fact: string; value: string; source: string }[] {
  return Object.entries(report.measured ?? {})
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([fact, m]) => ({ fact, value: formatValue(m.value, fact), source: m.source }));
}

/** Facts whose numbers are sizes in bytes, shown as KiB, MiB, GiB. */
const BYTE_FACT = /(_bytes|^memory_limit|^memory_swap_limit)$/;

/**
 * A measured value as text: lists joined, objects as "name: value" pairs (not JSON), sizes in
 * bytes (`fact` says which) in KiB, MiB, GiB, null as "—".
 */
export function formatValue(value: unknown, fact = ''): string {
  if (value === null || value === undefined) {
    return '—';
  }
  if (typeof value === 'number' && BYTE_FACT.test(fact)) {
    return formatBytes(value);
  }
  if (Array.isArray(value)) {
    return value.length ? value.map(v => formatValue(v, fact)).join(', ') : '(none)';
  }
  if (typeof value === 'object') {
    const pairs = Object.entries(value as { [name: string]: unknown });
    return pairs.length
      ? pairs.map(([name, v]) => `${name}: ${formatValue(v, name)}`).join('; ')
      : '(none)';
  }
  return String(value);
}

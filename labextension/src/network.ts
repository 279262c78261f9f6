/**
 * Network policy of a live sandbox (`GET/PUT /api/sandboxes/{id}/network`, and its audit log at
 * `/network/audit`), as the network server extension documents them in openapi.yaml: modes
 * none / allowlist / ask / open; allow and deny patterns ("pypi.org", "*.example.com",
 * optionally ":port"); deny wins in every mode. Under ask, a request to any other host is held
 * until the owner decides it (`/network/requests`, egressRequests.ts).
 */

import { notebookName } from './models';

export type NetworkMode = 'none' | 'allowlist' | 'ask' | 'open';

/** The body of a PUT (schema `NetworkPolicy`). */
export interface INetworkPolicy {
  mode: NetworkMode | string;
  allow?: string[];
  deny?: string[];
}

/** The policy in force (schema `NetworkPolicyState`). */
export interface INetworkPolicyState extends INetworkPolicy {
  allow: string[];
  deny: string[];
  proxy_running: boolean;
}

/** One egress decision of the sandbox's host proxy. */
export interface INetworkAuditEntry {
  time: string;
  sandbox: string;
  host: string;
  port: number;
  method: string;
  allowed: boolean;
  /** The rule that allowed, or why it was denied. */
  rule: string;
  address?: string;
  /** A request the ask policy held: what decided it, who, and when. */
  decision?: string;
  by?: string;
  decided_at?: string;
}

/** Schema `HeldRequest`: a request the sandbox's ask policy holds for the owner. */
export interface IHeldRequest {
  request_id: string;
  sandbox: string;
  host: string;
  port: number;
  method: string;
  asked_at: string;
  expires_at: string;
  kernel: { id: string | null; notebook: string | null } | null;
}

/** What the owner may decide of a held request. */
export type RequestDecision = 'once' | 'sandbox' | 'deny';

/** Schema `NetworkAudit`: the last decisions, oldest first. */
export interface INetworkAudit {
  entries: INetworkAuditEntry[];
}

export const NETWORK_MODES: readonly NetworkMode[] = ['none', 'allowlist', 'ask', 'open'];

const LABEL = '[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?';
// A host name, or "*." and a name of two labels or more; then optionally ":port".
const PATTERN = new RegExp(
  `^(\\*\\.${LABEL}(\\.${LABEL})+|(${LABEL}\\.)*${LABEL})(:(?<port>\\d{1,5}))?$`
);

/** Whether `pattern` is one the server takes ("*" and "*.tld" it refuses: so does this). */
export function isDomainPattern(pattern: string): boolean {
  const match = PATTERN.exec(pattern);
  if (!match || pattern.length > 260) {
    return false;
  }
  const port = match.groups?.port;
  return port === undefined || (Number(port) >= 1 && Number(port) <= 65535);
}

/**
 * An editor's text (one pattern a line, or separated by commas or spaces; `#` starts a comment)
 * as patterns, lower-cased and without duplicates, and the entries it refused.
 */
export function parsePatterns(text: string): { patterns: string[]; invalid: string[] } {
  const patterns: string[] = [];
  const invalid: string[] = [];
  for (const line of text.split('\n')) {
    for (const raw of line.replace(/#.*/, '').split(/[\s,]+/)) {
      const entry = raw.trim().toLowerCase().replace(/\.$/, '');
      if (!entry) {
        continue;
      }
      if (!isDomainPattern(entry)) {
        invalid.push(raw.trim());
      } else if (!patterns.includes(entry)) {
        patterns.push(entry);
      }
    }
  }
  return { patterns, invalid };
}

/**
 * The body of a PUT: the allow list travels only with 'allowlist' and 'ask'; deny wins in every
 * mode.
 */
export function policyRequest(mode: NetworkMode, allow: string[], deny: string[]): INetworkPolicy {
  const body: INetworkPolicy = { mode };
  if (mode === 'allowlist' || mode === 'ask') {
    body.allow = allow;
  }
  if (deny.length) {
    body.deny = deny;
  }
  return body;
}

/** "allowed CONNECT pypi.org:443 (allow pypi.org)" for the audit list. */
export function auditLine(entry: INetworkAuditEntry): string {
  const verdict = auditVerdict(entry);
  const address = entry.address ? ` → ${entry.address}` : '';
  return `${entry.time} ${verdict} ${entry.method} ${entry.host}:${entry.port}${address} (${entry.rule})`;
}

/**
 * What became of the request, in the words of the proxy's rule: a host whose lookup failed, or
 * an allowed connection that failed, was not refused by the policy and is not called so.
 */
export function auditVerdict(entry: INetworkAuditEntry): string {
  if (entry.allowed) {
    return 'allowed';
  }
  if (entry.rule.startsWith('lookup failed')) {
    return 'DNS lookup failed';
  }
  if (entry.rule.startsWith('allowed (')) {
    return 'connection failed';
  }
  return 'refused';
}

/**
 * The question a held request puts to the owner, one line, the target first (Lab cuts a
 * notification's text at 140 characters) and the notebook by its file name: "pypi.org:443:
 * sandbox a1b2c3d4e5f6 (notebook analysis.ipynb) asks to connect".
 */
export function heldRequestMessage(request: IHeldRequest): string {
  const notebook = notebookName(request.kernel?.notebook);
  const from = notebook ? ` (notebook ${notebook})` : '';
  return `${request.host}:${request.port}: sandbox ${request.sandbox}${from} asks to connect`;
}

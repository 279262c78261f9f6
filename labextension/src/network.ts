/**
 * Network policy of a live sandbox (`GET/PUT /api/sandboxes/{id}/network`, and its audit log at
 * `/network/audit`). These routes are being added to the server; the shapes below follow the
 * design (policies none / allowlist / open; domain patterns; deny wins) and are checked in the
 * browser only once the server has them.
 */

export type NetworkPolicyName = 'none' | 'allowlist' | 'open';

export interface INetworkPolicy {
  policy: NetworkPolicyName | string;
  /** Domain patterns allowed under 'allowlist' ("example.org", "*.pypi.org"). */
  allow?: string[];
  /** Domain patterns always refused; deny wins over allow. */
  deny?: string[];
}

/** One egress decision the host-side proxy took. */
export interface INetworkAuditEntry {
  time: string;
  host: string;
  port?: number | null;
  allowed: boolean;
  reason?: string;
}

export const NETWORK_POLICIES: readonly NetworkPolicyName[] = ['none', 'allowlist', 'open'];

// A host name, or "*." and a host name: letters, digits, hyphens, dots; no scheme, port or path.
const PATTERN =
  /^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

/** Whether `pattern` is a domain pattern the allowlist editor accepts. */
export function isDomainPattern(pattern: string): boolean {
  return pattern.length <= 253 && PATTERN.test(pattern);
}

/**
 * The allowlist editor's text (one pattern a line, or separated by commas or spaces; `#` starts
 * a comment) as patterns, lower-cased and without duplicates, and the entries it refused.
 */
export function parseAllowlist(text: string): { patterns: string[]; invalid: string[] } {
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

/** The body of a PUT that sets `policy` (the allowlist only travels with 'allowlist'). */
export function policyRequest(policy: NetworkPolicyName, allow: string[]): INetworkPolicy {
  return policy === 'allowlist' ? { policy, allow } : { policy };
}

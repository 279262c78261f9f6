/**
 * Network policy of a live sandbox: a details section with the policy (none / allowlist /
 * open), an allowlist editor and the audit log of the egress proxy, and a "Network" action on
 * each row that opens it. Registered only when the server has the network routes (features.ts).
 */

import { Widget } from '@lumino/widgets';

import { Features, showIfPresent } from './features';
import { attempt, confirm } from './dialogs';
import { button, el, readAt } from './dom';
import { ISandbox } from './models';
import {
  auditLine,
  INetworkPolicyState,
  NETWORK_MODES,
  NetworkMode,
  parsePatterns,
  policyRequest
} from './network';
import { ISandboxViews } from './slots';
import { SandboxStore } from './store';

const AUDIT_ROWS = 20;
/** How often a shown audit log is read again (a host-side read: the sandbox does nothing). */
export const AUDIT_EVERY_S = 5;

/**
 * The allowlist last typed for each sandbox, this page's lifetime: the server keeps allow
 * patterns only in allowlist mode, so a switch to none or open and back would lose them.
 */
const typedAllowlists = new Map<string, string>();

export function addNetworkViews(views: ISandboxViews, features: Features): void {
  views.addRowAction({
    id: 'network',
    label: 'Network',
    rank: 60,
    isVisible: () => features.network === true,
    execute: async sandbox => views.openDetails(sandbox.id)
  });
  views.addDetailSection({
    id: 'network',
    title: 'Network policy',
    rank: 40,
    create: (sandbox, store) => new NetworkSection(sandbox, store, features)
  });
}

class NetworkSection extends Widget {
  constructor(
    private readonly sandbox: ISandbox,
    private readonly store: SandboxStore,
    private readonly features: Features
  ) {
    super();
    this.addClass('jp-SandboxNetwork');
    this.timer = setInterval(() => void this.renewAudit(), AUDIT_EVERY_S * 1000);
    void this.load();
  }

  dispose(): void {
    clearInterval(this.timer);
    super.dispose();
  }

  /** The audit log read again in place, while it is on screen (the editors are left alone). */
  private async renewAudit(): Promise<void> {
    const shown = this.auditNode;
    if (!shown || this.renewing || !this.isVisible) {
      return;
    }
    this.renewing = true;
    try {
      const fresh = await this.audit();
      if (!this.isDisposed && this.auditNode === shown) {
        shown.replaceWith(fresh);
        this.auditNode = fresh;
      }
    } finally {
      this.renewing = false;
    }
  }

  private async load(): Promise<void> {
    if (!showIfPresent(this, this.features.network)) {
      return;
    }
    const id = this.sandbox.id;
    const heading = el('h3', {}, 'Network policy');
    let state: INetworkPolicyState;
    try {
      state = await this.store.api.network(id);
    } catch (error) {
      this.node.replaceChildren(heading, el('p', { role: 'alert' }, (error as Error).message));
      return;
    }
    const select = el('select', { 'aria-label': `Network policy of sandbox ${id}` });
    for (const mode of NETWORK_MODES) {
      const option = el('option', { value: mode }, mode);
      option.selected = mode === state.mode;
      select.append(option);
    }
    const allow = editor(
      `Allowed hosts of sandbox ${id}, one a line`,
      state.allow,
      'pypi.org\n*.pythonhosted.org'
    );
    if (state.mode !== 'allowlist' && state.mode !== 'ask' && typedAllowlists.has(id)) {
      allow.value = typedAllowlists.get(id)!;
    }
    allow.addEventListener('input', () => typedAllowlists.set(id, allow.value));
    const deny = editor(
      `Denied hosts of sandbox ${id}, one a line`,
      state.deny,
      'evil.example.com:443'
    );
    const problem = el('p', { class: 'jp-SandboxPanel-error', role: 'alert' });
    const apply = button('Apply', `Apply the network policy of sandbox ${id}`, () => {
      const allowed = parsePatterns(allow.value);
      const denied = parsePatterns(deny.value);
      const invalid = [...allowed.invalid, ...denied.invalid];
      if (invalid.length) {
        problem.textContent = `Not a host pattern: ${invalid.join(', ')} (a host name, or *.domain, optionally :port)`;
        return;
      }
      problem.textContent = '';
      typedAllowlists.set(id, allow.value);
      const mode = select.value as NetworkMode;
      const body = policyRequest(mode, allowed.patterns, denied.patterns);
      void (async () => {
        // Open is the one mode that weakens isolation: it takes a second, deliberate click.
        if (
          mode === 'open' &&
          state.mode !== 'open' &&
          !(await confirm(
            `Open the network of sandbox ${id}?`,
            'Code in the sandbox will reach any public address through the host proxy ' +
              '(direct egress stays blocked; deny patterns still apply). ' +
              'An allowlist of the hosts it needs is safer.',
            'Open network'
          ))
        ) {
          return;
        }
        if (
          await attempt('Network policy not changed', () => this.store.api.setNetwork(id, body))
        ) {
          await this.store.refresh();
          await this.load();
        }
      })();
    });
    this.node.replaceChildren(
      heading,
      el('label', {}, 'Mode ', select),
      el('span', { class: 'jp-Sandbox-note' }, state.proxy_running ? ' (host proxy running)' : ''),
      el('label', { class: 'jp-SandboxNetwork-label' }, 'Allowed (allowlist and ask modes)', allow),
      el('label', { class: 'jp-SandboxNetwork-label' }, 'Denied (wins in every mode)', deny),
      problem,
      apply,
      (this.auditNode = await this.audit())
    );
  }

  private async audit(): Promise<HTMLElement> {
    let entries;
    try {
      entries = (await this.store.api.networkAudit(this.sandbox.id, AUDIT_ROWS)).entries;
    } catch (error) {
      return el('p', { role: 'alert' }, `Audit log: ${(error as Error).message}`);
    }
    const recent = [...entries].reverse();
    return el(
      'div',
      {},
      el('h4', {}, `Egress decisions (latest ${recent.length})`),
      el(
        'p',
        { class: 'jp-Sandbox-note jp-SandboxNetwork-readAt' },
        readAt(new Date(), AUDIT_EVERY_S)
      ),
      el(
        'ul',
        { 'aria-label': `Egress decisions of sandbox ${this.sandbox.id}` },
        ...recent.map(e =>
          el('li', { class: e.allowed ? 'jp-Sandbox-ok' : 'jp-Sandbox-bad' }, auditLine(e))
        )
      )
    );
  }

  private readonly timer: ReturnType<typeof setInterval>;
  /** The audit log on show, replaced in place by each read. */
  private auditNode: HTMLElement | null = null;
  private renewing = false;
}

function editor(label: string, patterns: string[], placeholder: string): HTMLTextAreaElement {
  const area = el('textarea', {
    class: 'jp-SandboxNetwork-patterns',
    rows: '4',
    'aria-label': label,
    placeholder
  });
  area.value = patterns.join('\n');
  return area;
}

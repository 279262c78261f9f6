/**
 * Network policy of a live sandbox: a details section with the policy (none / allowlist /
 * open), an allowlist editor and the audit log of the egress proxy, and a "Network" action on
 * each row that opens it. Registered only when the server has the network routes (features.ts).
 */

import { Widget } from '@lumino/widgets';

import { Features } from './features';
import { attempt } from './dialogs';
import { button, el } from './dom';
import { ISandbox } from './models';
import {
  INetworkAuditEntry,
  INetworkPolicy,
  NETWORK_POLICIES,
  NetworkPolicyName,
  parseAllowlist,
  policyRequest
} from './network';
import { ISandboxViews } from './slots';
import { SandboxStore } from './store';

const AUDIT_ROWS = 20;

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
    void this.load();
  }

  private async load(): Promise<void> {
    if (this.features.network !== true) {
      this.node.replaceChildren();
      this.hide();
      return;
    }
    this.show();
    const id = this.sandbox.id;
    let policy: INetworkPolicy;
    try {
      policy = await this.store.api.network(id);
    } catch (error) {
      this.node.replaceChildren(
        el('h3', {}, 'Network policy'),
        el('p', { role: 'alert' }, (error as Error).message)
      );
      return;
    }
    const select = el('select', { 'aria-label': `Network policy of sandbox ${id}` });
    for (const name of NETWORK_POLICIES) {
      const option = el('option', { value: name }, name);
      option.selected = name === policy.policy;
      select.append(option);
    }
    const allowlist = el('textarea', {
      class: 'jp-SandboxNetwork-allowlist',
      rows: '5',
      'aria-label': `Allowed domains of sandbox ${id}, one a line`,
      placeholder: 'pypi.org\n*.pythonhosted.org'
    });
    allowlist.value = (policy.allow ?? []).join('\n');
    const problem = el('p', { class: 'jp-SandboxPanel-error', role: 'alert' });
    const apply = button('Apply', `Apply the network policy of sandbox ${id}`, () => {
      const { patterns, invalid } = parseAllowlist(allowlist.value);
      if (invalid.length) {
        problem.textContent = `Not a domain pattern: ${invalid.join(', ')} (use host names or *.domain)`;
        return;
      }
      problem.textContent = '';
      const body = policyRequest(select.value as NetworkPolicyName, patterns);
      void attempt('Network policy not changed', () => this.store.api.setNetwork(id, body)).then(
        async () => {
          await this.store.refresh();
          await this.load();
        }
      );
    });
    this.node.replaceChildren(
      el('h3', {}, 'Network policy'),
      el('label', {}, 'Policy ', select),
      el(
        'label',
        { class: 'jp-SandboxNetwork-label' },
        'Allowed domains (allowlist; deny wins)',
        allowlist
      ),
      problem,
      apply,
      await this.audit()
    );
  }

  private async audit(): Promise<HTMLElement> {
    let entries: INetworkAuditEntry[];
    try {
      entries = await this.store.api.networkAudit(this.sandbox.id);
    } catch (error) {
      return el('p', { role: 'alert' }, `Audit log: ${(error as Error).message}`);
    }
    const recent = entries.slice(-AUDIT_ROWS).reverse();
    return el(
      'div',
      {},
      el('h4', {}, `Egress decisions (latest ${recent.length})`),
      el(
        'ul',
        { 'aria-label': `Egress decisions of sandbox ${this.sandbox.id}` },
        ...recent.map(e =>
          el(
            'li',
            { class: e.allowed ? 'jp-Sandbox-ok' : 'jp-Sandbox-bad' },
            `${e.time} ${e.allowed ? 'allowed' : 'refused'} ${e.host}${e.port ? `:${e.port}` : ''}${e.reason ? ` (${e.reason})` : ''}`
          )
        )
      )
    );
  }
}

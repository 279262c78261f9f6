/**
 * The Sandboxes side panel: one card per sandbox of the user, redrawn on every refresh of the
 * store, with the row actions of the views registry (built-in and plugged-in).
 */

import { Widget } from '@lumino/widgets';

import { actionGroup, button, el, facts } from './dom';
import {
  formatCpu,
  formatMemory,
  ISandbox,
  memoryLimit,
  notebookName,
  runtimeLabel,
  uptime,
  weakenedIsolation
} from './models';
import { ISandboxViews } from './slots';

export class SandboxPanel extends Widget {
  constructor(private readonly views: ISandboxViews) {
    super();
    this.id = 'jupyter-sandbox-panel';
    this.addClass('jp-SandboxPanel');
    this.title.caption = 'Sandboxes';
    this.node.setAttribute('role', 'region');
    this.node.setAttribute('aria-label', 'Sandboxes');
    views.store.changed.connect(this.render, this);
    views.changed.connect(this.render, this);
    this.render();
  }

  dispose(): void {
    if (!this.isDisposed) {
      this.views.store.changed.disconnect(this.render, this);
      this.views.changed.disconnect(this.render, this);
    }
    super.dispose();
  }

  protected onAfterShow(): void {
    void this.views.store.refresh();
  }

  render(): void {
    // Redrawn on every refresh: a keyboard user keeps focus on the control they were on.
    const focused = this.node.contains(document.activeElement)
      ? document.activeElement?.getAttribute('aria-label')
      : null;
    this.draw();
    if (focused) {
      const again = [...this.node.querySelectorAll<HTMLElement>('[aria-label]')].find(
        node => node.getAttribute('aria-label') === focused
      );
      again?.focus();
    }
  }

  private draw(): void {
    const store = this.views.store;
    const header = el(
      'div',
      { class: 'jp-SandboxPanel-header' },
      el('h2', {}, 'Sandboxes'),
      button('Refresh', 'Refresh the list of sandboxes', () => void store.refresh())
    );
    const children: Node[] = [header];
    if (store.error) {
      children.push(
        el('p', { class: 'jp-SandboxPanel-error', role: 'alert' }, store.error.message)
      );
    }
    const list = el('ul', { class: 'jp-SandboxPanel-list', 'aria-label': 'Your sandboxes' });
    for (const sandbox of store.sandboxes) {
      list.append(this.card(sandbox));
    }
    if (!store.sandboxes.length && !store.error) {
      children.push(
        el(
          'p',
          { class: 'jp-SandboxPanel-empty' },
          'No sandboxes. Start a Sandboxed Python notebook.'
        )
      );
    }
    children.push(list);
    this.node.replaceChildren(...children);
  }

  private card(sandbox: ISandbox): HTMLElement {
    const store = this.views.store;
    const stats = store.stats(sandbox.id);
    const weak = weakenedIsolation(sandbox);
    const runtime = el(
      'span',
      {
        class: `jp-Sandbox-runtime ${weak.length ? 'jp-mod-weak' : ''}`,
        title: weak.length ? `Weakened isolation:\n${weak.join('\n')}` : 'Default isolation'
      },
      runtimeLabel(sandbox.runtime),
      weak.length
        ? el('span', { class: 'jp-Sandbox-weakMark', 'aria-label': 'weakened isolation' }, ' ⚠')
        : null
    );
    const title = el(
      'div',
      { class: 'jp-Sandbox-cardTitle' },
      el(
        'span',
        { class: `jp-Sandbox-state jp-mod-${sandbox.status}`, title: sandbox.status },
        sandbox.status
      ),
      el('code', { class: 'jp-Sandbox-id' }, sandbox.id),
      runtime
    );
    const notebook = sandbox.kernel?.notebook;
    const rows: [string, string | Node][] = [
      ['Image', sandbox.image],
      ['Context', sandbox.context ?? (sandbox.ephemeral ? "(kernel's own)" : '—')],
      ['Notebook', notebook ? el('span', { title: notebook }, notebookName(notebook)) : '—'],
      ['Network', sandbox.network?.policy ?? 'none'],
      ['Uptime', uptime(sandbox, Date.now())],
      ['CPU', formatCpu(stats?.cpu_percent)],
      ['Memory', formatMemory(stats?.memory_bytes, memoryLimit(sandbox, stats))]
    ];
    const actions = actionGroup(`Actions on sandbox ${sandbox.id}`);
    for (const action of this.views.rowActions) {
      if (action.isVisible && !action.isVisible(sandbox)) {
        continue;
      }
      actions.append(
        button(
          action.label,
          `${action.label} sandbox ${sandbox.id}`,
          () => void action.execute(sandbox, store),
          `jp-Sandbox-action-${action.id}${action.danger ? ' jp-mod-warn' : ''}`
        )
      );
    }
    return el(
      'li',
      {
        class: 'jp-Sandbox-card',
        'data-sandbox-id': sandbox.id,
        'aria-label': `Sandbox ${sandbox.id}`
      },
      title,
      facts(rows),
      actions
    );
  }
}

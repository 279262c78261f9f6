/**
 * Ports of a running sandbox: a details section that lists the servers listening in the sandbox
 * (port, command) with a Refresh button, opens one in a JupyterLab tab or a new browser tab, and
 * opens a port by number (one that listens later, or one the list does not show). The tabs it
 * opens are portTabs.ts's. The list is read when the section is shown and on demand only (each
 * read is one command in the sandbox). Registered only when the server has the ports routes
 * (features.ts).
 */

import { Widget } from '@lumino/widgets';

import { button, el } from './dom';
import { Features, showIfPresent } from './features';
import { ISandbox } from './models';
import { IListeningPort, parsePort, portProblem, sortPorts } from './ports';
import { SandboxPorts } from './portTabs';
import { ISandboxViews } from './slots';
import { SandboxStore } from './store';

export const EMPTY_PORTS =
  'No server listens in this sandbox. Start one, e.g. `python -m http.server 8000` in a cell or terminal.';

export function addPortsViews(views: ISandboxViews, features: Features, ports: SandboxPorts): void {
  views.addDetailSection({
    id: 'ports',
    title: 'Ports',
    rank: 37, // after the background commands, which often start the servers
    create: (sandbox, store) => new PortsSection(sandbox, store, features, ports)
  });
}

class PortsSection extends Widget {
  constructor(
    private readonly sandbox: ISandbox,
    private readonly store: SandboxStore,
    private readonly features: Features,
    private readonly ports: SandboxPorts
  ) {
    super();
    this.addClass('jp-SandboxPorts');
    const id = sandbox.id;
    this.input = el('input', {
      type: 'text',
      inputmode: 'numeric',
      class: 'jp-SandboxPorts-input',
      'aria-label': `Port number to open in sandbox ${id}`,
      placeholder: '8000',
      autocomplete: 'off',
      spellcheck: 'false'
    });
    this.input.addEventListener('input', () => this.check(false));
    this.input.addEventListener('keydown', event => {
      if (event.key === 'Enter' && !event.isComposing) {
        event.preventDefault();
        void this.openNumber();
      }
    });
    this.openButton = button(
      'Open',
      `Open the port number typed in sandbox ${id}`,
      () => void this.openNumber()
    );
    this.refreshButton = button('Refresh', `Refresh the ports of sandbox ${id}`, () => {
      void this.refresh();
    });
    this.problem = el('p', { class: 'jp-SandboxPanel-error', role: 'alert' });
    this.note = el('p', { class: 'jp-Sandbox-note' });
    this.listBox = el('div', { class: 'jp-SandboxPorts-list' });
    this.status = sandbox.status;
    this.store.changed.connect(this.sandboxChanged, this);
    if (!showIfPresent(this, this.features.ports)) {
      return;
    }
    this.node.replaceChildren(
      el('h3', {}, 'Ports'),
      this.listBox,
      el(
        'div',
        {
          class: 'jp-SandboxPorts-form',
          role: 'group',
          'aria-label': `Open a port of sandbox ${id} by number`
        },
        el('label', {}, 'Port ', this.input),
        this.openButton,
        this.refreshButton
      ),
      this.note,
      this.problem
    );
    void this.refresh();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.loads += 1; // answers still on their way are dropped
    this.store.changed.disconnect(this.sandboxChanged, this);
    super.dispose();
  }

  /** Shown again (its tab brought to the front): what listens may have changed. */
  protected onAfterShow(): void {
    if (this.present && this.loaded) {
      void this.refresh();
    }
  }

  private get present(): boolean {
    return !this.isDisposed && this.features.ports === true;
  }

  /** The sandbox as the store last listed it (its state changes under this section). */
  private get current(): ISandbox {
    return this.store.sandboxes.find(s => s.id === this.sandbox.id) ?? this.sandbox;
  }

  private get running(): boolean {
    return this.current.status === 'running';
  }

  /** A resumed sandbox's servers are read again; a paused one's controls are disabled. */
  private sandboxChanged(): void {
    const status = this.current.status;
    if (status !== this.status && this.present) {
      this.status = status;
      void this.refresh();
    }
  }

  /** Ports are served only by a running sandbox: the form says so otherwise. */
  private updateForm(): void {
    const running = this.running;
    this.input.disabled = !running;
    this.openButton.disabled = !running || this.opening;
    this.refreshButton.disabled = !running;
    this.note.textContent = running
      ? ''
      : `Ports are served only while the sandbox runs; this one is ${this.current.status}.`;
    this.note.hidden = running;
  }

  /** Say why the typed text is not a port; `submitted`: an empty field is a problem too. */
  private check(submitted: boolean): number | null {
    const text = this.input.value;
    const problem = text.trim() || submitted ? portProblem(text) : null;
    this.problem.textContent = problem ?? '';
    this.input.setAttribute('aria-invalid', problem === null ? 'false' : 'true');
    this.input.classList.toggle('jp-mod-error', problem !== null);
    return problem === null ? parsePort(text) : null;
  }

  /** Open the typed port in a tab: validated here first, then its URL asked of the server. */
  private async openNumber(): Promise<void> {
    if (this.opening || !this.present || !this.running) {
      return;
    }
    const port = this.check(true);
    if (port === null) {
      return;
    }
    this.opening = true;
    this.updateForm();
    try {
      await this.ports.open(this.sandbox.id, port);
      if (this.present) {
        this.input.value = '';
        this.problem.textContent = '';
      }
    } catch (error) {
      if (this.present) {
        this.problem.textContent = `Port ${port}: ${(error as Error).message}`;
      }
    } finally {
      this.opening = false;
      if (this.present) {
        this.updateForm();
      }
    }
  }

  /** Read the listening servers now (a running sandbox's only). */
  private async refresh(): Promise<void> {
    if (!this.present) {
      return;
    }
    this.updateForm();
    const ticket = ++this.loads; // a slower, older answer must not overwrite a newer one
    if (!this.running) {
      this.listBox.replaceChildren();
      return;
    }
    if (!this.loaded) {
      this.listBox.replaceChildren(el('p', { class: 'jp-Sandbox-note' }, 'Looking for servers…'));
    }
    let ports: IListeningPort[];
    try {
      ports = sortPorts(await this.store.api.listPorts(this.sandbox.id));
    } catch (error) {
      if (ticket === this.loads && this.present) {
        this.listBox.replaceChildren(el('p', { role: 'alert' }, (error as Error).message));
      }
      return;
    } finally {
      this.loaded = true;
    }
    if (ticket !== this.loads || !this.present) {
      return;
    }
    this.render(ports);
  }

  private render(ports: IListeningPort[]): void {
    if (!ports.length) {
      this.listBox.replaceChildren(el('p', { class: 'jp-SandboxPanel-empty' }, EMPTY_PORTS));
      return;
    }
    const id = this.sandbox.id;
    this.listBox.replaceChildren(
      el(
        'table',
        { class: 'jp-SandboxPorts-table', 'aria-label': `Listening ports of sandbox ${id}` },
        el(
          'thead',
          {},
          el('tr', {}, ...['Port', 'Command', 'Actions'].map(title => el('th', {}, title)))
        ),
        el('tbody', {}, ...ports.map(p => this.row(p)))
      )
    );
  }

  private row(listening: IListeningPort): HTMLTableRowElement {
    const id = this.sandbox.id;
    const port = listening.port;
    const open = button('Open', `Open port ${port} of sandbox ${id} in a JupyterLab tab`, () =>
      this.openListed(listening, false)
    );
    const browserTab = button(
      'Open in a new browser tab',
      `Open port ${port} of sandbox ${id} in a new browser tab`,
      () => this.openListed(listening, true)
    );
    return el(
      'tr',
      { 'data-port': String(port) },
      el('td', {}, el('code', {}, String(port))),
      el(
        'td',
        { title: listening.command ?? '' },
        el('code', { class: 'jp-SandboxPorts-command' }, listening.command || '—')
      ),
      el(
        'td',
        {},
        el(
          'div',
          {
            class: 'jp-Sandbox-actions',
            role: 'group',
            'aria-label': `Actions on port ${port} of sandbox ${id}`
          },
          open,
          browserTab
        )
      )
    );
  }

  /** Open a listed port from the URL the list gave (synchronously: a popup must not wait). */
  private openListed(listening: IListeningPort, browserTab: boolean): void {
    try {
      if (browserTab) {
        this.ports.openInBrowser(listening.url);
      } else {
        this.ports.openUrl(this.sandbox.id, listening.port, listening.url);
      }
      this.problem.textContent = '';
    } catch (error) {
      this.problem.textContent = `Port ${listening.port}: ${(error as Error).message}`;
    }
  }

  private readonly input: HTMLInputElement;
  private readonly openButton: HTMLButtonElement;
  private readonly refreshButton: HTMLButtonElement;
  private readonly problem: HTMLParagraphElement;
  private readonly note: HTMLParagraphElement;
  private readonly listBox: HTMLDivElement;
  private status: string;
  private loaded = false;
  private opening = false;
  private loads = 0;
}

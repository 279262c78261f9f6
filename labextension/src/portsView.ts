/**
 * Ports of a running sandbox: a details section that lists the servers listening in the sandbox
 * (port, command) with a Refresh button, opens one in a JupyterLab tab or a new browser tab, and
 * opens a port by number (one that listens later, or one the list does not show); and the tabs it
 * opens: a sandboxed frame (opaque origin, scripts allowed, never allow-same-origin, no
 * referrer) on the port's URL, which the server proxies to the sandbox's loopback. The list is
 * read when the section is shown and on demand only (each read is one command in the sandbox).
 * Registered only when the server has the ports routes (features.ts).
 */

import { JupyterFrontEnd } from '@jupyterlab/application';
import { IFrame, MainAreaWidget } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { SandboxApi } from './api';
import { askName } from './dialogs';
import { button, el } from './dom';
import { Features, showIfPresent } from './features';
import { ISandbox } from './models';
import {
  FRAME_SANDBOX,
  IListeningPort,
  parsePort,
  portHref,
  portProblem,
  portTabTitle,
  sortPorts
} from './ports';
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

type PortTab = MainAreaWidget<IFrame>;

/** Opens ports in tabs of the main area (one tab a port, brought back when opened again). */
export class SandboxPorts {
  constructor(
    private readonly shell: JupyterFrontEnd.IShell,
    private readonly api: SandboxApi,
    /** The Jupyter server's absolute base URL: port URLs must lie under it. */
    private readonly baseUrl: string
  ) {}

  /** Ask the server for the port's URL, then open it in a tab (rejects with the server's error). */
  async open(sandboxId: string, port: number): Promise<void> {
    const answer = await this.api.portUrl(sandboxId, port);
    this.openUrl(sandboxId, port, answer.url);
  }

  /** Open the server's `url` of the port in a tab: a sandboxed frame. Throws on a foreign URL. */
  openUrl(sandboxId: string, port: number, url: string): void {
    const href = portHref(url, this.baseUrl);
    const key = `${sandboxId}:${port}`;
    const open = this.tabs.get(key);
    if (open && !open.isDisposed) {
      if (open.content.url !== href) {
        open.content.url = href;
      }
      this.shell.activateById(open.id);
      return;
    }
    const frame = new IFrame({ sandbox: [...FRAME_SANDBOX], referrerPolicy: 'no-referrer' });
    frame.url = href;
    frame.addClass('jp-SandboxPort-frame');
    frame.node
      .querySelector('iframe')
      ?.setAttribute('title', `Port ${port} of sandbox ${sandboxId}`);
    const widget = new MainAreaWidget({ content: frame });
    widget.id = `jupyter-sandbox-port-${sandboxId}-${port}`;
    widget.addClass('jp-SandboxPort');
    widget.title.label = portTabTitle(sandboxId, port);
    widget.title.caption = `Port ${port} of sandbox ${sandboxId}, served by the sandbox's code (an opaque origin: it cannot act with your Jupyter session)`;
    widget.title.closable = true;
    widget.toolbar.addItem(
      'reload',
      new Widget({
        node: button('Reload', `Reload port ${port} of sandbox ${sandboxId}`, () => {
          frame.url = frame.url; // setting src again loads it again (its document is another origin's)
        })
      })
    );
    widget.toolbar.addItem(
      'browser-tab',
      new Widget({
        node: button(
          'Open in a new browser tab',
          `Open port ${port} of sandbox ${sandboxId} in a new browser tab`,
          () => openInBrowserTab(frame.url)
        )
      })
    );
    widget.disposed.connect(() => {
      if (this.tabs.get(key) === widget) {
        this.tabs.delete(key);
      }
    });
    this.tabs.set(key, widget);
    this.shell.add(widget, 'main');
    this.shell.activateById(widget.id);
  }

  /** Open the server's `url` of a port in a new browser tab. Throws on a foreign URL. */
  openInBrowser(url: string): void {
    openInBrowserTab(portHref(url, this.baseUrl));
  }

  private tabs = new Map<string, PortTab>();
}

/**
 * A new browser tab on `href`, which gets no handle on this page (noopener) and is not told its
 * address (noreferrer: the page's URL can hold the Jupyter token, and the sandbox's server would
 * read it from the Referer).
 */
function openInBrowserTab(href: string): void {
  window.open(href, '_blank', 'noopener,noreferrer');
}

/**
 * Ask for a port of the sandbox `sandboxId` to open, the first listening one proposed. Resolves
 * the port, or null when the user cancelled.
 */
export async function askPort(api: SandboxApi, sandboxId: string): Promise<number | null> {
  let listening: IListeningPort[] = [];
  try {
    listening = sortPorts(await api.listPorts(sandboxId));
  } catch {
    // The dialog still opens a port by number; opening it says what the server refuses.
  }
  const numbers = listening.map(p => p.port).join(', ');
  const text = await askName({
    title: `Open a port of sandbox ${sandboxId}`,
    label: listening.length ? `Port (listening now: ${numbers})` : 'Port (none listens yet)',
    inputLabel: `Port number to open in sandbox ${sandboxId}`,
    accept: 'Open',
    initial: listening.length ? String(listening[0].port) : '',
    problem: portProblem
  });
  return text === null ? null : parsePort(text);
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

/**
 * The list in a sandbox's Ports section (portsView.ts): the servers listening in the sandbox,
 * read from the server when the section asks (each read is one command in the sandbox, so it is
 * never polled), shown as a table of port, command and the buttons that open one in a JupyterLab
 * tab or a new browser tab. An answer that comes after a newer read was asked for is dropped.
 */

import { SandboxApi } from './api';
import { actionGroup, button, el } from './dom';
import { IListeningPort, sortPorts } from './ports';

export const EMPTY_PORTS =
  'No server listens in this sandbox. Start one, e.g. `python -m http.server 8000` in a cell or terminal.';

/** Opens a listed port from the URL the list gave, in a Lab tab or a new browser tab. */
export type OpenListed = (listening: IListeningPort, browserTab: boolean) => void;

export class PortsList {
  constructor(
    private readonly sandboxId: string,
    private readonly api: SandboxApi,
    private readonly open: OpenListed
  ) {}

  readonly node = el('div', { class: 'jp-SandboxPorts-list' });

  /** Whether a read has answered (before that, the list says it is looking). */
  get loaded(): boolean {
    return this._loaded;
  }

  /** Whether a read is on its way (a periodic read then waits for the next turn). */
  get reading(): boolean {
    return this._reading;
  }

  /** Empty the list (a sandbox that is not running serves no port); a read on its way is dropped. */
  clear(): void {
    this.loads += 1;
    this.node.replaceChildren();
  }

  /** Drop the answers still on their way (the section is going). */
  dispose(): void {
    this.loads += 1;
  }

  /** Read the listening servers now and show them, or the server's refusal. */
  async load(): Promise<void> {
    const ticket = ++this.loads; // a slower, older answer must not overwrite a newer one
    if (!this._loaded) {
      this.node.replaceChildren(el('p', { class: 'jp-Sandbox-note' }, 'Looking for servers…'));
    }
    let ports: IListeningPort[];
    this._reading = true;
    try {
      ports = sortPorts(await this.api.listPorts(this.sandboxId));
    } catch (error) {
      if (ticket === this.loads) {
        this.node.replaceChildren(el('p', { role: 'alert' }, (error as Error).message));
      }
      return;
    } finally {
      this._loaded = true;
      this._reading = false;
    }
    if (ticket === this.loads) {
      this.render(ports);
    }
  }

  private render(ports: IListeningPort[]): void {
    if (!ports.length) {
      this.node.replaceChildren(el('p', { class: 'jp-SandboxPanel-empty' }, EMPTY_PORTS));
      return;
    }
    const id = this.sandboxId;
    this.node.replaceChildren(
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
    const id = this.sandboxId;
    const port = listening.port;
    const open = button('Open', `Open port ${port} of sandbox ${id} in a JupyterLab tab`, () =>
      this.open(listening, false)
    );
    const browserTab = button(
      'Open in a new browser tab',
      `Open port ${port} of sandbox ${id} in a new browser tab`,
      () => this.open(listening, true)
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
      el('td', {}, actionGroup(`Actions on port ${port} of sandbox ${id}`, open, browserTab))
    );
  }

  private _loaded = false;
  private _reading = false;
  private loads = 0;
}

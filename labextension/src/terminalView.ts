/**
 * A terminal in a running sandbox: an "Open terminal" action on each running sandbox's row, and
 * the main-area tab it opens, JupyterLab's own terminal widget (xterm.js) over a shell in the
 * sandbox (terminal.ts). The tab follows the user's JupyterLab terminal settings (theme, font,
 * screen reader mode, close on exit); closing it ends the shell. Registered only when the
 * server has the terminal route (features.ts).
 */

import { JupyterFrontEnd } from '@jupyterlab/application';
import { MainAreaWidget, showErrorMessage } from '@jupyterlab/apputils';
import { ServerConnection } from '@jupyterlab/services';
import { ITerminal, Terminal } from '@jupyterlab/terminal';
import { terminalIcon } from '@jupyterlab/ui-components';
import { ReadonlyPartialJSONObject } from '@lumino/coreutils';

import { Features } from './features';
import { allowedActions } from './models';
import { ISandboxViews } from './slots';
import { SandboxStore } from './store';
import { SandboxTerminalConnection, terminalRefusal } from './terminal';

/** Where JupyterLab keeps the user's terminal settings. */
export const TERMINAL_SETTINGS = '@jupyterlab/terminal-extension:plugin';

export function addTerminalViews(
  views: ISandboxViews,
  features: Features,
  open: (sandboxId: string) => void
): void {
  views.addRowAction({
    id: 'terminal',
    label: 'Open terminal',
    rank: 15,
    isVisible: s => features.terminal === true && allowedActions(s).terminal,
    execute: async sandbox => open(sandbox.id)
  });
}

type SandboxTerminal = MainAreaWidget<Terminal>;

/** Opens the terminal tabs, and keeps the open ones in step with the user's settings. */
export class SandboxTerminals {
  constructor(
    private readonly shell: JupyterFrontEnd.IShell,
    private readonly serverSettings: ServerConnection.ISettings,
    private readonly store: SandboxStore
  ) {}

  /** The user's terminal settings (JupyterLab's), for new tabs and the open ones. */
  setOptions(settings: ReadonlyPartialJSONObject): void {
    // An initial command is meant for the server's own shells, not for a sandbox's.
    const { initialCommand: _, ...options } = settings as Partial<ITerminal.IOptions>;
    this.options = options;
    this.whenReady(terminal => {
      for (const [name, value] of Object.entries(options)) {
        terminal.setOption(name as keyof ITerminal.IOptions, value as never);
      }
    });
  }

  /** JupyterLab's theme changed: a terminal that inherits it takes its new colours. */
  themeChanged(): void {
    this.whenReady(terminal => {
      if (terminal.getOption('theme') === 'inherit') {
        terminal.setOption('theme', 'inherit');
      }
    });
  }

  /** Open a tab with a new shell in the sandbox `sandboxId`. */
  openTerminal(sandboxId: string): void {
    const connection = new SandboxTerminalConnection({
      sandboxId,
      serverSettings: this.serverSettings
    });
    const content = new Terminal(connection, this.options);
    content.title.label = `Terminal ${sandboxId}`; // the widget's own, once connected
    content.title.caption = `A shell in sandbox ${sandboxId}`;
    const widget = new MainAreaWidget({ content });
    widget.id = `jupyter-sandbox-terminal-${++this.opened}`;
    widget.addClass('jp-SandboxTerminal');
    widget.title.icon = terminalIcon;
    widget.title.closable = true;
    // Closing the tab closes the socket, and the server ends the shell: unlike a terminal of
    // the server's own, there is no session to come back to.
    widget.disposed.connect(() => {
      this.open.delete(widget);
      connection.dispose();
    });
    connection.connectionStatusChanged.connect((_, status) => {
      if (status === 'disconnected' && !connection.isDisposed) {
        void this.refused(widget, sandboxId);
      }
    });
    this.open.add(widget);
    this.shell.add(widget, 'main');
    this.shell.activateById(widget.id);
  }

  /** Change each open terminal once its xterm.js is there (it loads after the tab opens). */
  private whenReady(change: (terminal: Terminal) => void): void {
    for (const widget of this.open) {
      void widget.content.ready.then(() => !widget.isDisposed && change(widget.content));
    }
  }

  /** The server refused the terminal: close its tab and say why. */
  private async refused(widget: SandboxTerminal, sandboxId: string): Promise<void> {
    widget.dispose();
    const reason = await terminalRefusal(this.store.api, sandboxId);
    void this.store.refresh(); // the sandbox may have changed since the list was read
    await showErrorMessage('Terminal failed', reason);
  }

  private options: Partial<ITerminal.IOptions> = {};
  private open = new Set<SandboxTerminal>();
  private opened = 0;
}

/**
 * The tabs a port opens in: a main-area tab per port whose content is a sandboxed frame (opaque
 * origin, scripts allowed, never allow-same-origin, no referrer) on the port's URL, which the
 * server proxies to the sandbox's loopback, with Reload and "Open in a new browser tab" in its
 * toolbar; a new browser tab that learns nothing of this page; and the dialog that asks for a
 * port by number (the palette command's). The Ports section (portsView.ts) and the command
 * (index.ts) both open ports through SandboxPorts, so that a port has one tab whichever opened it,
 * and the section revokes a sandbox's links through it, so that its open tabs get the new ones.
 */

import { JupyterFrontEnd } from '@jupyterlab/application';
import { IFrame, MainAreaWidget } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { SandboxApi } from './api';
import { askName } from './dialogs';
import { button } from './dom';
import {
  FRAME_SANDBOX,
  IListeningPort,
  parsePort,
  portHref,
  portProblem,
  portTabTitle,
  sortPorts
} from './ports';

type PortTab = MainAreaWidget<IFrame>;

/** An open tab, with the sandbox and the port it shows. */
interface IOpenPort {
  sandboxId: string;
  port: number;
  tab: PortTab;
}

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
    const open = this.tabs.get(key)?.tab;
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
      if (this.tabs.get(key)?.tab === widget) {
        this.tabs.delete(key);
      }
    });
    this.tabs.set(key, { sandboxId, port, tab: widget });
    this.shell.add(widget, 'main');
    this.shell.activateById(widget.id);
  }

  /** Open the server's `url` of a port in a new browser tab. Throws on a foreign URL. */
  openInBrowser(url: string): void {
    openInBrowserTab(portHref(url, this.baseUrl));
  }

  /**
   * Revoke every link of the sandbox's ports (they answer 404 from then on), then give each open
   * tab of the sandbox its port's new link and load it, so that Lab's own tabs keep working (a
   * browser tab or a URL shared elsewhere does not). Rejects with the server's error; once the
   * links are revoked, with the ports whose tab could not get a new link (the others got theirs).
   */
  async revokeLinks(sandboxId: string): Promise<void> {
    await this.api.revokePorts(sandboxId);
    const open = [...this.tabs.values()].filter(o => o.sandboxId === sandboxId);
    const results = await Promise.allSettled(open.map(o => this.renew(o)));
    const failed = results.flatMap((result, i) =>
      result.status === 'rejected'
        ? [`port ${open[i].port}: ${(result.reason as Error)?.message ?? result.reason}`]
        : []
    );
    if (failed.length) {
      throw new Error(`links revoked, but a tab kept its dead link (${failed.join('; ')})`);
    }
  }

  /** Load the port's new link in its tab (setting the frame's src loads it). */
  private async renew(open: IOpenPort): Promise<void> {
    const answer = await this.api.portUrl(open.sandboxId, open.port);
    const href = portHref(answer.url, this.baseUrl);
    if (!open.tab.isDisposed) {
      open.tab.content.url = href;
    }
  }

  private tabs = new Map<string, IOpenPort>();
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

/**
 * Ports of a running sandbox: a details section that lists the servers listening in the sandbox
 * (port, command; portsList.ts) with a Refresh button, opens one in a JupyterLab tab or a new
 * browser tab, opens a port by number (one that listens later, or one the list does not show),
 * and revokes every link of the sandbox's ports (asked first; any sandbox, running or not). The
 * tabs it opens are portTabs.ts's. The list is read when the section is shown, on demand, and every
 * PORTS_EVERY_S seconds while it is on screen (each read is one command in the sandbox), and
 * says when it was read. Registered only when the server has the ports routes
 * (features.ts).
 */

import { Widget } from '@lumino/widgets';

import { confirm } from './dialogs';
import { button, el, readAt } from './dom';
import { Features, showIfPresent } from './features';
import { ISandbox } from './models';
import { IListeningPort, parsePort, portProblem } from './ports';
import { PortsList } from './portsList';
import { SandboxPorts } from './portTabs';
import { ISandboxViews } from './slots';
import { SandboxStore } from './store';

/** What revoking the links does, asked before it is done. */
export const REVOKE_QUESTION =
  "Revoke every link to this sandbox's ports? Anyone holding one — a browser tab, a shared URL — " +
  'loses access; new links are made when asked for. Open connections are not cut.';

/** How often a shown list of ports is read again (a server started since shows up by itself). */
export const PORTS_EVERY_S = 15;

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
    this.revokeButton = button(
      'Revoke links',
      `Revoke every link to the ports of sandbox ${id}`,
      () => void this.revokeLinks()
    );
    this.problem = el('p', { class: 'jp-SandboxPanel-error', role: 'alert' });
    this.note = el('p', { class: 'jp-Sandbox-note' });
    this.readStamp = el('p', { class: 'jp-Sandbox-note jp-SandboxPorts-readAt' });
    this.timer = setInterval(() => {
      // Only what is on screen is read again: a hidden tab costs the sandbox nothing.
      if (this.present && this.running && this.isVisible && !this.list.reading) {
        void this.refresh();
      }
    }, PORTS_EVERY_S * 1000);
    this.list = new PortsList(id, store.api, (listening, browserTab) =>
      this.openListed(listening, browserTab)
    );
    this.status = sandbox.status;
    this.store.changed.connect(this.sandboxChanged, this);
    if (!showIfPresent(this, this.features.ports)) {
      return;
    }
    this.node.replaceChildren(
      el('h3', {}, 'Ports'),
      this.list.node,
      this.readStamp,
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
      el(
        'div',
        {
          class: 'jp-SandboxPorts-form',
          role: 'group',
          'aria-label': `Links to the ports of sandbox ${id}`
        },
        this.revokeButton
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
    clearInterval(this.timer);
    this.list.dispose(); // answers still on their way are dropped
    this.store.changed.disconnect(this.sandboxChanged, this);
    super.dispose();
  }

  /** Shown again (its tab brought to the front): what listens may have changed. */
  protected onAfterShow(): void {
    if (this.present && this.list.loaded) {
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

  /** Listed, and not on its way out: its links can be revoked. */
  private get exists(): boolean {
    const listed = this.store.sandboxes.find(s => s.id === this.sandbox.id);
    return listed !== undefined && listed.status !== 'removing';
  }

  /** A resumed sandbox's servers are read again; a paused one's controls are disabled. */
  private sandboxChanged(): void {
    if (!this.present) {
      return;
    }
    const status = this.current.status;
    if (status !== this.status) {
      this.status = status;
      void this.refresh();
    } else {
      this.updateForm(); // the sandbox may be gone
    }
  }

  /** Ports are served only by a running sandbox: the form says so otherwise. */
  private updateForm(): void {
    const running = this.running;
    this.input.disabled = !running;
    this.openButton.disabled = !running || this.opening;
    this.refreshButton.disabled = !running;
    this.revokeButton.disabled = !this.exists || this.revoking;
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
    if (this.running) {
      await this.list.load();
      if (this.present) {
        this.readStamp.textContent = `Listening servers ${readAt(new Date(), PORTS_EVERY_S)}`;
      }
    } else {
      this.list.clear();
      this.readStamp.textContent = '';
    }
  }

  /**
   * Revoke every link of the sandbox's ports, once the user said yes: the open Lab tabs of its
   * ports get their new links (portTabs.ts), and the list is read again for its new URLs.
   */
  private async revokeLinks(): Promise<void> {
    const title = `Revoke the port links of sandbox ${this.sandbox.id}?`;
    if (
      this.revoking ||
      !this.present ||
      !(await confirm(title, REVOKE_QUESTION, 'Revoke links'))
    ) {
      return;
    }
    this.revoking = true;
    this.updateForm();
    try {
      await this.ports.revokeLinks(this.sandbox.id);
      this.problem.textContent = '';
    } catch (error) {
      this.problem.textContent = `Revoking the links: ${(error as Error).message}`;
    } finally {
      this.revoking = false;
      void this.refresh(); // the listed URLs are dead now; nothing is done once disposed
    }
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
  private readonly revokeButton: HTMLButtonElement;
  private readonly problem: HTMLParagraphElement;
  private readonly note: HTMLParagraphElement;
  private readonly readStamp: HTMLParagraphElement;
  private readonly timer: ReturnType<typeof setInterval>;
  private readonly list: PortsList;
  private status: string;
  private opening = false;
  private revoking = false;
}

/**
 * Background commands of a sandbox: a details section that starts a command left running (a
 * dev server, a long job), lists the sandbox's commands with their status, shows a command's
 * output below the list (followed while it runs: read again from where the last read ended,
 * every second) and stops one (killing everything it started, forgetting its output). The list
 * is read again at the panel's refresh interval while the section is shown; nothing is asked
 * while it is hidden, and every timer ends with it. Registered only when the server has the
 * commands routes (features.ts).
 */

import { Widget } from '@lumino/widgets';

import { SandboxApiError } from './api';
import {
  commandLine,
  commandStatus,
  FOLLOW_INTERVAL_MS,
  fromLineStart,
  IBackgroundCommand,
  keepTail,
  keptNote,
  nextRead,
  statusClass
} from './commands';
import { attempt, confirm } from './dialogs';
import { actionGroup, button, el } from './dom';
import { Features, showIfPresent } from './features';
import { formatModified } from './files';
import { ISandbox } from './models';
import { ISandboxViews } from './slots';
import { SandboxStore } from './store';

/** Output kept in the page for one command: its end, at most this many bytes (and characters). */
export const KEPT_OUTPUT = 256 * 1024;

export function addCommandsViews(views: ISandboxViews, features: Features): void {
  // The command whose output each sandbox's section shows: a redraw of the details keeps it.
  const shown = new Map<string, string>();
  views.addDetailSection({
    id: 'commands',
    title: 'Background commands',
    rank: 35,
    create: (sandbox, store) => new CommandsSection(sandbox, store, features, shown)
  });
}

/** The output being followed: where the next read starts, and what is kept of it. */
interface IFollowed {
  commandId: string;
  offset: number;
  text: string;
  /** Some of the output (its beginning) is not shown. */
  cut: boolean;
  /** The next read starts where the last skipped to, likely inside a line. */
  skipped: boolean;
  /** Still reading (the command runs, or output is still to be read). */
  following: boolean;
}

class CommandsSection extends Widget {
  constructor(
    private readonly sandbox: ISandbox,
    private readonly store: SandboxStore,
    private readonly features: Features,
    private readonly shown: Map<string, string>
  ) {
    super();
    this.addClass('jp-SandboxCommands');
    const id = sandbox.id;
    this.input = el('input', {
      type: 'text',
      class: 'jp-SandboxCommands-input',
      'aria-label': `Command to start in the background in sandbox ${id}`,
      placeholder: 'python -m http.server 8000',
      autocomplete: 'off',
      spellcheck: 'false'
    });
    this.input.addEventListener('keydown', event => {
      if (event.key === 'Enter' && !event.isComposing) {
        event.preventDefault();
        void this.start();
      }
    });
    this.startButton = button(
      'Start',
      `Start the command in the background in sandbox ${id}`,
      () => void this.start()
    );
    this.problem = el('p', { class: 'jp-SandboxPanel-error', role: 'alert' });
    this.note = el('p', { class: 'jp-Sandbox-note' });
    this.listBox = el('div', { class: 'jp-SandboxCommands-list' });
    this.outputBox = el('div', { class: 'jp-SandboxCommands-output' });
    this.outputBox.hidden = true;
    if (!showIfPresent(this, this.features.commands)) {
      return;
    }
    this.node.replaceChildren(
      el('h3', {}, 'Background commands'),
      el(
        'div',
        {
          class: 'jp-SandboxCommands-form',
          role: 'group',
          'aria-label': `Start a background command in sandbox ${id}`
        },
        this.input,
        this.startButton,
        button('Refresh', `Refresh the background commands of sandbox ${id}`, () => {
          void this.refresh();
        })
      ),
      this.note,
      this.problem,
      this.listBox,
      this.outputBox
    );
    this.updateForm();
    void this.refresh();
    const commandId = this.shown.get(id);
    if (commandId) {
      this.showOutput(commandId);
    }
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.loads += 1; // answers still on their way are dropped
    this.follows += 1;
    clearTimeout(this.listTimer);
    clearTimeout(this.followTimer);
    super.dispose();
  }

  /** Shown again (its tab brought to the front): catch up at once. */
  protected onAfterShow(): void {
    if (this.features.commands === true) {
      void this.refresh();
    }
  }

  private get present(): boolean {
    return !this.isDisposed && this.features.commands === true;
  }

  /** The sandbox as the store last listed it (its state changes under this section). */
  private get current(): ISandbox {
    return this.store.sandboxes.find(s => s.id === this.sandbox.id) ?? this.sandbox;
  }

  /** Commands start only in a running sandbox: the form says so otherwise. */
  private updateForm(): void {
    const status = this.current.status;
    const running = status === 'running';
    this.input.disabled = !running;
    this.startButton.disabled = !running || this.starting;
    this.note.textContent = running
      ? ''
      : `Commands start only in a running sandbox; this one is ${status}.`;
    this.note.hidden = running;
  }

  private async start(): Promise<void> {
    if (this.starting || !this.present) {
      return;
    }
    const text = this.input.value;
    if (!text.trim()) {
      this.problem.textContent = 'Type a command to start, e.g. python -m http.server 8000.';
      return;
    }
    this.starting = true;
    this.updateForm();
    try {
      const command = await this.store.api.startCommand(this.sandbox.id, text);
      if (!this.present) {
        return;
      }
      this.input.value = '';
      this.problem.textContent = '';
      this.commands.set(command.id, command);
      this.showOutput(command.id);
      await this.refresh();
    } catch (error) {
      if (this.present) {
        this.problem.textContent = message(error);
      }
    } finally {
      this.starting = false;
      if (this.present) {
        this.updateForm();
      }
    }
  }

  /** Read the list now, then again after the refresh interval (while shown). */
  private async refresh(): Promise<void> {
    if (!this.present) {
      return;
    }
    clearTimeout(this.listTimer);
    const ticket = ++this.loads; // a slower, older answer must not overwrite a newer one
    try {
      const commands = await this.store.api.listCommands(this.sandbox.id);
      if (ticket !== this.loads || !this.present) {
        return;
      }
      this.listError = '';
      this.commands = new Map(commands.map(c => [c.id, c]));
      this.render(commands);
    } catch (error) {
      if (ticket !== this.loads || !this.present) {
        return;
      }
      this.listError = message(error);
      this.render([...this.commands.values()]);
    }
    this.schedule();
  }

  private schedule(): void {
    clearTimeout(this.listTimer);
    const seconds = this.store.interval;
    if (!this.present || seconds <= 0) {
      return; // refreshed on demand only (the Refresh button), as the panel is
    }
    this.listTimer = setTimeout(() => {
      if (this.isVisible) {
        void this.refresh();
      } else {
        this.schedule(); // hidden: nothing asked; onAfterShow catches up
      }
    }, seconds * 1000);
  }

  /** The table, updated in place (a focused button keeps the focus across refreshes). */
  private render(commands: IBackgroundCommand[]): void {
    const id = this.sandbox.id;
    this.updateForm();
    this.followAgain(commands);
    const parts: Node[] = [];
    if (this.listError) {
      parts.push(el('p', { role: 'alert' }, this.listError));
    }
    if (!commands.length) {
      this.rows.clear();
      this.tbody = null;
      parts.push(
        el('p', { class: 'jp-SandboxPanel-empty' }, 'No background command in this sandbox.')
      );
      this.listBox.replaceChildren(...parts);
      this.updateOutputState();
      return;
    }
    if (!this.tbody) {
      this.rows.clear();
      this.tbody = el('tbody', {});
      this.table = el(
        'table',
        {
          class: 'jp-SandboxCommands-table',
          'aria-label': `Background commands of sandbox ${id}`
        },
        el(
          'thead',
          {},
          el(
            'tr',
            {},
            ...['Command', 'Status', 'Started', 'Actions'].map(title => el('th', {}, title))
          )
        ),
        this.tbody
      );
    }
    const wanted = new Set(commands.map(c => c.id));
    for (const [commandId, row] of this.rows) {
      if (!wanted.has(commandId)) {
        row.remove();
        this.rows.delete(commandId);
      }
    }
    for (const command of commands) {
      let row = this.rows.get(command.id);
      if (!row) {
        row = this.row(command);
        this.rows.set(command.id, row);
        this.tbody.append(row); // the server lists the oldest first: a new one comes last
      }
      this.updateRow(row, command);
    }
    parts.push(this.table as HTMLTableElement);
    if (
      this.listBox.childNodes.length !== parts.length ||
      parts.some((part, i) => this.listBox.childNodes[i] !== part)
    ) {
      this.listBox.replaceChildren(...parts);
    }
    this.updateOutputState();
  }

  private row(command: IBackgroundCommand): HTMLTableRowElement {
    const id = this.sandbox.id;
    const line = commandLine(command.command);
    const output = button(
      'Output',
      `Show the output of command ${command.id} in sandbox ${id}`,
      () => this.showOutput(command.id)
    );
    const stop = button('Stop', '', () => void this.stop(command.id), 'jp-mod-warn');
    stop.classList.add('jp-SandboxCommands-stop');
    return el(
      'tr',
      { 'data-command-id': command.id },
      el(
        'td',
        { title: `${JSON.stringify(command.command)} in ${command.cwd}` },
        el('code', { class: 'jp-SandboxCommands-line' }, line)
      ),
      el('td', {}, el('span', { class: 'jp-SandboxCommands-status' })),
      el('td', { title: command.started }, formatModified(command.started)),
      el('td', {}, actionGroup(`Actions on command ${command.id} in sandbox ${id}`, output, stop))
    );
  }

  /** The status and the Stop (running) or Remove (ended) button of a listed row. */
  private updateRow(row: HTMLTableRowElement, command: IBackgroundCommand): void {
    const status = row.querySelector('.jp-SandboxCommands-status') as HTMLElement;
    const text = commandStatus(command);
    if (status.textContent !== text) {
      status.textContent = text;
      status.className = `jp-SandboxCommands-status ${statusClass(command)}`.trim();
    }
    row.dataset.running = String(command.running);
    const stop = row.querySelector('.jp-SandboxCommands-stop') as HTMLButtonElement;
    const label = command.running ? 'Stop' : 'Remove';
    const name = command.running
      ? `Stop command ${command.id} in sandbox ${this.sandbox.id}`
      : `Remove command ${command.id} from sandbox ${this.sandbox.id}`;
    if (stop.getAttribute('aria-label') !== name) {
      stop.textContent = label;
      stop.setAttribute('aria-label', name);
      stop.title = name;
    }
  }

  /** Stop (or, ended, remove) the command after asking; its output is forgotten too. */
  private async stop(commandId: string): Promise<void> {
    const command = this.commands.get(commandId);
    const line = command ? commandLine(command.command) : commandId;
    const running = command?.running ?? true;
    const body = running
      ? `${line}: the command and everything it started are killed in sandbox ${this.sandbox.id}, and its output is discarded.`
      : `${line}: its output is discarded.`;
    const verb = running ? 'Stop' : 'Remove';
    if (!(await confirm(`${verb} command ${commandId}?`, body, verb))) {
      return;
    }
    const ok = await attempt(`${verb} failed`, () =>
      this.store.api.deleteCommand(this.sandbox.id, commandId)
    );
    if (this.isDisposed) {
      return;
    }
    if (ok && this.followed?.commandId === commandId) {
      this.hideOutput();
    }
    await this.refresh();
  }

  /** Show a command's output below the list, read from its start and followed while it runs. */
  private showOutput(commandId: string): void {
    if (!this.present || this.followed?.commandId === commandId) {
      return;
    }
    this.stopFollowing();
    this.shown.set(this.sandbox.id, commandId);
    const id = this.sandbox.id;
    this.followed = {
      commandId,
      offset: 0,
      text: '',
      cut: false,
      skipped: false,
      following: true
    };
    this.outputTitle = el('h4', {});
    this.outputState = el('span', { class: 'jp-SandboxCommands-state' });
    this.outputNote = el('p', { class: 'jp-Sandbox-note' });
    this.outputNote.hidden = true;
    this.outputError = el('p', { class: 'jp-SandboxCommands-outputError', role: 'alert' });
    this.pre = el('pre', {
      class: 'jp-SandboxCommands-pre',
      role: 'log',
      tabindex: '0',
      'aria-label': `Output of command ${commandId} in sandbox ${id}`
    });
    this.outputBox.replaceChildren(
      el(
        'div',
        { class: 'jp-SandboxCommands-outputHead' },
        this.outputTitle,
        this.outputState,
        button('Hide', `Hide the output of command ${commandId} in sandbox ${id}`, () =>
          this.hideOutput()
        )
      ),
      this.outputNote,
      this.outputError,
      this.pre
    );
    this.outputBox.hidden = false;
    this.updateOutputState();
    const ticket = ++this.follows;
    void this.read(ticket);
  }

  private hideOutput(): void {
    this.stopFollowing();
    this.shown.delete(this.sandbox.id);
    this.followed = null;
    this.outputBox.replaceChildren();
    this.outputBox.hidden = true;
  }

  /**
   * A read that failed while the sandbox was paused (or the server was away) stopped the
   * following with its error on show; once the sandbox runs and the command is listed running
   * again, the error goes and the following goes on from where it stopped.
   */
  private followAgain(commands: IBackgroundCommand[]): void {
    const followed = this.followed;
    if (
      !followed ||
      followed.following ||
      !this.outputError.textContent ||
      this.current.status !== 'running' ||
      !commands.some(c => c.id === followed.commandId && c.running)
    ) {
      return;
    }
    this.outputError.textContent = '';
    followed.following = true;
    this.updateOutputState();
    this.stopFollowing();
    const ticket = ++this.follows;
    void this.read(ticket);
  }

  private stopFollowing(): void {
    this.follows += 1;
    clearTimeout(this.followTimer);
  }

  /** One read from where the last ended; the next is scheduled from its answer. */
  private async read(ticket: number): Promise<void> {
    const followed = this.followed;
    if (ticket !== this.follows || !this.present || !followed) {
      return;
    }
    if (!this.isVisible && followed.offset > 0) {
      // Hidden: nothing asked (reading it is activity that keeps the sandbox); the first read
      // is made at once, as the list's is.
      this.followTimer = setTimeout(() => void this.read(ticket), FOLLOW_INTERVAL_MS);
      return;
    }
    let answer;
    try {
      answer = await this.store.api.commandOutput(
        this.sandbox.id,
        followed.commandId,
        followed.offset,
        KEPT_OUTPUT
      );
    } catch (error) {
      if (ticket !== this.follows || !this.present) {
        return;
      }
      if (error instanceof SandboxApiError && error.code === 'command_not_found') {
        this.hideOutput(); // removed meanwhile (elsewhere): the list drops it too
        void this.refresh();
        return;
      }
      followed.following = false;
      this.outputError.textContent = message(error);
      this.updateOutputState();
      return;
    }
    if (ticket !== this.follows || !this.present) {
      return;
    }
    this.outputError.textContent = '';
    const next = nextRead(answer, KEPT_OUTPUT);
    const text = followed.skipped ? fromLineStart(answer.text) : followed.text + answer.text;
    // Skipped past: what this read brought is older than what the next brings, and goes.
    const kept = keepTail(next.skipped ? '' : text, KEPT_OUTPUT);
    followed.skipped = next.skipped;
    followed.text = kept.text;
    followed.cut = followed.cut || kept.cut || next.skipped;
    followed.offset = next.offset;
    followed.following = next.delay !== null;
    this.showText(followed, answer.size);
    this.updateOutputState();
    if (next.delay !== null) {
      this.followTimer = setTimeout(() => void this.read(ticket), next.delay);
    } else if (this.commands.get(followed.commandId)?.running) {
      void this.refresh(); // it ended: the list shows its exit status now, not in seconds
    }
  }

  /** The kept output in the <pre>, kept scrolled to its end when it was there. */
  private showText(followed: IFollowed, size: number): void {
    const pre = this.pre;
    const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    if (pre.textContent !== followed.text) {
      pre.textContent = followed.text;
    }
    if (atEnd) {
      pre.scrollTop = pre.scrollHeight;
    }
    this.outputNote.hidden = !followed.cut;
    this.outputNote.textContent = followed.cut
      ? keptNote(new TextEncoder().encode(followed.text).length, size)
      : '';
  }

  /** The output's heading: the command, its status, and whether it is being followed. */
  private updateOutputState(): void {
    const followed = this.followed;
    if (!followed) {
      return;
    }
    const command = this.commands.get(followed.commandId);
    this.outputTitle.textContent = `Output of ${command ? commandLine(command.command) : followed.commandId}`;
    const status = command ? commandStatus(command) : '';
    const parts = [status, followed.following ? 'following' : ''];
    if (!followed.following && !followed.text && !this.outputError.textContent) {
      parts.push('no output');
    }
    this.outputState.textContent = parts.filter(Boolean).join(' · ');
    this.outputState.className =
      `jp-SandboxCommands-state ${command ? statusClass(command) : ''}`.trim();
  }

  private readonly input: HTMLInputElement;
  private readonly startButton: HTMLButtonElement;
  private readonly problem: HTMLParagraphElement;
  private readonly note: HTMLParagraphElement;
  private readonly listBox: HTMLDivElement;
  private readonly outputBox: HTMLDivElement;
  private table: HTMLTableElement | null = null;
  private tbody: HTMLTableSectionElement | null = null;
  private rows = new Map<string, HTMLTableRowElement>();
  private commands = new Map<string, IBackgroundCommand>();
  private listError = '';
  private starting = false;
  private loads = 0;
  private follows = 0;
  private listTimer: ReturnType<typeof setTimeout> | undefined;
  private followTimer: ReturnType<typeof setTimeout> | undefined;
  private followed: IFollowed | null = null;
  private outputTitle = el('h4', {});
  private outputState = el('span', {});
  private outputNote = el('p', {});
  private outputError = el('p', {});
  private pre = el('pre', {});
}

function message(error: unknown): string {
  return error instanceof SandboxApiError
    ? error.message
    : error instanceof Error
      ? error.message
      : String(error);
}

/** Dialogs: a server's refusal in its own words, confirmations, and a name asked for. */

import { Dialog, showDialog, showErrorMessage } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { SandboxApiError } from './api';
import { el } from './dom';

/** Show `error` under `title`; the text is the server's message and its stable code. */
export async function showServerError(title: string, error: unknown): Promise<void> {
  await showErrorMessage(title, serverMessage(error));
}

/** The server's message and its stable code (or any other error's message). */
export function serverMessage(error: unknown): string {
  return error instanceof SandboxApiError
    ? `${error.message} (${error.code}${error.status ? `, HTTP ${error.status}` : ''})`
    : error instanceof Error
      ? error.message
      : String(error);
}

/** Run `work`; a failure becomes a dialog titled `title`. Resolves false when it failed. */
export async function attempt(title: string, work: () => Promise<unknown>): Promise<boolean> {
  try {
    await work();
    return true;
  } catch (error) {
    await showServerError(title, error);
    return false;
  }
}

/** Tell the user something that needs no answer. */
export async function notify(title: string, body: string): Promise<void> {
  await showDialog({ title, body, buttons: [Dialog.okButton()] });
}

/** Ask before something that loses state; resolves true when the user accepted. */
export async function confirm(title: string, body: string, accept: string): Promise<boolean> {
  const result = await showDialog({
    title,
    body,
    buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: accept })]
  });
  return result.button.accept;
}

export interface IAskNameOptions {
  title: string;
  /** The field's visible label. */
  label: string;
  /** The field's accessible name (what it names, and in which sandbox). */
  inputLabel: string;
  /** The accept button's label. */
  accept: string;
  /** The text the field starts with. */
  initial?: string;
  /** Why a name is refused, or null when it is fine. */
  problem: (name: string) => string | null;
}

/**
 * Ask for a name in a dialog with one text field. A name `problem` refuses is never answered:
 * the reason shows under the field and the accept button is disabled while it stands, and a
 * refused name accepted anyway (Enter) brings the dialog back with the reason. Resolves the
 * name, or null when the user cancelled.
 */
export async function askName(options: IAskNameOptions): Promise<string | null> {
  let text = options.initial ?? '';
  for (;;) {
    const result = await showDialog({
      title: options.title,
      body: new NameBody(options, text),
      buttons: [Dialog.cancelButton(), Dialog.okButton({ label: options.accept })],
      focusNodeSelector: 'input'
    });
    if (!result.button.accept || result.value === null) {
      return null;
    }
    text = result.value;
    if (options.problem(text) === null) {
      return text;
    }
  }
}

/** A Lumino message (named through Widget, which this package depends on directly). */
type Message = Parameters<Widget['processMessage']>[0];

/** askName's body: the labelled field and, under it, why its name is refused. */
class NameBody extends Widget implements Dialog.IBodyWidget<string> {
  constructor(
    private readonly options: IAskNameOptions,
    text: string
  ) {
    super();
    this.addClass('jp-SandboxName');
    const messageId = `jp-SandboxName-problem-${++NameBody.count}`;
    this.input = el('input', {
      type: 'text',
      class: 'jp-mod-styled jp-SandboxName-input',
      'aria-label': options.inputLabel,
      'aria-describedby': messageId,
      spellcheck: 'false',
      autocomplete: 'off'
    });
    this.input.value = text;
    this.message = el('p', {
      id: messageId,
      class: 'jp-SandboxName-problem',
      'aria-live': 'polite'
    });
    this.node.append(el('label', {}, options.label, this.input), this.message);
    this.check();
  }

  getValue(): string {
    return this.input.value;
  }

  /**
   * The field's validity follows each edit before the dialog looks at it: the dialog checks
   * its inputs (`:invalid` disables its accept button, and refuses Enter) in a capturing
   * listener on the document, so this one captures on the window, which comes first.
   */
  handleEvent(event: Event): void {
    if (event.type === 'input' && event.target === this.input) {
      this.check();
    }
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    window.addEventListener('input', this, true);
    // A rename starts with the name's stem selected, so typing keeps its extension.
    const dot = this.input.value.lastIndexOf('.');
    this.input.setSelectionRange(0, dot > 0 ? dot : this.input.value.length);
    // The dialog listens once it is attached, after its body: then it checks the first name.
    void Promise.resolve().then(() => {
      this.input.dispatchEvent(new Event('input', { bubbles: true }));
    });
  }

  protected onBeforeDetach(msg: Message): void {
    window.removeEventListener('input', this, true);
    super.onBeforeDetach(msg);
  }

  /** Show why the name is refused (if it is), and let the dialog be accepted only if not. */
  private check(): void {
    const problem = this.options.problem(this.input.value);
    this.message.textContent = problem ?? '';
    this.input.setCustomValidity(problem ?? '');
    this.input.classList.toggle('jp-mod-error', problem !== null);
    this.input.setAttribute('aria-invalid', problem === null ? 'false' : 'true');
    const dialog = this.node.closest('.jp-Dialog');
    dialog?.querySelectorAll<HTMLButtonElement>('.jp-Dialog-button.jp-mod-accept').forEach(b => {
      b.disabled = problem !== null;
    });
  }

  private static count = 0;
  private readonly input: HTMLInputElement;
  private readonly message: HTMLParagraphElement;
}

/** Server errors as dialogs carrying the server's own message. */

import { Dialog, showDialog, showErrorMessage } from '@jupyterlab/apputils';

import { SandboxApiError } from './api';

/** Show `error` under `title`; the text is the server's message and its stable code. */
export async function showServerError(title: string, error: unknown): Promise<void> {
  const message =
    error instanceof SandboxApiError
      ? `${error.message} (${error.code}${error.status ? `, HTTP ${error.status}` : ''})`
      : error instanceof Error
        ? error.message
        : String(error);
  await showErrorMessage(title, message);
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

/** Ask before something that loses state; resolves true when the user accepted. */
export async function confirm(title: string, body: string, accept: string): Promise<boolean> {
  const result = await showDialog({
    title,
    body,
    buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: accept })]
  });
  return result.button.accept;
}

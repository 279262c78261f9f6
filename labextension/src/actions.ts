/**
 * The built-in actions on a sandbox: details, pause/resume, restart its kernel, stop.
 * Each goes through the REST API; a refusal is a dialog with the server's message.
 */

import { Kernel } from '@jupyterlab/services';

import { attempt, confirm } from './dialogs';
import { allowedActions, ISandbox } from './models';
import { IRowAction, ISandboxViews } from './slots';
import { SandboxStore } from './store';

export function builtinActions(views: ISandboxViews, kernels: Kernel.IManager): IRowAction[] {
  return [
    {
      id: 'details',
      label: 'Details',
      rank: 10,
      execute: async sandbox => views.openDetails(sandbox.id)
    },
    {
      id: 'pause',
      label: 'Pause',
      rank: 20,
      isVisible: s => allowedActions(s).pause,
      execute: (sandbox, store) => act(store, sandbox, 'pause', 'Pause failed')
    },
    {
      id: 'resume',
      label: 'Resume',
      rank: 20,
      isVisible: s => allowedActions(s).resume,
      execute: (sandbox, store) => act(store, sandbox, 'resume', 'Resume failed')
    },
    {
      id: 'restart',
      label: 'Restart kernel',
      rank: 30,
      isVisible: s => allowedActions(s).restart,
      execute: (sandbox, store) => act(store, sandbox, 'restart', 'Restart failed')
    },
    {
      id: 'stop',
      label: 'Stop',
      rank: 40,
      danger: true,
      isVisible: s => allowedActions(s).stop,
      execute: (sandbox, store) => stop(store, kernels, sandbox)
    }
  ];
}

/** Pause, resume or restart the sandbox, saying so in a dialog if the server refuses. */
export async function act(
  store: SandboxStore,
  sandbox: ISandbox,
  action: 'pause' | 'resume' | 'restart',
  title: string
): Promise<void> {
  await attempt(title, async () => store.update(await store.api.action(sandbox.id, action)));
  await store.refresh();
}

/**
 * Remove the sandbox. A kernel of this server attached to it is shut down first: removing the
 * sandbox under a live kernel would make Jupyter's restarter start it again in a new one.
 */
export async function stop(
  store: SandboxStore,
  kernels: Kernel.IManager,
  sandbox: ISandbox
): Promise<void> {
  const kernelId = sandbox.kernel?.attached ? sandbox.kernel.id : null;
  const ours = kernelId !== null && [...kernels.running()].some(k => k.id === kernelId);
  const what = sandbox.context ? `context '${sandbox.context}'` : 'its files in /workspace';
  const body = ours
    ? `The kernel of ${sandbox.kernel.notebook || 'a notebook'} is shut down, and ${what} is lost.`
    : `The sandbox is removed, and ${what} is lost.`;
  if (!(await confirm(`Stop sandbox ${sandbox.id}?`, body, 'Stop'))) {
    return;
  }
  await attempt('Stop failed', async () => {
    if (ours && kernelId) {
      await kernels.shutdown(kernelId);
    }
    try {
      await store.api.deleteSandbox(sandbox.id);
    } catch (error) {
      // An ephemeral sandbox goes with its kernel: already gone is what was asked for.
      if (!(ours && (error as { status?: number }).status === 404)) {
        throw error;
      }
    }
  });
  await store.refresh();
}

/**
 * Outputs of a Sandboxed Python kernel stay untrusted in JupyterLab.
 *
 * JupyterLab trusts whatever a cell prints once the cell runs (CodeCell.execute sets the cell
 * model's `trusted`): an output's HTML event handlers, its JavaScript and the HTML in its
 * Markdown then run in the page, on the Jupyter server's origin, with the user's session. Code in
 * a sandbox is untrusted by definition; trusted output would hand it the user's server (its REST
 * API: another kernel, the sandbox's own network policy) and the browser's network, whatever the
 * sandbox's policy says.
 *
 * So each code cell of a notebook or console whose kernel is a sandboxed one is set back to
 * untrusted the moment JupyterLab trusts it, before any output of the run arrives (the signal is synchronous),
 * and its `trusted` metadata is dropped, so the server does not sign the saved notebook.
 * JupyterLab then renders the outputs as an untrusted notebook's: HTML and Markdown through its
 * own sanitizer, JavaScript not run, SVG as an image. When a notebook's kernel becomes a
 * sandboxed one, its cells already trusted (a notebook signed before) are untrusted too. The
 * user setting `trustSandboxedOutputs` turns this off, for sandboxed code one would run on the
 * host anyway.
 */

import type { ICellModel } from '@jupyterlab/cells';
import type { IChangedArgs } from '@jupyterlab/coreutils';
import type { ISessionContext } from '@jupyterlab/apputils';
import type { ConsolePanel, IConsoleTracker } from '@jupyterlab/console';
import type { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

import { KERNEL_NAME } from './models';

/** Whether the kernelspec of that name is a sandboxed one (its metadata says so). */
export type SandboxedKernelTest = (kernelName: string) => boolean;

/** A kernelspec is sandboxed when its metadata has a `jupyter_sandbox` entry (kernel.json). */
export function sandboxedKernelTest(
  specs: () => { [name: string]: { metadata?: { [key: string]: unknown } } | undefined } | null
): SandboxedKernelTest {
  return (kernelName: string) => {
    const spec = specs()?.[kernelName];
    return spec ? Boolean(spec.metadata?.jupyter_sandbox) : kernelName === KERNEL_NAME;
  };
}

/** Untrust a cell model, and drop its `trusted` metadata (what the server would sign). */
export function untrust(model: ICellModel): void {
  model.trusted = false;
  if (model.getMetadata('trusted') !== undefined) {
    model.deleteMetadata('trusted');
  }
}

/** What a notebook panel and a console panel both have: the session, whose kernel counts. */
interface ISessionOwner {
  sessionContext: ISessionContext;
}

export class UntrustedSandboxOutputs {
  constructor(
    private readonly isSandboxed: SandboxedKernelTest,
    notebooks: INotebookTracker | null,
    consoles: IConsoleTracker | null
  ) {
    notebooks?.widgetAdded.connect((_, panel) => this.watchNotebook(panel));
    notebooks?.forEach(panel => this.watchNotebook(panel));
    consoles?.widgetAdded.connect((_, panel) => this.watchConsole(panel));
    consoles?.forEach(panel => this.watchConsole(panel));
  }

  /** False (the `trustSandboxedOutputs` setting): JupyterLab trusts outputs as it does. */
  enabled = true;

  /** Whether the panel's kernel (or, before it starts, the one it asks for) is sandboxed. */
  sandboxed(panel: ISessionOwner): boolean {
    const context = panel.sessionContext;
    const name = context.session?.kernel?.name ?? context.kernelPreference.name ?? '';
    return this.enabled && this.isSandboxed(name);
  }

  /** A guard for the cells of ``panel``: untrusts a cell the moment it is trusted. */
  private guardOf(panel: ISessionOwner) {
    return (model: ICellModel, change: IChangedArgs<unknown, unknown, string>) => {
      if (change.name === 'trusted' && change.newValue === true && this.sandboxed(panel)) {
        untrust(model);
      }
    };
  }

  private watchNotebook(panel: NotebookPanel): void {
    const guard = this.guardOf(panel);
    const guardAll = () => {
      const cells = panel.content.model?.cells;
      for (let index = 0; cells && index < cells.length; index++) {
        const model = cells.get(index);
        if (model.type === 'code') {
          model.stateChanged.disconnect(guard); // once per cell, however often this runs
          model.stateChanged.connect(guard);
          if (this.sandboxed(panel)) {
            untrust(model);
          }
        }
      }
    };
    // Cells come as the file is read into the model, and as they are added or pasted: follow
    // the model's list from now (it exists before the file is read), and once more when ready.
    let followed: unknown = null;
    const follow = () => {
      const cells = panel.content.model?.cells;
      if (cells && cells !== followed) {
        cells.changed.connect(guardAll);
        followed = cells;
      }
      guardAll();
    };
    follow();
    void panel.context.ready.then(follow);
    panel.sessionContext.kernelChanged.connect(guardAll);
  }

  private watchConsole(panel: ConsolePanel): void {
    // A console runs its prompt cell, which then joins its history: guarding the prompt cell
    // guards every cell it runs.
    const guard = this.guardOf(panel);
    const guardPrompt = () => {
      const model = panel.console.promptCell?.model;
      if (model) {
        model.stateChanged.disconnect(guard);
        model.stateChanged.connect(guard);
        if (this.sandboxed(panel)) {
          untrust(model); // a prompt cell may be made trusted, which running it would not change
        }
      }
    };
    panel.console.promptCellCreated.connect(guardPrompt);
    panel.sessionContext.kernelChanged.connect(guardPrompt);
    guardPrompt();
  }
}

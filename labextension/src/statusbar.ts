/**
 * The status bar item of the active notebook's sandbox: runtime, network policy, memory in use
 * against its limit, and a red mark when isolation is weakened (runc, open network). The
 * sandbox is the one whose attached kernel id is the notebook's kernel id. Clicking opens the
 * sandbox's details.
 */

import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { Widget } from '@lumino/widgets';

import { act } from './actions';
import { sandboxOfKernel, statusText, statusTitle, weakenedIsolation } from './models';
import type { SandboxedKernelTest } from './outputTrust';
import { ISandboxViews } from './slots';

export class SandboxStatusItem extends Widget {
  constructor(
    private readonly views: ISandboxViews,
    private readonly tracker: INotebookTracker,
    private readonly isSandboxed: SandboxedKernelTest
  ) {
    super({ node: document.createElement('button') });
    this.id = 'jupyter-sandbox-status';
    this.addClass('jp-SandboxStatus');
    this.node.setAttribute('type', 'button');
    this.node.addEventListener('click', () => this.openDetails());
    views.store.changed.connect(this.render, this);
    tracker.currentChanged.connect(this.watch, this);
    this.watch();
  }

  dispose(): void {
    if (!this.isDisposed) {
      this.views.store.changed.disconnect(this.render, this);
      this.tracker.currentChanged.disconnect(this.watch, this);
      this.watched?.sessionContext.kernelChanged.disconnect(this.kernelChanged, this);
      this.watched?.sessionContext.statusChanged.disconnect(this.statusChanged, this);
    }
    super.dispose();
  }

  /** The id of the sandbox shown, when one is. */
  get sandboxId(): string | null {
    return this.shown;
  }

  private watch(): void {
    this.watched?.sessionContext.kernelChanged.disconnect(this.kernelChanged, this);
    this.watched?.sessionContext.statusChanged.disconnect(this.statusChanged, this);
    this.watched = this.tracker.currentWidget;
    this.watched?.sessionContext.kernelChanged.connect(this.kernelChanged, this);
    this.watched?.sessionContext.statusChanged.connect(this.statusChanged, this);
    this.render();
  }

  private kernelChanged(): void {
    this.render();
    // A new kernel's sandbox shows up in the list once the kernel has attached.
    void this.views.store.refresh();
  }

  /**
   * A kernel that turns idle with its sandbox not listed (after a restart, which attaches the
   * kernel anew) has it attached by now: the list is read at once, not at the next poll, so
   * "starting…" does not outlast the kernel's own start.
   */
  private statusChanged(_: unknown, status: string): void {
    if (status === 'idle' && this.shown === null) {
      void this.views.store.refresh();
    }
  }

  private render(): void {
    const kernel = this.watched?.sessionContext.session?.kernel;
    const sandbox = sandboxOfKernel(this.views.store.sandboxes, kernel?.id);
    this.shown = sandbox?.id ?? null;
    if (!sandbox) {
      this.paused = false;
      this.toggleClass('jp-mod-paused', false);
      this.toggleClass('jp-mod-weak', false);
      const error = this.views.store.error;
      const sandboxed = kernel ? this.isSandboxed(kernel.name) : false;
      if (sandboxed && error) {
        // No engine (a Binder host), or the server refuses: the kernel refuses every cell too.
        this.node.textContent = '⚠ No sandbox';
        this.node.title = `No sandbox for this notebook: ${error.message}`;
        this.node.setAttribute('aria-label', `No sandbox for this notebook: ${error.message}`);
        this.toggleClass('jp-mod-weak', true);
        this.show();
      } else if (sandboxed) {
        this.node.textContent = 'Sandbox: starting…';
        this.node.title = 'The sandbox of this notebook is not listed yet';
        this.node.setAttribute('aria-label', 'Sandbox of this notebook: starting');
        this.show();
      } else {
        this.hide();
      }
      return;
    }
    this.paused = sandbox.status === 'paused';
    if (this.paused) {
      // A cell run now waits at [*] while Lab's own indicators say Idle: say why, and offer
      // the way out on the same button.
      this.node.textContent = '⏸ Sandbox paused · Resume';
      this.node.title = `Sandbox ${sandbox.id} is paused: cells wait until it resumes. Click to resume it`;
      this.node.setAttribute('aria-label', `Sandbox ${sandbox.id} is paused. Resume it`);
      this.toggleClass('jp-mod-weak', false);
      this.toggleClass('jp-mod-paused', true);
      this.show();
      return;
    }
    this.toggleClass('jp-mod-paused', false);
    const stats = this.views.store.stats(sandbox.id);
    const weak = weakenedIsolation(sandbox).length > 0;
    const text = statusText(sandbox, stats);
    this.node.replaceChildren(
      ...(weak
        ? [
            Object.assign(document.createElement('span'), {
              className: 'jp-SandboxStatus-mark',
              textContent: '⚠ '
            })
          ]
        : []),
      text
    );
    this.node.title = statusTitle(sandbox, stats);
    this.node.setAttribute(
      'aria-label',
      `Sandbox ${sandbox.id}: ${text}${weak ? ', weakened isolation' : ''}. Open its details`
    );
    this.toggleClass('jp-mod-weak', weak);
    this.show();
  }

  private openDetails(): void {
    const sandbox = this.views.store.sandboxes.find(s => s.id === this.shown);
    if (sandbox && this.paused) {
      void act(this.views.store, sandbox, 'resume', 'Resume failed');
    } else if (this.shown) {
      this.views.openDetails(this.shown);
    }
  }

  private watched: NotebookPanel | null = null;
  private shown: string | null = null;
  private paused = false;
}

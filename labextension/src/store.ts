/**
 * One live view of the user's sandboxes and their resource use, shared by the status bar, the
 * side panel and the details views, so that every view polls through the same requests.
 */

import { ISignal, Signal } from '@lumino/signaling';

import { SandboxApi, SandboxApiError } from './api';
import { ISandbox, IStats } from './models';

export class SandboxStore {
  constructor(readonly api: SandboxApi) {}

  get sandboxes(): readonly ISandbox[] {
    return this._sandboxes;
  }

  /** The last measurement of each running sandbox (absent: not measured, or it failed). */
  stats(id: string): IStats | undefined {
    return this._stats.get(id);
  }

  /** The error of the last refresh, null when it worked. */
  get error(): SandboxApiError | null {
    return this._error;
  }

  /** Emitted after every refresh, successful or not. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** Seconds between refreshes while anything watches; 0 stops polling. */
  get interval(): number {
    return this._interval;
  }

  set interval(seconds: number) {
    this._interval = Math.max(0, seconds);
    this.schedule();
  }

  /**
   * Fetch the list, then the stats of each running sandbox (in parallel). A call while a refresh
   * is under way queues one more (that refresh may have read the list before the caller's
   * change), shared by every caller meanwhile: a slow server never piles requests up.
   */
  refresh(): Promise<void> {
    if (this._pending) {
      if (!this._queued) {
        this._queued = this._pending.then(() => {
          this._queued = null;
          return this.refresh();
        });
      }
      return this._queued;
    }
    this._pending = this.load().finally(() => {
      this._pending = null;
      this.schedule();
    });
    return this._pending;
  }

  /** Replace one sandbox after an action answered with its new model. */
  update(sandbox: ISandbox): void {
    this._generation += 1; // a refresh under way read the list before this: it is stale
    this._sandboxes = this._sandboxes.map(s => (s.id === sandbox.id ? sandbox : s));
    this._changed.emit();
  }

  dispose(): void {
    this._disposed = true;
    if (this._timer !== undefined) {
      clearTimeout(this._timer);
    }
    Signal.clearData(this);
  }

  private async load(): Promise<void> {
    const generation = this._generation;
    try {
      const sandboxes = await this.api.listSandboxes();
      const running = sandboxes.filter(s => s.status === 'running');
      const measured = await Promise.all(
        running.map(s => this.api.stats(s.id).catch(() => undefined))
      );
      const stats = new Map<string, IStats>();
      running.forEach((s, i) => {
        const m = measured[i];
        if (m) {
          stats.set(s.id, m);
        }
      });
      if (generation !== this._generation) {
        return; // an action's answer came meanwhile and is newer; the queued refresh follows
      }
      this._sandboxes = sandboxes;
      this._stats = stats;
      this._error = null;
    } catch (error) {
      this._error =
        error instanceof SandboxApiError
          ? error
          : new SandboxApiError(0, 'client_error', String(error));
    }
    if (!this._disposed) {
      this._changed.emit();
    }
  }

  private schedule(): void {
    if (this._timer !== undefined) {
      clearTimeout(this._timer);
      this._timer = undefined;
    }
    if (this._disposed || this._interval <= 0 || this._pending || this._queued) {
      return;
    }
    this._timer = setTimeout(() => void this.refresh(), this._interval * 1000);
  }

  private _sandboxes: ISandbox[] = [];
  private _stats = new Map<string, IStats>();
  private _error: SandboxApiError | null = null;
  private _changed = new Signal<this, void>(this);
  private _interval = 0;
  private _timer: ReturnType<typeof setTimeout> | undefined;
  private _pending: Promise<void> | null = null;
  private _queued: Promise<void> | null = null;
  private _generation = 0;
  private _disposed = false;
}

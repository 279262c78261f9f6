/**
 * The owner's side of the network policy ask: a notification for each request a sandbox's ask
 * policy holds, naming the sandbox, its notebook, the host and the port, with three actions,
 * Allow once, Allow for this sandbox and Deny (POST `/network/requests/{request_id}`). A
 * notification goes when its request no longer waits: decided here, elsewhere (REST, another
 * tab) or timed out.
 *
 * It asks the server every `interval` ms, and only about the running sandboxes whose policy is
 * ask in the store's list (one GET each): a page with none asks nothing.
 */

import { Notification } from '@jupyterlab/apputils';

import { SandboxApi, SandboxApiError } from './api';
import { showServerError } from './dialogs';
import { heldRequestMessage, IHeldRequest, RequestDecision } from './network';
import { SandboxStore } from './store';

/** The actions, in the order shown, and the decision each sends. */
export const REQUEST_ACTIONS: readonly { label: string; decision: RequestDecision }[] = [
  { label: 'Allow once', decision: 'once' },
  { label: 'Allow for this sandbox', decision: 'sandbox' },
  { label: 'Deny', decision: 'deny' }
];

export class EgressRequests {
  constructor(
    private readonly api: SandboxApi,
    private readonly store: SandboxStore,
    private readonly interval = 1000
  ) {}

  /** Start asking; stopped by dispose(). */
  start(): void {
    if (this._timer === undefined && !this._disposed) {
      this._timer = setTimeout(() => void this.poll(), 0);
    }
  }

  dispose(): void {
    this._disposed = true;
    clearTimeout(this._timer);
    for (const toast of this._shown.values()) {
      Notification.dismiss(toast);
    }
    this._shown.clear();
  }

  private async poll(): Promise<void> {
    try {
      await this.look();
    } catch (error) {
      console.error('jupyter-sandbox: could not look for held network requests', error);
    }
    if (!this._disposed) {
      this._timer = setTimeout(() => void this.poll(), this.interval);
    }
  }

  /** One look at the held requests of every asking sandbox: notifications shown, gone. */
  private async look(): Promise<void> {
    const asking = this.store.sandboxes.filter(
      s => s.status === 'running' && s.network?.policy === 'ask'
    );
    const waiting = new Set<string>();
    await Promise.all(
      asking.map(async sandbox => {
        let requests: IHeldRequest[];
        try {
          requests = await this.api.heldRequests(sandbox.id);
        } catch {
          // Not known this time (a server restart, the sandbox just removed): its
          // notifications stay until an answer says their requests no longer wait.
          for (const key of this._shown.keys()) {
            if (key.startsWith(`${sandbox.id}/`)) {
              waiting.add(key);
            }
          }
          return;
        }
        for (const request of requests) {
          const key = `${sandbox.id}/${request.request_id}`;
          waiting.add(key);
          if (!this._shown.has(key) && !this._decided.has(key)) {
            this._shown.set(key, this.show(request));
          }
        }
      })
    );
    for (const [key, toast] of this._shown) {
      if (!waiting.has(key)) {
        Notification.dismiss(toast);
        this._shown.delete(key);
      }
    }
    for (const key of this._decided) {
      if (!waiting.has(key)) {
        this._decided.delete(key);
      }
    }
  }

  private show(request: IHeldRequest): string {
    const key = `${request.sandbox}/${request.request_id}`;
    return Notification.warning(heldRequestMessage(request), {
      autoClose: false,
      actions: REQUEST_ACTIONS.map(({ label, decision }) => ({
        label,
        caption: `${label}: ${request.host}:${request.port} from sandbox ${request.sandbox}`,
        displayType: decision === 'deny' ? 'warn' : 'accent',
        callback: () => void this.decide(key, request, decision)
      }))
    });
  }

  private async decide(
    key: string,
    request: IHeldRequest,
    decision: RequestDecision
  ): Promise<void> {
    const toast = this._shown.get(key);
    this._shown.delete(key);
    this._decided.add(key); // not shown again while the list still has it
    if (toast !== undefined) {
      Notification.dismiss(toast);
    }
    try {
      await this.api.decideRequest(request.sandbox, request.request_id, decision);
    } catch (error) {
      if (error instanceof SandboxApiError && error.code === 'network_request_not_found') {
        return; // decided elsewhere, or timed out, meanwhile: nothing left to do
      }
      await showServerError(`Could not decide the request to ${request.host}`, error);
    }
    if (decision === 'sandbox') {
      void this.store.refresh(); // the policy changed
    }
  }

  private _shown = new Map<string, string>();
  private _decided = new Set<string>();
  private _timer: ReturnType<typeof setTimeout> | undefined;
  private _disposed = false;
}

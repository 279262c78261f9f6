/**
 * Which optional parts of the REST API this server has: snapshots and network policies arrive
 * with later server extensions, and their views appear only where their routes answer.
 */

import { SandboxApi } from './api';

export class Features {
  constructor(private readonly api: SandboxApi) {}

  /** `GET /api/snapshots` answers: true; a route this server lacks: false; not asked yet: null. */
  snapshots: boolean | null = null;
  /** `GET /api/sandboxes/{id}/network` answers (asked of the first sandbox listed). */
  network: boolean | null = null;

  /** Ask what is not known yet; `sandboxId`: any sandbox of the user, for the network route. */
  probe(sandboxId?: string): Promise<boolean> {
    if (!this._probing) {
      this._probing = this.ask(sandboxId).finally(() => (this._probing = null));
    }
    return this._probing;
  }

  private async ask(sandboxId?: string): Promise<boolean> {
    const before = [this.snapshots, this.network].join();
    if (this.snapshots === null) {
      this.snapshots = await this.api.hasRoute('api/snapshots');
    }
    if (this.network === null && sandboxId) {
      this.network = await this.api.hasRoute(
        `api/sandboxes/${encodeURIComponent(sandboxId)}/network`
      );
    }
    return before !== [this.snapshots, this.network].join();
  }

  private _probing: Promise<boolean> | null = null;
}

/**
 * Which optional parts of the REST API this server has: snapshots, network policies, the
 * files of a sandbox, its terminal, its background commands and its ports arrive with later server
 * extensions, and their views appear only where their routes answer.
 */

import { Widget } from '@lumino/widgets';

import { SandboxApi } from './api';

export class Features {
  constructor(private readonly api: SandboxApi) {}

  /** `GET /api/snapshots` answers: true; a route this server lacks: false; not asked yet: null. */
  snapshots: boolean | null = null;
  /** `GET /api/sandboxes/{id}/network` answers (asked of the first sandbox listed). */
  network: boolean | null = null;
  /** `GET /api/sandboxes/{id}/files` answers (asked of the first sandbox listed). */
  files: boolean | null = null;
  /**
   * `GET /api/sandboxes/{id}/terminal` answers (asked of the first sandbox listed). A websocket
   * route answers a plain GET with an error of its own (no upgrade asked): it is there.
   */
  terminal: boolean | null = null;
  /** `GET /api/sandboxes/{id}/commands` answers (asked of the first sandbox listed). */
  commands: boolean | null = null;
  /** `GET /api/sandboxes/{id}/ports` answers (asked of the first sandbox listed). */
  ports: boolean | null = null;

  /** Whether something is still to be asked. */
  get unknown(): boolean {
    return (
      this.snapshots === null ||
      this.network === null ||
      this.files === null ||
      this.terminal === null ||
      this.commands === null ||
      this.ports === null
    );
  }

  /** Ask what is not known yet; `sandboxId`: any sandbox of the user, for its own routes. */
  probe(sandboxId?: string): Promise<boolean> {
    if (!this._probing) {
      this._probing = this.ask(sandboxId).finally(() => (this._probing = null));
    }
    return this._probing;
  }

  private async ask(sandboxId?: string): Promise<boolean> {
    const before = this.known();
    if (this.snapshots === null) {
      this.snapshots = await this.api.hasRoute('api/snapshots');
    }
    if (this.network === null && sandboxId) {
      this.network = await this.api.hasRoute(
        `api/sandboxes/${encodeURIComponent(sandboxId)}/network`
      );
    }
    if (this.files === null && sandboxId) {
      this.files = await this.api.hasRoute(`api/sandboxes/${encodeURIComponent(sandboxId)}/files`);
    }
    if (this.terminal === null && sandboxId) {
      this.terminal = await this.api.hasRoute(
        `api/sandboxes/${encodeURIComponent(sandboxId)}/terminal`
      );
    }
    if (this.commands === null && sandboxId) {
      this.commands = await this.api.hasRoute(
        `api/sandboxes/${encodeURIComponent(sandboxId)}/commands`
      );
    }
    if (this.ports === null && sandboxId) {
      this.ports = await this.api.hasRoute(`api/sandboxes/${encodeURIComponent(sandboxId)}/ports`);
    }
    return before !== this.known();
  }

  private known(): string {
    return [
      this.snapshots,
      this.network,
      this.files,
      this.terminal,
      this.commands,
      this.ports
    ].join();
  }

  private _probing: Promise<boolean> | null = null;
}

/**
 * A section of an optional feature shows only once the server is known to have it: shown and
 * true then; otherwise emptied, hidden and false (the section loads nothing).
 */
export function showIfPresent(section: Widget, present: boolean | null): boolean {
  if (present !== true) {
    section.node.replaceChildren();
    section.hide();
    return false;
  }
  section.show();
  return true;
}

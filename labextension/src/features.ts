/**
 * Which optional parts of the REST API this server has: snapshots, network policies, the
 * files of a sandbox, its terminal, its background commands and its ports arrive with later server
 * extensions, and their views appear only where their routes answer.
 */

import { Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import { SandboxApi, SandboxApiError } from './api';

/** The optional features, each named by its route (a sandbox's own, but for snapshots). */
const FEATURES = ['snapshots', 'network', 'files', 'terminal', 'commands', 'ports'] as const;
export type FeatureName = (typeof FEATURES)[number];

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

  /**
   * Emitted as each answer arrives that makes a feature known (its views can show now). The
   * routes are asked all at once, so one slow answer holds up none of the others.
   */
  readonly found = new Signal<this, FeatureName>(this);

  /** Whether something is still to be asked. */
  get unknown(): boolean {
    return FEATURES.some(name => this[name] === null);
  }

  /**
   * Ask what is not known yet and not being asked already; `sandboxId`: any sandbox of the
   * user, for its own routes. Resolves when this call's answers are in: true if it asked
   * something (which is known now).
   */
  async probe(sandboxId?: string): Promise<boolean> {
    if (this._listed === null) {
      return this.askList(sandboxId);
    }
    const sandbox = sandboxId && `api/sandboxes/${encodeURIComponent(sandboxId)}`;
    const asked = FEATURES.filter(
      name => this[name] === null && !this._asking.has(name) && (name === 'snapshots' || sandbox)
    );
    await Promise.all(
      asked.map(async name => {
        this._asking.add(name);
        try {
          this[name] = await this.api.hasRoute(
            name === 'snapshots' ? 'api/snapshots' : `${sandbox}/${name}`
          );
        } finally {
          this._asking.delete(name);
        }
        this.found.emit(name);
      })
    );
    return asked.length > 0;
  }

  /**
   * Ask the server for its list of features first: one request that answers 200. Probing each
   * route is for an older server without the list; it costs a red error in the browser's
   * console for each route that is missing (a 404) and for the terminal's (its WebSocket
   * answers a plain GET with 400).
   */
  private async askList(sandboxId?: string): Promise<boolean> {
    if (!this._listing) {
      this._listing = this.api.serverFeatures().then(
        names => {
          this._listed = true;
          for (const name of FEATURES) {
            this[name] = names.includes(name);
            this.found.emit(name);
          }
        },
        (error: unknown) => {
          // An older server (no such route): its routes are probed instead. Anything else
          // (offline, a refusal) is asked again by the next probe.
          if (error instanceof SandboxApiError && error.missingRoute) {
            this._listed = false;
          }
        }
      );
    }
    try {
      await this._listing;
    } finally {
      this._listing = null;
    }
    return this._listed === false ? this.probe(sandboxId) : this._listed === true;
  }

  private readonly _asking = new Set<FeatureName>();
  /** Whether the server listed its features: true, false (an older server), null: not known. */
  private _listed: boolean | null = null;
  private _listing: Promise<void> | null = null;
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

/**
 * Where other views plug into the panel and the details view: an action on each sandbox's row
 * (snapshot, network policy, ...) and a section of the details view. The snapshot and network
 * views register here; so can another extension, through the ISandboxViews token.
 */

import { Token } from '@lumino/coreutils';
import { ISignal, Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import { ISandbox } from './models';
import { SandboxStore } from './store';

/** A button on each sandbox's row of the panel. */
export interface IRowAction {
  id: string;
  /** The button's text; its aria-label is `${label} sandbox ${id}`. */
  label: string;
  /** Lower comes first; the built-in actions use 10 to 40. */
  rank?: number;
  /** Loses state (stop, delete): drawn as a warning button. */
  danger?: boolean;
  isVisible?(sandbox: ISandbox): boolean;
  execute(sandbox: ISandbox, store: SandboxStore): Promise<void>;
}

/** A section of a sandbox's details view. */
export interface IDetailSection {
  id: string;
  title: string;
  rank?: number;
  /** A widget showing this sandbox; disposed with the details view. */
  create(sandbox: ISandbox, store: SandboxStore): Widget;
}

export interface ISandboxViews {
  readonly store: SandboxStore;
  addRowAction(action: IRowAction): void;
  addDetailSection(section: IDetailSection): void;
  readonly rowActions: readonly IRowAction[];
  readonly detailSections: readonly IDetailSection[];
  /** Emitted when an action or a section is added, so open views redraw. */
  readonly changed: ISignal<ISandboxViews, void>;
  /** Open the details of the sandbox `id` in the main area. */
  openDetails(id: string): void;
  /** Make open views redraw for a feature of the server found (see SandboxViews.notify). */
  notify(): void;
}

export const ISandboxViews = new Token<ISandboxViews>(
  'jupyter-sandbox:views',
  'The sandbox store, and the slots where row actions and details sections plug in'
);

export class SandboxViews implements ISandboxViews {
  constructor(
    readonly store: SandboxStore,
    private readonly open: (id: string) => void
  ) {}

  get rowActions(): readonly IRowAction[] {
    return this._actions;
  }

  get detailSections(): readonly IDetailSection[] {
    return this._sections;
  }

  get changed(): ISignal<ISandboxViews, void> {
    return this._changed;
  }

  addRowAction(action: IRowAction): void {
    this._actions = byRank([...this._actions.filter(a => a.id !== action.id), action]);
    this._changed.emit();
  }

  addDetailSection(section: IDetailSection): void {
    this._sections = byRank([...this._sections.filter(s => s.id !== section.id), section]);
    this._changed.emit();
  }

  openDetails(id: string): void {
    this.open(id);
  }

  /**
   * Open views redraw for a feature of the server found: row actions are asked again, and the
   * details make anew only their new and hidden sections (one on show keeps its state). A
   * section whose content changes otherwise listens for that itself.
   */
  notify(): void {
    this._changed.emit();
  }

  private _actions: IRowAction[] = [];
  private _sections: IDetailSection[] = [];
  private _changed = new Signal<ISandboxViews, void>(this);
}

function byRank<T extends { rank?: number }>(items: T[]): T[] {
  return items.sort((a, b) => (a.rank ?? 100) - (b.rank ?? 100));
}

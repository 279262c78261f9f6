/**
 * Snapshots of /workspace: a "Snapshot" action on each sandbox's row, and a details section
 * listing that sandbox's snapshots with download and delete. Registered only when the server
 * has the snapshot routes (features.ts).
 */

import { Notification } from '@jupyterlab/apputils';
import { ISignal, Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import { Features, showIfPresent } from './features';
import { attempt, confirm } from './dialogs';
import { actionGroup, button, el, saveBlob } from './dom';
import { formatBytes, ISandbox } from './models';
import { ISandboxViews } from './slots';
import { ISnapshot, snapshotsOf, sortSnapshots } from './snapshots';
import { SandboxStore } from './store';

export function addSnapshotViews(views: ISandboxViews, features: Features): void {
  // The id of a sandbox whose snapshot a row action just took: its open section lists it.
  const taken = new Signal<ISandboxViews, string>(views);
  views.addRowAction({
    id: 'snapshot',
    label: 'Snapshot',
    rank: 50,
    isVisible: s => features.snapshots === true && s.status === 'running',
    execute: async (sandbox, store) => {
      await attempt('Snapshot failed', async () => {
        const snapshot = await store.api.takeSnapshot(sandbox.id);
        Notification.success(
          `Snapshot ${snapshot.id} of sandbox ${sandbox.id}: ${snapshot.members} files, ${formatBytes(snapshot.size)}`,
          { autoClose: 5000 }
        );
      });
      views.openDetails(sandbox.id);
      taken.emit(sandbox.id);
    }
  });
  views.addDetailSection({
    id: 'snapshots',
    title: 'Snapshots',
    rank: 50,
    create: (sandbox, store) => new SnapshotSection(sandbox, store, features, views, taken)
  });
}

class SnapshotSection extends Widget {
  constructor(
    private readonly sandbox: ISandbox,
    private readonly store: SandboxStore,
    private readonly features: Features,
    private readonly views: ISandboxViews,
    private readonly taken: ISignal<ISandboxViews, string>
  ) {
    super();
    this.addClass('jp-SandboxSnapshots');
    taken.connect(this.onTaken, this);
    void this.load();
  }

  dispose(): void {
    if (!this.isDisposed) {
      this.taken.disconnect(this.onTaken, this);
    }
    super.dispose();
  }

  private onTaken(_: ISandboxViews, sandboxId: string): void {
    if (sandboxId === this.sandbox.id && !this.isDisposed) {
      void this.load();
    }
  }

  private async load(): Promise<void> {
    if (!showIfPresent(this, this.features.snapshots)) {
      return;
    }
    const heading = el('h3', {}, 'Snapshots');
    const take = button(
      'Take a snapshot',
      `Take a snapshot of sandbox ${this.sandbox.id}`,
      () =>
        void attempt('Snapshot failed', () => this.store.api.takeSnapshot(this.sandbox.id)).then(
          () => this.load()
        )
    );
    let snapshots: ISnapshot[];
    try {
      snapshots = sortSnapshots(snapshotsOf(await this.store.api.listSnapshots(), this.sandbox.id));
    } catch (error) {
      this.node.replaceChildren(
        heading,
        el('p', { role: 'alert' }, String((error as Error).message))
      );
      return;
    }
    const list = el('ul', {
      class: 'jp-SandboxSnapshots-list',
      'aria-label': `Snapshots of sandbox ${this.sandbox.id}`
    });
    for (const snapshot of snapshots) {
      const name = `snapshot ${snapshot.id}`;
      list.append(
        el(
          'li',
          { 'data-snapshot-id': snapshot.id },
          el('code', {}, snapshot.id),
          ` ${snapshot.created} · ${snapshot.members} files, ${formatBytes(snapshot.file_bytes)}`,
          snapshot.note ? ` · ${snapshot.note}` : '',
          actionGroup(
            `Actions on ${name}`,
            button('Download', `Download ${name}`, () => void this.download(snapshot)),
            button(
              'Restore here',
              `Restore ${name} into sandbox ${this.sandbox.id}`,
              () => void this.restoreHere(snapshot)
            ),
            button(
              'Restore into a new sandbox',
              `Restore ${name} into a new sandbox`,
              () => void this.restoreNew(snapshot)
            ),
            button('Delete', `Delete ${name}`, () => void this.remove(snapshot), 'jp-mod-warn')
          )
        )
      );
    }
    this.node.replaceChildren(
      heading,
      snapshots.length
        ? list
        : el('p', { class: 'jp-SandboxPanel-empty' }, 'No snapshot of this sandbox.'),
      take
    );
  }

  private async download(snapshot: ISnapshot): Promise<void> {
    await attempt('Download failed', async () => {
      const blob = await this.store.api.downloadSnapshot(snapshot.id);
      saveBlob(blob, `snapshot-${snapshot.id}.tar`);
    });
  }

  private async restoreHere(snapshot: ISnapshot): Promise<void> {
    const body = `Files of the snapshot overwrite those of sandbox ${this.sandbox.id}; other files stay.`;
    if (!(await confirm(`Restore snapshot ${snapshot.id}?`, body, 'Restore'))) {
      return;
    }
    await attempt('Restore failed', async () => {
      const result = await this.store.api.restoreSnapshot(snapshot.id, this.sandbox.id);
      Notification.success(`Restored ${result.members} files into sandbox ${result.sandbox}`, {
        autoClose: 5000
      });
    });
  }

  private async restoreNew(snapshot: ISnapshot): Promise<void> {
    await attempt('Restore failed', async () => {
      const created = await this.store.api.createFromSnapshot(
        snapshot.id,
        snapshot.source?.runtime
      );
      await this.store.refresh();
      this.views.openDetails(created.id);
    });
  }

  private async remove(snapshot: ISnapshot): Promise<void> {
    if (!(await confirm(`Delete snapshot ${snapshot.id}?`, 'Its files are lost.', 'Delete'))) {
      return;
    }
    await attempt('Delete failed', () => this.store.api.deleteSnapshot(snapshot.id));
    await this.load();
  }
}

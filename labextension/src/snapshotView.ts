/**
 * Snapshots of /workspace: a "Snapshot" action on each sandbox's row, and a details section
 * listing that sandbox's snapshots with download and delete. Registered only when the server
 * has the snapshot routes (features.ts).
 */

import { Notification } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { Features } from './features';
import { attempt, confirm } from './dialogs';
import { button, el } from './dom';
import { formatBytes, ISandbox } from './models';
import { ISandboxViews } from './slots';
import { ISnapshot, snapshotsOf, sortSnapshots } from './snapshots';
import { SandboxStore } from './store';

export function addSnapshotViews(views: ISandboxViews, features: Features): void {
  views.addRowAction({
    id: 'snapshot',
    label: 'Snapshot',
    rank: 50,
    isVisible: s => features.snapshots === true && s.status === 'running',
    execute: async (sandbox, store) => {
      await attempt('Snapshot failed', async () => {
        const snapshot = await store.api.takeSnapshot(sandbox.id);
        Notification.success(
          `Snapshot ${snapshot.id} of sandbox ${sandbox.id}: ${formatBytes(snapshot.size)}`,
          { autoClose: 5000 }
        );
      });
      views.openDetails(sandbox.id);
    }
  });
  views.addDetailSection({
    id: 'snapshots',
    title: 'Snapshots',
    rank: 50,
    create: (sandbox, store) => new SnapshotSection(sandbox, store, features)
  });
}

class SnapshotSection extends Widget {
  constructor(
    private readonly sandbox: ISandbox,
    private readonly store: SandboxStore,
    private readonly features: Features
  ) {
    super();
    this.addClass('jp-SandboxSnapshots');
    void this.load();
  }

  private async load(): Promise<void> {
    if (this.features.snapshots !== true) {
      this.node.replaceChildren();
      this.hide();
      return;
    }
    this.show();
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
      list.append(
        el(
          'li',
          { 'data-snapshot-id': snapshot.id },
          el('code', {}, snapshot.id),
          ` ${snapshot.created} · ${formatBytes(snapshot.size)} `,
          button(
            'Download',
            `Download snapshot ${snapshot.id}`,
            () => void this.download(snapshot)
          ),
          button(
            'Delete',
            `Delete snapshot ${snapshot.id}`,
            () => void this.remove(snapshot),
            'jp-mod-warn'
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
      const url = URL.createObjectURL(blob);
      const link = el('a', { href: url, download: `snapshot-${snapshot.id}.tar` });
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60_000);
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

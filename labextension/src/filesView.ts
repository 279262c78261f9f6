/**
 * The files inside a running sandbox: a details section that lists a directory (from
 * /workspace), walks into directories and up, downloads, renames, deletes and uploads files, and
 * makes folders. Under the
 * default copy-on-write workspace the notebook's writes never reach the host's directory, so
 * JupyterLab's own file browser cannot see them: this is how a user gets them. Registered only
 * when the server has the files routes (features.ts).
 */

import { Widget } from '@lumino/widgets';

import { SandboxApiError } from './api';
import { askName, attempt, confirm, notify, serverMessage, showServerError } from './dialogs';
import { actionGroup, button, el, saveBlob } from './dom';
import { Features, showIfPresent } from './features';
import {
  formatModified,
  IFileEntry,
  IFileListing,
  IMadeDirectory,
  joinPath,
  nameProblem,
  parentPath,
  sortEntries,
  WORKSPACE
} from './files';
import { formatBytes, ISandbox } from './models';
import { ISandboxViews } from './slots';
import { SandboxStore } from './store';

export function addFilesViews(views: ISandboxViews, features: Features): void {
  // The directory each sandbox's section shows: a redraw of the details view keeps it.
  const directories = new Map<string, string>();
  views.addDetailSection({
    id: 'files',
    title: 'Files',
    rank: 30,
    create: (sandbox, store) => new FilesSection(sandbox, store, features, directories)
  });
}

class FilesSection extends Widget {
  constructor(
    private readonly sandbox: ISandbox,
    private readonly store: SandboxStore,
    private readonly features: Features,
    private readonly directories: Map<string, string>
  ) {
    super();
    this.addClass('jp-SandboxFiles');
    // One file input, kept across redraws; the Upload button opens its chooser.
    this.input = el('input', {
      type: 'file',
      multiple: '',
      hidden: '',
      class: 'jp-SandboxFiles-input'
    });
    this.input.addEventListener('change', () => void this.upload());
    void this.load();
  }

  /** The directory shown, absolute. */
  private get directory(): string {
    return this.directories.get(this.sandbox.id) ?? WORKSPACE;
  }

  private async open(path: string): Promise<void> {
    this.directories.set(this.sandbox.id, path);
    await this.load();
  }

  private async load(): Promise<void> {
    if (!showIfPresent(this, this.features.files)) {
      return;
    }
    const ticket = ++this.loads; // a slower, older listing must not overwrite a newer one
    const directory = this.directory;
    let listing: IFileListing;
    try {
      listing = await this.store.api.listFiles(this.sandbox.id, directory);
    } catch (error) {
      if (ticket === this.loads && !this.isDisposed) {
        this.names = new Set();
        this.node.replaceChildren(
          el('h3', {}, 'Files'),
          this.toolbar(directory),
          el('p', { role: 'alert' }, String((error as Error).message))
        );
      }
      return;
    }
    if (ticket !== this.loads || this.isDisposed) {
      return;
    }
    this.directories.set(this.sandbox.id, listing.path);
    this.names = new Set(listing.entries.map(e => e.name));
    const entries = sortEntries(listing.entries);
    this.node.replaceChildren(
      el('h3', {}, 'Files'),
      this.toolbar(listing.path),
      entries.length
        ? this.table(listing.path, entries)
        : el('p', { class: 'jp-SandboxPanel-empty' }, 'This directory is empty.')
    );
  }

  /** The current path, and Up, Refresh, New folder and Upload. */
  private toolbar(directory: string): HTMLElement {
    const id = this.sandbox.id;
    const up = button(
      'Up',
      `Up to ${parentPath(directory)} in sandbox ${id}`,
      () => void this.open(parentPath(directory))
    );
    up.disabled = directory === '/';
    this.input.setAttribute('aria-label', `Files to upload into ${directory} of sandbox ${id}`);
    return el(
      'div',
      { class: 'jp-SandboxFiles-toolbar' },
      el(
        'code',
        { class: 'jp-SandboxFiles-path', 'aria-label': `Current directory in sandbox ${id}` },
        directory
      ),
      actionGroup(
        `Files of sandbox ${id}`,
        up,
        button('Refresh', `Refresh the files in ${directory} of sandbox ${id}`, () => {
          void this.load();
        }),
        button(
          'New folder',
          `New folder in ${directory} of sandbox ${id}`,
          () => void this.makeDirectory(directory)
        ),
        button('Upload', `Upload files into ${directory} of sandbox ${id}`, () =>
          this.input.click()
        ),
        this.input
      )
    );
  }

  private table(directory: string, entries: IFileEntry[]): HTMLTableElement {
    const id = this.sandbox.id;
    const head = el(
      'tr',
      {},
      ...['Name', 'Type', 'Size', 'Modified', 'Actions'].map(title => el('th', {}, title))
    );
    const rows = entries.map(entry => {
      const isDirectory = entry.type === 'directory';
      const name = isDirectory
        ? this.directoryLink(entry)
        : el('span', { class: 'jp-SandboxFiles-name' }, entry.name);
      const actions = actionGroup(`Actions on ${entry.path} in sandbox ${id}`);
      if (entry.type === 'file' || entry.type === 'symlink') {
        actions.append(
          button(
            'Download',
            `Download ${entry.path} from sandbox ${id}`,
            () => void this.download(entry)
          )
        );
      }
      actions.append(
        button(
          'Rename',
          `Rename ${entry.path} in sandbox ${id}`,
          () => void this.rename(directory, entry)
        ),
        button(
          'Delete',
          `Delete ${entry.path} from sandbox ${id}`,
          () => void this.remove(entry),
          // Quiet on every row (it asks before it deletes); red only under the pointer.
          'jp-SandboxFiles-delete'
        )
      );
      return el(
        'tr',
        { 'data-path': entry.path, 'data-type': entry.type },
        el('td', { title: `${entry.path} (${entry.mode})` }, name),
        el('td', {}, entry.type),
        el('td', {}, isDirectory ? '—' : formatBytes(entry.size)),
        el('td', { title: entry.modified }, formatModified(entry.modified)),
        el('td', {}, actions)
      );
    });
    return el(
      'table',
      { class: 'jp-SandboxFiles-table', 'aria-label': `Files in ${directory} of sandbox ${id}` },
      el('thead', {}, head),
      el('tbody', {}, ...rows)
    );
  }

  /** A directory's name, as a button that lists it. */
  private directoryLink(entry: IFileEntry): HTMLButtonElement {
    const link = el(
      'button',
      {
        type: 'button',
        class: 'jp-SandboxFiles-open',
        'aria-label': `Open ${entry.path} in sandbox ${this.sandbox.id}`,
        title: `Open ${entry.path}`
      },
      `${entry.name}/`
    );
    link.addEventListener('click', () => void this.open(entry.path));
    return link;
  }

  private async download(entry: IFileEntry): Promise<void> {
    await attempt('Download failed', async () => {
      saveBlob(await this.store.api.readFile(this.sandbox.id, entry.path), entry.name);
    });
  }

  private async remove(entry: IFileEntry): Promise<void> {
    const what =
      entry.type === 'directory' ? `The directory ${entry.path} and all it holds` : entry.path;
    const body = `${what} will be removed from sandbox ${this.sandbox.id}; this cannot be undone.`;
    if (!(await confirm(`Delete ${entry.name}?`, body, 'Delete'))) {
      return;
    }
    await attempt('Delete failed', () => this.store.api.deleteFile(this.sandbox.id, entry.path));
    await this.load();
  }

  /** Make a folder, named in a dialog, in `directory` (the one shown when asked). */
  private async makeDirectory(directory: string): Promise<void> {
    const id = this.sandbox.id;
    const name = await askName({
      title: 'New folder',
      label: `Name of the folder to make in ${directory}:`,
      inputLabel: `Name of the new folder in ${directory} of sandbox ${id}`,
      accept: 'Create',
      problem: nameProblem
    });
    if (name === null) {
      return;
    }
    const path = joinPath(directory, name);
    let made: IMadeDirectory | undefined;
    await attempt('New folder failed', async () => {
      made = await this.store.api.makeDirectory(id, path);
    });
    await this.load();
    if (made && !made.created) {
      await notify('Folder exists', `Sandbox ${id} has the folder ${path} already.`);
    }
  }

  /**
   * Rename `entry` within `directory`, the new name asked for. A name that is taken is the
   * server's refusal, shown in a dialog that offers to replace what has it.
   */
  private async rename(directory: string, entry: IFileEntry): Promise<void> {
    const id = this.sandbox.id;
    const name = await askName({
      title: `Rename ${entry.name}`,
      label: `New name in ${directory}:`,
      inputLabel: `New name for ${entry.path} in sandbox ${id}`,
      accept: 'Rename',
      initial: entry.name,
      problem: nameProblem
    });
    if (name === null || name === entry.name) {
      return;
    }
    const target = joinPath(directory, name);
    const api = this.store.api;
    try {
      await api.moveFile(id, entry.path, target);
    } catch (error) {
      if (!(error instanceof SandboxApiError && error.code === 'file_exists')) {
        await showServerError('Rename failed', error);
      } else if (
        await confirm(
          `Replace ${name}?`,
          `${serverMessage(error)}. Replace ${target} with ${entry.path} in sandbox ${id}? ` +
            'What is there now is lost.',
          'Replace'
        )
      ) {
        await attempt('Rename failed', () => api.moveFile(id, entry.path, target, true));
      }
    }
    await this.load();
  }

  /** Write the chosen files into the directory shown; a name already there asks first. */
  private async upload(): Promise<void> {
    const files = Array.from(this.input.files ?? []);
    this.input.value = ''; // choosing the same file again is a change again
    const directory = this.directory;
    for (const file of files) {
      const path = joinPath(directory, file.name);
      if (
        this.names.has(file.name) &&
        !(await confirm(
          `Replace ${file.name}?`,
          `Sandbox ${this.sandbox.id} has ${path} already; the upload replaces it.`,
          'Replace'
        ))
      ) {
        continue;
      }
      const ok = await attempt('Upload failed', () =>
        this.store.api.writeFile(this.sandbox.id, path, file)
      );
      if (!ok) {
        break;
      }
    }
    await this.load();
  }

  private readonly input: HTMLInputElement;
  private names = new Set<string>();
  private loads = 0;
}

/**
 * Files inside a running sandbox (`GET/PUT/PATCH/DELETE /api/sandboxes/{id}/files?path=P`: list,
 * make a directory, move, remove; `GET/PUT /api/sandboxes/{id}/files/content?path=P`), as the
 * server extension documents them in openapi.yaml (schemas `FileEntry`, `FileListing`). Paths are the sandbox's own: absolute, or
 * relative to /workspace. Under copy-on-write this is the only way to a file a notebook wrote,
 * which never reaches the host's directory.
 */

/** Where the files view starts: the sandbox's working directory. */
export const WORKSPACE = '/workspace';

/** Schema `FileEntry`: one entry of a directory. */
export interface IFileEntry {
  name: string;
  /** Absolute, in the sandbox. */
  path: string;
  type: 'file' | 'directory' | 'symlink' | 'other' | string;
  /** Bytes (a symlink's is its target's length). */
  size: number;
  /** Permission bits in octal, e.g. "0o644". */
  mode: string;
  /** ISO 8601, UTC. */
  modified: string;
}

/** The answer to making a directory: its entry, and whether it was made (false: it was there). */
export interface IMadeDirectory extends IFileEntry {
  created: boolean;
}

/** Schema `FileListing`: a directory (absolute, normalised by the server) and its entries. */
export interface IFileListing {
  path: string;
  entries: IFileEntry[];
}

/** Directories first, then everything else; each group by name (code point order, as `ls`). */
export function sortEntries(entries: readonly IFileEntry[]): IFileEntry[] {
  const rank = (e: IFileEntry) => (e.type === 'directory' ? 0 : 1);
  return [...entries].sort(
    (a, b) => rank(a) - rank(b) || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)
  );
}

/** `name` in the directory `dir` (absolute): "/workspace" + "a.txt" -> "/workspace/a.txt". */
export function joinPath(dir: string, name: string): string {
  return dir.endsWith('/') ? `${dir}${name}` : `${dir}/${name}`;
}

/** The directory holding `path` (absolute); "/" is its own parent. */
export function parentPath(path: string): string {
  const trimmed = path.replace(/\/+$/, '');
  const cut = trimmed.lastIndexOf('/');
  return cut <= 0 ? '/' : trimmed.slice(0, cut);
}

/**
 * Why `name` cannot name a new entry of a directory (a folder made, a file renamed), or null
 * when it can: it must be one name, not a path, and not "." or "..".
 */
export function nameProblem(name: string): string | null {
  if (name === '') {
    return 'Enter a name.';
  }
  if (name.includes('/')) {
    return 'A name cannot contain "/": it names one entry of this directory, not a path.';
  }
  if (name.includes('\0')) {
    return 'A name cannot contain a NUL character.';
  }
  if (name === '.' || name === '..') {
    return `"${name}" is not a name of its own: it means a directory that is already there.`;
  }
  return null;
}

/** "2026-01-02 03:04:05 UTC" from the server's ISO 8601 stamp; unparsable: as it came. */
export function formatModified(iso: string): string {
  const time = Date.parse(iso);
  if (Number.isNaN(time)) {
    return iso || '—';
  }
  return `${new Date(time).toISOString().slice(0, 19).replace('T', ' ')} UTC`;
}

/**
 * Snapshots of a sandbox's /workspace (`POST /api/sandboxes/{id}/snapshots`,
 * `GET/DELETE /api/snapshots[/{id}]`, `GET /api/snapshots/{id}/download`, restore with
 * `POST /api/snapshots/{id}/restore` or into a new sandbox with `POST /api/sandboxes
 * {"snapshot": id}`), as the snapshot server extension documents them (schema `Snapshot`).
 */

export interface ISnapshot {
  id: string;
  owner: string;
  kind: string;
  created: string;
  /** The sandbox it was made from (all null for an imported archive). */
  source: { sandbox: string | null; image: string | null; runtime: string | null };
  /** Bytes of the stored tar. */
  size: number;
  sha256: string;
  members: number;
  /** Bytes of the regular files in it. */
  file_bytes: number;
  note: string;
}

/** What a restore answers. */
export interface IRestoreResult {
  snapshot: string;
  sandbox: string;
  members: number;
  file_bytes: number;
}

/** Newest first: the one just taken is at the top of the list. */
export function sortSnapshots(snapshots: readonly ISnapshot[]): ISnapshot[] {
  return [...snapshots].sort((a, b) => Date.parse(b.created) - Date.parse(a.created));
}

/** The snapshots taken of one sandbox. */
export function snapshotsOf(snapshots: readonly ISnapshot[], sandboxId: string): ISnapshot[] {
  return snapshots.filter(s => s.source?.sandbox === sandboxId);
}

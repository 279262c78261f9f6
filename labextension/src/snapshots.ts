/**
 * Snapshots of a sandbox's /workspace (`POST /api/sandboxes/{id}/snapshots`,
 * `GET/DELETE /api/snapshots[/{id}]`, `GET /api/snapshots/{id}/download`). These routes are being
 * added to the server; the shape follows the design's metadata (id, owner, source image, size,
 * sha256, created).
 */

export interface ISnapshot {
  id: string;
  owner?: string;
  sandbox_id?: string | null;
  source_image?: string;
  size: number;
  sha256?: string;
  created: string;
  name?: string | null;
}

/** Newest first: the one just taken is at the top of the list. */
export function sortSnapshots(snapshots: readonly ISnapshot[]): ISnapshot[] {
  return [...snapshots].sort((a, b) => Date.parse(b.created) - Date.parse(a.created));
}

/** The snapshots taken of one sandbox. */
export function snapshotsOf(snapshots: readonly ISnapshot[], sandboxId: string): ISnapshot[] {
  return snapshots.filter(s => s.sandbox_id === sandboxId);
}

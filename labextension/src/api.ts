/**
 * The REST client. It takes the function that sends a request, so that JupyterLab gives it
 * ServerConnection (base URL, token, XSRF) and node's test runner gives it a stand-in `fetch`.
 */

import { backgroundRequest, IBackgroundCommand, ICommandOutput } from './commands';
import { IFileEntry, IFileListing, IMadeDirectory } from './files';
import { errorMessage, IAttestation, ISandbox, IStats } from './models';
import {
  IHeldRequest,
  INetworkAudit,
  INetworkPolicy,
  INetworkPolicyState,
  RequestDecision
} from './network';
import { IListeningPort, IPortUrl, MAX_PORT, MIN_PORT } from './ports';
import { IRestoreResult, ISnapshot } from './snapshots';

/** Sends `init` to `path` (relative to the server's base URL, e.g. "api/sandboxes"). */
export type Requester = (path: string, init: RequestInit) => Promise<Response>;

/** A request the server refused: `message` is the server's own words. */
export class SandboxApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string
  ) {
    super(message);
    this.name = 'SandboxApiError';
  }

  /** The route does not exist on this server (an older server extension). */
  get missingRoute(): boolean {
    return this.status === 404 && this.code === 'http_404';
  }
}

export type SandboxAction = 'pause' | 'resume' | 'restart';

export class SandboxApi {
  constructor(private readonly send: Requester) {}

  listSandboxes(): Promise<ISandbox[]> {
    return this.json('api/sandboxes');
  }

  getSandbox(id: string): Promise<ISandbox> {
    return this.json(`api/sandboxes/${enc(id)}`);
  }

  /** Removes the sandbox and its files; an attached kernel reports it gone. */
  async deleteSandbox(id: string): Promise<void> {
    await this.call(`api/sandboxes/${enc(id)}`, { method: 'DELETE' });
  }

  action(id: string, action: SandboxAction): Promise<ISandbox> {
    return this.json(`api/sandboxes/${enc(id)}/${action}`, { method: 'POST', body: '' });
  }

  stats(id: string): Promise<IStats> {
    return this.json(`api/sandboxes/${enc(id)}/stats`);
  }

  attestation(id: string): Promise<IAttestation> {
    return this.json(`api/sandboxes/${enc(id)}/attestation`);
  }

  // Snapshots (routes being added to the server).

  takeSnapshot(id: string, note = ''): Promise<ISnapshot> {
    const body = note ? { kind: 'workspace', note } : { kind: 'workspace' };
    return this.json(`api/sandboxes/${enc(id)}/snapshots`, {
      method: 'POST',
      body: JSON.stringify(body)
    });
  }

  /** Unpack the snapshot into a running sandbox's /workspace (its files overwrite). */
  restoreSnapshot(id: string, sandboxId: string): Promise<IRestoreResult> {
    return this.json(`api/snapshots/${enc(id)}/restore`, {
      method: 'POST',
      body: JSON.stringify({ sandbox: sandboxId })
    });
  }

  /** Start a new sandbox whose /workspace holds the snapshot's files. */
  createFromSnapshot(id: string, runtime?: string | null): Promise<ISandbox> {
    return this.json('api/sandboxes', {
      method: 'POST',
      body: JSON.stringify(runtime ? { snapshot: id, runtime } : { snapshot: id })
    });
  }

  listSnapshots(): Promise<ISnapshot[]> {
    return this.json('api/snapshots');
  }

  async deleteSnapshot(id: string): Promise<void> {
    await this.call(`api/snapshots/${enc(id)}`, { method: 'DELETE' });
  }

  /** The snapshot's tar, fetched with the server's credentials (a plain link has none). */
  async downloadSnapshot(id: string): Promise<Blob> {
    return (await this.call(`api/snapshots/${enc(id)}/download`, {})).blob();
  }

  /** The optional features this server names (`GET /api/sandbox-features`, newer servers). */
  async serverFeatures(): Promise<string[]> {
    const answer = await this.json<{ features: unknown }>('api/sandbox-features');
    if (!Array.isArray(answer.features) || answer.features.some(f => typeof f !== 'string')) {
      throw new SandboxApiError(0, 'bad_answer', 'the server named its features wrongly');
    }
    return answer.features as string[];
  }

  /**
   * Whether this server has the route `path` (GET): false when it answers the 404 of a route it
   * does not know; true for any answer of the route itself, errors included.
   */
  async hasRoute(path: string): Promise<boolean> {
    try {
      await this.call(path, {});
      return true;
    } catch (error) {
      return !(error instanceof SandboxApiError && (error.missingRoute || error.status === 0));
    }
  }

  // Network policy (routes being added to the server).

  network(id: string): Promise<INetworkPolicyState> {
    return this.json(`api/sandboxes/${enc(id)}/network`);
  }

  setNetwork(id: string, policy: INetworkPolicy): Promise<INetworkPolicyState> {
    return this.json(`api/sandboxes/${enc(id)}/network`, {
      method: 'PUT',
      body: JSON.stringify(policy)
    });
  }

  /** The last `limit` egress decisions, oldest first. */
  networkAudit(id: string, limit = 50): Promise<INetworkAudit> {
    return this.json(`api/sandboxes/${enc(id)}/network/audit?limit=${limit}`);
  }

  /** The requests the sandbox's ask policy holds for a decision, oldest first. */
  async heldRequests(id: string): Promise<IHeldRequest[]> {
    const answer = await this.json<{ requests: IHeldRequest[] }>(
      `api/sandboxes/${enc(id)}/network/requests`
    );
    return answer.requests;
  }

  /** Decide a held request (404 `network_request_not_found` once it no longer waits). */
  decideRequest(id: string, requestId: string, decision: RequestDecision): Promise<IHeldRequest> {
    return this.json(`api/sandboxes/${enc(id)}/network/requests/${enc(requestId)}`, {
      method: 'POST',
      body: JSON.stringify({ decision })
    });
  }

  // Files inside a running sandbox: paths are the sandbox's, absolute or relative to /workspace.

  /** The entries of the directory `path` (the server's default, /workspace, when omitted). */
  listFiles(id: string, path?: string): Promise<IFileListing> {
    const query = path === undefined ? '' : `?path=${encodeURIComponent(path)}`;
    return this.json(`api/sandboxes/${enc(id)}/files${query}`);
  }

  /** A file's bytes, fetched with the server's credentials (a plain link has none). */
  async readFile(id: string, path: string): Promise<Blob> {
    const response = await this.call(
      `api/sandboxes/${enc(id)}/files/content?path=${encodeURIComponent(path)}`,
      {}
    );
    return response.blob();
  }

  /** Write `data` to `path` whole (missing parent directories made, a file there replaced). */
  writeFile(id: string, path: string, data: Blob): Promise<IFileEntry> {
    return this.json(`api/sandboxes/${enc(id)}/files/content?path=${encodeURIComponent(path)}`, {
      method: 'PUT',
      body: data,
      headers: { 'Content-Type': 'application/octet-stream' }
    });
  }

  /**
   * Make the directory `path` with its missing parents. Its entry; `created` is false when a
   * directory was there already (a file there is refused: 409 `file_exists`).
   */
  makeDirectory(id: string, path: string): Promise<IMadeDirectory> {
    return this.json(`api/sandboxes/${enc(id)}/files?path=${encodeURIComponent(path)}`, {
      method: 'PUT',
      body: JSON.stringify({ type: 'directory' })
    });
  }

  /**
   * Move (rename) `path` to `target` (its missing parents made); the entry at `target`. Something
   * already there is refused (409 `file_exists`) unless `overwrite`.
   */
  moveFile(id: string, path: string, target: string, overwrite = false): Promise<IFileEntry> {
    return this.json(`api/sandboxes/${enc(id)}/files?path=${encodeURIComponent(path)}`, {
      method: 'PATCH',
      body: JSON.stringify({ path: target, overwrite })
    });
  }

  /** Remove a file, a link, or a directory with all it holds (not /workspace itself). */
  async deleteFile(id: string, path: string): Promise<void> {
    await this.call(`api/sandboxes/${enc(id)}/files?path=${encodeURIComponent(path)}`, {
      method: 'DELETE'
    });
  }

  // Background commands of a sandbox: started, listed, their output read from an offset,
  // removed (killed with all they started, their output forgotten).

  /** Start `command` (a string for /bin/sh -c, or an argv) and leave it running. */
  startCommand(
    id: string,
    command: string | readonly string[],
    options: { cwd?: string; env?: { [name: string]: string } } = {}
  ): Promise<IBackgroundCommand> {
    const body = backgroundRequest(command, options);
    if (!body) {
      return Promise.reject(
        new SandboxApiError(400, 'invalid_request', 'there is no command to start')
      );
    }
    return this.json(`api/sandboxes/${enc(id)}/commands`, {
      method: 'POST',
      body: JSON.stringify(body)
    });
  }

  /** The sandbox's background commands, oldest first. */
  async listCommands(id: string): Promise<IBackgroundCommand[]> {
    const answer = await this.json<{ commands: IBackgroundCommand[] }>(
      `api/sandboxes/${enc(id)}/commands`
    );
    return answer.commands;
  }

  /** Its output from byte `offset` on, at most `limit` bytes (the server's cap when omitted). */
  commandOutput(
    id: string,
    commandId: string,
    offset = 0,
    limit?: number
  ): Promise<ICommandOutput> {
    const query = `offset=${offset}${limit === undefined ? '' : `&limit=${limit}`}`;
    return this.json(`api/sandboxes/${enc(id)}/commands/${enc(commandId)}/output?${query}`);
  }

  /** Kill the command and everything it started (if it runs), and forget it and its output. */
  async deleteCommand(id: string, commandId: string): Promise<void> {
    await this.call(`api/sandboxes/${enc(id)}/commands/${enc(commandId)}`, { method: 'DELETE' });
  }

  // Ports: servers the sandbox's code started on its loopback, proxied by the Jupyter server.

  /** The servers listening in the sandbox now (409 `sandbox_conflict` when it is paused). */
  async listPorts(id: string): Promise<IListeningPort[]> {
    const answer = await this.json<{ ports: IListeningPort[] }>(`api/sandboxes/${enc(id)}/ports`);
    return answer.ports;
  }

  /** The proxied URL of `port`, whether or not a server listens there yet. */
  portUrl(id: string, port: number): Promise<IPortUrl> {
    if (!Number.isInteger(port) || port < MIN_PORT || port > MAX_PORT) {
      return Promise.reject(
        new SandboxApiError(400, 'invalid_request', `${port} is not a port (1 to 65535)`)
      );
    }
    return this.json(`api/sandboxes/${enc(id)}/ports/${port}`);
  }

  /**
   * Revoke every link of the sandbox's ports handed out so far (they answer 404 from then on);
   * the links asked for afterwards are new. No running server needed; open connections stay.
   */
  async revokePorts(id: string): Promise<void> {
    await this.call(`api/sandboxes/${enc(id)}/ports`, { method: 'DELETE' });
  }

  private async json<T>(path: string, init: RequestInit = {}): Promise<T> {
    const response = await this.call(path, init);
    return (await response.json()) as T;
  }

  private async call(path: string, init: RequestInit): Promise<Response> {
    let response: Response;
    try {
      response = await this.send(path, init);
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      throw new SandboxApiError(0, 'network_error', `the server did not answer: ${reason}`);
    }
    if (!response.ok) {
      const body = await response.text();
      const { code, message } = errorMessage(response.status, body, response.statusText);
      throw new SandboxApiError(response.status, code, message);
    }
    return response;
  }
}

function enc(id: string): string {
  return encodeURIComponent(id);
}

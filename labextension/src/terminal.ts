/**
 * A shell in a running sandbox, over the server's websocket
 * `GET api/sandboxes/{id}/terminal?rows=R&cols=C`. It speaks terminado's protocol, the one
 * JupyterLab's own terminals speak, so JupyterLab's terminal widget drives it unchanged: every
 * message is a JSON array; the client sends `["stdin", text]` and `["set_size", rows, cols, …]`,
 * the server `["setup", {}]` once, `["stdout", text]`, and `["disconnect", 1]` when the shell
 * exits. The shell lives as long as its socket: closing it ends the shell, and there is no
 * session to reattach to, so a lost connection ends the terminal rather than retrying.
 */

import { URLExt } from '@jupyterlab/coreutils';
import type { ServerConnection, Terminal } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

import { SandboxApi, SandboxApiError } from './api';
import { ISandbox } from './models';

/** The parts of the server settings a terminal's socket needs. */
export type SocketSettings = Pick<
  ServerConnection.ISettings,
  'wsUrl' | 'token' | 'appendToken' | 'WebSocket'
>;

/** A terminal's size in character cells. */
export interface ITerminalSize {
  rows: number;
  cols: number;
}

/** The shell's size until the terminal widget tells its own, right after it connects. */
export const DEFAULT_SIZE: ITerminalSize = { rows: 24, cols: 80 };

/**
 * The websocket's URL. The token goes in the query only when the settings say so, as
 * @jupyterlab/services does for its own sockets: in the browser the page's cookie
 * authenticates them.
 */
export function terminalUrl(
  settings: SocketSettings,
  sandboxId: string,
  size: ITerminalSize
): string {
  const route = URLExt.join(
    settings.wsUrl,
    'api/sandboxes',
    encodeURIComponent(sandboxId),
    'terminal'
  );
  let query = `?rows=${size.rows}&cols=${size.cols}`;
  if (settings.appendToken && settings.token !== '') {
    query += `&token=${encodeURIComponent(settings.token)}`;
  }
  return route + query;
}

/** A client message as the protocol's array: `["stdin", "ls\r"]`, `["set_size", 24, 80]`. */
export function encodeMessage(message: Terminal.IMessage): string {
  return JSON.stringify([message.type, ...(message.content ?? [])]);
}

/** What the server says: the terminal is ready, the shell wrote, or the shell is gone. */
export type ServerMessage =
  { type: 'setup' } | { type: 'stdout'; text: string } | { type: 'disconnect' };

/** A server message, or null for anything else (binary, not JSON, another shape or type). */
export function decodeMessage(data: unknown): ServerMessage | null {
  if (typeof data !== 'string') {
    return null;
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(data);
  } catch {
    return null;
  }
  if (!Array.isArray(parsed)) {
    return null;
  }
  const [type, text] = parsed;
  switch (type) {
    case 'setup':
      return { type: 'setup' };
    case 'stdout':
      return typeof text === 'string' ? { type: 'stdout', text } : null;
    case 'disconnect':
      return { type: 'disconnect' };
    default:
      return null;
  }
}

/**
 * Why no terminal opened in the sandbox. A browser's websocket sees only a failed connection,
 * never the HTTP error the server answered the upgrade with (404 unknown sandbox, 409 paused,
 * 429 too many terminals), so the sandbox's state as the server lists it now is the best
 * explanation there is.
 */
export async function terminalRefusal(api: SandboxApi, sandboxId: string): Promise<string> {
  const prefix = `Could not open a terminal in sandbox ${sandboxId}`;
  let sandbox: ISandbox;
  try {
    sandbox = await api.getSandbox(sandboxId);
  } catch (error) {
    if (error instanceof SandboxApiError && error.status === 404 && !error.missingRoute) {
      return `${prefix}: it no longer exists.`;
    }
    return `${prefix}: is it running? (${(error as Error).message})`;
  }
  if (sandbox.status === 'paused') {
    return `${prefix}: it is paused. Resume it, then open the terminal again.`;
  }
  if (sandbox.status !== 'running') {
    return `${prefix}: it is ${sandbox.status}, not running.`;
  }
  return (
    `${prefix}: it is running, but the server refused the terminal ` +
    '(are as many terminals open in it as the server allows? Close one.) Its log says why.'
  );
}

export interface ISandboxTerminalOptions {
  sandboxId: string;
  serverSettings: ServerConnection.ISettings;
  /** The shell's first size (the widget sends its own once connected). */
  size?: ITerminalSize;
}

/** A terminal connection to a new shell in a sandbox, for JupyterLab's terminal widget. */
export class SandboxTerminalConnection implements Terminal.ITerminalConnection {
  constructor(options: ISandboxTerminalOptions) {
    this.sandboxId = options.sandboxId;
    this.serverSettings = options.serverSettings;
    this.size = options.size ?? DEFAULT_SIZE;
    this.open();
  }

  readonly sandboxId: string;
  readonly serverSettings: ServerConnection.ISettings;

  /** The sandbox's id: JupyterLab's widget titles its tab "Terminal <name>". */
  get name(): string {
    return this.sandboxId;
  }

  get model(): Terminal.IModel {
    return { name: this.name };
  }

  get messageReceived(): ISignal<this, Terminal.IMessage> {
    return this._messageReceived;
  }

  /**
   * `connecting` until the server's setup message, then `connected`; `disconnected` once the
   * terminal is closed, or when it never opened (the socket closed before the setup: the server
   * refused the upgrade).
   */
  get connectionStatus(): Terminal.ConnectionStatus {
    return this._status;
  }

  get connectionStatusChanged(): ISignal<this, Terminal.ConnectionStatus> {
    return this._statusChanged;
  }

  get disposed(): ISignal<this, void> {
    return this._disposed;
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  /** Send `message`; what is sent before the server's setup waits for it. */
  send(message: Terminal.IMessage): void {
    if (this._isDisposed || !message.content) {
      return;
    }
    if (message.type === 'set_size') {
      const [rows, cols] = message.content;
      if (typeof rows === 'number' && typeof cols === 'number') {
        this.size = { rows, cols }; // a new shell after reconnect() opens at this size
      }
    }
    if (this._status === 'connected' && this.socket) {
      this.socket.send(encodeMessage(message));
    } else if (this._status === 'connecting') {
      this.pending.push(message);
    }
  }

  /** Open a new shell in the sandbox (the previous one ended with its socket). */
  reconnect(): Promise<void> {
    if (this._isDisposed) {
      return Promise.reject(new Error('the terminal is closed'));
    }
    return new Promise((resolve, reject) => {
      const settle = (_: this, status: Terminal.ConnectionStatus) => {
        if (status === 'connecting') {
          return;
        }
        this._statusChanged.disconnect(settle);
        if (status === 'connected') {
          resolve();
        } else {
          reject(new Error(`could not open a terminal in sandbox ${this.sandboxId}`));
        }
      };
      this._statusChanged.connect(settle);
      this.open();
    });
  }

  /** Close the socket: the server ends the shell. */
  async shutdown(): Promise<void> {
    this.dispose();
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this.closeSocket();
    this.setStatus('disconnected');
    this._disposed.emit();
    Signal.clearData(this);
  }

  private open(): void {
    this.closeSocket();
    this.pending = [];
    this.setStatus('connecting');
    const socket = new this.serverSettings.WebSocket(
      terminalUrl(this.serverSettings, this.sandboxId, this.size)
    );
    socket.onmessage = event => this.receive(event.data);
    socket.onclose = () => this.closed(); // a failed connection's error event is followed by this
    this.socket = socket;
  }

  private receive(data: unknown): void {
    const message = decodeMessage(data);
    if (message === null) {
      return; // not the protocol: nothing a terminal could show
    }
    switch (message.type) {
      case 'setup':
        if (this._status !== 'connecting') {
          break; // the protocol sends it once; another changes nothing
        }
        // What waited goes out first, so that the size the widget sends on this news is last.
        this._status = 'connected';
        this.flush();
        this._statusChanged.emit('connected');
        break;
      case 'stdout':
        this._messageReceived.emit({ type: 'stdout', content: [message.text] });
        break;
      case 'disconnect':
        this.end();
        break;
    }
  }

  private closed(): void {
    this.socket = null;
    if (this._status === 'connecting') {
      this.pending = [];
      this.setStatus('disconnected'); // never opened: whoever opened it explains why
    } else {
      this.end(); // the shell cannot outlive its socket
    }
  }

  /** The shell is gone: the widget writes that the session finished, then the terminal closes. */
  private end(): void {
    this._messageReceived.emit({ type: 'disconnect', content: [1] });
    this.dispose();
  }

  private flush(): void {
    for (const message of this.pending.splice(0)) {
      this.send(message);
    }
  }

  private closeSocket(): void {
    if (this.socket) {
      this.socket.onmessage = null;
      this.socket.onclose = null;
      this.socket.close();
      this.socket = null;
    }
  }

  private setStatus(status: Terminal.ConnectionStatus): void {
    if (status !== this._status) {
      this._status = status;
      this._statusChanged.emit(status);
    }
  }

  private size: ITerminalSize;
  private socket: WebSocket | null = null;
  private pending: Terminal.IMessage[] = [];
  private _status: Terminal.ConnectionStatus = 'connecting';
  private _isDisposed = false;
  private _messageReceived = new Signal<this, Terminal.IMessage>(this);
  private _statusChanged = new Signal<this, Terminal.ConnectionStatus>(this);
  private _disposed = new Signal<this, void>(this);
}

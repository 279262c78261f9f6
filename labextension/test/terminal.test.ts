import { strict as assert } from 'node:assert';
import { beforeEach, describe, it } from 'node:test';

import type { ServerConnection, Terminal } from '@jupyterlab/services';

import { SandboxApi } from '../src/api';
import {
  decodeMessage,
  encodeMessage,
  SandboxTerminalConnection,
  terminalRefusal,
  terminalUrl
} from '../src/terminal';

/** A websocket the test plays the server's side of. */
class FakeSocket {
  static opened: FakeSocket[] = [];

  constructor(readonly url: string) {
    FakeSocket.opened.push(this);
  }

  onmessage: ((event: { data: unknown }) => void) | null = null;
  onclose: (() => void) | null = null;
  sent: unknown[] = [];
  closed = false;

  send(data: string): void {
    this.sent.push(JSON.parse(data));
  }

  close(): void {
    this.closed = true;
  }

  /** The server sends `data` (a message's JSON text, or anything else). */
  receive(data: unknown): void {
    this.onmessage?.({ data });
  }

  /** The socket closes from the server's side (or never opened). */
  drop(): void {
    this.onclose?.();
  }
}

function settings(overrides: Partial<ServerConnection.ISettings> = {}): ServerConnection.ISettings {
  return {
    wsUrl: 'ws://127.0.0.1:8888/lab-base/',
    token: 'secret token',
    appendToken: false,
    WebSocket: FakeSocket as unknown as typeof WebSocket,
    ...overrides
  } as ServerConnection.ISettings;
}

/** A connection, its socket, and every message and status it reported. */
function connect() {
  const connection = new SandboxTerminalConnection({
    sandboxId: 'a1b2c3d4e5f6',
    serverSettings: settings()
  });
  const messages: Terminal.IMessage[] = [];
  const statuses: string[] = [];
  let disposed = 0;
  connection.messageReceived.connect((_, message) => messages.push(message));
  connection.connectionStatusChanged.connect((_, status) => statuses.push(status));
  connection.disposed.connect(() => (disposed += 1));
  const socket = FakeSocket.opened[FakeSocket.opened.length - 1];
  return { connection, socket, messages, statuses, disposed: () => disposed };
}

const SETUP = JSON.stringify(['setup', {}]);

beforeEach(() => {
  FakeSocket.opened = [];
});

describe('terminal URL', () => {
  it("is the server's websocket URL of the sandbox's terminal, with the size", () => {
    assert.equal(
      terminalUrl(settings(), 'a1b2c3d4e5f6', { rows: 30, cols: 100 }),
      'ws://127.0.0.1:8888/lab-base/api/sandboxes/a1b2c3d4e5f6/terminal?rows=30&cols=100'
    );
    assert.equal(
      terminalUrl(settings({ wsUrl: 'wss://hub.example/' }), 'a/b?c', { rows: 24, cols: 80 }),
      'wss://hub.example/api/sandboxes/a%2Fb%3Fc/terminal?rows=24&cols=80'
    );
  });

  it('carries the token only where the settings append it, as JupyterLab does', () => {
    const size = { rows: 24, cols: 80 };
    assert.doesNotMatch(terminalUrl(settings(), 's1', size), /token/);
    assert.equal(
      terminalUrl(settings({ appendToken: true }), 's1', size),
      'ws://127.0.0.1:8888/lab-base/api/sandboxes/s1/terminal?rows=24&cols=80&token=secret%20token'
    );
    assert.doesNotMatch(
      terminalUrl(settings({ appendToken: true, token: '' }), 's1', size),
      /token/,
      'no empty token'
    );
  });
});

describe("terminado's messages", () => {
  it('encodes what the terminal sends as a JSON array', () => {
    assert.equal(encodeMessage({ type: 'stdin', content: ['ls -l\r'] }), '["stdin","ls -l\\r"]');
    assert.equal(
      encodeMessage({ type: 'set_size', content: [24, 80, 400, 600] }),
      '["set_size",24,80,400,600]'
    );
    assert.equal(encodeMessage({ type: 'stdin' }), '["stdin"]');
  });

  it("decodes the server's setup, output and disconnect", () => {
    assert.deepEqual(decodeMessage('["setup", {}]'), { type: 'setup' });
    assert.deepEqual(decodeMessage('["stdout", "42\\r\\n\\u001b[0m"]'), {
      type: 'stdout',
      text: '42\r\n\u001b[0m'
    });
    assert.deepEqual(decodeMessage('["disconnect", 1]'), { type: 'disconnect' });
  });

  it('ignores anything else the server might send', () => {
    for (const data of [
      'not JSON',
      '',
      'null',
      '{"type": "stdout"}',
      '"stdout"',
      '[]',
      '["stdout"]',
      '["stdout", 42]',
      '["stdout", ["a"]]',
      '["stdin", "a client\'s message"]',
      '["set_size", 24, 80]',
      '["unknown", "x"]',
      '[null]'
    ]) {
      assert.equal(decodeMessage(data), null, data);
    }
    assert.equal(decodeMessage(new ArrayBuffer(4)), null, 'a binary frame');
    assert.equal(decodeMessage(undefined), null);
  });
});

describe('SandboxTerminalConnection', () => {
  it('opens the socket at the default size and is connected on the setup message', () => {
    const { connection, socket, statuses } = connect();
    assert.equal(
      socket.url,
      'ws://127.0.0.1:8888/lab-base/api/sandboxes/a1b2c3d4e5f6/terminal?rows=24&cols=80'
    );
    assert.equal(connection.name, 'a1b2c3d4e5f6');
    assert.deepEqual(connection.model, { name: 'a1b2c3d4e5f6' });
    assert.equal(connection.connectionStatus, 'connecting');
    socket.receive(SETUP);
    assert.equal(connection.connectionStatus, 'connected');
    assert.deepEqual(statuses, ['connected']);
    socket.receive(SETUP);
    assert.deepEqual(statuses, ['connected'], 'a second setup changes nothing');
  });

  it('holds what is sent until the setup, then sends it first, in order', () => {
    const { connection, socket } = connect();
    connection.send({ type: 'set_size', content: [30, 100, 500, 800] });
    connection.send({ type: 'stdin', content: ['echo hi\r'] });
    connection.send({ type: 'stdin' }); // nothing to send
    assert.deepEqual(socket.sent, []);
    // The widget answers the news of the connection with its size: it goes out after.
    connection.connectionStatusChanged.connect(() =>
      connection.send({ type: 'set_size', content: [31, 101, 510, 810] })
    );
    socket.receive(SETUP);
    assert.deepEqual(socket.sent, [
      ['set_size', 30, 100, 500, 800],
      ['stdin', 'echo hi\r'],
      ['set_size', 31, 101, 510, 810]
    ]);
    connection.send({ type: 'stdin', content: ['\u0003'] });
    assert.deepEqual(socket.sent[3], ['stdin', '\u0003']);
  });

  it("passes the shell's output on and ignores malformed messages", () => {
    const { socket, messages } = connect();
    socket.receive(SETUP);
    socket.receive('["stdout", "$ "]');
    socket.receive('garbage');
    socket.receive('["stdout", 7]');
    socket.receive(new ArrayBuffer(2));
    socket.receive('["stdout", "42\\r\\n"]');
    assert.deepEqual(messages, [
      { type: 'stdout', content: ['$ '] },
      { type: 'stdout', content: ['42\r\n'] }
    ]);
  });

  it('ends when the shell exits: the widget hears the disconnect, then it is disposed', () => {
    const { connection, socket, messages, statuses, disposed } = connect();
    let disconnectedBeforeDisposal = false;
    connection.messageReceived.connect((_, message) => {
      disconnectedBeforeDisposal = message.type === 'disconnect' && !connection.isDisposed;
    });
    socket.receive(SETUP);
    socket.receive('["disconnect", 1]');
    assert.ok(disconnectedBeforeDisposal);
    assert.deepEqual(messages, [{ type: 'disconnect', content: [1] }]);
    assert.equal(connection.isDisposed, true);
    assert.equal(disposed(), 1);
    assert.equal(socket.closed, true);
    assert.deepEqual(statuses, ['connected', 'disconnected']);
    socket.drop(); // the server then closes: nothing more happens
    connection.send({ type: 'stdin', content: ['x'] });
    assert.deepEqual(socket.sent, []);
    assert.equal(disposed(), 1);
  });

  it('ends when the socket closes under a live shell', () => {
    const { connection, socket, messages } = connect();
    socket.receive(SETUP);
    socket.drop();
    assert.deepEqual(messages, [{ type: 'disconnect', content: [1] }]);
    assert.equal(connection.isDisposed, true);
  });

  it('reports a refused connection as disconnected, not disposed, and sends nothing', () => {
    const { connection, socket, messages, statuses } = connect();
    connection.send({ type: 'stdin', content: ['ls\r'] });
    socket.drop(); // the server answered the upgrade with an HTTP error
    assert.equal(connection.connectionStatus, 'disconnected');
    assert.deepEqual(statuses, ['disconnected']);
    assert.equal(connection.isDisposed, false);
    assert.deepEqual(messages, []);
    connection.send({ type: 'stdin', content: ['ls\r'] });
    assert.deepEqual(socket.sent, []);
  });

  it('closes its socket when shut down or disposed, once', async () => {
    const { connection, socket, disposed } = connect();
    socket.receive(SETUP);
    await connection.shutdown();
    assert.equal(socket.closed, true);
    assert.equal(connection.isDisposed, true);
    assert.equal(connection.connectionStatus, 'disconnected');
    connection.dispose();
    assert.equal(disposed(), 1);
    assert.equal(FakeSocket.opened.length, 1, 'no reconnection');
    await assert.rejects(connection.reconnect(), /closed/);
  });

  it('reconnects to a new shell at the size the terminal last had', async () => {
    const { connection, socket } = connect();
    socket.receive(SETUP);
    connection.send({ type: 'set_size', content: [40, 120, 700, 1000] });
    const reconnected = connection.reconnect();
    assert.equal(socket.closed, true, 'the old shell ends with its socket');
    const second = FakeSocket.opened[1];
    assert.match(second.url, /\/terminal\?rows=40&cols=120$/);
    socket.receive('["stdout", "late"]'); // the old socket is not listened to any more
    second.receive(SETUP);
    await reconnected;
    assert.equal(connection.connectionStatus, 'connected');

    const refused = connection.reconnect();
    FakeSocket.opened[2].drop();
    await assert.rejects(refused, /could not open a terminal in sandbox a1b2c3d4e5f6/);
    assert.equal(connection.isDisposed, false);
  });
});

describe('why no terminal opened', () => {
  /** The explanation when the server answers `GET api/sandboxes/s1` with `answer`. */
  function refusal(answer: Response): Promise<string> {
    const api = new SandboxApi(async path => {
      assert.equal(path, 'api/sandboxes/s1');
      return answer;
    });
    return terminalRefusal(api, 's1');
  }

  function json(data: unknown, status = 200): Response {
    return new Response(JSON.stringify(data), { status });
  }

  it('says the sandbox is paused, stopped or gone', async () => {
    assert.equal(
      await refusal(json({ id: 's1', status: 'paused' })),
      'Could not open a terminal in sandbox s1: it is paused. Resume it, then open the terminal again.'
    );
    assert.equal(
      await refusal(json({ id: 's1', status: 'exited' })),
      'Could not open a terminal in sandbox s1: it is exited, not running.'
    );
    assert.equal(
      await refusal(json({ code: 'sandbox_not_found', message: 'no sandbox s1' }, 404)),
      'Could not open a terminal in sandbox s1: it no longer exists.'
    );
  });

  it('names the other reasons when the sandbox runs, and asks when nothing answers', async () => {
    assert.match(
      await refusal(json({ id: 's1', status: 'running' })),
      /^Could not open a terminal in sandbox s1: it is running, but the server refused .*terminals open/
    );
    const down = new SandboxApi(async () => {
      throw new TypeError('fetch failed');
    });
    assert.equal(
      await terminalRefusal(down, 's1'),
      'Could not open a terminal in sandbox s1: is it running? (the server did not answer: fetch failed)'
    );
  });
});

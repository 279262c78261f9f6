import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';

import { SandboxApi, SandboxApiError } from '../src/api';
import { Features } from '../src/features';
import {
  backgroundRequest,
  commandLine,
  commandStatus,
  FOLLOW_INTERVAL_MS,
  fromLineStart,
  ICommandOutput,
  keepTail,
  keptNote,
  nextRead,
  shellQuote,
  statusClass
} from '../src/commands';
import { apiError } from './answers';

function output(fields: Partial<ICommandOutput>): ICommandOutput {
  return { text: '', offset: 0, next_offset: 0, size: 0, running: true, ...fields };
}

describe('background commands model', () => {
  it('shows a string command as it was typed, an argv quoted for a shell', () => {
    assert.equal(commandLine(['/bin/sh', '-c', 'echo hello; sleep 1']), 'echo hello; sleep 1');
    assert.equal(
      commandLine(['python', '-m', 'http.server', '8000']),
      'python -m http.server 8000'
    );
    assert.equal(
      commandLine(['sh', '-c', 'echo "$HOME"']),
      `sh -c 'echo "$HOME"'`,
      'only /bin/sh -c is how the server runs a string'
    );
    assert.equal(commandLine(['echo', '', "it's", 'a b', 'é']), `echo '' 'it'\\''s' 'a b' 'é'`);
    assert.equal(commandLine(['/bin/sh', '-c', 'x', 'extra']), `/bin/sh -c x extra`);
    assert.equal(commandLine([]), '');
  });

  it('quotes only what a shell would split or expand', () => {
    assert.equal(shellQuote('a-b_c.d/e:f,g=h@i%j+k'), 'a-b_c.d/e:f,g=h@i%j+k');
    assert.equal(shellQuote(''), "''");
    assert.equal(shellQuote('$HOME'), "'$HOME'");
    assert.equal(shellQuote('*.py'), "'*.py'");
    assert.equal(shellQuote("'"), `''\\'''`);
    assert.equal(shellQuote('line\nbreak'), "'line\nbreak'");
  });

  it('says whether it runs and how it ended', () => {
    assert.equal(commandStatus({ running: true, exit_code: null }), 'running');
    assert.equal(commandStatus({ running: false, exit_code: 0 }), 'exited 0');
    assert.equal(commandStatus({ running: false, exit_code: 3 }), 'exited 3');
    assert.equal(commandStatus({ running: false, exit_code: 137 }), 'exited 137 (signal 9)');
    assert.equal(commandStatus({ running: false, exit_code: 128 }), 'exited 128');
    assert.equal(commandStatus({ running: false, exit_code: null }), 'ended');
    assert.equal(statusClass({ running: true, exit_code: null }), '');
    assert.equal(statusClass({ running: false, exit_code: 0 }), 'jp-Sandbox-ok');
    assert.equal(statusClass({ running: false, exit_code: 1 }), 'jp-Sandbox-bad');
  });

  it('builds the request that starts a command in the background', () => {
    assert.deepEqual(backgroundRequest('python -m http.server'), {
      command: 'python -m http.server',
      background: true
    });
    assert.deepEqual(backgroundRequest(['ls', '-la'], { cwd: '/workspace/x', env: { A: '1' } }), {
      command: ['ls', '-la'],
      background: true,
      cwd: '/workspace/x',
      env: { A: '1' }
    });
    assert.deepEqual(backgroundRequest('ls', { cwd: '', env: {} }), {
      command: 'ls',
      background: true
    });
    assert.equal(backgroundRequest('   '), null);
    assert.equal(backgroundRequest([]), null);
  });

  it('follows the output: at once while more is there, each second while it runs', () => {
    assert.deepEqual(nextRead(output({ next_offset: 10, size: 10 }), 100), {
      offset: 10,
      skipped: false,
      delay: FOLLOW_INTERVAL_MS
    });
    assert.deepEqual(nextRead(output({ next_offset: 10, size: 50 }), 100), {
      offset: 10,
      skipped: false,
      delay: 0
    });
    // Ended, with output still to read: read it; all read: done.
    assert.equal(nextRead(output({ next_offset: 10, size: 50, running: false }), 100).delay, 0);
    assert.deepEqual(nextRead(output({ next_offset: 50, size: 50, running: false }), 100), {
      offset: 50,
      skipped: false,
      delay: null
    });
    // Far behind: what would not be kept is not read.
    assert.deepEqual(nextRead(output({ next_offset: 100, size: 1000 }), 100), {
      offset: 900,
      skipped: true,
      delay: 0
    });
  });

  it('keeps the end of the output, from the start of a line, never half a character', () => {
    assert.deepEqual(keepTail('short', 10), { text: 'short', cut: false });
    assert.deepEqual(keepTail('one\ntwo\nthree\n', 8), { text: 'three\n', cut: true });
    assert.deepEqual(keepTail('abcdefghij', 4), { text: 'ghij', cut: true });
    // "x😀y": the cut falls between the halves of the emoji, which goes whole.
    assert.deepEqual(keepTail('x\u{1F600}y', 2), { text: 'y', cut: true });
    // A line too long to wait for: cut where the limit says.
    const long = `${'a'.repeat(10_000)}\nend`;
    assert.equal(keepTail(long, 9_000).text.length, 9_000);
    // Read from an offset inside a line: from the next line's start.
    assert.equal(fromLineStart('2551\n362552\n'), '362552\n');
    assert.equal(fromLineStart('\n362552\n'), '362552\n');
    assert.equal(fromLineStart('no line end'), 'no line end');
    assert.equal(fromLineStart(`${'a'.repeat(5000)}\nb`).length, 5002);
    assert.match(keptNote(256 * 1024, 3 * 1024 * 1024), /last 256 KiB of 3\.00 MiB/);
  });
});

describe('SandboxApi background commands', () => {
  it('calls the documented routes', async () => {
    const calls: { path: string; init: RequestInit }[] = [];
    const command = {
      id: '0123456789ab',
      command: ['/bin/sh', '-c', 'sleep 600'],
      cwd: '/workspace',
      started: '2026-01-02T03:04:05+00:00',
      running: true,
      exit_code: null
    };
    const answers: { [key: string]: () => Response } = {
      'POST api/sandboxes/s%2F1/commands': () => Response.json(command, { status: 201 }),
      'GET api/sandboxes/s%2F1/commands': () => Response.json({ commands: [command] }),
      'GET api/sandboxes/s%2F1/commands/0123456789ab/output?offset=5&limit=100': () =>
        Response.json({ text: 'hi', offset: 5, next_offset: 7, size: 7, running: true }),
      'GET api/sandboxes/s%2F1/commands/0123456789ab/output?offset=0': () =>
        Response.json({ text: '', offset: 0, next_offset: 0, size: 0, running: true }),
      'DELETE api/sandboxes/s%2F1/commands/0123456789ab': () => new Response(null, { status: 204 }),
      'DELETE api/sandboxes/s%2F1/commands/ffffffffffff': () =>
        Response.json(
          { code: 'command_not_found', message: 'sandbox s/1 has no background command' },
          { status: 404 }
        )
    };
    const api = new SandboxApi(async (path, init) => {
      calls.push({ path, init });
      return answers[`${init.method ?? 'GET'} ${path}`]();
    });
    const started = await api.startCommand('s/1', 'sleep 600', { cwd: '/workspace' });
    assert.equal(started.id, command.id);
    assert.deepEqual(JSON.parse(String(calls[0].init.body)), {
      command: 'sleep 600',
      background: true,
      cwd: '/workspace'
    });
    assert.deepEqual(
      (await api.listCommands('s/1')).map(c => c.id),
      [command.id]
    );
    assert.equal((await api.commandOutput('s/1', command.id, 5, 100)).next_offset, 7);
    assert.equal((await api.commandOutput('s/1', command.id)).size, 0);
    await api.deleteCommand('s/1', command.id);
    await assert.rejects(
      api.deleteCommand('s/1', 'ffffffffffff'),
      apiError({ status: 404, code: 'command_not_found' })
    );
    const asked = calls.length;
    await assert.rejects(api.startCommand('s/1', '  '), SandboxApiError);
    assert.equal(calls.length, asked, 'an empty command is not sent');
  });
});

describe('Features: background commands', () => {
  it("shows the section where the server answers the sandbox's commands route", async () => {
    const api = (routes: string[]) =>
      new SandboxApi(async path =>
        routes.includes(path)
          ? Response.json({ commands: [] })
          : new Response('<html>404: Not Found</html>', { status: 404 })
      );
    const features = new Features(api(['api/sandboxes/s1/commands']));
    await features.probe();
    assert.equal(features.commands, null); // not asked without a sandbox
    assert.equal(await features.probe('s1'), true);
    assert.equal(features.commands, true);

    const older = new Features(api([]));
    await older.probe('s1');
    assert.equal(older.commands, false);
  });
});

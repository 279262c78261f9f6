import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';

import { SandboxApi } from '../src/api';
import { Features } from '../src/features';
import {
  FRAME_SANDBOX,
  parsePort,
  portHref,
  portProblem,
  portTabTitle,
  shortId,
  sortPorts
} from '../src/ports';
import { apiError, json } from './answers';

const ID = 'a1b2c3d4e5f6';
const LINK = `/sandbox-ports/${ID}/8000/tok_3n-x/`;

describe('port numbers', () => {
  it('takes whole numbers from 1 to 65535, blanks and leading zeros allowed', () => {
    for (const [text, port] of [
      ['1', 1],
      ['8000', 8000],
      [' 8050 ', 8050],
      ['08000', 8000],
      ['65535', 65535]
    ] as const) {
      assert.equal(portProblem(text), null, text);
      assert.equal(parsePort(text), port, text);
    }
  });

  it('says why anything else is not a port, before anything is sent', () => {
    assert.equal(portProblem(''), 'Type a port number, from 1 to 65535.');
    assert.equal(portProblem('   '), 'Type a port number, from 1 to 65535.');
    assert.equal(portProblem('0'), 'Port 0 is out of range: a port is a number from 1 to 65535.');
    assert.equal(
      portProblem('65536'),
      'Port 65536 is out of range: a port is a number from 1 to 65535.'
    );
    assert.equal(
      portProblem('000099999'),
      'Port 99999 is out of range: a port is a number from 1 to 65535.'
    );
    for (const text of ['80a', '-1', '+80', '8.0', '1e3', '0x50', '80 81', 'http']) {
      assert.equal(
        portProblem(text),
        `Not a port number: "${text}". A port is a whole number from 1 to 65535.`,
        text
      );
      assert.equal(parsePort(text), null, text);
    }
    assert.equal(parsePort(''), null);
    assert.equal(parsePort('70000'), null);
  });
});

describe('port URLs', () => {
  it("opens the server's path as it is, on the origin of the server's base URL", () => {
    assert.equal(portHref(LINK, 'http://127.0.0.1:8888/'), `http://127.0.0.1:8888${LINK}`);
    assert.equal(
      portHref(`/user/alice${LINK}`, 'https://hub.example.org/user/alice/'),
      `https://hub.example.org/user/alice${LINK}`,
      'base_url is in the path already: never added twice'
    );
    assert.equal(
      portHref(`/lab-base${LINK}?q=1#top`, 'http://127.0.0.1:8888/lab-base'),
      `http://127.0.0.1:8888/lab-base${LINK}?q=1#top`,
      'a base URL without its last slash'
    );
  });

  it('refuses a URL that leaves the server: another origin, outside its base, not a path', () => {
    const base = 'http://127.0.0.1:8888/user/alice/';
    for (const url of [
      'http://evil.example.com/x',
      'https://127.0.0.1:8888/user/alice/sandbox-ports/x/',
      '//evil.example.com/user/alice/',
      '/\\evil.example.com/user/alice/',
      '\\\\evil.example.com/',
      'javascript:alert(1)',
      'sandbox-ports/a/8000/t/',
      '',
      ' /user/alice/sandbox-ports/a/8000/t/',
      '/user/bob/sandbox-ports/a/8000/t/',
      '/user/alicex/sandbox-ports/a/8000/t/',
      '/user/alice/../bob/sandbox-ports/a/8000/t/',
      '/user/alice/%2e%2e/bob/',
      '/user/alice'
    ]) {
      assert.throws(() => portHref(url, base), /the server gave .*port URL/, url);
    }
    assert.throws(() => portHref(undefined as unknown as string, base), /unexpected port URL/);
  });

  it('keeps the frame in an opaque origin: never allow-same-origin', () => {
    assert.deepEqual(
      [...FRAME_SANDBOX],
      ['allow-scripts', 'allow-forms', 'allow-popups', 'allow-modals', 'allow-downloads']
    );
    assert.ok(!(FRAME_SANDBOX as readonly string[]).includes('allow-same-origin'));
    assert.ok(!(FRAME_SANDBOX as readonly string[]).some(e => e.startsWith('allow-top-')));
  });

  it('titles a tab with the short id and the port', () => {
    assert.equal(shortId(ID), 'a1b2c3d4');
    assert.equal(portTabTitle(ID, 8000), 'Sandbox a1b2c3d4:8000');
  });

  it('lists ports lowest first, each once', () => {
    const ports = sortPorts([
      { port: 8050, command: 'dash', url: '/b/' },
      { port: 8000, command: 'python -m http.server 8000', url: '/a/' },
      { port: 8050, command: 'again', url: '/c/' }
    ]);
    assert.deepEqual(
      ports.map(p => [p.port, p.command]),
      [
        [8000, 'python -m http.server 8000'],
        [8050, 'dash']
      ]
    );
  });
});

describe('SandboxApi: ports', () => {
  it('lists the listening ports and asks the URL of one', async () => {
    const calls: string[] = [];
    const api = new SandboxApi(async (path, init) => {
      calls.push(`${init.method ?? 'GET'} ${path}`);
      if (path === `api/sandboxes/${ID}/ports`) {
        return json({
          ports: [{ port: 8000, command: 'python -m http.server 8000', url: LINK }]
        });
      }
      return json({ port: 8000, url: LINK });
    });
    assert.deepEqual(await api.listPorts(ID), [
      { port: 8000, command: 'python -m http.server 8000', url: LINK }
    ]);
    assert.deepEqual(await api.portUrl(ID, 8000), { port: 8000, url: LINK });
    assert.deepEqual(calls, [
      `GET api/sandboxes/${ID}/ports`,
      `GET api/sandboxes/${ID}/ports/8000`
    ]);
  });

  it('sends no port that is not one, and reports the server refusing in its words', async () => {
    const calls: string[] = [];
    const api = new SandboxApi(async path => {
      calls.push(path);
      return json(
        { code: 'sandbox_conflict', message: `sandbox ${ID} is paused; resume it first` },
        409
      );
    });
    for (const port of [0, 65536, 80.5, NaN]) {
      await assert.rejects(api.portUrl(ID, port), apiError({ code: 'invalid_request' }));
    }
    assert.deepEqual(calls, []);
    await assert.rejects(
      api.listPorts(ID),
      apiError({
        status: 409,
        code: 'sandbox_conflict',
        message: `sandbox ${ID} is paused; resume it first`
      })
    );
  });
});

describe('SandboxApi: revoking the links of ports', () => {
  it('sends DELETE to the ports route and resolves on 204; the links asked for after are new', async () => {
    const calls: string[] = [];
    let generation = 0;
    const api = new SandboxApi(async (path, init) => {
      calls.push(`${init.method ?? 'GET'} ${path}`);
      if (init.method === 'DELETE') {
        generation += 1;
        return new Response(null, { status: 204 });
      }
      return json({ port: 8000, url: `/sandbox-ports/${ID}/8000/tok${generation}/` });
    });
    const before = await api.portUrl(ID, 8000);
    assert.equal(await api.revokePorts(ID), undefined);
    const after = await api.portUrl(ID, 8000);
    assert.notEqual(after.url, before.url);
    assert.deepEqual(calls, [
      `GET api/sandboxes/${ID}/ports/8000`,
      `DELETE api/sandboxes/${ID}/ports`,
      `GET api/sandboxes/${ID}/ports/8000`
    ]);
  });

  it("escapes the sandbox id, and reports the server's refusal in its words", async () => {
    const calls: string[] = [];
    const api = new SandboxApi(async (path, init) => {
      calls.push(`${init.method} ${path}`);
      return json({ code: 'sandbox_not_found', message: 'no such sandbox: a/b' }, 404);
    });
    await assert.rejects(
      api.revokePorts('a/b'),
      apiError({
        status: 404,
        code: 'sandbox_not_found',
        message: 'no such sandbox: a/b',
        missingRoute: false
      })
    );
    assert.deepEqual(calls, ['DELETE api/sandboxes/a%2Fb/ports']);
  });

  it('says the server did not answer when the request fails', async () => {
    const api = new SandboxApi(async () => {
      throw new TypeError('Failed to fetch');
    });
    await assert.rejects(
      api.revokePorts(ID),
      apiError({ code: 'network_error', message: 'the server did not answer: Failed to fetch' })
    );
  });
});

describe('Features: ports', () => {
  it("shows the section where the server answers the sandbox's ports route", async () => {
    const api = (routes: string[]) =>
      new SandboxApi(async path =>
        routes.includes(path)
          ? json({ ports: [] })
          : new Response('<html>404: Not Found</html>', { status: 404 })
      );
    const features = new Features(api([`api/sandboxes/${ID}/ports`]));
    await features.probe();
    assert.equal(features.ports, null); // not asked without a sandbox
    assert.equal(await features.probe(ID), true);
    assert.equal(features.ports, true);

    const older = new Features(api([]));
    await older.probe(ID);
    assert.equal(older.ports, false);
  });
});

import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';

import { SandboxApi, SandboxApiError } from '../src/api';
import { Features } from '../src/features';
import {
  auditLine,
  auditVerdict,
  heldRequestMessage,
  IHeldRequest,
  isDomainPattern,
  parsePatterns,
  policyRequest
} from '../src/network';
import { ISnapshot, snapshotsOf, sortSnapshots } from '../src/snapshots';
import { SandboxStore } from '../src/store';
import { apiError, json } from './answers';

type Call = { path: string; init: RequestInit };

/** A server that answers each path from a table, and records what was asked. */
function server(routes: { [key: string]: () => Response }) {
  const calls: Call[] = [];
  const api = new SandboxApi(async (path, init) => {
    calls.push({ path, init });
    const route = routes[`${init.method ?? 'GET'} ${path}`];
    if (!route) {
      return new Response('<html>404: Not Found</html>', { status: 404, statusText: 'Not Found' });
    }
    return route();
  });
  return { api, calls };
}

const SANDBOX = {
  id: 'a1b2c3d4e5f6',
  owner: 'alice',
  status: 'running',
  runtime: 'runc',
  image: 'img',
  created: '2026-01-01T00:00:00Z',
  limits: {},
  network: { policy: 'none' },
  kernel: { attached: false, id: null, notebook: null, since: null }
};

describe('SandboxApi', () => {
  it('calls the documented routes with the documented methods', async () => {
    const { api, calls } = server({
      'GET api/sandboxes': () => json([SANDBOX]),
      'POST api/sandboxes/a1b2c3d4e5f6/pause': () => json({ ...SANDBOX, status: 'paused' }),
      'DELETE api/sandboxes/a1b2c3d4e5f6': () => new Response(null, { status: 204 }),
      'GET api/sandboxes/a1b2c3d4e5f6/stats': () => json({ memory_bytes: 1 }),
      'GET api/sandboxes/a1b2c3d4e5f6/attestation': () => json({ ok: true }),
      'PUT api/sandboxes/a1b2c3d4e5f6/network': () =>
        json({ mode: 'allowlist', allow: ['pypi.org'], deny: [], proxy_running: true }),
      'POST api/sandboxes': () => json({ ...SANDBOX, id: 'c00000000000' }, 201),
      'POST api/snapshots/s1/restore': () =>
        json({ snapshot: 's1', sandbox: SANDBOX.id, members: 3, file_bytes: 10 })
    });
    assert.equal((await api.listSandboxes())[0].id, SANDBOX.id);
    assert.equal((await api.action(SANDBOX.id, 'pause')).status, 'paused');
    await api.deleteSandbox(SANDBOX.id);
    assert.equal((await api.stats(SANDBOX.id)).memory_bytes, 1);
    assert.equal((await api.attestation(SANDBOX.id)).ok, true);
    const state = await api.setNetwork(SANDBOX.id, { mode: 'allowlist', allow: ['pypi.org'] });
    assert.equal(state.proxy_running, true);
    const put = calls[calls.length - 1];
    assert.equal(put.init.method, 'PUT');
    assert.deepEqual(JSON.parse(String(put.init.body)), { mode: 'allowlist', allow: ['pypi.org'] });
    assert.equal((await api.createFromSnapshot('s1', 'runsc')).id, 'c00000000000');
    assert.deepEqual(JSON.parse(String(calls[calls.length - 1].init.body)), {
      snapshot: 's1',
      runtime: 'runsc'
    });
    assert.equal((await api.restoreSnapshot('s1', SANDBOX.id)).members, 3);
    assert.deepEqual(JSON.parse(String(calls[calls.length - 1].init.body)), {
      sandbox: SANDBOX.id
    });
  });

  it("raises the server's message and code", async () => {
    const { api } = server({
      'POST api/sandboxes/a1b2c3d4e5f6/resume': () =>
        json({ code: 'sandbox_conflict', message: 'sandbox a1b2c3d4e5f6 is not paused' }, 409)
    });
    await assert.rejects(
      api.action(SANDBOX.id, 'resume'),
      apiError({
        status: 409,
        code: 'sandbox_conflict',
        message: 'sandbox a1b2c3d4e5f6 is not paused',
        missingRoute: false
      })
    );
  });

  it('tells a route the server lacks from a sandbox it lacks', async () => {
    const { api } = server({
      'GET api/sandboxes/gone/stats': () =>
        json({ code: 'sandbox_not_found', message: 'no sandbox gone' }, 404)
    });
    await assert.rejects(api.listSnapshots(), (e: SandboxApiError) => e.missingRoute);
    await assert.rejects(api.stats('gone'), (e: SandboxApiError) => !e.missingRoute);
  });

  it('turns a failed connection into an error that says so', async () => {
    const api = new SandboxApi(async () => {
      throw new TypeError('fetch failed');
    });
    await assert.rejects(api.listSandboxes(), /the server did not answer: fetch failed/);
  });

  it('lists, reads, writes and deletes files on the documented routes, the path encoded', async () => {
    // A name with a space, an "é" and characters of a query: each travels percent-encoded.
    const path = '/workspace/my résumé & co?.txt';
    const query = '?path=%2Fworkspace%2Fmy%20r%C3%A9sum%C3%A9%20%26%20co%3F.txt';
    const entry = {
      name: 'my résumé & co?.txt',
      path,
      type: 'file',
      size: 5,
      mode: '0o644',
      modified: '2026-01-02T03:04:05+00:00'
    };
    const files = `api/sandboxes/${SANDBOX.id}/files`;
    const { api, calls } = server({
      [`GET ${files}`]: () => json({ path: '/workspace', entries: [] }),
      [`GET ${files}?path=sub%2Fdir`]: () => json({ path: '/workspace/sub/dir', entries: [entry] }),
      [`GET ${files}/content${query}`]: () =>
        new Response(new Uint8Array([104, 195, 169, 0, 255]), {
          headers: { 'Content-Type': 'application/octet-stream' }
        }),
      [`PUT ${files}/content${query}`]: () => json(entry),
      [`DELETE ${files}${query}`]: () => new Response(null, { status: 204 })
    });
    assert.equal((await api.listFiles(SANDBOX.id)).path, '/workspace');
    assert.equal(calls[0].init.method ?? 'GET', 'GET');
    const listing = await api.listFiles(SANDBOX.id, 'sub/dir');
    assert.deepEqual(listing.entries, [entry]);

    const blob = await api.readFile(SANDBOX.id, path);
    assert.deepEqual([...new Uint8Array(await blob.arrayBuffer())], [104, 195, 169, 0, 255]);

    const data = new Blob([new Uint8Array([0, 1, 2, 254, 255])]);
    assert.deepEqual(await api.writeFile(SANDBOX.id, path, data), entry);
    const put = calls[calls.length - 1];
    assert.equal(put.init.method, 'PUT');
    assert.equal(put.init.body, data, 'the bytes go as they are, not as JSON');
    assert.equal(new Headers(put.init.headers).get('Content-Type'), 'application/octet-stream');

    await api.deleteFile(SANDBOX.id, path);
    assert.equal(calls[calls.length - 1].init.method, 'DELETE');
    assert.deepEqual(
      calls.map(c => `${c.init.method ?? 'GET'} ${c.path}`),
      [
        `GET ${files}`,
        `GET ${files}?path=sub%2Fdir`,
        `GET ${files}/content${query}`,
        `PUT ${files}/content${query}`,
        `DELETE ${files}${query}`
      ]
    );
  });

  it('makes directories and moves files on the documented routes, the bodies as documented', async () => {
    const path = '/workspace/my résumé & co?.txt';
    const query = '?path=%2Fworkspace%2Fmy%20r%C3%A9sum%C3%A9%20%26%20co%3F.txt';
    const files = `api/sandboxes/${SANDBOX.id}/files`;
    const entry = (name: string, type = 'file') => ({
      name,
      path: `/workspace/${name}`,
      type,
      size: 5,
      mode: '0o644',
      modified: '2026-01-02T03:04:05+00:00'
    });
    let made = 0;
    let moves = 0;
    const { api, calls } = server({
      [`PUT ${files}?path=new%20dir%2Fsub`]: () =>
        made++ === 0
          ? json({ ...entry('new dir/sub', 'directory'), created: true }, 201)
          : json({ ...entry('new dir/sub', 'directory'), created: false }),
      [`PATCH ${files}${query}`]: () =>
        moves++ === 0
          ? json(
              {
                code: 'file_exists',
                message: '/workspace/b.txt already exists: choose another name, or overwrite it'
              },
              409
            )
          : json(entry('b.txt'))
    });
    const first = await api.makeDirectory(SANDBOX.id, 'new dir/sub');
    assert.equal(first.created, true);
    assert.equal(first.type, 'directory');
    assert.equal((await api.makeDirectory(SANDBOX.id, 'new dir/sub')).created, false);
    for (const call of calls) {
      assert.equal(call.init.method, 'PUT');
      assert.deepEqual(JSON.parse(String(call.init.body)), { type: 'directory' });
    }

    await assert.rejects(
      api.moveFile(SANDBOX.id, path, '/workspace/b.txt'),
      (error: SandboxApiError) =>
        error.status === 409 && error.code === 'file_exists' && /overwrite it/.test(error.message)
    );
    assert.deepEqual(JSON.parse(String(calls[calls.length - 1].init.body)), {
      path: '/workspace/b.txt',
      overwrite: false
    });
    assert.deepEqual(
      await api.moveFile(SANDBOX.id, path, '/workspace/b.txt', true),
      entry('b.txt')
    );
    assert.deepEqual(JSON.parse(String(calls[calls.length - 1].init.body)), {
      path: '/workspace/b.txt',
      overwrite: true
    });
    assert.deepEqual(
      calls.map(c => `${c.init.method ?? 'GET'} ${c.path}`),
      [
        `PUT ${files}?path=new%20dir%2Fsub`,
        `PUT ${files}?path=new%20dir%2Fsub`,
        `PATCH ${files}${query}`,
        `PATCH ${files}${query}`
      ]
    );
  });

  it("raises a file route's error with the server's message", async () => {
    const { api } = server({
      [`GET api/sandboxes/${SANDBOX.id}/files/content?path=big.bin`]: () =>
        json({ code: 'file_too_large', message: 'big.bin is larger than 10 bytes' }, 413),
      [`DELETE api/sandboxes/${SANDBOX.id}/files?path=gone`]: () =>
        json({ code: 'file_not_found', message: 'no such file or directory: gone' }, 404)
    });
    await assert.rejects(api.readFile(SANDBOX.id, 'big.bin'), (error: SandboxApiError) => {
      assert.equal(error.status, 413);
      assert.equal(error.code, 'file_too_large');
      assert.equal(error.message, 'big.bin is larger than 10 bytes');
      return true;
    });
    await assert.rejects(
      api.deleteFile(SANDBOX.id, 'gone'),
      (error: SandboxApiError) => error.code === 'file_not_found' && !error.missingRoute
    );
  });

  it('escapes ids in paths', async () => {
    const { api, calls } = server({});
    await assert.rejects(api.getSandbox('../x'));
    assert.equal(calls[0].path, 'api/sandboxes/..%2Fx');
  });
});

describe('SandboxStore', () => {
  it('lists sandboxes and measures only the running ones', async () => {
    const paused = { ...SANDBOX, id: 'b00000000000', status: 'paused' };
    const { api, calls } = server({
      'GET api/sandboxes': () => json([SANDBOX, paused]),
      'GET api/sandboxes/a1b2c3d4e5f6/stats': () => json({ memory_bytes: 42 })
    });
    const store = new SandboxStore(api);
    let changes = 0;
    store.changed.connect(() => (changes += 1));
    await store.refresh();
    assert.equal(store.sandboxes.length, 2);
    assert.equal(store.stats(SANDBOX.id)?.memory_bytes, 42);
    assert.equal(store.stats(paused.id), undefined);
    assert.equal(calls.filter(c => c.path.endsWith('/stats')).length, 1);
    assert.equal(changes, 1);
    assert.equal(store.error, null);
    store.dispose();
  });

  it('keeps the last list and records the error when a refresh fails', async () => {
    let fail = false;
    const { api } = server({
      'GET api/sandboxes': () =>
        fail
          ? json({ code: 'engine_unavailable', message: 'no Docker engine' }, 503)
          : json([SANDBOX])
    });
    const store = new SandboxStore(api);
    await store.refresh();
    fail = true;
    await store.refresh();
    assert.equal(store.sandboxes.length, 1);
    assert.equal(store.error?.code, 'engine_unavailable');
    store.dispose();
  });

  it('queues one more refresh, shared, for calls made while one is under way', async () => {
    const { api, calls } = server({ 'GET api/sandboxes': () => json([]) });
    const store = new SandboxStore(api);
    await Promise.all([store.refresh(), store.refresh(), store.refresh(), store.refresh()]);
    assert.equal(calls.length, 2);
    store.dispose();
  });

  it("lets an action's answer win over a refresh that read the list before it", async () => {
    let release: () => void = () => undefined;
    const gate = new Promise<void>(resolve => (release = resolve));
    let status = 'running';
    let slowStats = false;
    const { api: fast } = server({
      'GET api/sandboxes': () => json([{ ...SANDBOX, status }]),
      'GET api/sandboxes/a1b2c3d4e5f6/stats': () => json({ memory_bytes: 1 })
    });
    const send = (fast as unknown as { send: (p: string, i: RequestInit) => Promise<Response> })
      .send;
    const api = new SandboxApi(async (path, init) => {
      const answer = await send(path, init);
      if (slowStats && path.endsWith('/stats')) {
        await gate;
      }
      return answer;
    });
    const store = new SandboxStore(api);
    await store.refresh();
    // A refresh reads "running"; while its stats are slow, a pause answers "paused".
    slowStats = true;
    const stale = store.refresh();
    await new Promise(resolve => setTimeout(resolve, 10));
    status = 'paused';
    store.update({ ...SANDBOX, status: 'paused' } as never);
    const queued = store.refresh();
    release();
    await stale;
    assert.equal(store.sandboxes[0].status, 'paused', 'the stale list was applied');
    await queued;
    assert.equal(store.sandboxes[0].status, 'paused');
    store.dispose();
  });
});

describe('held requests of the ask policy', () => {
  const HELD: IHeldRequest = {
    request_id: '0123456789abcdef',
    sandbox: 'a1b2c3d4e5f6',
    host: 'pypi.org',
    port: 443,
    method: 'CONNECT',
    asked_at: '2026-01-01T00:00:00.000+00:00',
    expires_at: '2026-01-01T00:01:00.000+00:00',
    kernel: { id: 'k1', notebook: '/home/alice/work/analysis.ipynb' }
  };

  it('lists and decides them on their documented routes', async () => {
    const { api, calls } = server({
      'GET api/sandboxes/a1b2c3d4e5f6/network/requests': () => json({ requests: [HELD] }),
      'POST api/sandboxes/a1b2c3d4e5f6/network/requests/0123456789abcdef': () =>
        json({ ...HELD, decision: 'sandbox', by: 'alice', decided_at: HELD.asked_at })
    });
    assert.deepEqual(await api.heldRequests(HELD.sandbox), [HELD]);
    await api.decideRequest(HELD.sandbox, HELD.request_id, 'sandbox');
    const post = calls[calls.length - 1];
    assert.equal(post.init.method, 'POST');
    assert.deepEqual(JSON.parse(String(post.init.body)), { decision: 'sandbox' });
  });

  it('a decided request is the API error of its code', async () => {
    const { api } = server({
      'POST api/sandboxes/a1b2c3d4e5f6/network/requests/0123456789abcdef': () =>
        json({ code: 'network_request_not_found', message: 'no request' }, 404)
    });
    await assert.rejects(
      api.decideRequest(HELD.sandbox, HELD.request_id, 'once'),
      apiError({ status: 404, code: 'network_request_not_found' })
    );
  });

  it('names the sandbox, its notebook, the host and the port', () => {
    assert.equal(
      heldRequestMessage(HELD),
      'pypi.org:443: sandbox a1b2c3d4e5f6 (notebook analysis.ipynb) asks to connect'
    );
    assert.equal(
      heldRequestMessage({ ...HELD, kernel: null }),
      'pypi.org:443: sandbox a1b2c3d4e5f6 asks to connect'
    );
  });
});

describe('network policy model', () => {
  it('accepts host names, wildcards below a domain, and ports, as the server does', () => {
    for (const ok of [
      'pypi.org',
      '*.pythonhosted.org',
      'a-b.example.co.uk',
      'localhost',
      'evil.example.com:443'
    ]) {
      assert.ok(isDomainPattern(ok), ok);
    }
    for (const bad of [
      'https://pypi.org',
      'pypi.org/simple',
      '*',
      '*.org',
      '-a.org',
      'a..org',
      'a*.org',
      'x.org:0',
      'x.org:70000'
    ]) {
      assert.ok(!isDomainPattern(bad), bad);
    }
  });

  it('parses an editor, lower-cased, deduplicated, with comments', () => {
    assert.deepEqual(
      parsePatterns(
        'PyPI.org, files.pythonhosted.org\n# mirrors\n*.example.com pypi.org.\nhttp://x'
      ),
      {
        patterns: ['pypi.org', 'files.pythonhosted.org', '*.example.com'],
        invalid: ['http://x']
      }
    );
  });

  it('sends the allow list only in allowlist mode, and deny in every mode', () => {
    assert.deepEqual(policyRequest('open', ['x.org'], []), { mode: 'open' });
    assert.deepEqual(policyRequest('open', ['x.org'], ['y.org']), {
      mode: 'open',
      deny: ['y.org']
    });
    assert.deepEqual(policyRequest('allowlist', ['x.org'], []), {
      mode: 'allowlist',
      allow: ['x.org']
    });
  });

  it('writes an audit entry as one line with its verdict and rule', () => {
    const line = auditLine({
      time: 't',
      sandbox: 's',
      host: 'pypi.org',
      port: 443,
      method: 'CONNECT',
      allowed: false,
      rule: 'private address',
      address: '10.0.0.1'
    });
    assert.equal(line, 't refused CONNECT pypi.org:443 → 10.0.0.1 (private address)');
  });

  it('says a failed lookup or connection failed, not that the policy refused it', () => {
    const entry = {
      time: 't',
      sandbox: 's',
      host: 'no-such-host.example',
      port: 443,
      method: 'CONNECT',
      allowed: false,
      rule: 'lookup failed: [Errno -2] Name or service not known'
    };
    assert.equal(auditVerdict(entry), 'DNS lookup failed');
    assert.match(
      auditLine(entry),
      /^t DNS lookup failed CONNECT no-such-host\.example:443 \(lookup/
    );
    assert.equal(
      auditVerdict({ ...entry, rule: "allowed (open) but the connection failed: OSError('x')" }),
      'connection failed'
    );
    assert.equal(auditVerdict({ ...entry, rule: 'not in allowlist' }), 'refused');
    assert.equal(auditVerdict({ ...entry, allowed: true, rule: 'open' }), 'allowed');
  });
});

describe('snapshot model', () => {
  const snapshot = (id: string, created: string, sandbox: string | null): ISnapshot => ({
    id,
    owner: 'alice',
    kind: 'workspace',
    created,
    source: { sandbox, image: null, runtime: null },
    size: 1,
    sha256: '',
    members: 1,
    file_bytes: 1,
    note: ''
  });
  const snaps = [
    snapshot('s1', '2026-01-01T00:00:00Z', 'a'),
    snapshot('s2', '2026-01-02T00:00:00Z', 'b'),
    snapshot('s3', '2026-01-03T00:00:00Z', 'a'),
    snapshot('s4', '2026-01-04T00:00:00Z', null)
  ];

  it('lists the newest first, and those made from one sandbox', () => {
    assert.deepEqual(
      sortSnapshots(snaps).map(s => s.id),
      ['s4', 's3', 's2', 's1']
    );
    assert.deepEqual(
      snapshotsOf(snaps, 'a').map(s => s.id),
      ['s1', 's3']
    );
  });
});

describe('Features', () => {
  it("learns every feature from the server's list in one request, probing no route", async () => {
    const { api, calls } = server({
      'GET api/sandbox-features': () => json({ features: ['network', 'files', 'terminal'] })
    });
    const features = new Features(api);
    const found: string[] = [];
    features.found.connect((_, name) => found.push(name));
    assert.equal(await features.probe(), true);
    assert.deepEqual(
      calls.map(c => c.path),
      ['api/sandbox-features']
    );
    assert.equal(features.unknown, false, 'known without a sandbox to ask');
    assert.equal(features.network, true);
    assert.equal(features.terminal, true);
    assert.equal(features.snapshots, false);
    assert.equal(features.ports, false);
    assert.equal(found.length, 6);
    assert.equal(await features.probe('s1'), false);
    assert.equal(calls.length, 1, 'nothing asked again');
  });

  it('asks for the list again after a failure that is not a missing route', async () => {
    let answer = () => json({ code: 'forbidden', message: 'no' }, 403);
    const { api, calls } = server({ 'GET api/sandbox-features': () => answer() });
    const features = new Features(api);
    assert.equal(await features.probe('s1'), false);
    assert.equal(features.unknown, true);
    assert.equal(calls.length, 1, 'no route probed on a refusal');
    answer = () => json({ features: ['ports'] });
    assert.equal(await features.probe('s1'), true);
    assert.equal(features.ports, true);
  });

  it("knows a route by any answer of its own, and a missing one by the server's 404", async () => {
    const { api } = server({
      'GET api/sandboxes/s1/network': () =>
        json({ code: 'sandbox_conflict', message: 'not running' }, 409)
    });
    const features = new Features(api);
    assert.equal(await features.probe(), true);
    assert.equal(features.snapshots, false); // the test server has no such route
    assert.equal(features.network, null); // not asked without a sandbox
    assert.equal(await features.probe('s1'), true);
    assert.equal(features.network, true);
    assert.equal(await features.probe('s1'), false);
  });

  it("shows the files section where the server answers the sandbox's files route", async () => {
    const { api, calls } = server({
      'GET api/snapshots': () => json([]),
      'GET api/sandboxes/s%2F1/files': () =>
        json({ code: 'sandbox_conflict', message: 'sandbox s/1 is paused' }, 409)
    });
    const features = new Features(api);
    assert.equal(await features.probe(), true);
    assert.equal(features.files, null); // not asked without a sandbox
    assert.equal(features.unknown, true);
    assert.equal(await features.probe('s/1'), true);
    assert.equal(features.files, true); // a refusal of its own: the route is there
    assert.equal(features.network, false); // the test server has no network route
    assert.equal(features.unknown, false);
    assert.ok(calls.some(c => c.path === 'api/sandboxes/s%2F1/files'));
    const asked = calls.length;
    assert.equal(await features.probe('s/1'), false);
    assert.equal(calls.length, asked, 'what is known is not asked again');

    const older = new Features(server({}).api);
    await older.probe('s1');
    assert.equal(older.files, false); // an older server: the 404 of a route it does not know
  });

  it('asks every route at once and tells of each answer as it arrives', async () => {
    const asked: string[] = [];
    const answers = new Map<string, () => void>();
    const api = new SandboxApi(
      path =>
        new Promise<Response>(resolve => {
          if (path === 'api/sandbox-features') {
            // An older server: no list, so each route is probed.
            resolve(new Response('<html>404: Not Found</html>', { status: 404 }));
            return;
          }
          asked.push(path);
          answers.set(path, () => resolve(json({})));
        })
    );
    const features = new Features(api);
    const found: string[] = [];
    features.found.connect((_, name) => found.push(name));
    const probing = features.probe();
    const withSandbox = features.probe('s1'); // while snapshots is being asked
    assert.equal(await features.probe('s1'), false, 'nothing asked twice');
    await new Promise(resolve => setTimeout(resolve, 0));
    assert.deepEqual(asked.sort(), [
      'api/sandboxes/s1/commands',
      'api/sandboxes/s1/files',
      'api/sandboxes/s1/network',
      'api/sandboxes/s1/ports',
      'api/sandboxes/s1/terminal',
      'api/snapshots'
    ]);
    answers.get('api/sandboxes/s1/commands')!();
    await new Promise(resolve => setTimeout(resolve, 0));
    assert.deepEqual(found, ['commands'], 'one answer is shown before the others are in');
    assert.equal(features.commands, true);
    assert.equal(features.ports, null);
    for (const answer of answers.values()) {
      answer();
    }
    assert.equal(await probing, true);
    assert.equal(await withSandbox, true);
    assert.equal(found.length, 6);
    assert.equal(features.unknown, false);
  });

  it("offers terminals where the sandbox's terminal route answers a plain GET", async () => {
    const { api } = server({
      // A websocket route refuses a request that asks no upgrade: it is there.
      'GET api/sandboxes/s1/terminal': () =>
        new Response('Can "Upgrade" only to "WebSocket".', { status: 400 })
    });
    const features = new Features(api);
    await features.probe();
    assert.equal(features.terminal, null); // not asked without a sandbox
    assert.equal(await features.probe('s1'), true);
    assert.equal(features.terminal, true);

    const older = new Features(server({}).api);
    await older.probe('s1');
    assert.equal(older.terminal, false);
  });
});

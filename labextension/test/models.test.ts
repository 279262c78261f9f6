import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';

import {
  allowedActions,
  attestationRows,
  detailsTabLabel,
  errorMessage,
  expiresIn,
  formatBytes,
  formatCpu,
  formatDuration,
  formatMemory,
  formatValue,
  ISandbox,
  IStats,
  memoryLimit,
  metadataText,
  notebookName,
  runtimeLabel,
  sandboxOfKernel,
  statusText,
  statusTitle,
  uptime,
  weakenedIsolation
} from '../src/models';

const GIB = 1024 ** 3;

function sandbox(overrides: Partial<ISandbox> = {}): ISandbox {
  return {
    id: 'a1b2c3d4e5f6',
    owner: 'alice',
    status: 'running',
    runtime: 'runsc',
    image: 'jupyter-sandbox/python:0.1.0',
    created: '2026-01-01T10:00:00Z',
    limits: { memory: 2 * GIB, cpus: 1, pids: 256 },
    workspace: { mode: 'copy-on-write', note: '' },
    network: { policy: 'none' },
    kernel: { attached: true, id: 'k-1', notebook: 'work/analysis.ipynb', since: null },
    ...overrides
  };
}

function stats(overrides: Partial<IStats> = {}): IStats {
  return {
    sandbox_id: 'a1b2c3d4e5f6',
    runtime: 'runsc',
    measured_at: '2026-01-01T10:05:00Z',
    cpu_seconds: 1.5,
    cpu_percent: 12.34,
    memory_bytes: 300 * 1024 ** 2,
    memory_limit_bytes: 2 * GIB,
    pids: 3,
    pids_limit: 256,
    processes: 2,
    workspace_bytes: 4096,
    ...overrides
  };
}

describe('runtime and isolation', () => {
  it('names the runtimes as a person knows them', () => {
    assert.equal(runtimeLabel('runsc'), 'gVisor');
    assert.equal(runtimeLabel('runc'), 'Docker runc');
    assert.equal(runtimeLabel('kata'), 'kata');
  });

  it('finds nothing weak in the default sandbox', () => {
    assert.deepEqual(weakenedIsolation(sandbox()), []);
    assert.deepEqual(weakenedIsolation(sandbox({ network: { policy: 'allowlist' } })), []);
  });

  it('marks runc, an open network and a read-write workspace, each with its reason', () => {
    const weak = weakenedIsolation(
      sandbox({
        runtime: 'runc',
        network: { policy: 'open' },
        workspace: { mode: 'read-write' }
      })
    );
    assert.equal(weak.length, 3);
    assert.match(weak[0], /runc.*host's kernel/);
    assert.match(weak[1], /network open/);
    assert.match(weak[2], /read-write/);
  });

  it('treats a policy it does not know as weakened, not as safe', () => {
    assert.equal(weakenedIsolation(sandbox({ network: { policy: 'proxy-all' } })).length, 1);
  });
});

describe('sandboxOfKernel', () => {
  const list = [
    sandbox({ id: 'one', kernel: { attached: true, id: 'k-1', notebook: null, since: null } }),
    sandbox({ id: 'two', kernel: { attached: false, id: 'k-2', notebook: null, since: null } }),
    sandbox({ id: 'three', kernel: { attached: true, id: 'k-3', notebook: null, since: null } })
  ];

  it('finds the sandbox whose attached kernel is the notebook kernel', () => {
    assert.equal(sandboxOfKernel(list, 'k-3')?.id, 'three');
  });

  it('ignores a kernel id recorded on a sandbox it is no longer attached to', () => {
    assert.equal(sandboxOfKernel(list, 'k-2'), undefined);
  });

  it('finds nothing without a kernel', () => {
    assert.equal(sandboxOfKernel(list, null), undefined);
    assert.equal(sandboxOfKernel(list, undefined), undefined);
    assert.equal(sandboxOfKernel([], 'k-1'), undefined);
  });
});

describe('formatting', () => {
  it('formats bytes in binary units', () => {
    assert.equal(formatBytes(0), '0 B');
    assert.equal(formatBytes(1023), '1023 B');
    assert.equal(formatBytes(1536), '1.50 KiB');
    assert.equal(formatBytes(300 * 1024 ** 2), '300 MiB');
    assert.equal(formatBytes(2 * GIB), '2.00 GiB');
    assert.equal(formatBytes(null), '—');
    assert.equal(formatBytes(-1), '—');
  });

  it('formats memory against its limit', () => {
    assert.equal(formatMemory(512 * 1024 ** 2, 2 * GIB), '512 MiB / 2.00 GiB (25%)');
    assert.equal(formatMemory(512 * 1024 ** 2, null), '512 MiB');
    assert.equal(formatMemory(null, 2 * GIB), '—');
  });

  it('takes the measured limit first, else the configured one', () => {
    assert.equal(memoryLimit(sandbox(), stats({ memory_limit_bytes: GIB })), GIB);
    assert.equal(memoryLimit(sandbox(), stats({ memory_limit_bytes: null })), 2 * GIB);
    assert.equal(memoryLimit(sandbox({ limits: {} }), null), null);
  });

  it('formats durations and uptime', () => {
    assert.equal(formatDuration(5_400), '5 s');
    assert.equal(formatDuration(3 * 60_000), '3 min');
    assert.equal(formatDuration(125 * 60_000), '2 h 05 min');
    assert.equal(formatDuration(27 * 3_600_000), '1 d 3 h');
    assert.equal(formatDuration(-1), '—');
    assert.equal(uptime(sandbox(), Date.parse('2026-01-01T10:00:42Z')), '42 s');
    assert.equal(uptime(sandbox({ created: 'not a date' }), Date.now()), '—');
  });

  it('says when a sandbox expires, and its metadata', () => {
    const expires = '2026-01-01T11:00:00+00:00';
    const now = Date.parse('2026-01-01T10:30:00Z');
    assert.equal(expiresIn(sandbox({ expires }), now), `in 30 min (${expires})`);
    assert.equal(expiresIn(sandbox({ expires }), now + 3_600_000), `due now (${expires})`);
    assert.equal(expiresIn(sandbox({ expires: null }), now), 'never (only when idle)');
    assert.equal(
      metadataText(sandbox({ metadata: { agent: 'planner', task: 't-42' } })),
      'agent=planner, task=t-42'
    );
    assert.equal(metadataText(sandbox()), '—');
  });

  it('formats CPU, and says when it was not measured', () => {
    assert.equal(formatCpu(12.34), '12.3%');
    assert.equal(formatCpu(null), '—');
  });

  it('shows the notebook by its file name', () => {
    assert.equal(notebookName('work/analysis.ipynb'), 'analysis.ipynb');
    assert.equal(notebookName(null), '');
  });
});

describe('status bar text', () => {
  it('shows runtime, network policy and memory against the limit', () => {
    assert.equal(statusText(sandbox(), stats()), 'gVisor · net none · 300 MiB / 2.00 GiB (15%)');
  });

  it('shows the state instead of memory when the sandbox is not running', () => {
    assert.equal(statusText(sandbox({ status: 'paused' }), stats()), 'gVisor · net none · paused');
  });

  it('explains weakened isolation in the tooltip', () => {
    const title = statusTitle(sandbox({ runtime: 'runc', network: { policy: 'open' } }), stats());
    assert.match(title, /Runtime: Docker runc \(runc\)/);
    assert.match(title, /Weakened isolation:/);
    assert.match(title, /network open/);
    assert.doesNotMatch(statusTitle(sandbox(), stats()), /Weakened/);
  });
});

describe('actions by state', () => {
  it('offers pause, restart, stop and a terminal on a running sandbox', () => {
    assert.deepEqual(allowedActions(sandbox()), {
      pause: true,
      resume: false,
      restart: true,
      stop: true,
      terminal: true
    });
  });

  it('offers resume and stop on a paused one', () => {
    assert.deepEqual(allowedActions(sandbox({ status: 'paused' })), {
      pause: false,
      resume: true,
      restart: false,
      stop: true,
      terminal: false
    });
  });

  it('opens a terminal only in a running sandbox', () => {
    for (const status of ['created', 'restarting', 'removing', 'exited', 'dead'] as const) {
      assert.equal(allowedActions(sandbox({ status })).terminal, false, status);
    }
  });
});

describe('errorMessage', () => {
  it("carries the server's code and message", () => {
    const body = JSON.stringify({ code: 'quota_exceeded', message: 'max_sandboxes is 10' });
    assert.deepEqual(errorMessage(403, body), {
      code: 'quota_exceeded',
      message: 'max_sandboxes is 10'
    });
  });

  it("falls back to the status line when the body is not the server's JSON", () => {
    assert.deepEqual(errorMessage(502, '<html>Bad gateway</html>', 'Bad Gateway'), {
      code: 'http_502',
      message: '502 Bad Gateway'
    });
    assert.deepEqual(errorMessage(404, '{"message": ""}'), {
      code: 'http_404',
      message: '404 request failed'
    });
  });
});

describe('attestationRows', () => {
  it('lists each measured fact with its value and method, sorted', () => {
    const rows = attestationRows({
      sandbox_id: 'x',
      measured_at: '',
      ok: true,
      probe_ok: true,
      error: null,
      summary: '',
      measured: {
        uid: { value: 10001, source: 'os.getuid()' },
        capabilities: { value: [], source: '/proc/self/status CapEff' },
        interfaces: { value: ['lo'], source: '/sys/class/net' },
        memory: { value: null, source: 'cgroup' }
      },
      findings: [],
      notes: []
    });
    assert.deepEqual(
      rows.map(r => [r.fact, r.value]),
      [
        ['capabilities', '(none)'],
        ['interfaces', 'lo'],
        ['memory', '—'],
        ['uid', '10001']
      ]
    );
    assert.equal(rows[3].source, 'os.getuid()');
  });
});

describe('details and attestation wording', () => {
  it("names a details tab by its notebook when a notebook's kernel uses the sandbox", () => {
    assert.equal(detailsTabLabel(sandbox(), 'a1b2c3d4e5f6'), 'Sandbox: analysis.ipynb');
    const unattached = sandbox({
      kernel: { attached: false, id: null, notebook: null, since: null }
    });
    assert.equal(detailsTabLabel(unattached, 'a1b2c3d4e5f6'), 'Sandbox a1b2c3d4e5f6');
    assert.equal(detailsTabLabel(undefined, 'a1b2c3d4e5f6'), 'Sandbox a1b2c3d4e5f6');
  });

  it('shows measured sizes in MiB and objects as name: value pairs, not JSON', () => {
    assert.equal(formatValue(2 * GIB, 'memory_limit'), '2.00 GiB');
    assert.equal(formatValue(512, 'uid'), '512');
    assert.equal(
      formatValue({ used_bytes: 1024 * 1024, mode: 'rw' }, 'workspace'),
      'used_bytes: 1.00 MiB; mode: rw'
    );
    assert.doesNotMatch(formatValue({ a: { b: 1 } }), /[{}"]/);
    assert.equal(formatValue({}), '(none)');
  });

  it('words open network so that it agrees with an attested "egress blocked"', () => {
    const [reason] = weakenedIsolation(sandbox({ network: { policy: 'open' } }));
    assert.match(reason, /direct egress is blocked/);
    assert.match(reason, /host proxy/);
  });
});

import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';

import { sandboxedKernelTest } from '../src/outputTrust';

describe('sandboxedKernelTest', () => {
  const specs = {
    'sandboxed-python': { metadata: { jupyter_sandbox: { isolation: 'gVisor' } } },
    'sandboxed-ml': { metadata: { jupyter_sandbox: { isolation: 'gVisor' } } },
    python3: { metadata: {} },
    bare: {}
  };

  it('goes by the kernelspec metadata, whatever the name', () => {
    const isSandboxed = sandboxedKernelTest(() => specs);
    assert.equal(isSandboxed('sandboxed-python'), true);
    assert.equal(isSandboxed('sandboxed-ml'), true); // jupyter sandbox install-kernel --name
    assert.equal(isSandboxed('python3'), false);
    assert.equal(isSandboxed('bare'), false);
  });

  it('falls back to the installed name while the specs are unknown', () => {
    const isSandboxed = sandboxedKernelTest(() => null);
    assert.equal(isSandboxed('sandboxed-python'), true);
    assert.equal(isSandboxed('python3'), false);
    assert.equal(isSandboxed(''), false);
    // A spec that is not listed (removed since) is judged by its name too.
    assert.equal(sandboxedKernelTest(() => specs)('gone'), false);
  });
});

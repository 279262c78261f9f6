import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';

import {
  formatModified,
  IFileEntry,
  joinPath,
  nameProblem,
  parentPath,
  sortEntries
} from '../src/files';

function entry(name: string, type: string): IFileEntry {
  return {
    name,
    path: `/workspace/${name}`,
    type,
    size: 1,
    mode: '0o644',
    modified: '2026-01-02T03:04:05+00:00'
  };
}

describe('files model', () => {
  it('lists directories first, then the rest, each by name', () => {
    const entries = [
      entry('b.txt', 'file'),
      entry('data', 'directory'),
      entry('A.csv', 'file'),
      entry('link', 'symlink'),
      entry('.hidden', 'directory'),
      entry('a.csv', 'file'),
      entry('Zeta', 'directory')
    ];
    assert.deepEqual(
      sortEntries(entries).map(e => e.name),
      ['.hidden', 'Zeta', 'data', 'A.csv', 'a.csv', 'b.txt', 'link']
    );
    assert.equal(entries[0].name, 'b.txt', 'the given list is left as it was');
  });

  it('joins a name to a directory, the root included', () => {
    assert.equal(joinPath('/workspace', 'result.txt'), '/workspace/result.txt');
    assert.equal(joinPath('/workspace/', 'my file é.txt'), '/workspace/my file é.txt');
    assert.equal(joinPath('/', 'tmp'), '/tmp');
  });

  it('goes up one directory, never above the root', () => {
    assert.equal(parentPath('/workspace/sub/dir'), '/workspace/sub');
    assert.equal(parentPath('/workspace/sub/'), '/workspace');
    assert.equal(parentPath('/workspace'), '/');
    assert.equal(parentPath('/'), '/');
    assert.equal(parentPath(parentPath('/')), '/');
  });

  it('shows the modification time in UTC to the second', () => {
    assert.equal(formatModified('2026-01-02T03:04:05.678901+00:00'), '2026-01-02 03:04:05 UTC');
    assert.equal(formatModified('2026-01-02T05:04:05+02:00'), '2026-01-02 03:04:05 UTC');
    assert.equal(formatModified('not a time'), 'not a time');
    assert.equal(formatModified(''), '—');
  });

  it('takes one name for a new folder or a rename, never a path', () => {
    for (const name of ['results', 'my file é.txt', '.hidden', '...', 'a\\b', ' spaced ']) {
      assert.equal(nameProblem(name), null, name);
    }
    assert.equal(nameProblem(''), 'Enter a name.');
    assert.match(nameProblem('a/b') ?? '', /cannot contain "\/"/);
    assert.match(nameProblem('/') ?? '', /cannot contain "\/"/);
    assert.match(nameProblem('sub/') ?? '', /cannot contain "\/"/);
    assert.match(nameProblem('a\0b') ?? '', /NUL/);
    assert.match(nameProblem('.') ?? '', /not a name of its own/);
    assert.match(nameProblem('..') ?? '', /not a name of its own/);
  });
});

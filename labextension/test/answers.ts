/** What the unit tests' stand-in fetch answers, and how they check the errors it leads to. */

import { strict as assert } from 'node:assert';

import { SandboxApiError } from '../src/api';

/** A JSON answer, as the server gives one. */
export function json(data: unknown, status = 200): Response {
  return new Response(JSON.stringify(data), {
    status,
    headers: { 'Content-Type': 'application/json' }
  });
}

/**
 * For `assert.rejects`: the error is a SandboxApiError with every field given here (fields left
 * out are not checked).
 */
export function apiError(expected: {
  status?: number;
  code?: string;
  message?: string;
  missingRoute?: boolean;
}): (error: unknown) => true {
  return (error: unknown) => {
    assert.ok(error instanceof SandboxApiError);
    for (const [field, value] of Object.entries(expected)) {
      assert.equal(error[field as keyof typeof expected], value, field);
    }
    return true;
  };
}

/**
 * Background commands of a running sandbox (`POST /api/sandboxes/{id}/commands` with
 * `"background": true`, `GET /api/sandboxes/{id}/commands`,
 * `GET /api/sandboxes/{id}/commands/{cid}/output?offset=N&limit=M`,
 * `DELETE /api/sandboxes/{id}/commands/{cid}`), as the server extension documents them
 * (sandbox/background.py): a dev server, a long job, a watcher, left running as the sandbox's
 * user, its output (standard output and error interleaved) kept in a log in the sandbox and
 * read from a byte offset. Removing one kills it and everything it started, and forgets its
 * output.
 */

import { formatBytes } from './models';

/** One background command, as the server lists it. */
export interface IBackgroundCommand {
  /** 12 hex digits. */
  id: string;
  /** The argv as run: a string command shows as ["/bin/sh", "-c", COMMAND]. */
  command: string[];
  cwd: string;
  /** ISO 8601, UTC. */
  started: string;
  running: boolean;
  /** Null while it runs. */
  exit_code: number | null;
}

/** A piece of a command's output: `text` from byte `offset` of its log up to `next_offset`. */
export interface ICommandOutput {
  text: string;
  offset: number;
  /** Where the next read starts (a character cut in two is left for it). */
  next_offset: number;
  /** Bytes of output the command has written so far. */
  size: number;
  /** Whether it still runs (more may come). */
  running: boolean;
}

/** What `POST /api/sandboxes/{id}/commands` takes to start a background command. */
export interface IBackgroundRequest {
  /** A string is run by /bin/sh -c; a list is the argv itself. */
  command: string | string[];
  background: true;
  cwd?: string;
  env?: { [name: string]: string };
}

/** The body that starts `command` in the background; null when there is nothing to run. */
export function backgroundRequest(
  command: string | readonly string[],
  options: { cwd?: string; env?: { [name: string]: string } } = {}
): IBackgroundRequest | null {
  if (typeof command === 'string' ? !command.trim() : command.length === 0) {
    return null;
  }
  const request: IBackgroundRequest = {
    command: typeof command === 'string' ? command : [...command],
    background: true
  };
  if (options.cwd) {
    request.cwd = options.cwd;
  }
  if (options.env && Object.keys(options.env).length) {
    request.env = { ...options.env };
  }
  return request;
}

// What a POSIX shell takes as a word without quotes.
const PLAIN_WORD = /^[A-Za-z0-9_@%+=:,./-]+$/;

/** One argument as a shell reads it back: as it is when plain, else in single quotes. */
export function shellQuote(arg: string): string {
  if (arg === '') {
    return "''";
  }
  return PLAIN_WORD.test(arg) ? arg : `'${arg.replace(/'/g, `'\\''`)}'`;
}

/** The command line to show: a string command as it was typed, an argv quoted for a shell. */
export function commandLine(argv: readonly string[]): string {
  if (argv.length === 3 && argv[0] === '/bin/sh' && argv[1] === '-c') {
    return argv[2];
  }
  return argv.map(shellQuote).join(' ');
}

/** "running", "exited 0", "exited 137 (signal 9)"; "ended" when its status is unknown. */
export function commandStatus(command: Pick<IBackgroundCommand, 'running' | 'exit_code'>): string {
  if (command.running) {
    return 'running';
  }
  const code = command.exit_code;
  if (code === null || code === undefined) {
    return 'ended';
  }
  // A shell reports a command that a signal ended as 128 + the signal's number.
  return code > 128 && code < 160 ? `exited ${code} (signal ${code - 128})` : `exited ${code}`;
}

/** The class of a status: ok for a success, bad for a failure, none while it runs. */
export function statusClass(command: Pick<IBackgroundCommand, 'running' | 'exit_code'>): string {
  if (command.running || command.exit_code === null || command.exit_code === undefined) {
    return '';
  }
  return command.exit_code === 0 ? 'jp-Sandbox-ok' : 'jp-Sandbox-bad';
}

/** Milliseconds between two reads of a running command's output. */
export const FOLLOW_INTERVAL_MS = 1000;

/**
 * What follows a read of the output: `offset`, where the next read starts (past output that
 * would not be kept when more than `keepBytes` are still to be read), `skipped` when it jumped,
 * and `delay`: 0 to read again at once (more is there), FOLLOW_INTERVAL_MS while the command
 * runs, null when all its output has been read.
 */
export function nextRead(
  answer: ICommandOutput,
  keepBytes: number
): { offset: number; skipped: boolean; delay: number | null } {
  let offset = answer.next_offset;
  let skipped = false;
  if (answer.size - offset > keepBytes) {
    offset = answer.size - keepBytes;
    skipped = true;
  }
  const delay = offset < answer.size ? 0 : answer.running ? FOLLOW_INTERVAL_MS : null;
  return { offset, skipped, delay };
}

/**
 * The end of `text`, at most `limit` characters: cut at the start of a line where one begins
 * near the cut, never inside a character (a surrogate pair). `cut` says whether anything went.
 */
export function keepTail(text: string, limit: number): { text: string; cut: boolean } {
  if (text.length <= limit) {
    return { text, cut: false };
  }
  let start = text.length - limit;
  const code = text.charCodeAt(start);
  if (code >= 0xdc00 && code <= 0xdfff) {
    start += 1; // the second half of a pair whose first half goes
  }
  const line = text.indexOf('\n', start);
  if (line !== -1 && line - start < 4096 && line + 1 < text.length) {
    start = line + 1;
  }
  return { text: text.slice(start), cut: true };
}

/**
 * Output read from an offset chosen by size rather than by line (after a skip): without the
 * piece of a line it starts in, when that line ends near its start.
 */
export function fromLineStart(text: string): string {
  const line = text.indexOf('\n');
  return line !== -1 && line < 4096 ? text.slice(line + 1) : text;
}

/** The note over output of which only the end is shown. */
export function keptNote(limitBytes: number, size: number): string {
  return `Only the end of the output is shown: the last ${formatBytes(limitBytes)} of ${formatBytes(size)}.`;
}

/**
 * Ports of a running sandbox (`GET /api/sandboxes/{id}/ports`, `GET /api/sandboxes/{id}/ports/{port}`),
 * as the server extension documents them: a server that code in the sandbox started on the
 * sandbox's loopback (`python -m http.server 8000`), proxied by the Jupyter server at
 * `/sandbox-ports/<id>/<port>/<token>/` under its base URL. That URL is a capability (no Jupyter
 * token needed), and every answer through it carries `Content-Security-Policy: sandbox …`
 * without allow-same-origin: the page has an opaque origin and can never act with the user's
 * Jupyter session. The frame that shows it here is sandboxed the same way.
 */

/** One server listening in the sandbox now. */
export interface IListeningPort {
  port: number;
  /** The command line of the process that listens ('' when the server could not tell). */
  command?: string;
  /** The proxied URL's path from the server's root, base URL included. */
  url: string;
}

/** `GET /api/sandboxes/{id}/ports`: the servers listening now. */
export interface IPortList {
  ports: IListeningPort[];
}

/** `GET /api/sandboxes/{id}/ports/{port}`: the URL of a port, whether or not it listens yet. */
export interface IPortUrl {
  port: number;
  url: string;
}

export const MIN_PORT = 1;
export const MAX_PORT = 65535;

/**
 * The exceptions to the frame's sandbox: the page's scripts, forms, popups, dialogs and
 * downloads work, and it keeps an opaque origin (never allow-same-origin, which would give it
 * the Jupyter page's origin: its cookies, its XSRF token, the REST API as the user).
 */
export const FRAME_SANDBOX = [
  'allow-scripts',
  'allow-forms',
  'allow-popups',
  'allow-modals',
  'allow-downloads'
] as const;

/** Why `text` is not a port number, or null when it is one (see parsePort). */
export function portProblem(text: string): string | null {
  const value = text.trim();
  if (!value) {
    return `Type a port number, from ${MIN_PORT} to ${MAX_PORT}.`;
  }
  if (!/^\d+$/.test(value)) {
    return `Not a port number: "${value}". A port is a whole number from ${MIN_PORT} to ${MAX_PORT}.`;
  }
  const port = Number(value);
  if (port < MIN_PORT || port > MAX_PORT) {
    return `Port ${value.replace(/^0+(?=\d)/, '')} is out of range: a port is a number from ${MIN_PORT} to ${MAX_PORT}.`;
  }
  return null;
}

/** `text` as a port number (surrounding blanks and leading zeros allowed), or null. */
export function parsePort(text: string): number | null {
  return portProblem(text) === null ? Number(text.trim()) : null;
}

/**
 * The absolute URL to open for the server's `url`, a path from the server's root that includes
 * its base URL (`/base/sandbox-ports/<id>/8000/<token>/`), resolved against the origin of
 * `baseUrl` (the Jupyter server's absolute base URL, the page's origin in a browser). Anything
 * but a path under that base URL (another origin, `//host/…`, a `javascript:` URL, a path
 * outside the server's base) is refused with an Error: the page never opens a place the port
 * route did not mean.
 */
export function portHref(url: string, baseUrl: string): string {
  const base = new URL(baseUrl);
  const root = base.origin + (base.pathname.endsWith('/') ? base.pathname : `${base.pathname}/`);
  if (
    typeof url !== 'string' ||
    !url.startsWith('/') ||
    url.startsWith('//') ||
    /[\\\s]/.test(url)
  ) {
    throw new Error(`the server gave an unexpected port URL: ${JSON.stringify(url)}`);
  }
  const href = new URL(url, base.origin).href;
  if (!href.startsWith(root)) {
    throw new Error(`the server gave a port URL outside its base URL: ${JSON.stringify(url)}`);
  }
  return href;
}

/** The first characters of a sandbox id, for a tab's narrow title. */
export function shortId(sandboxId: string): string {
  return sandboxId.slice(0, 8);
}

/** The title of the tab that shows a port: "Sandbox a1b2c3d4:8000". */
export function portTabTitle(sandboxId: string, port: number): string {
  return `Sandbox ${shortId(sandboxId)}:${port}`;
}

/** The listed ports, lowest first, each once. */
export function sortPorts(ports: readonly IListeningPort[]): IListeningPort[] {
  const seen = new Set<number>();
  return [...ports]
    .sort((a, b) => a.port - b.port)
    .filter(p => !seen.has(p.port) && seen.add(p.port));
}

/** Small DOM helpers, so that views build elements without innerHTML (no markup injection). */

export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: { [name: string]: string | undefined } = {},
  ...children: (Node | string | null | undefined)[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value !== undefined) {
      node.setAttribute(name, value);
    }
  }
  for (const child of children) {
    if (child !== null && child !== undefined) {
      node.append(child);
    }
  }
  return node;
}

export function button(
  label: string,
  ariaLabel: string,
  onClick: () => void,
  className = ''
): HTMLButtonElement {
  const node = el(
    'button',
    {
      type: 'button',
      class: `jp-Button jp-mod-styled jp-mod-small jp-Sandbox-button ${className}`.trim(),
      'aria-label': ariaLabel,
      title: ariaLabel
    },
    label
  );
  node.addEventListener('click', onClick);
  return node;
}

/** A labelled group of buttons (a row's or a section's actions). */
export function actionGroup(
  ariaLabel: string,
  ...children: (Node | string | null | undefined)[]
): HTMLDivElement {
  return el(
    'div',
    { class: 'jp-Sandbox-actions', role: 'group', 'aria-label': ariaLabel },
    ...children
  );
}

/** A two-column list of facts: <dl> with a <dt>/<dd> pair for each. */
export function facts(rows: [string, string | Node][]): HTMLDListElement {
  const list = el('dl', { class: 'jp-Sandbox-facts' });
  for (const [name, value] of rows) {
    list.append(el('dt', {}, name), el('dd', {}, value));
  }
  return list;
}

/** The nodes that are there: for `replaceChildren` with optional parts. */
export function present(...nodes: (Node | string | null | undefined)[]): (Node | string)[] {
  return nodes.filter((n): n is Node | string => n !== null && n !== undefined);
}

/** Save `blob` as the file `name` on the user's computer: a link to an object URL, clicked. */
export function saveBlob(blob: Blob, name: string): void {
  const url = URL.createObjectURL(blob);
  const link = el('a', { href: url, download: name });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

/** "read 14:02:07, again every 15 s": how old a live view's content is, and when it renews. */
export function readAt(when: Date, everySeconds: number): string {
  return `read ${when.toLocaleTimeString([], { hour12: false })}, again every ${everySeconds} s`;
}

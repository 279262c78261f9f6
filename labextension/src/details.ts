/**
 * One sandbox's details in the main area: what it is, its live resource use, why its isolation
 * is weaker (if it is), the attestation report its probe measured, and the plugged-in sections
 * (files, background commands, ports, network policy, snapshots).
 */

import { Panel, Widget } from '@lumino/widgets';

import { SandboxApiError } from './api';
import { button, el, facts, present } from './dom';
import {
  attestationRows,
  expiresIn,
  formatBytes,
  formatCpu,
  formatMemory,
  IAttestation,
  ISandbox,
  memoryLimit,
  metadataText,
  detailsTabLabel,
  notebookName,
  runtimeLabel,
  uptime,
  weakenedIsolation
} from './models';
import { IDetailSection, ISandboxViews } from './slots';

/** The summary and the attestation come before the plugged-in sections. */
const FIXED_PARTS = 2;

export class SandboxDetails extends Panel {
  constructor(
    readonly sandboxId: string,
    private readonly views: ISandboxViews
  ) {
    super();
    this.addClass('jp-SandboxDetails');
    this.id = `jupyter-sandbox-details-content-${sandboxId}`;
    this.title.label = `Sandbox ${sandboxId}`;
    this.title.closable = true;
    this.node.setAttribute('aria-label', `Details of sandbox ${sandboxId}`);
    this.addWidget(this.summary);
    this.addWidget(this.attestation);
    views.store.changed.connect(this.renderSummary, this);
    views.changed.connect(this.renderSections, this);
    this.renderSummary(); // which builds the sections when the sandbox is listed already
    if (!this.sectionsShown) {
      this.renderSections();
    }
    void this.loadAttestation();
  }

  dispose(): void {
    if (!this.isDisposed) {
      this.views.store.changed.disconnect(this.renderSummary, this);
      this.views.changed.disconnect(this.renderSections, this);
    }
    super.dispose();
  }

  private get sandbox(): ISandbox | undefined {
    return this.views.store.sandboxes.find(s => s.id === this.sandboxId);
  }

  private renderSummary(): void {
    const sandbox = this.sandbox;
    const node = this.summary.node;
    if (!sandbox) {
      node.replaceChildren(
        el('h2', {}, `Sandbox ${this.sandboxId}`),
        el('p', { class: 'jp-SandboxPanel-empty' }, 'This sandbox is not listed (any more).')
      );
      return;
    }
    if (!this.sectionsShown) {
      this.renderSections(); // the sandbox was not listed yet when this view opened
    }
    this.title.label = detailsTabLabel(sandbox, sandbox.id);
    this.title.caption = `Details of sandbox ${sandbox.id}`;
    const stats = this.views.store.stats(sandbox.id);
    const weak = weakenedIsolation(sandbox);
    const limits = sandbox.limits ?? {};
    node.replaceChildren(
      ...present(
        el('h2', {}, `Sandbox ${sandbox.id}`),
        weak.length
          ? el(
              'div',
              { class: 'jp-Sandbox-weakBox', role: 'note', 'aria-label': 'Weakened isolation' },
              el('strong', {}, 'Weakened isolation'),
              el('ul', {}, ...weak.map(reason => el('li', {}, reason)))
            )
          : null,
        facts([
          ['State', sandbox.status + (sandbox.busy ? ' (a cell is running)' : '')],
          ['Runtime', `${runtimeLabel(sandbox.runtime)} (${sandbox.runtime})`],
          ['Image', sandbox.image],
          ['Context', sandbox.context ?? (sandbox.ephemeral ? "(the kernel's own)" : '—')],
          ['Kernel', sandbox.kernel?.attached ? (sandbox.kernel.id ?? '') : 'none attached'],
          ['Notebook', notebookName(sandbox.kernel?.notebook) || '—'],
          ['Network', sandbox.network?.policy ?? 'none'],
          [
            'Workspace',
            sandbox.workspace
              ? `${sandbox.workspace.mode} ${sandbox.workspace.note ?? ''}`.trim()
              : '—'
          ],
          ['Created', sandbox.created],
          ['Uptime', uptime(sandbox, Date.now())],
          ['Expires', expiresIn(sandbox, Date.now())],
          ['Metadata', metadataText(sandbox)],
          ['CPU', `${formatCpu(stats?.cpu_percent)} (limit ${limits.cpus ?? '—'} CPU)`],
          ['Memory', formatMemory(stats?.memory_bytes, memoryLimit(sandbox, stats))],
          ['Processes', `${stats?.processes ?? '—'} (pids limit ${limits.pids ?? '—'})`],
          ['Workspace bytes', formatBytes(stats?.workspace_bytes)]
        ]),
        sandbox.exit ? el('p', {}, `Stopped: ${sandbox.exit}`) : null
      )
    );
  }

  private async loadAttestation(): Promise<void> {
    const node = this.attestation.node;
    const reload = button(
      'Reload',
      `Reload the attestation report of sandbox ${this.sandboxId}`,
      () => void this.loadAttestation()
    );
    node.replaceChildren(el('h3', {}, 'Attestation'), el('p', {}, 'Reading the report…'));
    let report: IAttestation;
    try {
      report = await this.views.store.api.attestation(this.sandboxId);
    } catch (error) {
      const message = error instanceof SandboxApiError ? error.message : String(error);
      node.replaceChildren(
        el('h3', {}, 'Attestation'),
        el('p', { role: 'alert' }, message),
        reload
      );
      return;
    }
    const table = el(
      'table',
      { class: 'jp-Sandbox-attestation', 'aria-label': `Attestation of sandbox ${this.sandboxId}` },
      el(
        'thead',
        {},
        el('tr', {}, el('th', {}, 'Fact'), el('th', {}, 'Measured'), el('th', {}, 'How'))
      ),
      el(
        'tbody',
        {},
        ...attestationRows(report).map(row =>
          el('tr', {}, el('td', {}, row.fact), el('td', {}, row.value), el('td', {}, row.source))
        )
      )
    );
    const findings = report.findings?.length
      ? el(
          'div',
          { class: 'jp-Sandbox-weakBox', role: 'note', 'aria-label': 'Attestation findings' },
          el('strong', {}, 'Differences from the configuration'),
          el('ul', {}, ...report.findings.map(f => el('li', {}, f.message)))
        )
      : null;
    node.replaceChildren(
      ...present(
        el('h3', {}, 'Attestation'),
        el(
          'p',
          { class: report.ok ? 'jp-Sandbox-ok' : 'jp-Sandbox-bad' },
          `${report.ok ? 'As configured' : 'NOT as configured'}: ${report.summary}`
        ),
        findings,
        report.error ? el('p', { role: 'alert' }, report.error) : null,
        this.sandbox?.runtime === 'runsc'
          ? el(
              'p',
              { class: 'jp-Sandbox-note' },
              "Under gVisor the boundary is gVisor's own kernel: the sandbox's system calls are " +
                "served by gVisor, not the host's kernel, so a seccomp filter of 0 inside is " +
                'expected and not a weakness.'
            )
          : null,
        table,
        el('p', { class: 'jp-Sandbox-note' }, `Measured ${report.measured_at}`),
        reload
      )
    );
  }

  /**
   * The plugged-in sections, made once the sandbox is listed and made again when the views
   * change (a section added, a feature of the server found). Only the new ones and those hidden
   * (their feature was not known yet) are made again: a section on show stays as it is, with
   * what its user is typing, since a feature once known stays known.
   */
  private renderSections(): void {
    const sandbox = this.sandbox;
    this.sectionsShown = sandbox !== undefined;
    const wanted = sandbox ? this.views.detailSections : [];
    const kept = new Map<IDetailSection, Widget>();
    for (const [section, widget] of this.sections) {
      if (wanted.includes(section) && !widget.isHidden) {
        kept.set(section, widget);
      } else {
        widget.dispose();
      }
    }
    this.sections = new Map();
    if (!sandbox) {
      return;
    }
    wanted.forEach((section, index) => {
      const widget = kept.get(section) ?? this.makeSection(section, sandbox);
      this.sections.set(section, widget);
      this.insertWidget(FIXED_PARTS + index, widget); // moves a kept one into its place
    });
  }

  private makeSection(section: IDetailSection, sandbox: ISandbox): Widget {
    const widget = section.create(sandbox, this.views.store);
    widget.addClass('jp-SandboxDetails-section');
    widget.node.setAttribute('aria-label', section.title);
    return widget;
  }

  private summary = new Widget();
  private attestation = new Widget();
  private sections = new Map<IDetailSection, Widget>();
  private sectionsShown = false;
}

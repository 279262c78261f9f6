/**
 * jupyter-sandbox's JupyterLab extension: the sandbox store and its slots (ISandboxViews), the
 * Sandboxes side panel, the status bar item of the active notebook's sandbox, the details
 * view they both open, terminals in sandboxes, the web servers sandboxes serve (ports), and
 * the network requests sandboxes ask their owner about (egressRequests.ts).
 */

import { ILayoutRestorer, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import {
  ICommandPalette,
  IThemeManager,
  MainAreaWidget,
  WidgetTracker
} from '@jupyterlab/apputils';
import { IConsoleTracker } from '@jupyterlab/console';
import { INotebookTracker } from '@jupyterlab/notebook';
import { ServerConnection } from '@jupyterlab/services';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import { LabIcon } from '@jupyterlab/ui-components';
import { URLExt } from '@jupyterlab/coreutils';

import { builtinActions } from './actions';
import { SandboxApi } from './api';
import { addCommandsViews } from './commandsView';
import { SandboxDetails } from './details';
import { EgressRequests } from './egressRequests';
import { Features } from './features';
import { addFilesViews } from './filesView';
import { addNetworkViews } from './networkView';
import { allowedActions, sandboxOfKernel } from './models';
import { addSnapshotViews } from './snapshotView';
import { attempt, showServerError } from './dialogs';
import { SandboxPanel } from './panel';
import { addPortsViews } from './portsView';
import { askPort, SandboxPorts } from './portTabs';
import { ISandboxViews, SandboxViews } from './slots';
import { UntrustedSandboxOutputs, sandboxedKernelTest } from './outputTrust';
import { guardRendermime } from './sandboxWidgets';
import { parsePort, portProblem } from './ports';
import { SandboxStatusItem } from './statusbar';
import { SandboxStore } from './store';
import { addTerminalViews, SandboxTerminals, TERMINAL_SETTINGS } from './terminalView';

export { ISandboxViews } from './slots';
export type { IDetailSection, IRowAction } from './slots';

const PLUGIN_ID = 'jupyter-sandbox:plugin';
const OPEN_DETAILS = 'jupyter-sandbox:open-details';
const OPEN_PANEL = 'jupyter-sandbox:open-panel';
const OPEN_TERMINAL = 'jupyter-sandbox:open-terminal';
const OPEN_PORT = 'jupyter-sandbox:open-port';

// A box with a lock: the sandbox.
const sandboxIcon = new LabIcon({
  name: 'jupyter-sandbox:icon',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" width="16" viewBox="0 0 24 24"><g class="jp-icon3" fill="#616161"><path d="M3 5h18v14H3zM5 7v10h14V7z"/><path d="M10 11V9.5a2 2 0 0 1 4 0V11h1v5H9v-5zm1 0h2V9.5a1 1 0 0 0-2 0z"/></g></svg>'
});

/** Requests through ServerConnection: the server's base URL, its token and XSRF cookie. */
function requester(settings: ServerConnection.ISettings) {
  return (path: string, init: RequestInit) =>
    ServerConnection.makeRequest(URLExt.join(settings.baseUrl, path), init, settings);
}

const plugin: JupyterFrontEndPlugin<ISandboxViews> = {
  id: PLUGIN_ID,
  description: 'See and steer Sandboxed Python sandboxes: side panel, status bar, details',
  autoStart: true,
  provides: ISandboxViews,
  optional: [
    ILayoutRestorer,
    INotebookTracker,
    IConsoleTracker,
    ISettingRegistry,
    IStatusBar,
    ICommandPalette,
    IThemeManager
  ],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    notebooks: INotebookTracker | null,
    consoles: IConsoleTracker | null,
    settingRegistry: ISettingRegistry | null,
    statusBar: IStatusBar | null,
    palette: ICommandPalette | null,
    themeManager: IThemeManager | null
  ): ISandboxViews => {
    const api = new SandboxApi(requester(app.serviceManager.serverSettings));
    const store = new SandboxStore(api);
    const tracker = new WidgetTracker<MainAreaWidget<SandboxDetails>>({
      namespace: 'jupyter-sandbox-details'
    });
    const views = new SandboxViews(store, id => void app.commands.execute(OPEN_DETAILS, { id }));
    for (const action of builtinActions(views, app.serviceManager.kernels)) {
      views.addRowAction(action);
    }
    // Snapshot, network, files, commands and ports views show once the server answers their
    // routes.
    const features = new Features(api);
    addSnapshotViews(views, features);
    addNetworkViews(views, features);
    addFilesViews(views, features);
    addCommandsViews(views, features);
    addTerminalViews(views, features, id => void app.commands.execute(OPEN_TERMINAL, { id }));
    const ports = new SandboxPorts(app.shell, api, app.serviceManager.serverSettings.baseUrl);
    addPortsViews(views, features, ports);
    features.found.connect(() => views.notify());
    const probe = () => {
      if (features.unknown) {
        void features.probe(store.sandboxes[0]?.id);
      }
    };
    store.changed.connect(probe);

    app.commands.addCommand(OPEN_DETAILS, {
      label: args => `Sandbox ${args.id ?? ''} details`,
      execute: args => {
        const id = String(args.id);
        const open = tracker.find(w => w.content.sandboxId === id);
        if (open) {
          app.shell.activateById(open.id);
          return;
        }
        const widget = new MainAreaWidget({ content: new SandboxDetails(id, views) });
        widget.id = `jupyter-sandbox-details-${id}`;
        widget.title.icon = sandboxIcon;
        widget.title.label = `Sandbox ${id}`;
        void tracker.add(widget);
        app.shell.add(widget, 'main');
        app.shell.activateById(widget.id);
        void store.refresh();
      }
    });

    // A terminal, or a port, of the sandbox given by id, or else of the active notebook's.
    const terminals = new SandboxTerminals(app.shell, app.serviceManager.serverSettings, store);
    const sandboxOfArgs = (args: { id?: unknown }) => {
      const id = args.id ?? null;
      return id !== null
        ? store.sandboxes.find(s => s.id === String(id))
        : sandboxOfKernel(
            store.sandboxes,
            notebooks?.currentWidget?.sessionContext.session?.kernel?.id
          );
    };
    app.commands.addCommand(OPEN_TERMINAL, {
      label: args =>
        args.id
          ? `Open a terminal in sandbox ${args.id}`
          : "Open a terminal in the notebook's sandbox",
      isEnabled: args => {
        const sandbox = sandboxOfArgs(args);
        return features.terminal === true && !!sandbox && allowedActions(sandbox).terminal;
      },
      execute: args => {
        const sandbox = sandboxOfArgs(args);
        if (sandbox) {
          terminals.openTerminal(sandbox.id);
        }
      }
    });
    palette?.addItem({ command: OPEN_TERMINAL, category: 'Sandboxes' });
    // A port (args.port, or asked for) in a tab: the sandbox's web server, proxied.
    app.commands.addCommand(OPEN_PORT, {
      label: args =>
        args.id ? `Open a port of sandbox ${args.id}` : "Open a port of the notebook's sandbox",
      isEnabled: args => {
        const sandbox = sandboxOfArgs(args);
        return features.ports === true && sandbox?.status === 'running';
      },
      execute: async args => {
        const sandbox = sandboxOfArgs(args);
        if (!sandbox) {
          return;
        }
        const given = args.port === undefined || args.port === null ? null : String(args.port);
        if (given !== null && portProblem(given) !== null) {
          await showServerError('Could not open the port', new Error(portProblem(given) ?? ''));
          return;
        }
        const port = given === null ? await askPort(api, sandbox.id) : parsePort(given);
        if (port !== null) {
          await attempt(`Could not open port ${port}`, () => ports.open(sandbox.id, port));
        }
      }
    });
    palette?.addItem({ command: OPEN_PORT, category: 'Sandboxes' });
    themeManager?.themeChanged.connect(() => terminals.themeChanged());

    const panel = new SandboxPanel(views);
    panel.title.icon = sandboxIcon;
    app.shell.add(panel, 'left', { rank: 600 });
    restorer?.add(panel, panel.id);
    app.commands.addCommand(OPEN_PANEL, {
      label: 'Show the Sandboxes panel',
      execute: () => app.shell.activateById(panel.id)
    });

    // Outputs of sandboxed kernels rendered untrusted (outputTrust.ts), unless the user trusts them.
    // Which kernels are sandboxed: their kernelspec's metadata says so (install-kernel's too).
    const isSandboxed = sandboxedKernelTest(
      () => app.serviceManager.kernelspecs.specs?.kernelspecs ?? null
    );
    const outputs = new UntrustedSandboxOutputs(isSandboxed, notebooks, consoles);
    // The core ipywidgets render in them nonetheless, through a hardened widget manager; what
    // does not render says so in place (sandboxWidgets.ts).
    notebooks?.widgetAdded.connect((_, panel) =>
      guardRendermime(panel.content.rendermime, () => outputs.sandboxed(panel))
    );
    notebooks?.forEach(panel =>
      guardRendermime(panel.content.rendermime, () => outputs.sandboxed(panel))
    );
    consoles?.widgetAdded.connect((_, panel) =>
      guardRendermime(panel.console.rendermime, () => outputs.sandboxed(panel))
    );
    consoles?.forEach(panel =>
      guardRendermime(panel.console.rendermime, () => outputs.sandboxed(panel))
    );

    if (statusBar && notebooks) {
      const item = new SandboxStatusItem(views, notebooks, isSandboxed);
      statusBar.registerStatusItem(PLUGIN_ID, { item, align: 'left', rank: 5 });
    }

    // The refresh interval (seconds) comes from the settings; 5 s until they are read.
    store.interval = 5;
    if (settingRegistry) {
      void settingRegistry.load(PLUGIN_ID).then(settings => {
        const apply = () => {
          store.interval = Number(settings.get('refreshInterval').composite);
          outputs.enabled = !settings.get('trustSandboxedOutputs').composite;
        };
        settings.changed.connect(apply);
        apply();
      });
      // The user's JupyterLab terminal settings, where the terminal extension is there.
      void settingRegistry.load(TERMINAL_SETTINGS).then(
        settings => {
          const apply = () => terminals.setOptions(settings.composite);
          settings.changed.connect(apply);
          apply();
        },
        () => undefined // no terminal extension: its defaults
      );
    }
    // The requests sandboxes' ask policies hold, each a notification with its decisions.
    const egressRequests = new EgressRequests(api, store);
    void app.restored.then(() => {
      void store.refresh();
      egressRequests.start();
    });
    return views;
  }
};

export default plugin;

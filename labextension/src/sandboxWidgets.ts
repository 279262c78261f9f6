/**
 * The core ipywidgets render for Sandboxed Python, without sandboxed code running script here.
 *
 * Outputs of a sandboxed kernel stay untrusted (outputTrust.ts), and JupyterLab renders an
 * untrusted output only through "safe" renderer factories; ipywidgets' factory is not one, so a
 * widget showed as its text (`IntSlider(value=0)`). A widget view is drawn by the widget
 * manager, which is JupyterLab's own code; what comes from the sandbox is the models' state: data,
 * not script. So, for the notebooks and consoles of sandboxed kernels, the widget view factory is
 * declared safe, and the widget manager of each such panel is hardened first, wherever the
 * sandbox's state reaches markup:
 *
 * - Only the core modules (@jupyter-widgets/base, controls, output) load, with plain class
 *   names: a model or view naming any other module, even one whose JupyterLab extension is
 *   installed (its code was written for trusted state), is refused, and its output says so.
 * - HTML and HTMLMath views put their value into the page as markup: it goes through
 *   JupyterLab's sanitizer first, as an untrusted HTML output's does (no script, no handlers).
 *   Descriptions with `description_allow_html` are sanitized by ipywidgets itself.
 * - The Output widget's outputs are untrusted (ipywidgets makes them trusted, assuming widgets
 *   only render in trusted cells), so what it captures renders as any other sandboxed output.
 * - ipywidgets' error view writes its message, which quotes the module and class names the state
 *   gave, as markup when clicked: it is written as text instead.
 *
 * What stays unrendered says so in place, with the way to change it: a JavaScript output, the
 * scripts of an HTML output, a widget of another module. All of this follows the same test as
 * the untrusting (the panel's kernel is sandboxed, the user has not set trustSandboxedOutputs):
 * trusted, JupyterLab and ipywidgets behave as they do for any kernel.
 *
 * The hardening reaches into ipywidgets' widget manager (jupyterlab_widgets 3, ipywidgets 8):
 * its `loadClass` and `new_model`, and the manager a widget renderer holds. Should those change,
 * widgets fail closed: their outputs say they could not be shown safely.
 */

import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import type { IRenderMimeRegistry } from '@jupyterlab/rendermime';

export const WIDGET_VIEW_MIMETYPE = 'application/vnd.jupyter.widget-view+json';
const JAVASCRIPT_MIMETYPES = ['application/javascript', 'text/javascript'];
const HTML_MIMETYPE = 'text/html';

/** The modules whose widgets render for a sandboxed kernel: ipywidgets' own. */
export const CORE_WIDGET_MODULES: ReadonlySet<string> = new Set([
  '@jupyter-widgets/base',
  '@jupyter-widgets/controls',
  '@jupyter-widgets/output'
]);
// The names the core modules export; a name from the state is looked up in a module's exports,
// and quoted in error messages.
const CLASS_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** How to have what is not rendered rendered: the setting outputTrust.ts follows. */
export const TRUST_HINT =
  'To render it, turn on "Trust outputs of sandboxed kernels" in Settings → Settings Editor → ' +
  'Sandboxes, only for code you would run on this machine: trusted, it runs in this page with ' +
  'your session.';

/** The markers of the notices, which tests and styles find them by. */
export const NOTICE_CLASS = 'jp-Sandbox-unrendered';

/** A notice in place of (or after) what a sandboxed output could not render. */
export function unrenderedNotice(what: string): HTMLElement {
  const node = document.createElement('div');
  node.className = NOTICE_CLASS;
  node.textContent = `${what}: outputs of Sandboxed Python are untrusted. ${TRUST_HINT}`;
  return node;
}

/** What the hardening uses of a widget model (a Backbone model of @jupyter-widgets/base). */
interface IWidgetModel {
  get(name: string): unknown;
}

/** What the hardening uses of ipywidgets' JupyterLab widget manager. */
interface IWidgetManager {
  loadClass(className: string, moduleName: string, moduleVersion: string): Promise<unknown>;
  new_model(
    options: { model_id?: string; model_module?: string; comm?: { comm_id?: string } },
    state?: unknown
  ): Promise<unknown>;
  get_model(modelId: string): Promise<IWidgetModel>;
}

/** What the hardening uses of a widget view class's instances. */
interface IWidgetView {
  model: IWidgetModel & { widget_manager: { rendermime?: IRenderMimeRegistry } };
  content: HTMLElement;
  el: HTMLElement;
  typeset(element: HTMLElement, text?: string): void;
  update(options?: unknown): unknown;
  generateErrorMessage(): { msg: unknown; stack: unknown };
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- TypeScript's mixin form
type WidgetClass = new (...args: any[]) => object;

/** A hardened manager: which models it refused, and the test it follows. */
class ManagerGuard {
  constructor(
    readonly manager: IWidgetManager,
    readonly sandboxed: () => boolean
  ) {
    const loadClass = manager.loadClass.bind(manager);
    const newModel = manager.new_model.bind(manager);
    manager.loadClass = async (className, moduleName, moduleVersion) => {
      if (!this.sandboxed()) {
        return loadClass(className, moduleName, moduleVersion);
      }
      if (!CORE_WIDGET_MODULES.has(moduleName) || !CLASS_NAME.test(className)) {
        // A fixed text: ipywidgets quotes what it was asked for beside it.
        throw new Error('jupyter-sandbox: not a core widget, not loaded for a sandboxed kernel');
      }
      return hardenedClass(
        className,
        moduleName,
        await loadClass(className, moduleName, moduleVersion)
      );
    };
    manager.new_model = (options, state) => {
      const modelId = options.model_id ?? options.comm?.comm_id;
      const moduleName = String(options.model_module);
      if (this.sandboxed() && modelId !== undefined && !CORE_WIDGET_MODULES.has(moduleName)) {
        this.refused.set(modelId, moduleName);
      }
      return newModel(options, state);
    };
    // Error views render from here on as text (the prototype is ipywidgets' one, shared).
    this.ready = loadClass('ErrorWidgetView', '@jupyter-widgets/base', '*').then(textErrorView);
  }

  /** Resolved once error views are made safe: renderers wait for it before drawing a view. */
  readonly ready: Promise<void>;

  /** Model ids the sandbox opened with a module other than the core ones, and that module. */
  private readonly refused = new Map<string, string>();

  /** Why the view of that model is not drawn, or null to draw it. */
  async refusal(modelId: string): Promise<string | null> {
    await this.ready;
    if (!this.sandboxed()) {
      return null;
    }
    const refusedModule = this.refused.get(modelId);
    if (refusedModule !== undefined) {
      return `A widget of module "${refusedModule}" is not shown (only the core ipywidgets are)`;
    }
    let model: IWidgetModel;
    try {
      model = await this.manager.get_model(modelId);
    } catch {
      return null; // ipywidgets says "model not found" itself
    }
    const viewModule = String(model.get('_view_module'));
    if (!CORE_WIDGET_MODULES.has(viewModule)) {
      return `A widget view of module "${viewModule}" is not shown (only the core ipywidgets are)`;
    }
    return null;
  }
}

const guards = new WeakMap<object, ManagerGuard>();

/** The guard of that manager, made the first time it is asked for. */
function guardOf(manager: IWidgetManager, sandboxed: () => boolean): ManagerGuard {
  let guard = guards.get(manager);
  if (!guard) {
    guard = new ManagerGuard(manager, sandboxed);
    guards.set(manager, guard);
  }
  return guard;
}

/** The manager an ipywidgets WidgetRenderer holds (a private field: null if it has none). */
function managerOf(renderer: IRenderMime.IRenderer): Promise<IWidgetManager> | null {
  const held = (renderer as unknown as { _manager?: { promise?: unknown } })._manager;
  const promise = held?.promise;
  return promise instanceof Promise ? (promise as Promise<IWidgetManager>) : null;
}

const hardenedClasses = new WeakMap<object, WidgetClass>();

/** The class to use for a core class: HTML views and the Output model replaced. */
function hardenedClass(className: string, moduleName: string, loaded: unknown): unknown {
  if (typeof loaded !== 'function') {
    return loaded;
  }
  let hardened = hardenedClasses.get(loaded);
  if (!hardened) {
    const base = loaded as WidgetClass;
    if (moduleName === '@jupyter-widgets/controls' && className === 'HTMLView') {
      hardened = sanitizedHtmlView(base, false);
    } else if (moduleName === '@jupyter-widgets/controls' && className === 'HTMLMathView') {
      hardened = sanitizedHtmlView(base, true);
    } else if (moduleName === '@jupyter-widgets/output' && className === 'OutputModel') {
      hardened = untrustedOutputModel(base);
    } else {
      return loaded;
    }
    hardenedClasses.set(loaded, hardened);
  }
  return hardened;
}

/** An HTML (or HTMLMath) view whose value goes through JupyterLab's sanitizer. */
function sanitizedHtmlView(base: WidgetClass, math: boolean): WidgetClass {
  // Its own update writes the value unsanitized: skip it, and run its parent's (description,
  // style) as it would.
  const parentUpdate = Object.getPrototypeOf(base.prototype).update as (
    this: IWidgetView,
    options?: unknown
  ) => unknown;
  return class SanitizedHtmlView extends base {
    update(this: IWidgetView, options?: unknown): unknown {
      const sanitizer = this.model.widget_manager.rendermime?.sanitizer;
      const value = String(this.model.get('value') ?? '');
      if (sanitizer) {
        this.content.innerHTML = sanitizer.sanitize(value);
      } else {
        this.content.textContent = value; // no sanitizer to be had: show the markup as text
      }
      if (math) {
        this.typeset(this.content);
      }
      return parentUpdate.call(this, options);
    }
  };
}

/** An Output widget model whose outputs are untrusted, as the cell's own are. */
function untrustedOutputModel(base: WidgetClass): WidgetClass {
  return class UntrustedOutputModel extends base {
    initialize(...args: unknown[]): void {
      const parent = Object.getPrototypeOf(UntrustedOutputModel.prototype) as {
        initialize(...args: unknown[]): void;
      };
      parent.initialize.apply(this, args);
      (this as unknown as { _outputs: { trusted: boolean } })._outputs.trusted = false;
    }
  };
}

let errorViewsMadeText = false;

/**
 * ipywidgets' error view, written as text for a sandboxed panel (its click shows the message,
 * which quotes names from the state, as markup); as it was for others.
 */
function textErrorView(loaded: unknown): void {
  if (errorViewsMadeText || typeof loaded !== 'function') {
    return;
  }
  errorViewsMadeText = true;
  const prototype = (loaded as { prototype: IWidgetView & { render(): void } }).prototype;
  const render = prototype.render;
  prototype.render = function (this: IWidgetView): void {
    const guard = guards.get(this.model.widget_manager);
    if (guard === undefined || !guard.sandboxed()) {
      render.call(this);
      return;
    }
    const { msg, stack } = this.generateErrorMessage();
    this.el.classList.add('jupyter-widgets', 'jupyter-widgets-error-text');
    const message = document.createElement('pre');
    message.textContent = `Error displaying widget: ${String(msg)}`;
    message.title = String(stack);
    this.el.replaceChildren(message);
  };
}

/**
 * Watches the rendermime registries of sandboxed panels: widget views rendered through
 * hardened managers, notices in place of JavaScript and of HTML's scripts.
 */
export function guardRendermime(rendermime: IRenderMimeRegistry, sandboxed: () => boolean): void {
  const wrapped = new WeakSet<IRenderMime.IRendererFactory>();
  const wrap = (factory: IRenderMime.IRendererFactory): IRenderMime.IRendererFactory | null => {
    if (wrapped.has(factory)) {
      return null;
    }
    let replacement: IRenderMime.IRendererFactory | null = null;
    if (factory.mimeTypes.includes(WIDGET_VIEW_MIMETYPE)) {
      replacement = widgetViewFactory(factory, rendermime, sandboxed);
    } else if (factory.mimeTypes.some(type => JAVASCRIPT_MIMETYPES.includes(type))) {
      replacement = javascriptFactory(factory, sandboxed);
    } else if (factory.mimeTypes.includes(HTML_MIMETYPE)) {
      replacement = htmlFactory(factory, sandboxed);
    }
    if (replacement) {
      wrapped.add(replacement);
    }
    return replacement;
  };
  // ipywidgets adds its factory to each panel's registry when it makes the panel's manager,
  // before or after this runs: wrap what is there, and what is added later.
  const addFactory = rendermime.addFactory.bind(rendermime);
  rendermime.addFactory = (factory, rank) => addFactory(wrap(factory) ?? factory, rank);
  for (const mimeType of [WIDGET_VIEW_MIMETYPE, ...JAVASCRIPT_MIMETYPES, HTML_MIMETYPE]) {
    const factory = rendermime.getFactory(mimeType);
    const replacement = factory ? wrap(factory) : null;
    if (replacement) {
      addFactory(replacement, rendermime.getRank(mimeType));
    }
  }
}

/** ipywidgets' factory, safe while the panel is sandboxed, drawing through a hardened manager. */
function widgetViewFactory(
  factory: IRenderMime.IRendererFactory,
  rendermime: IRenderMimeRegistry,
  sandboxed: () => boolean
): IRenderMime.IRendererFactory {
  // Harden the manager now, before the kernel opens any model: the factory's renderers hold it.
  const probe = factory.createRenderer({
    mimeType: WIDGET_VIEW_MIMETYPE,
    sanitizer: rendermime.sanitizer,
    resolver: null,
    linkHandler: null,
    latexTypesetter: null
  });
  const managed = managerOf(probe);
  const guard = managed?.then(manager => guardOf(manager, sandboxed)) ?? null;
  probe.dispose();
  return {
    get safe() {
      return sandboxed();
    },
    mimeTypes: factory.mimeTypes,
    defaultRank: factory.defaultRank,
    createRenderer(options) {
      const renderer = factory.createRenderer(options);
      if (!sandboxed()) {
        return renderer;
      }
      const render = renderer.renderModel.bind(renderer);
      renderer.renderModel = async model => {
        const data = model.data[WIDGET_VIEW_MIMETYPE] as { model_id?: unknown } | undefined;
        const modelId = typeof data?.model_id === 'string' ? data.model_id : '';
        const why =
          guard === null
            ? 'This widget cannot be shown safely (an ipywidgets this extension does not know)'
            : await (await guard).refusal(modelId);
        if (why !== null) {
          renderer.node.replaceChildren(unrenderedNotice(why));
          return;
        }
        return render(model);
      };
      return renderer;
    }
  };
}

/** JupyterLab's JavaScript factory; sandboxed, a notice that the script did not run. */
function javascriptFactory(
  factory: IRenderMime.IRendererFactory,
  sandboxed: () => boolean
): IRenderMime.IRendererFactory {
  return {
    get safe() {
      return sandboxed() || factory.safe;
    },
    mimeTypes: factory.mimeTypes,
    defaultRank: factory.defaultRank,
    createRenderer(options) {
      const renderer = factory.createRenderer(options);
      if (sandboxed()) {
        // JupyterLab's renderer runs the script only when trusted; it never is here.
        renderer.renderModel = () => {
          renderer.node.replaceChildren(unrenderedNotice('This JavaScript output did not run'));
          return Promise.resolve();
        };
      }
      return renderer;
    }
  };
}

/** JupyterLab's HTML factory; sandboxed, a notice after HTML whose scripts were taken out. */
function htmlFactory(
  factory: IRenderMime.IRendererFactory,
  sandboxed: () => boolean
): IRenderMime.IRendererFactory {
  return {
    safe: factory.safe,
    mimeTypes: factory.mimeTypes,
    defaultRank: factory.defaultRank,
    createRenderer(options) {
      const renderer = factory.createRenderer(options);
      if (sandboxed()) {
        const render = renderer.renderModel.bind(renderer);
        renderer.renderModel = async model => {
          await render(model);
          if (!model.trusted && /<script\b/i.test(String(model.data[HTML_MIMETYPE] ?? ''))) {
            renderer.node.append(unrenderedNotice('The scripts of this HTML output did not run'));
          }
        };
      }
      return renderer;
    }
  };
}

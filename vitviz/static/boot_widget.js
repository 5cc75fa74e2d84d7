// A notebook's boot (vitviz.explore): anywidget's render({model, el}). The meta is the model's "meta" trait, with
// its large parts (the photo, the Q·K view's part) asked of the kernel first (vitvizWidgetExtras), and the layers
// come from the kernel on demand, as binary buffers (vitvizWidgetSource). The function it returns takes the Explorer
// down when the view goes, so that ten Explorers in a row leave no listeners and no photo behind. Under it, the Q·K
// view of the same layers (qk.js), where the extras carry its part.

function vitvizWidgetStyle(el) {
  // the style sheet (VITVIZ_CSS and its hash VITVIZ_CSS_KEY, which widget.py puts at the engine's head), once in the
  // document, or once in a shadow root where the host renders each widget in one (marimo); another version's goes
  const home = el.getRootNode() instanceof ShadowRoot ? el.getRootNode() : document.head;
  const sheets = [...home.querySelectorAll("style[data-vitviz]")];
  if (sheets.some((s) => s.dataset.vitviz === VITVIZ_CSS_KEY)) return;
  for (const s of sheets) s.remove();
  const style = document.createElement("style");
  style.dataset.vitviz = VITVIZ_CSS_KEY;
  style.textContent = VITVIZ_CSS;
  home.appendChild(style);
}

export default {
  async render({ model, el }) {
    vitvizWidgetStyle(el);
    let extras;
    try {
      extras = await vitvizWidgetExtras(model);
    } catch (error) {
      // nothing was built: the view says why
      el.textContent = `The Explorer could not start: ${error.message}`;
      return () => {};
    }
    const root = document.createElement("div");
    root.className = "vx";
    root.dataset.mode = "attention";
    el.appendChild(root);
    const engine = vitvizExplorer(root, "attention");
    window.vitviz ||= {};
    const shared = window.vitviz;
    shared.explorer = engine.handle; // the newest Explorer of the page
    const apply = () => engine.apply(vitvizWidgetSource(model, extras));
    model.on("change:meta", apply);
    apply();
    const qk = extras.qk ? vitvizQkBelow(el, vitvizWidgetSource(model, extras)) : null;
    if (qk) shared.qk = qk.view.handle;
    return () => {
      model.off("change:meta", apply);
      engine.destroy();
      extras = null; // a host may keep this function while the model lives
      root.remove(); // the host keeps `el` while the model lives (JupyterLab: until the kernel lets it go)
      if (shared.explorer === engine.handle) delete shared.explorer;
      if (qk) {
        qk.close();
        if (shared.qk === qk.view.handle) delete shared.qk;
      }
    };
  },
};

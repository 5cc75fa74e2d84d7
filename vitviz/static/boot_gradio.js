// The app's boot: gr.HTML's js_on_load, with `element`, `props` and `watch` in scope. props.value is the
// analysis' meta (vitviz/app/explorer.py), its layers come from the app's route.
{
  const root = element.querySelector(".vx") || element;
  const mode = root.dataset.mode === "inside" ? "inside" : "attention"; // the template's data-mode
  const engine = vitvizExplorer(root, mode);
  window.vitviz ||= {};
  window.vitviz[mode === "inside" ? "inside" : "explorer"] = engine.handle;
  const apply = (value) => engine.apply(value && typeof value === "object" ? vitvizRouteSource(value) : null);
  watch("value", () => apply(props.value));
  apply(props.value);
}

// The Q·K view's boot in the app: gr.HTML's js_on_load, with `element`, `props` and `watch` in scope. props.value
// is vitviz.qk.meta with the session and the analysis key; the layers come from the Explorer's route and the UMAP
// maps of one or several photos from GET /vitviz/qk/umap (vitviz/app/tabs/qk.py).
{
  const view = vitvizQkView(element);
  window.vitviz ||= {};
  window.vitviz.qk = view.handle;
  const base = (window.gradio_config?.root || location.origin).replace(/\/$/, "");
  const source = (meta) => ({
    ...vitvizRouteSource(meta),
    async umap(keys, layer, head) {
      // little-endian float32 [2N, 2]: every photo's queries, then every photo's keys
      const q = new URLSearchParams({ session: meta.session, layer: String(layer), head: String(head) });
      for (const key of keys) q.append("key", key);
      const r = await fetch(`${base}/vitviz/qk/umap?${q}`, vitvizRouteAsk(meta));
      if (!r.ok) throw Object.assign(new Error((await r.text()) || `HTTP ${r.status}`), { status: r.status });
      return r.arrayBuffer();
    },
  });
  const apply = (value) => view.apply(value && typeof value === "object" && value.tokens ? source(value) : null);
  watch("value", () => apply(props.value));
  apply(props.value);
}

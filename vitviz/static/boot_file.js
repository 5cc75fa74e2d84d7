// One offline HTML file's boot (vitviz.export_html): the meta and every exported layer's bytes (base64) are
// JSON in the page itself, so it needs no server and no network. The Q·K view reads the same layers.
{
  const read = (id) => JSON.parse(document.getElementById(id).textContent);
  const engine = vitvizExplorer(document.querySelector(".vx"), "attention");
  window.vitviz ||= {};
  window.vitviz.explorer = engine.handle;
  const meta = read("vitviz-meta"),
    layers = read("vitviz-layers");
  engine.apply(vitvizEmbeddedSource(meta, layers));
  if (meta.qk)
    window.vitviz.qk = vitvizQkBelow(document.querySelector(".vx-qk"), vitvizEmbeddedSource(meta, layers)).view.handle;
}

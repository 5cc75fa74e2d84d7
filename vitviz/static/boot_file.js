// One offline HTML file's boot (vitviz.export_html): the meta and every exported layer's bytes (base64) are
// JSON in the page itself, so it needs no server and no network.
{
  const read = (id) => JSON.parse(document.getElementById(id).textContent);
  const engine = vitvizExplorer(document.querySelector(".vx"), "attention");
  (window.vitviz = window.vitviz || {}).explorer = engine.handle;
  engine.apply(vitvizEmbeddedSource(read("vitviz-meta"), read("vitviz-layers")));
}

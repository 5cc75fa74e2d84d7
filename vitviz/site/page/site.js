// The site's boot: the page's config (vitviz/site/build.py), the service worker (offline.js), the engines (the
// Explorer, Inside a head's live part and Queries & keys), the tabs and controls, the photos, and the model fetched
// once (loading.js). `page` is the state that they share; window.vitviz.site is the test handle (sitehandle.js).

(async () => {
  const cfg = JSON.parse(document.getElementById("vitviz-site").textContent);
  cfg.runtime = new URL(cfg.runtime, location.href).href; // a module specifier must be a whole URL
  if (await vitvizThroughWorker()) return;
  cfg.positions.table = new Float32Array(await (await fetch(cfg.positions.url)).arrayBuffer());
  const $ = (sel) => document.querySelector(sel);
  window.vitviz = window.vitviz || {};
  const params = new URLSearchParams(location.search);
  const phone = matchMedia("(max-width: 600px)").matches;
  const asked = Number(params.get("size"));
  const page = {
    cfg,
    params,
    phone,
    asked,
    longest: cfg.sizes.includes(asked) ? asked : phone ? cfg.phoneSize : cfg.defaultSize,
    state: {
      session: null,
      run: null,
      busy: null,
      settings: { fusion: "mean", discard: 0, toward: "output" },
      step: 1,
      orderings: null,
      position: [Math.floor(cfg.positions.grid[0] / 2), Math.floor(cfg.positions.grid[1] / 2)],
      error: null,
    },
    status: (html) => {
      $(".site-status").innerHTML = html;
    },
    esc: (text) =>
      String(text).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]),
  };
  const explorer = vitvizExplorer($(".site-panel[data-tab=attention] .vx"), "attention");
  const inside = vitvizExplorer($(".site-panel[data-tab=inside] .vx"), "inside");
  const qk = vitvizQkView($(".site-panel[data-tab=qk] .qk"));
  Object.assign(window.vitviz, { explorer: explorer.handle, inside: inside.handle, qk: qk.handle });
  page.engines = [explorer, inside, qk];
  vitvizPageControls(page, vitvizTabs(page));
  vitvizPhotos(page);
  page.state.ready = vitvizLoadModel(page);
  window.vitviz.site = vitvizSiteHandle(page);
  page.show(params.get("tab") || "tokens");
})();

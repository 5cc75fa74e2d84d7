// The model: its graphs fetched once with their size and progress (model.js keeps them in this browser), the
// runtime's sessions made, and the page told how it went. Resolves to the session; page.preview(small) draws the
// precomputed example with the small graphs meanwhile.

function vitvizLoadModel(page) {
  const { cfg, state, status, esc } = page,
    bar = document.querySelector(".site-progress"),
    barText = document.querySelector(".site-progress-text");
  const mb = (b) => vitvizFixed(b / 1e6, 1);
  const kept =
    "caches" in self
      ? " (the first visit only: this browser keeps it)"
      : " (on every visit: a page that is not on https or localhost cannot keep it)";
  return (async () => {
    const t0 = performance.now(),
      ort = await import(`${cfg.runtime}ort.wasm.min.mjs`);
    const progress = (done, total) => {
      bar.value = total ? done / total : 0;
      barText.textContent = `Fetching the model: ${mb(done)} of ${mb(total)} MB${kept}.`;
    };
    const session = await vitvizSession(ort, cfg, progress, page.preview);
    state.session = session;
    document.body.classList.add("site-ready");
    if (state.run?.preview && !state.busy)
      status(
        `The model is in. The views still show <b>${esc(state.run.name)}</b>'s precomputed numbers: choose an ` +
          `example, your own photo or the camera to analyse it in this browser.`,
      );
    vitvizKeepSite();
    bar.hidden = true;
    const threads = `${session.threads} thread${session.threads === 1 ? "" : "s"}`;
    barText.textContent =
      `Model ready in ${vitvizFixed((performance.now() - t0) / 1000, 1)} s ` +
      `(${session.cached ? "from this browser's cache" : `${mb(cfg.modelBytes)} MB fetched`}; ${threads}${
        session.isolated
          ? ""
          : ": the page is not cross-origin isolated (the headers, or the service worker that adds them, need " +
            "https or localhost), so the runtime uses one thread"
      }).`;
    return session;
  })().catch((e) => {
    barText.textContent = `The model could not be loaded: ${e.message}`;
    throw e;
  });
}

// A photo: a bundled example, the file input or the camera, decoded here, one forward here, and every view from it;
// while the model loads, the precomputed example (build.py `preview`) drawn by the small graphs' sessions. Adds
// page.showRun(run), page.analyse(blob, name, size) and page.preview(small) to the site's state (site.js).

function vitvizPhotos(page) {
  const { cfg, state, status, esc } = page,
    $ = (sel) => document.querySelector(sel);
  // every view of `run` from now on: the engines' source, the tab shown drawn again
  page.showRun = (run) => {
    if (state.run) state.run.cancel(); // the last photo's summaries stop between two layers
    state.run = run;
    document.body.classList.add("site-has-photo");
    page.fit();
    for (const engine of page.engines) engine.apply(run.source);
    page.draw();
  };
  page.analyse = async (blob, given, size = page.longest) => {
    const name = esc(given),
      mine = Symbol(name);
    state.busy = mine;
    try {
      if (!state.session) {
        status("The model is still loading: the photo will be analysed once it is ready.");
        await state.ready;
      }
      status(`Analysing <b>${name}</b> in this browser…`);
      const photo = await vitvizDecode(blob, cfg.maxPixels);
      const t0 = performance.now();
      const run = await vitvizRun(cfg, state.session, photo, size, given).finally(() => photo.bitmap.close());
      if (state.busy !== mine) return null;
      state.error = null;
      page.showRun(run);
      run.firstViewMs = performance.now() - t0;
      status(vitvizRunWords(run, name, state.session.threads));
      return run;
    } catch (e) {
      if (state.busy === mine) {
        state.error = e.message;
        status(
          `<b>${name}</b> could not be analysed: ${esc(e.message)}. The views still show ` +
            `${state.run ? `<b>${esc(state.run.name)}</b>` : "no photo"}.`,
        );
      }
      return null;
    }
  };
  $(".site-file").addEventListener("change", (e) => {
    const f = e.target.files[0];
    if (f) page.analyse(f, f.name);
  });
  for (const b of document.querySelectorAll(".site-example")) {
    b.addEventListener("click", async () => {
      try {
        const r = await fetch(b.dataset.src);
        if (!r.ok) throw new Error(`HTTP ${r.status}`);
        page.analyse(await r.blob(), b.dataset.name);
      } catch (e) {
        status(`The example ${esc(b.dataset.name)} could not be fetched: ${esc(e.message)}.`);
      }
    });
  }
  vitvizCamera(
    $(".site-camera"),
    $(".site-video"),
    (blob) => page.analyse(blob, "the camera's frame", cfg.phoneSize),
    (m) => status(m),
  ); // a frame at 224 px, as a phone
  page.preview = async (small) => {
    try {
      const p = cfg.preview,
        [outputs, r] = await Promise.all([vitvizPreviewOutputs(p, cfg.outputs), fetch(p.src)]);
      if (!r.ok) throw new Error(`HTTP ${r.status} for ${p.src}`);
      const photo = await vitvizDecode(await r.blob(), cfg.maxPixels);
      if (state.busy || state.run) {
        photo.bitmap.close();
        return;
      } // a photo of the student's own came first
      const run = await vitvizRun(cfg, small, photo, p.size, p.name, outputs).finally(() => photo.bitmap.close());
      if (run.meta.tokens !== outputs.tokens.dims[0]) throw new Error("its numbers are not of this photo's size");
      if (state.busy || state.run) return;
      page.showRun(run);
      status(
        `While the model loads, the views show <b>${esc(p.name)}</b> at ${p.size} px from numbers computed when ` +
          `this site was built, by the same model, and kept as float16 (about 3 significant digits). Your own photo ` +
          `is analysed in this browser once the model is in.`,
      );
    } catch (e) {
      console.warn(`vitviz: no precomputed example (${e.message})`);
    }
  };
}

// The status line of a photo analysed here: its input, its tokens and the forward's time (name: HTML, escaped)
function vitvizRunWords(run, name, threads) {
  const [gh, gw] = run.meta.grid;
  return (
    `<b>${name}</b>: ${run.input.width} × ${run.input.height} px, ${gh} × ${gw} patches + CLS = ` +
    `${run.meta.tokens} tokens. The forward took ${vitvizFixed(run.forwardMs / 1000)} s in this browser ` +
    `(${threads} thread${threads === 1 ? "" : "s"}).${
      run.input.exact
        ? ""
        : " A side of this photo grows to the input, a resize the page does not port from OpenCV: the browser's " +
          "own smoothing made the input, so its numbers differ slightly from the Python app's."
    }`
  );
}

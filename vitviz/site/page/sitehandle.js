// window.vitviz.site, the test handle: it calls what the page's controls call (page.analyse, page.show, the state
// the controls set) and gives the run's numbers, for the tests that hold them to Python's. The Explorer's own
// handles are window.vitviz.explorer and .inside (handle.js).

function vitvizSiteHandle(page) {
  const { cfg, state } = page;
  const summary = (run) => ({
    preview: run.preview,
    name: run.name,
    size: [run.input.height, run.input.width],
    tokens: run.meta.tokens,
    forwardMs: run.forwardMs,
    firstViewMs: run.firstViewMs,
    denseMs: run.denseMs,
    summaryMs: run.summaryMs,
    exact: run.input.exact,
  });
  return {
    config: cfg,
    ready: state.ready,
    // analyse a photo given as a URL or a Blob, at the page's size or `size`; resolves to the run's summary once
    // every view has it (null if it failed: state().error says why)
    async analyse(src, name = "photo", size = page.longest) {
      const blob = typeof src === "string" ? await (await fetch(src)).blob() : src;
      const run = await page.analyse(blob, name, size);
      return run && summary(run);
    },
    async tab(id) {
      // resolves once the tab's view is drawn, its dense head or summaries made first where it needs them
      page.show(id);
      const run = state.run;
      if (run && id === "output") await run.denseMap();
      if (run && (id === "rollout" || id === "heads")) await run.summaries();
      if (run && id === "lesson") await page.lessonNeeds();
      if (run) page.draw();
      return state.tab;
    },
    async rollout(settings) {
      await state.run.summaries();
      Object.assign(state.settings, settings);
      page.show("rollout");
      return { shares: Array.from(state.run.rollout.shown), truth: state.run.rollout.truth };
    },
    async lesson(step) {
      // step `step` (from 1) on the shown photo, drawn: its {title, text} (the sentences' Markdown)
      await page.lessonNeeds();
      state.step = step;
      page.show("lesson");
      const s = page.lessonStep(step);
      return { title: s.title, text: s.text, steps: page.lessonSteps().length };
    },
    async look(layer, head, guessed = null) {
      // the lesson's exercise on the shown photo with layer `layer`, head `head` and the patch `guessed` (from 0;
      // null: none yet), set as its selects and a click on its photo set them, and drawn: {step, title, text} (the
      // Markdown), the head's row of the query [N], the query patch and, once guessed, the revealed numbers
      await page.lessonNeeds();
      state.step = page.lessonSteps().findIndex((s) => s.look) + 1;
      page.show("lesson");
      page.look({ layer, head });
      page.look({ guessed });
      const s = page.lessonStep(state.step);
      return { step: state.step, title: s.title, text: s.text, row: Array.from(s.row), query: s.query, ...s.numbers };
    },
    positions(row, col) {
      state.position = [row, col];
      page.show("positions");
      return Array.from(state.similarity);
    },
    async arrays() {
      const o = await state.run.summaries(),
        pick = (name) => Array.from(o[name].data);
      return {
        tokens: pick("tokens"),
        distance: pick("distance"),
        entropy: pick("entropy"),
        dense: pick("dense"),
        norms: Array.from(state.run.tokenNorms()),
        pca: Array.from(state.run.pca()),
        pixels: Array.from(state.run.input.resized),
        size: [state.run.input.height, state.run.input.width],
      };
    },
    state() {
      return {
        ready: Boolean(state.session),
        threads: state.session?.threads,
        isolated: self.crossOriginIsolated,
        cached: state.session?.cached,
        createMs: state.session?.createMs,
        error: state.error,
        tab: state.tab,
        position: state.position,
        run: state.run && summary(state.run),
      };
    },
  };
}

// The site's boot: the page's config (vitviz/site/build.py), the runtime and the model fetched once, a photo chosen
// (a bundled example, the file input or the camera), one forward in this browser, and every view drawn from it.
// window.vitviz.site is the test handle; window.vitviz.explorer and .inside are the engine's own (handle.js).

(async () => {
  const cfg = JSON.parse(document.getElementById("vitviz-site").textContent);
  cfg.runtime = new URL(cfg.runtime, location.href).href; // a module specifier must be a whole URL
  // The service worker keeps the site for a visit with the network off and isolates the page where the host cannot
  // (threads need it): a page it does not control yet is loaded once more, through it. Where the host isolates the
  // page itself, it is registered once the model is in, so that it stores the files the page has already fetched
  // (from the browser's HTTP cache) rather than fetching them beside the page.
  const worker = () =>
    navigator.serviceWorker.register("sw.js").catch((e) => {
      console.warn(`vitviz: no service worker (${e.message}): the site needs the network on every visit`);
      return null;
    });
  if ("serviceWorker" in navigator && navigator.serviceWorker.controller)
    // a new build's worker took over this page of the last one (sw.js): the next load is the new build's
    navigator.serviceWorker.addEventListener("controllerchange", () => {
      document.querySelector(".site-update").hidden = false;
    });
  if ("serviceWorker" in navigator && location.protocol.startsWith("http") && !self.crossOriginIsolated) {
    const registered = await worker(),
      waited = new Promise((resolve) => setTimeout(() => resolve(null), 5000));
    if (
      registered &&
      !navigator.serviceWorker.controller &&
      !sessionStorage.getItem("vitviz-reloaded") &&
      (await Promise.race([navigator.serviceWorker.ready, waited]))
    ) {
      sessionStorage.setItem("vitviz-reloaded", "1");
      location.reload();
      return;
    }
  }
  cfg.positions.table = new Float32Array(await (await fetch(cfg.positions.url)).arrayBuffer());
  const $ = (sel) => document.querySelector(sel);
  window.vitviz = window.vitviz || {};
  const shared = window.vitviz;
  const params = new URLSearchParams(location.search);
  const phone = matchMedia("(max-width: 600px)").matches;
  const asked = Number(params.get("size"));
  const longest = cfg.sizes.includes(asked) ? asked : phone ? cfg.phoneSize : cfg.defaultSize;
  const state = {
    session: null,
    run: null,
    busy: null,
    settings: { fusion: "mean", discard: 0, toward: "output" },
    step: 1,
    orderings: null,
    position: [Math.floor(cfg.positions.grid[0] / 2), Math.floor(cfg.positions.grid[1] / 2)],
    error: null,
  };
  const status = (html) => {
    $(".site-status").innerHTML = html;
  };
  const esc = (text) =>
    String(text).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);

  // ---- the page: size, tabs, projector mode
  $(".site-size").innerHTML = cfg.sizes
    .map((s) => `<option value="${s}"${s === longest ? " selected" : ""}>${s} px</option>`)
    .join("");
  $(".site-size").addEventListener("change", (e) => {
    params.set("size", e.target.value);
    location.search = params.toString();
  });
  $(".site-size-why").textContent =
    phone && !asked
      ? `A phone gets ${cfg.phoneSize} px: a forward at ${cfg.defaultSize} px takes about 4× as long and ` +
        "4× the memory."
      : "";
  const tabs = [...document.querySelectorAll(".site-tab")];
  const show = (id) => {
    for (const t of tabs) t.setAttribute("aria-selected", String(t.dataset.tab === id));
    for (const p of document.querySelectorAll(".site-panel")) p.hidden = p.dataset.tab !== id;
    state.tab = id;
    fit();
    draw();
  };
  // The first screen holds the whole picture: each panel's pictures are as wide as the height left under their top
  // allows, in the photo's proportions (the CSS reads --site-room and --photo-aspect)
  function fit() {
    const panel = $(`.site-panel[data-tab=${state.tab}]`),
      first = panel?.querySelector("canvas");
    if (!first) return;
    const top = first.getBoundingClientRect().top + window.scrollY;
    panel.style.setProperty("--site-room", `${Math.max(200, window.innerHeight - top - 48)}px`);
    if (state.run)
      document.body.style.setProperty("--photo-aspect", String(state.run.input.width / state.run.input.height));
  }
  window.addEventListener("resize", () => {
    fit();
    draw();
  });
  tabs.forEach((t, i) => {
    t.addEventListener("click", () => show(t.dataset.tab));
    t.addEventListener("keydown", (e) => {
      // the tab bar's arrows, Home and End, as a tab list's keyboard does
      const to = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: tabs.length - 1 }[e.key];
      if (to === undefined) return;
      e.preventDefault();
      const next = tabs[(to + tabs.length) % tabs.length];
      next.focus();
      show(next.dataset.tab);
    });
  });
  $(".site-projector").addEventListener("change", (e) => {
    document.body.classList.toggle("site-big", e.target.checked);
    fit();
    draw();
  });

  // ---- the engines: the Explorer, Inside a head's live part and Queries & keys, fed by the run's source
  const explorer = vitvizExplorer($(".site-panel[data-tab=attention] .vx"), "attention");
  const inside = vitvizExplorer($(".site-panel[data-tab=inside] .vx"), "inside");
  const qk = vitvizQkView($(".site-panel[data-tab=qk] .qk"));
  shared.explorer = explorer.handle;
  shared.inside = inside.handle;
  shared.qk = qk.handle;

  function draw() {
    const run = state.run;
    if (!run) return;
    const panel = $(`.site-panel[data-tab=${state.tab}]`),
      tab = state.tab;
    const needs =
      tab === "output"
        ? [run.out.dense, run.denseMap]
        : tab === "rollout" || tab === "heads"
          ? [run.summarised, run.summaries]
          : tab === "lesson"
            ? [run.summarised && state.orderings, lessonNeeds]
            : [true];
    if (!needs[0]) {
      // the dense head, or every layer's summaries, made once the tab needs them
      const wait = panel.querySelector(".site-wait");
      wait.dataset.said ||= wait.textContent;
      const said = wait.dataset.said;
      wait.textContent = said;
      wait.hidden = false;
      needs[1]()
        .then(() => {
          if (state.run === run) {
            wait.hidden = true;
            if (state.tab === tab) draw();
          }
        })
        .catch((e) => {
          if (state.run === run) wait.textContent = `This could not be computed in this browser: ${e.message}.`;
        });
      return;
    }
    if (state.tab === "tokens") vitvizTokensView(panel, run);
    else if (state.tab === "rollout") vitvizRolloutView(panel, run, state.settings);
    else if (state.tab === "heads") vitvizHeadsView(panel, run);
    else if (state.tab === "output") vitvizOutputView(panel, run, cfg.lesson.dense);
    if (state.tab === "positions") state.similarity = vitvizPositionsView(panel, cfg, ...state.position);
    if (state.tab === "lesson") drawLesson(panel, run);
  }
  // ---- the lesson: its steps on this run once every layer's summary and the trend test's orderings are in
  const lessonNeeds = async () => {
    state.ordering ||= fetch(cfg.lesson.orderings.url)
      .then((r) => {
        if (!r.ok) throw new Error(`HTTP ${r.status} for the trend test's orderings`);
        return r.arrayBuffer();
      })
      .then((bytes) => {
        state.orderings = new Uint8Array(bytes);
      })
      .catch((e) => {
        state.ordering = null;
        throw e;
      });
    await Promise.all([state.ordering, state.run.summaries()]);
  };
  function drawLesson(panel, run) {
    if (run.lesson === undefined) run.lesson = vitvizLessonSteps(run, cfg, state.orderings);
    const steps = run.lesson;
    state.step = Math.min(Math.max(state.step, 1), steps.length);
    const i = state.step,
      step = steps[i - 1];
    panel.querySelector(".site-step-at").textContent = `Step ${i} of ${steps.length}`;
    panel.querySelector(".site-step-title").textContent = step.title;
    panel.querySelector(".site-step-text").innerHTML = vitvizLessonHtml(step.text);
    panel.querySelector(".site-step-back").disabled = i === 1;
    panel.querySelector(".site-step-next").disabled = i === steps.length;
    fit(); // the title and text above the picture are in now: the room left under them
    const canvas = panel.querySelector("canvas");
    step.draw(canvas);
    // this picture's own proportions
    canvas.style.maxWidth = `min(100%, 760px, calc(var(--site-room, 600px) * ${canvas.width / canvas.height}))`;
  }
  const lessonPanel = $(".site-panel[data-tab=lesson]");
  lessonPanel.querySelector(".site-step-back").addEventListener("click", () => {
    state.step -= 1;
    draw();
  });
  lessonPanel.querySelector(".site-step-next").addEventListener("click", () => {
    state.step += 1;
    draw();
  });
  const rollPanel = $(".site-panel[data-tab=rollout]");
  for (const name of ["fusion", "toward"])
    rollPanel.querySelector(`.site-${name}`).addEventListener("change", (e) => {
      state.settings[name] = e.target.value;
      draw();
    });
  rollPanel.querySelector(".site-discard").addEventListener("input", (e) => {
    state.settings.discard = Number(e.target.value);
    rollPanel.querySelector(".site-discard-out").textContent = `${Math.round(100 * state.settings.discard)} %`;
    draw();
  });
  const positionsCanvas = $(".site-panel[data-tab=positions] canvas");
  positionsCanvas.tabIndex = 0; // the arrow keys move the chosen position, as a click chooses it
  positionsCanvas.setAttribute("aria-label", "The chosen position: the arrow keys move it");
  positionsCanvas.addEventListener("keydown", (e) => {
    const step = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] }[e.key];
    if (!step) return;
    e.preventDefault();
    const [g0, g1] = cfg.positions.grid;
    state.position = [
      Math.min(g0 - 1, Math.max(0, state.position[0] + step[0])),
      Math.min(g1 - 1, Math.max(0, state.position[1] + step[1])),
    ];
    draw();
  });
  positionsCanvas.addEventListener("click", (e) => {
    const r = e.target.getBoundingClientRect(),
      [g0, g1] = cfg.positions.grid;
    state.position = [
      Math.min(g0 - 1, Math.floor(((e.clientY - r.top) / r.height) * g0)),
      Math.min(g1 - 1, Math.floor(((e.clientX - r.left) / r.width) * g1)),
    ];
    draw();
  });

  // every view of `run` from now on: the engines' source, the tab shown drawn again
  function showRun(run) {
    if (state.run) state.run.cancel(); // the last photo's summaries stop between two layers
    state.run = run;
    document.body.classList.add("site-has-photo");
    fit();
    explorer.apply(run.source);
    inside.apply(run.source);
    qk.apply(run.source);
    draw();
  }

  // ---- a photo: decoded here, one forward here, every view from it
  async function analyse(blob, given, size = longest) {
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
      showRun(run);
      run.firstViewMs = performance.now() - t0;
      const [gh, gw] = run.meta.grid;
      status(
        `<b>${name}</b>: ${run.input.width} × ${run.input.height} px, ${gh} × ${gw} patches + CLS = ` +
          `${run.meta.tokens} tokens. The forward took ${vitvizFixed(run.forwardMs / 1000)} s in this browser ` +
          `(${state.session.threads} ` +
          `thread${state.session.threads === 1 ? "" : "s"}).${
            run.input.exact
              ? ""
              : " A side of this photo " +
                "grows to the input, a resize the page does not port from OpenCV: the browser's own smoothing " +
                "made the input, so its numbers differ slightly from the Python app's."
          }`,
      );
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
  }
  $(".site-file").addEventListener("change", (e) => {
    const f = e.target.files[0];
    if (f) analyse(f, f.name);
  });
  for (const b of document.querySelectorAll(".site-example")) {
    b.addEventListener("click", async () => {
      try {
        const r = await fetch(b.dataset.src);
        if (!r.ok) throw new Error(`HTTP ${r.status}`);
        analyse(await r.blob(), b.dataset.name);
      } catch (e) {
        status(`The example ${esc(b.dataset.name)} could not be fetched: ${esc(e.message)}.`);
      }
    });
  }
  vitvizCamera(
    $(".site-camera"),
    $(".site-video"),
    (blob) => analyse(blob, "the camera's frame", cfg.phoneSize),
    (m) => status(m),
  ); // a frame at 224 px, as a phone

  // ---- while the model loads: the precomputed example (build.py `preview`), drawn by the small graphs' sessions
  async function preview(small) {
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
      showRun(run);
      status(
        `While the model loads, the views show <b>${esc(p.name)}</b> at ${p.size} px from numbers computed when ` +
          `this site was built, by the same model, and kept as float16 (about 3 significant digits). Your own photo ` +
          `is analysed in this browser once the model is in.`,
      );
    } catch (e) {
      console.warn(`vitviz: no precomputed example (${e.message})`);
    }
  }

  // ---- the model: fetched once with its size and progress, kept by this browser
  const bar = $(".site-progress"),
    barText = $(".site-progress-text");
  const mb = (b) => vitvizFixed(b / 1e6, 1);
  state.ready = (async () => {
    const t0 = performance.now(),
      ort = await import(`${cfg.runtime}ort.wasm.min.mjs`);
    const session = await vitvizSession(
      ort,
      cfg,
      (done, total) => {
        bar.value = total ? done / total : 0;
        barText.textContent =
          `Fetching the model: ${mb(done)} of ${mb(total)} ` +
          `MB${
            "caches" in self
              ? " (the first visit only: this browser " + "keeps it)"
              : " (on every visit: a page that is not on https or localhost cannot keep it)"
          }.`;
      },
      preview,
    );
    state.session = session;
    document.body.classList.add("site-ready");
    if (state.run?.preview && !state.busy)
      status(
        `The model is in. The views still show <b>${esc(state.run.name)}</b>'s precomputed numbers: choose an ` +
          `example, your own photo or the camera to analyse it in this browser.`,
      );
    if ("serviceWorker" in navigator && location.protocol.startsWith("http") && self.crossOriginIsolated) worker();
    bar.hidden = true;
    barText.textContent =
      `Model ready in ${vitvizFixed((performance.now() - t0) / 1000, 1)} s ` +
      `(${session.cached ? "from this browser's cache" : `${mb(cfg.modelBytes)} MB fetched`}; ${session.threads} ` +
      `thread${session.threads === 1 ? "" : "s"}${
        session.isolated
          ? ""
          : ": the page is not cross-origin " +
            "isolated (the headers, or the service worker that adds them, need https or localhost), so the runtime " +
            "uses one thread"
      }).`;
    return session;
  })().catch((e) => {
    barText.textContent = `The model could not be loaded: ${e.message}`;
    throw e;
  });

  shared.site = {
    config: cfg,
    ready: state.ready,
    // analyse a photo given as a URL or a Blob, at the page's size or `size`; resolves to the run's summary once
    // every view has it (null if it failed: state().error says why)
    async analyse(src, name = "photo", size = longest) {
      const blob = typeof src === "string" ? await (await fetch(src)).blob() : src;
      const run = await analyse(blob, name, size);
      return run && summary(run);
    },
    async tab(id) {
      // resolves once the tab's view is drawn, its dense head or summaries made first where it needs them
      show(id);
      const run = state.run;
      if (run && id === "output") await run.denseMap();
      if (run && (id === "rollout" || id === "heads")) await run.summaries();
      if (run) draw();
      return state.tab;
    },
    async rollout(settings) {
      await state.run.summaries();
      Object.assign(state.settings, settings);
      show("rollout");
      return { shares: Array.from(state.run.rollout.shown), truth: state.run.rollout.truth };
    },
    async lesson(step) {
      // step `step` (from 1) on the shown photo, drawn: its {title, text} (the sentences' Markdown)
      await lessonNeeds();
      state.step = step;
      show("lesson");
      const s = state.run.lesson[step - 1];
      return { title: s.title, text: s.text, steps: state.run.lesson.length };
    },
    positions(row, col) {
      state.position = [row, col];
      show("positions");
      return Array.from(state.similarity);
    },
    async arrays() {
      // the run's numbers, for the tests that hold them to Python's
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
  show(params.get("tab") || "tokens");
})();

// The camera: a live preview and a button that takes one frame as the photo (at the site's size, like an upload)
function vitvizCamera(button, video, onFrame, say) {
  let stream = null;
  button.addEventListener("click", async () => {
    if (!stream) {
      try {
        stream = await navigator.mediaDevices.getUserMedia({ video: { facingMode: "environment" }, audio: false });
      } catch (e) {
        say(`The camera could not be opened: ${e.message}.`);
        return;
      }
      video.srcObject = stream;
      video.hidden = false;
      await video.play();
      button.textContent = "Take this frame";
      return;
    }
    if (!video.videoWidth) {
      say("The camera has no picture yet: try again in a moment.");
      return;
    }
    const canvas = document.createElement("canvas");
    canvas.width = video.videoWidth;
    canvas.height = video.videoHeight;
    canvas.getContext("2d").drawImage(video, 0, 0);
    for (const track of stream.getTracks()) track.stop(); // the camera's light goes off with its one frame
    stream = null;
    video.srcObject = null;
    video.hidden = true;
    button.textContent = "Camera";
    canvas.toBlob((blob) => onFrame(blob), "image/png");
  });
}

// The page's tabs: which one is shown, its pictures fitted to the first screen, and its view drawn from the run
// shown (views in picture.js, rolloutview.js, positions.js, heads.js, output.js and lesson.js), once what it needs
// is made. `page` is the site's shared state (site.js); this adds page.show(id), page.fit(), page.draw(),
// page.lessonNeeds() and page.lessonStep(i) to it.

function vitvizTabs(page) {
  const { cfg, state } = page;
  const panelOf = (id) => document.querySelector(`.site-panel[data-tab=${id}]`);
  const tabs = [...document.querySelectorAll(".site-tab")];
  page.show = (id) => {
    for (const t of tabs) t.setAttribute("aria-selected", String(t.dataset.tab === id));
    for (const p of document.querySelectorAll(".site-panel")) p.hidden = p.dataset.tab !== id;
    state.tab = id;
    page.fit();
    page.draw();
  };
  // The first screen holds the whole picture and its colour bar: each panel's pictures are as wide as the height
  // left under their top allows, in the photo's proportions (the CSS reads --site-room and --photo-aspect)
  page.fit = () => {
    const panel = panelOf(state.tab),
      first = panel?.querySelector("canvas");
    if (!first) return;
    const top = first.getBoundingClientRect().top + window.scrollY,
      bar = panel.querySelector(".site-colourbar")?.offsetHeight || 0;
    panel.style.setProperty("--site-room", `${Math.max(200, window.innerHeight - top - bar - 48)}px`);
    if (state.run)
      document.body.style.setProperty("--photo-aspect", String(state.run.input.width / state.run.input.height));
  };
  // the lesson: its steps on this run once every layer's summary and the trend test's orderings are in
  page.lessonNeeds = async () => {
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
  // step i (from 1) of the shown run's lesson as shown: the exercise's as the student's choice has it (guess.js)
  page.lessonSteps = () => (state.run.lesson ??= vitvizLessonSteps(state.run, cfg, state.orderings));
  page.lessonStep = (i) => {
    const step = page.lessonSteps()[i - 1];
    return step.at ? step.at(state.look) : step;
  };
  function drawLesson(panel) {
    const steps = page.lessonSteps();
    state.step = Math.min(Math.max(state.step, 1), steps.length);
    const i = state.step,
      step = page.lessonStep(i);
    panel.querySelector(".site-look").hidden = !steps[i - 1].look;
    panel.querySelector(".site-step-at").textContent = `Step ${i} of ${steps.length}`;
    panel.querySelector(".site-step-title").textContent = step.title;
    panel.querySelector(".site-step-text").innerHTML = vitvizLessonHtml(step.text);
    panel.querySelector(".site-step-back").disabled = i === 1;
    panel.querySelector(".site-step-next").disabled = i === steps.length;
    page.fit(); // the title and text above the picture are in now: the room left under them
    const canvas = panel.querySelector("canvas");
    vitvizColourBar(panel.querySelector(".site-colourbar"), step.draw(canvas));
    // this picture's own proportions
    panel.querySelector(".site-map").style.maxWidth =
      `min(100%, 760px, calc(var(--site-room, 600px) * ${canvas.width / canvas.height}))`;
  }
  // what a tab needs before it is drawn: [made yet, make()]
  const needs = (tab, run) =>
    tab === "output"
      ? [run.out.dense, run.denseMap]
      : tab === "rollout" || tab === "heads"
        ? [run.summarised, run.summaries]
        : tab === "lesson"
          ? [run.summarised && state.orderings, page.lessonNeeds]
          : [true];
  page.draw = () => {
    const run = state.run;
    if (!run) return;
    const tab = state.tab,
      panel = panelOf(tab),
      [made, make] = needs(tab, run);
    if (!made) {
      // the dense head, or every layer's summaries, made once the tab needs them
      const wait = panel.querySelector(".site-wait");
      wait.dataset.said ||= wait.textContent;
      wait.textContent = wait.dataset.said;
      wait.hidden = false;
      make()
        .then(() => {
          if (state.run === run) {
            wait.hidden = true;
            if (state.tab === tab) page.draw();
          }
        })
        .catch((e) => {
          if (state.run === run) wait.textContent = `This could not be computed in this browser: ${e.message}.`;
        });
      return;
    }
    const view = () => {
      if (tab === "tokens") vitvizTokensView(panel, run);
      else if (tab === "rollout") vitvizRolloutView(panel, run, state.settings);
      else if (tab === "heads") vitvizHeadsView(panel, run);
      else if (tab === "output") vitvizOutputView(panel, run, cfg.lesson.dense);
      else if (tab === "positions") state.similarity = vitvizPositionsView(panel, cfg, ...state.position);
      else if (tab === "lesson") drawLesson(panel);
    };
    view();
    // the colour bar's words are in now: drawn once more if they took room from the picture
    const room = panel.style.getPropertyValue("--site-room");
    page.fit();
    if (panel.style.getPropertyValue("--site-room") !== room) view();
  };
  return tabs;
}

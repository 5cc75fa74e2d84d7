// The page's controls: the input size, the tab bar (its arrows, Home and End, as a tab list's keyboard does), the
// projector mode, Rollout's fusion, discard and direction, the lesson's Back and Next (and its exercise's, guess.js),
// and the position that the Positions map shows (a click, or the arrow keys). Each sets the site's state
// (page.state) and draws again.

function vitvizPageControls(page, tabs) {
  const { cfg, state, params } = page,
    $ = (sel) => document.querySelector(sel);
  $(".site-size").innerHTML = cfg.sizes
    .map((s) => `<option value="${s}"${s === page.longest ? " selected" : ""}>${s} px</option>`)
    .join("");
  $(".site-size").addEventListener("change", (e) => {
    params.set("size", e.target.value);
    location.search = params.toString();
  });
  $(".site-size-why").textContent =
    page.phone && !page.asked
      ? `A phone gets ${cfg.phoneSize} px: a forward at ${cfg.defaultSize} px takes about 4× as long and ` +
        "4× the memory."
      : "";
  window.addEventListener("resize", () => {
    page.fit();
    page.draw();
  });
  tabs.forEach((t, i) => {
    t.addEventListener("click", () => page.show(t.dataset.tab));
    t.addEventListener("keydown", (e) => {
      const to = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: tabs.length - 1 }[e.key];
      if (to === undefined) return;
      e.preventDefault();
      const next = tabs[(to + tabs.length) % tabs.length];
      next.focus();
      page.show(next.dataset.tab);
    });
  });
  $(".site-projector").addEventListener("change", (e) => {
    document.body.classList.toggle("site-big", e.target.checked);
    page.fit();
    page.draw();
  });
  const lessonPanel = $(".site-panel[data-tab=lesson]");
  for (const [button, by] of [
    [".site-step-back", -1],
    [".site-step-next", 1],
  ])
    lessonPanel.querySelector(button).addEventListener("click", () => {
      state.step += by;
      page.draw();
    });
  vitvizLookControls(page);
  const rollPanel = $(".site-panel[data-tab=rollout]");
  for (const name of ["fusion", "toward"])
    rollPanel.querySelector(`.site-${name}`).addEventListener("change", (e) => {
      state.settings[name] = e.target.value;
      page.draw();
    });
  rollPanel.querySelector(".site-discard").addEventListener("input", (e) => {
    state.settings.discard = Number(e.target.value);
    rollPanel.querySelector(".site-discard-out").textContent = `${Math.round(100 * state.settings.discard)} %`;
    page.draw();
  });
  vitvizPositionControls($(".site-panel[data-tab=positions] canvas"), page);
}

// The Positions map: a click chooses a position, the arrow keys move it
function vitvizPositionControls(canvas, page) {
  const { cfg, state } = page,
    [g0, g1] = cfg.positions.grid,
    clamp = (row, col) => [Math.min(g0 - 1, Math.max(0, row)), Math.min(g1 - 1, Math.max(0, col))];
  canvas.tabIndex = 0;
  canvas.setAttribute("aria-label", "The chosen position: the arrow keys move it");
  canvas.addEventListener("keydown", (e) => {
    const step = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] }[e.key];
    if (!step) return;
    e.preventDefault();
    state.position = clamp(state.position[0] + step[0], state.position[1] + step[1]);
    page.draw();
  });
  canvas.addEventListener("click", (e) => {
    const r = e.target.getBoundingClientRect();
    state.position = clamp(
      Math.floor(((e.clientY - r.top) / r.height) * g0),
      Math.floor(((e.clientX - r.left) / r.width) * g1),
    );
    page.draw();
  });
}

// Clicks on clickable pictures (server-drawn maps whose patches are picked) reach Gradio one at a time, in the
// order they were made, each tagged "page:n" for the server's `ClickOrder`. A click is held, and replayed at the
// same place on the picture, while
// - the picture is still loading: the browser then reports it as 0×0, and Gradio's select would turn the click
//   into no patch or a wrong one;
// - the last click's answer has not landed: two answers in flight for the same outputs can be applied by Gradio
//   in the wrong order (the query then ends on the click before last);
// - an earlier click is held.
() => {
  if (window.vitvizPick) return;
  const held = [], replayed = new WeakSet(), WAIT_MS = 15000;
  const page = Math.random().toString(36).slice(2) + Date.now().toString(36);
  const state = {
    held: 0, replayed: 0, dropped: 0, n: 0, busy: 0, sent: 0,
    tag() { this.busy++; this.sent = performance.now(); return `${page}:${++this.n}`; },  // a click is sent
    done() { this.busy = Math.max(0, this.busy - 1); },  // its answer has landed
  };
  window.vitvizPick = state;
  const answering = () => state.busy > 0 && performance.now() - state.sent < WAIT_MS;
  const ready = (img) => img.complete && img.naturalWidth > 0;
  const replay = () => {
    while (held.length) {
      const click = held[0];
      if (!click.img.isConnected || performance.now() - click.at > WAIT_MS) {  // gone, or never loaded
        held.shift();
        state.dropped++;
        continue;
      }
      if (answering() || !ready(click.img)) {
        setTimeout(replay, 30);
        return;
      }
      held.shift();
      const r = click.img.getBoundingClientRect();
      const again = new MouseEvent('click', {bubbles: true, cancelable: true, view: window,
        clientX: r.left + click.u * r.width, clientY: r.top + click.v * r.height});
      replayed.add(again);
      state.replayed++;
      click.img.dispatchEvent(again);  // Gradio's select calls tag() at once: the next waits for its answer
    }
  };
  document.addEventListener('click', (e) => {
    const img = e.target instanceof HTMLImageElement && e.target.closest('.vitviz-pick') ? e.target : null;
    if (!img || replayed.has(e) || (!held.length && !answering() && ready(img))) return;
    e.stopImmediatePropagation();
    e.preventDefault();
    state.held++;
    const r = img.getBoundingClientRect();
    held.push({img, at: performance.now(), u: (e.clientX - r.left) / r.width, v: (e.clientY - r.top) / r.height});
    if (held.length === 1) setTimeout(replay, 0);
  }, true);
}

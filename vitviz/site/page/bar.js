// A map's colour bar under its picture: its colormap's ramp (vitvizRamp, as the Explorer's), its two ends labelled
// in the map's units, and a line saying how the colours were spread over the values. Text is HTML, so that it grows
// with the projector mode. A view says what its bar is (a "bar": {colours, ends, label, note}) and this draws it.

// The ends of scale `sc` (vitvizScale) in the values' own units: [low, high]
function vitvizScaleEnds(sc) {
  return sc.log ? [10 ** sc.lo, 10 ** sc.hi] : [sc.lo, sc.hi];
}

function vitvizOrdinal(n) {
  const teen = n % 100 >= 11 && n % 100 <= 13;
  return `${n}${teen ? "th" : ({ 1: "st", 2: "nd", 3: "rd" }[n % 10] ?? "th")}`;
}

// How scale `sc` spread the colours over `what` (the values, in words), by the page's rule (meta.scaleRule)
function vitvizScaleWords(sc, rule, what) {
  const [low, high] = rule.percentiles.map(vitvizOrdinal);
  if (sc.clip === "both") return `log scale, ${low} to ${high} percentile of ${what} (the rest: the end colours)`;
  if (sc.clip === "top") return `linear, lowest to ${high} percentile of ${what} (higher: the last colour)`;
  return `${sc.log ? "log scale" : "linear"}, lowest to highest of ${what}`;
}

// The bar of a map drawn on the page's scale `sc` with the meta's colormap: its ends as label(x) says them, the
// note naming the scale's kind over `what`
function vitvizScaleBar(meta, sc, label, what) {
  return {
    colours: meta,
    ends: vitvizScaleEnds(sc),
    label,
    note: `Colour: ${vitvizScaleWords(sc, meta.scaleRule, what)}.`,
  };
}

// A number with three significant digits, as a bar's end says it: 0.0123, 1.23, 12.3
const vitvizSignificant = (x) => String(Number(x.toPrecision(3)));

// Draw `bar` ({colours: a meta-like {colormaps, cmap}, ends: [low, high], label(x), note}) in `el` (a
// .site-colourbar), or hide it where the picture has no bar (null)
function vitvizColourBar(el, bar) {
  el.hidden = !bar;
  if (!bar) return;
  if (!el.firstChild)
    el.innerHTML =
      '<div class="vx-bar-row"><span class="site-bar-lo"></span><span class="vx-ramp"></span>' +
      '<span class="site-bar-hi"></span></div><div class="site-bar-note"></div>';
  vitvizRamp(el.querySelector(".vx-ramp"), bar.colours);
  el.querySelector(".site-bar-lo").textContent = bar.label(bar.ends[0]);
  el.querySelector(".site-bar-hi").textContent = bar.label(bar.ends[1]);
  el.querySelector(".site-bar-note").textContent = bar.note;
}

// The page's colour scale, as maps.colour_scale makes it, from the rule the meta sends (its floor and percentiles):
// "log" spans log10 of the values above floor x the largest, between two percentiles; "robust" is linear up to the
// upper percentile; "min-max" spans the values. A scale is made from every map it is shared by.

function vitvizPercentile(sorted, q) {
  // numpy's default: linear between the two nearest ranks
  const at = ((sorted.length - 1) * q) / 100,
    i = Math.floor(at),
    f = at - i;
  return i + 1 < sorted.length ? sorted[i] + f * (sorted[i + 1] - sorted[i]) : sorted[i];
}

// maps: arrays of values; kind "log" | "robust" | "min-max"; rule {floor, percentiles: [low, high]}.
// Returns {log, floor?, lo, hi, clip}: lo and hi in the scale's own units (log10 for "log"); clip, which ends are
// percentiles: "both" (log), "top" (robust) or "none" (the values' own lowest and highest).
function vitvizScale(maps, kind, rule) {
  const {
    floor: fraction,
    percentiles: [low, high],
  } = rule;
  let lo = Infinity,
    hi = -Infinity;
  for (const m of maps)
    for (let i = 0; i < m.length; i++) {
      lo = Math.min(lo, m[i]);
      hi = Math.max(hi, m[i]);
    }
  if (kind === "log") {
    const floor = hi > 0 ? Math.max(hi * fraction, 1.1754944e-38) : 1e-12,
      above = [];
    let a = Infinity,
      b = -Infinity;
    for (const m of maps)
      for (let i = 0; i < m.length; i++) {
        const v = Math.log10(Math.max(m[i], floor));
        a = Math.min(a, v);
        b = Math.max(b, v);
        if (m[i] > floor) above.push(v);
      }
    above.sort((x, y) => x - y);
    const from = above.length ? vitvizPercentile(above, low) : 0,
      to = above.length ? vitvizPercentile(above, high) : 0;
    return to > from
      ? { log: true, floor, lo: from, hi: to, clip: "both" }
      : { log: true, floor, lo: a, hi: b, clip: "none" };
  }
  if (kind === "robust") {
    const all = [];
    for (const m of maps) for (let i = 0; i < m.length; i++) all.push(m[i]);
    all.sort((x, y) => x - y);
    const clip = vitvizPercentile(all, high);
    if (clip > lo) return { log: false, lo, hi: clip, clip: "top" };
  }
  return { log: false, lo, hi, clip: "none" };
}

function vitvizAtScale(v, sc) {
  return sc.log ? Math.log10(Math.max(v, sc.floor)) : v;
}

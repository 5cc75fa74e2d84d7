// The lesson's numbers as Python says them: Python's rounding, and the trend of a value with depth (vitviz.trend:
// Spearman's rho and its permutation p over the orderings Python draws), for lesson.js.

// Python's f"{x:.{digits}f}": vitvizFixed, except that an exact half goes to the even neighbour, as Python rounds
function vitvizPyFixed(x, digits = 0) {
  if (digits === 0 && Math.abs(x % 1) === 0.5) return vitvizFixed(2 * Math.round(x / 2), 0);
  return vitvizFixed(x, digits);
}

const vitvizPyPct = (x, digits = 0) => `${vitvizPyFixed(100 * x, digits)}%`; // f"{x:.{digits}%}"

// [n] ranks 1..n, ties given their mean rank (vitviz.trend.ranks)
function vitvizRanks(x) {
  const order = Array.from(x.keys()).sort((i, j) => x[i] - x[j]),
    r = new Float64Array(x.length);
  for (let i = 0; i < order.length; ) {
    let j = i;
    while (j + 1 < order.length && x[order[j + 1]] === x[order[i]]) j++;
    for (let k = i; k <= j; k++) r[order[k]] = (i + j) / 2 + 1;
    i = j + 1;
  }
  return r;
}

function vitvizStandardised(x) {
  // centred, unit length; all 0 for a constant x (vitviz.trend.standardised)
  let lo = Infinity,
    hi = -Infinity,
    mean = 0;
  for (const v of x) {
    lo = Math.min(lo, v);
    hi = Math.max(hi, v);
    mean += v / x.length;
  }
  if (hi === lo) return new Float64Array(x.length);
  const c = Float64Array.from(x, (v) => v - mean),
    norm = Math.sqrt(c.reduce((s, v) => s + v * v, 0));
  return c.map((v) => v / norm);
}

// The trend of values [L] with depth (vitviz.trend.depth_trend): Spearman's rho and its permutation p over the
// orderings Python draws (uint8 [K*L]), with the same rule for its direction and strength
function vitvizDepthTrend(values, facts, orderings) {
  const L = values.length,
    sx = vitvizStandardised(vitvizRanks(Array.from({ length: L }, (_, i) => i)));
  const sy = vitvizStandardised(vitvizRanks(values)),
    dot = (f) => {
      let s = 0;
      for (let i = 0; i < L; i++) s += f(i) * sx[i];
      return s;
    };
  const rho = Math.min(
      1,
      Math.max(
        -1,
        dot((i) => sy[i]),
      ),
    ),
    observed = Math.abs(rho),
    K = orderings.length / L;
  let p = 1;
  if (sy.some((v) => v !== 0)) {
    let hits = 0;
    for (let o = 0; o < K; o++) if (Math.abs(dot((i) => sy[orderings[o * L + i]])) >= observed - 1e-12) hits++;
    p = facts.trend.exact ? hits / K : (hits + 1) / (K + 1);
  }
  const t = facts.trend,
    a = Math.abs(rho);
  const direction = a < t.rho || p > t.p ? "none" : rho > 0 ? "grows" : "falls";
  return { rho, p, direction, strength: a >= t.strong ? "strong" : a >= t.rho ? "moderate" : "weak" };
}

const vitvizTrendWords = (t) =>
  `rank correlation ${vitvizFixed(t.rho)} with the layer's depth, ${t.strength}; ` +
  `${t.p < 0.001 ? "p < 0.001" : `p = ${vitvizFixed(t.p, 3)}`}`;

// What a head's map sorts by, by Python's rule: how far each feature follows the map, the features' own
// correlations, and the sentence's words. vitviz/qk.py (`SortsBy`) is the reference that the browser tests
// compare with.

// How far a feature follows a 2-D map, as vitviz.qk.multiple_r: the correlation of feature f [m] with its
// least-squares fit on the points xy [m*2] (a pseudo-inverse where the points lie on a line). 0 for a constant f.
function vitvizMultipleR(xy, f) {
  const m = f.length;
  let mx = 0,
    my = 0,
    mf = 0;
  for (let i = 0; i < m; i++) {
    mx += xy[2 * i];
    my += xy[2 * i + 1];
    mf += f[i];
  }
  mx /= m;
  my /= m;
  mf /= m;
  let a = 0,
    b = 0,
    d = 0,
    u = 0,
    v = 0,
    ff = 0;
  for (let i = 0; i < m; i++) {
    const x = xy[2 * i] - mx,
      y = xy[2 * i + 1] - my,
      g = f[i] - mf;
    a += x * x;
    b += x * y;
    d += y * y;
    u += x * g;
    v += y * g;
    ff += g * g;
  }
  if (!(ff > 0)) return 0;
  const det = a * d - b * b;
  let explained; // (xᵀf)ᵀ (xᵀx)⁺ (xᵀf)
  if (det > 1e-12 * a * d) explained = (d * u * u - 2 * b * u * v + a * v * v) / det;
  else explained = a + d > 0 ? (a * u + b * v) ** 2 / ((a + d) * (a * a + b * b) || 1) : 0; // rank one: along (a, b)
  return Math.sqrt(Math.max(explained, 0) / ff);
}

// The correlation of two features a, b [m] over the same points, as vitviz.qk.feature_correlations: 0 where one is
// constant.
function vitvizCorrelation(a, b) {
  if (a.every((v) => v === a[0]) || b.every((v) => v === b[0])) return 0;
  const m = a.length;
  let ma = 0,
    mb = 0;
  for (let i = 0; i < m; i++) {
    ma += a[i];
    mb += b[i];
  }
  ma /= m;
  mb /= m;
  let ab = 0,
    aa = 0,
    bb = 0;
  for (let i = 0; i < m; i++) {
    const x = a[i] - ma,
      y = b[i] - mb;
    ab += x * y;
    aa += x * x;
    bb += y * y;
  }
  return ab / (Math.sqrt(aa) * Math.sqrt(bb));
}

// Words as a sentence lists them (vitviz.qk.and_list), and a range of values at two decimals (vitviz.qk.span).
function vitvizAndList(words) {
  return words.length === 1 ? words[0] : `${words.slice(0, -1).join(", ")} and ${words.at(-1)}`;
}
function vitvizSpan(symbol, values) {
  const lo = vitvizFixed(Math.min(...values), 2),
    hi = vitvizFixed(Math.max(...values), 2);
  return lo === hi ? `${symbol} = ${hi}` : `${symbol} ${lo}–${hi}`;
}

// The named features linked by |r| >= level over the points (f {feature: [m]}), in groups that chains of links
// reach, each with its links' |r|: vitviz.qk.SortsBy.entangled.
function vitvizEntangled(named, f, level) {
  const links = [];
  for (const [i, a] of named.entries())
    for (const b of named.slice(i + 1)) {
      const r = Math.abs(vitvizCorrelation(f[a], f[b]));
      if (r >= level) links.push([a, b, r]);
    }
  const group = Object.fromEntries(named.map((n, i) => [n, i]));
  for (const [a, b] of links) {
    const merged = group[b],
      into = group[a];
    for (const n of named) if (group[n] === merged) group[n] = into;
  }
  const groups = [...new Set(named.map((n) => group[n]))].map((g) => named.filter((n) => group[n] === g));
  return groups
    .filter((m) => m.length > 1)
    .map((m) => [m, links.filter(([a]) => group[a] === group[m[0]]).map(([, , r]) => r)]);
}

// What a map sorts by, by Python's rule (vitviz.qk.rule: features, words, thresholds, templates): r {feature: R} and
// the features f {feature: [m]} over the map's patch points -> {verdict, sentence}, vitviz.qk.SortsBy's words.
function vitvizSortsBy(r, f, rule, layer, head) {
  const features = [...rule.position, ...rule.colour],
    t = rule.templates,
    who = `Head ${head} of layer ${layer}`;
  const fill = (name, values) => t[name].replace(/\{(\w+)\}/g, (_, key) => values[key]);
  const said = (n) => `${rule.words[n]} (R = ${vitvizFixed(r[n], 2)})`,
    words = (ns) => vitvizAndList(ns.map((n) => rule.words[n]));
  const best = (names) => names.reduce((x, y) => (r[y] > r[x] ? y : x));
  const pf = best(rule.position),
    cf = best(rule.colour),
    top = Math.max(...features.map((n) => r[n]));
  if (top < rule.weak) return { verdict: "neither", sentence: fill("neither", { who, pos: said(pf), col: said(cf) }) };
  const named = features.filter((n) => r[n] > top - rule.margin).sort((a, b) => r[b] - r[a]);
  const kinds = new Set(named.map((n) => (rule.position.includes(n) ? "position" : "colour")));
  const verdict = kinds.size === 1 ? [...kinds][0] : "both";
  const near = fill("near", {
    names: words(named),
    span: vitvizSpan(
      "R",
      named.map((n) => r[n]),
    ),
    margin: rule.margin,
  });
  let sentence = fill(verdict, {
    who,
    named: named.length === 1 ? said(named[0]) : near,
    other: said(verdict === "position" ? cf : pf),
  });
  for (const [members, links] of vitvizEntangled(named, f, rule.entangled)) {
    const pairs = links.length > 1 ? fill("pairs", { count: links.length }) : "";
    sentence += fill("entangled", {
      names: words(members),
      span: vitvizSpan("|r|", links),
      pairs,
      level: rule.entangled,
    });
  }
  return { verdict, sentence };
}

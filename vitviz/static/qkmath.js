// The Q·K view's arithmetic: AttentionViz's normalisation of one head and the joint PCA, in float64 (JavaScript
// numbers). vitviz/qk.py is the reference that the browser tests compare with.

// q [nq*dh], k [nk*dh] (Float64Array) -> {q: c·q, k: (k - mean k)/c + c·mean q, c}: the keys' centroid is the
// queries', both have the same mean norm, and every row of softmax(q·k) is unchanged (a shift per row, c·1/c).
function vitvizQkNormalise(q, k, dh) {
  const nq = q.length / dh,
    nk = k.length / dh;
  if (!nq || !nk || !Number.isInteger(nq) || !Number.isInteger(nk))
    throw new Error(`queries and keys must be [N, ${dh}]`);
  const muQ = new Float64Array(dh),
    muK = new Float64Array(dh);
  let mq = 0;
  for (let i = 0; i < nq; i++) {
    let s = 0;
    for (let d = 0; d < dh; d++) {
      const v = q[i * dh + d];
      muQ[d] += v;
      s += v * v;
    }
    mq += Math.sqrt(s);
  }
  mq /= nq;
  for (let d = 0; d < dh; d++) muQ[d] /= nq;
  for (let i = 0; i < nk; i++) for (let d = 0; d < dh; d++) muK[d] += k[i * dh + d];
  for (let d = 0; d < dh; d++) muK[d] /= nk;
  // With a_j = k_j − μk and u = 1/c², mean ||k'|| = mean ||q'|| reads h(u) = mean ||u·a_j + μq|| − mean ||q|| = 0:
  // h is convex, h(0) = ||μq|| − mean ||q|| <= 0, so Newton from the right falls to its one root. ||u·a + μq||²
  // = u²||a||² + 2u a·μq + ||μq||²: each step costs O(N), not O(N·dh).
  const spread = new Float64Array(k.length),
    aa = new Float64Array(nk),
    ab = new Float64Array(nk);
  let bb = 0,
    ma = 0;
  for (let d = 0; d < dh; d++) bb += muQ[d] * muQ[d];
  for (let i = 0; i < nk; i++) {
    let s2 = 0,
      sb = 0;
    for (let d = 0; d < dh; d++) {
      const v = k[i * dh + d] - muK[d];
      spread[i * dh + d] = v;
      s2 += v * v;
      sb += v * muQ[d];
    }
    aa[i] = s2;
    ab[i] = sb;
    ma += Math.sqrt(s2);
  }
  ma /= nk;
  if (!(Math.sqrt(bb) < mq * (1 - 1e-12) && ma > 0))
    throw new Error("the queries or keys are all equal: no scale gives them the same mean norm");
  let u = (2 * (mq + Math.sqrt(bb))) / ma; // h(u) >= u·mean||a|| − ||μq|| − mean||q|| > 0 here
  for (let it = 0; it < 100; it++) {
    let h = 0,
      slope = 0;
    for (let i = 0; i < nk; i++) {
      const n = Math.sqrt(u * u * aa[i] + 2 * u * ab[i] + bb);
      h += n;
      slope += (u * aa[i] + ab[i]) / n;
    }
    const step = (h / nk - mq) / (slope / nk);
    u -= step;
    if (Math.abs(step) <= 1e-14 * u) break;
  }
  const c = 1 / Math.sqrt(u);
  const qn = new Float64Array(q.length),
    kn = new Float64Array(k.length);
  for (let i = 0; i < q.length; i++) qn[i] = q[i] * c;
  for (let i = 0; i < nk; i++) for (let d = 0; d < dh; d++) kn[i * dh + d] = spread[i * dh + d] / c + c * muQ[d];
  return { q: qn, k: kn, c };
}

// Eigenvalues and eigenvectors of a symmetric n×n matrix (cyclic Jacobi): {values [n], vectors [n*n], column j}.
function vitvizEigen(matrix, n) {
  const a = Float64Array.from(matrix),
    v = new Float64Array(n * n);
  for (let i = 0; i < n; i++) v[i * n + i] = 1;
  let total = 0;
  for (let i = 0; i < n * n; i++) total += a[i] * a[i];
  for (let sweep = 0; sweep < 60; sweep++) {
    let off = 0;
    for (let p = 0; p < n; p++) for (let q = p + 1; q < n; q++) off += a[p * n + q] * a[p * n + q];
    if (off <= 1e-30 * total) break;
    for (let p = 0; p < n - 1; p++) {
      for (let q = p + 1; q < n; q++) {
        const apq = a[p * n + q];
        if (apq === 0) continue;
        const theta = (a[q * n + q] - a[p * n + p]) / (2 * apq);
        const t = (theta >= 0 ? 1 : -1) / (Math.abs(theta) + Math.sqrt(theta * theta + 1));
        const c = 1 / Math.sqrt(t * t + 1),
          s = t * c;
        for (let k = 0; k < n; k++) {
          // columns p and q: A P
          const akp = a[k * n + p],
            akq = a[k * n + q];
          a[k * n + p] = c * akp - s * akq;
          a[k * n + q] = s * akp + c * akq;
        }
        for (let k = 0; k < n; k++) {
          // rows p and q: P^T A
          const apk = a[p * n + k],
            aqk = a[q * n + k];
          a[p * n + k] = c * apk - s * aqk;
          a[q * n + k] = s * apk + c * aqk;
        }
        for (let k = 0; k < n; k++) {
          const vkp = v[k * n + p],
            vkq = v[k * n + q];
          v[k * n + p] = c * vkp - s * vkq;
          v[k * n + q] = s * vkp + c * vkq;
        }
      }
    }
  }
  return { values: Array.from({ length: n }, (_, i) => a[i * n + i]), vectors: v };
}

// x [m*d] (Float64Array) -> [m*2] on the first two principal axes; each axis' largest loading positive, as
// vitviz.qk.pca2 does.
function vitvizPca2(x, d) {
  const m = x.length / d,
    mean = new Float64Array(d),
    cov = new Float64Array(d * d);
  for (let i = 0; i < m; i++) for (let j = 0; j < d; j++) mean[j] += x[i * d + j];
  for (let j = 0; j < d; j++) mean[j] /= m;
  const c = new Float64Array(4 * d);
  for (let i = 0; i < m; i += 4) {
    // four points a pass over cov: a quarter of its traffic
    for (let p = 0; p < 4; p++) for (let j = 0; j < d; j++) c[p * d + j] = i + p < m ? x[(i + p) * d + j] - mean[j] : 0;
    for (let a = 0; a < d; a++) {
      const a0 = c[a],
        a1 = c[d + a],
        a2 = c[2 * d + a],
        a3 = c[3 * d + a],
        row = a * d;
      for (let b = a; b < d; b++) cov[row + b] += a0 * c[b] + a1 * c[d + b] + a2 * c[2 * d + b] + a3 * c[3 * d + b];
    }
  }
  for (let a = 0; a < d; a++) for (let b = 0; b < a; b++) cov[a * d + b] = cov[b * d + a];
  const { values, vectors } = vitvizEigen(cov, d);
  const order = values
    .map((_, i) => i)
    .sort((i, j) => values[j] - values[i])
    .slice(0, 2);
  const axes = order.map((col) => {
    const axis = new Float64Array(d);
    let big = 0;
    for (let j = 0; j < d; j++) {
      axis[j] = vectors[j * d + col];
      if (Math.abs(axis[j]) > Math.abs(big)) big = axis[j];
    }
    if (big < 0) for (let j = 0; j < d; j++) axis[j] = -axis[j];
    return axis;
  });
  const out = new Float64Array(2 * m);
  for (let i = 0; i < m; i++) {
    for (let a = 0; a < 2; a++) {
      let s = 0;
      for (let j = 0; j < d; j++) s += (x[i * d + j] - mean[j]) * axes[a][j];
      out[2 * i + a] = s;
    }
  }
  return { xy: out, variance: order.map((i) => values[i] / m), spectrum: values.slice().sort((p, q) => q - p) };
}

// The `top` indices of the smallest of values [n] into out [top], smallest first: a small sorted buffer, O(n·top).
function vitvizSmallest(values, top, out, best) {
  let count = 0;
  for (let j = 0; j < values.length; j++) {
    const v = values[j];
    if (count === top && !(v < best[top - 1])) continue;
    let p = count < top ? count++ : top - 1;
    while (p > 0 && best[p - 1] > v) {
      best[p] = best[p - 1];
      out[p] = out[p - 1];
      p--;
    }
    best[p] = v;
    out[p] = j;
  }
  return out;
}

// How well a map keeps attention order, for query i: how many of its `top` keys by score (q, k [n*dh]; softmax
// keeps the order) are among its `top` nearest keys in the map (q2, k2 [n*2]). vitviz.qk.top_key_recall, summed
// over the queries and divided by n·top, is the share.
function vitvizRecallHits(i, q, k, dh, q2, k2, top, scratch) {
  const n = k.length / dh,
    { scores, dist, byScore, byDistance, best } = scratch;
  for (let j = 0; j < n; j++) {
    let s = 0;
    for (let d = 0; d < dh; d++) s += q[i * dh + d] * k[j * dh + d];
    scores[j] = -s;
    const x = k2[2 * j] - q2[2 * i],
      y = k2[2 * j + 1] - q2[2 * i + 1];
    dist[j] = x * x + y * y;
  }
  vitvizSmallest(scores, top, byScore, best);
  vitvizSmallest(dist, top, byDistance, best);
  let hits = 0;
  for (let a = 0; a < top; a++) for (let b = 0; b < top; b++) if (byScore[a] === byDistance[b]) hits++;
  return hits;
}

// One head's rows [tokens*dh] (Float64Array) of a layer's "q" or "k" [tokens, heads*dh] (heads side by side).
function vitvizQkHead(data, m, head, which) {
  const { tokens, heads, headWidth: dh } = m,
    out = new Float64Array(tokens * dh),
    src = data[which];
  for (let t = 0; t < tokens; t++) for (let d = 0; d < dh; d++) out[t * dh + d] = src[t * heads * dh + head * dh + d];
  return out;
}

// The log of each query's softmax denominator [tokens]: lse_i = log Σ_j exp(scale·q_i·k_j), so that the weight
// query i gives key j is exp(scale·q_i·k_j − lse_i). q, k [tokens*dh] of one head.
function vitvizQkRowLse(q, k, dh, scale) {
  const n = q.length / dh,
    out = new Float64Array(n),
    s = new Float64Array(k.length / dh);
  for (let i = 0; i < n; i++) {
    let top = -Infinity,
      sum = 0;
    for (let j = 0; j < s.length; j++) {
      let v = 0;
      for (let d = 0; d < dh; d++) v += q[i * dh + d] * k[j * dh + d];
      s[j] = v * scale;
      if (s[j] > top) top = s[j];
    }
    for (let j = 0; j < s.length; j++) sum += Math.exp(s[j] - top);
    out[i] = top + Math.log(sum);
  }
  return out;
}

// Key j's column of the attention matrix [tokens]: the weight each query gives it, exp(scale·q_i·k_j − lse_i).
function vitvizQkColumn(q, k, dh, scale, lse, j) {
  const n = q.length / dh,
    out = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    let v = 0;
    for (let d = 0; d < dh; d++) v += q[i * dh + d] * k[j * dh + d];
    out[i] = Math.exp(v * scale - lse[i]);
  }
  return out;
}

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

// Query i's raw scores [tokens]: q_i·k_j for every key j of one head (q, k [tokens*dh]).
function vitvizQkScoresOf(q, k, dh, i) {
  const n = k.length / dh,
    out = new Float64Array(n);
  for (let j = 0; j < n; j++) {
    let v = 0;
    for (let d = 0; d < dh; d++) v += q[i * dh + d] * k[j * dh + d];
    out[j] = v;
  }
  return out;
}

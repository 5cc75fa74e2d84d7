// What the Explorer says in words: token names, the caption and the mechanism's table, as HTML strings (text, so
// that it grows with the projector's type). Pure: each function takes what it describes.

const VITVIZ_TIE = 0.005; // a score this close to the top one shows as 0.00: it is named a tie, never "−0.00"

// Every number a view prints with fixed decimals goes through here: toFixed's digits, except that a value that
// rounds to zero prints as 0 ("0.00", never "-0.00"). vitviz.sentences.fixed is its Python twin.
function vitvizFixed(x, digits = 2) {
  const s = x.toFixed(digits);
  return Number(s) === 0 ? (0).toFixed(digits) : s;
}

function vitvizPct(x) {
  return x >= 0.1
    ? `${vitvizFixed(100 * x, 1)} %`
    : x >= 0.001
      ? `${vitvizFixed(100 * x, 2)} %`
      : `${(100 * x).toExponential(1)} %`;
}

// n of `count` layers in this browser, `bytes` each
function vitvizStatus(n, count, bytes) {
  const mb = n ? vitvizFixed(bytes / 1e6, 1) : "?";
  return n < count
    ? `Layers in this browser: ${n} of ${count} (${mb} MB each, the rest loading in the background)`
    : `All ${count} layers are in this browser (${mb} MB each): every move below is computed here, with no trip ` +
        `to the server.`;
}

function vitvizHeadColour(meta, h) {
  return meta.headColours[h % meta.headColours.length];
} // plots.HEAD_COLOURS

function vitvizShortName(meta, t) {
  if (t === VITVIZ_PROBE) return "the pooling probe";
  if (t === VITVIZ_READOUT) return "the readout";
  const n = meta.prefix.length;
  if (t < n) return meta.prefix[t];
  const p = t - n,
    gw = meta.grid[1];
  return `p${p} (${Math.floor(p / gw)}, ${p % gw})`;
}

function vitvizTokenName(meta, t) {
  if (t === VITVIZ_PROBE)
    return (
      "the readout, the pooling probe (a learned query that reads the last layer's tokens; the layer slider does " +
      "not change it)"
    );
  if (t === VITVIZ_READOUT)
    return (
      `the readout, ${meta.readout.tokens.map((i) => meta.prefix[i]).join(" and ")}: their rows averaged, as ` +
      `the model averages what it reads from them`
    );
  const n = meta.prefix.length;
  if (t < n) return meta.prefix[t];
  const p = t - n,
    gw = meta.grid[1];
  return `patch ${p} (row ${Math.floor(p / gw)}, column ${p % gw})`;
}

// v: {meta, layer, head, query, pinned, row [N] (the head's weights), entropy, inside}
function vitvizCaption(v) {
  const { meta, row } = v;
  const prefix = meta.prefix.map((name, i) => `${name} ${vitvizPct(row[i])}`).join(", ");
  const hidden = meta.prefix.length > 1 ? "The prefix tokens are not on the photo; they get" : "Not on the photo:";
  const where = v.query === VITVIZ_PROBE ? `After layer ${meta.layers - 1}` : `Layer ${v.layer}`;
  return (
    (v.inside ? "<b>3 · Weights α = softmax(s / T).</b> " : "") +
    `${where}, <span class="vx-chip" style="background:${vitvizHeadColour(meta, v.head)}"></span><b>head ` +
    `${v.head}</b>: ` +
    `attention of <b>${vitvizTokenName(meta, v.query)}</b>${v.pinned ? " (pinned: click it again to unpin)" : ""}. ` +
    `Over the ${row.length} keys it is as spread out as if ${vitvizFixed(Math.exp(v.entropy), 1)} keys shared it ` +
    `equally (the effective number of keys, e<sup>entropy</sup>). ` +
    (meta.prefix.length ? `${hidden} ${prefix}.` : "")
  );
}

function vitvizBelowTop(gap, top) {
  // s_j − max s as a class reads it: the top key, a tie with it, or how far below it
  if (top) return "0 (the top key)";
  return Math.abs(gap) < VITVIZ_TIE ? "tied with the top key" : vitvizFixed(gap, 2);
}

// v: {meta, layer, head, query, T, dh, scores [N] (the first query's), row [N] (weights at T), norms [N]}
function vitvizMechanism(v) {
  const { meta, scores: s, row: w, norms, T } = v,
    tokens = s.length,
    name = (j) => vitvizShortName(meta, j);
  const model = new Float32Array(tokens);
  vitvizSoftmax(model, s, 1);
  let hi = -Infinity,
    lo = Infinity;
  for (let j = 0; j < tokens; j++) {
    if (s[j] > hi) hi = s[j];
    if (s[j] < lo) lo = s[j];
  }
  const order = Array.from({ length: tokens }, (_, j) => j)
    .sort((a, b) => w[b] - w[a])
    .slice(0, 6);
  const rows = order
    .map(
      (j) =>
        `<tr><td>${name(j)}</td><td>${vitvizFixed(s[j], 2)}</td><td>${vitvizBelowTop(s[j] - hi, j === order[0])}</td>` +
        `<td>${vitvizPct(w[j])}</td><td>${vitvizPct(model[j])}</td><td>${(w[j] * norms[j]).toPrecision(3)}</td></tr>`,
    )
    .join("");
  const second = order.length > 1 ? +vitvizFixed(s[order[1]] - hi, 2) : 0;
  const exponent = +vitvizFixed(second / T, 2); // rounded as shown, so that e^x agrees with a calculator
  const of = v.query === VITVIZ_PROBE ? "the pooling probe" : `layer ${v.layer}`;
  const runnerUp =
    Math.abs(second) < VITVIZ_TIE
      ? `the next key, ${name(order[1])}, is tied with the top key (their scores differ by less than ` +
        `${VITVIZ_TIE}), so it gets at least ${vitvizPct(Math.exp(-VITVIZ_TIE / T))} of the top key's weight`
      : `a key ${vitvizFixed(Math.abs(second), 2)} below the top gets e<sup>${vitvizFixed(exponent, 2)}</sup> = ` +
        `${vitvizPct(Math.exp(exponent))} of the top key's weight`;
  const [first, ...rest] = v.query === VITVIZ_READOUT ? meta.readout.tokens.map((i) => meta.prefix[i]) : [];
  const temperature =
    T === 1 ? " (T = 1: the model itself)" : "; T = 1 is the model, T &lt; 1 sharpens, T &gt; 1 flattens";
  const averaged = first
    ? `<p>The readout's row is the mean of ${[first, ...rest].join(" and ")}'s rows; the scores here are ` +
      `${first}'s, the weights α the mean.</p>`
    : "";
  return `<h4>How head ${v.head} of ${of} computes this row</h4>${averaged}
    <p>Scores s<sub>j</sub> = q·k<sub>j</sub>/√${v.dh} of the query against all ${tokens} keys run from
    ${vitvizFixed(lo, 2)} to ${vitvizFixed(hi, 2)}.
    Softmax ignores a shift that is the same for every key, so only s<sub>j</sub> − max s matters:
    ${runnerUp} at T = ${vitvizFixed(T, 2)}. Weights α = softmax(s / T)${temperature}.</p>
    <table><thead><tr><th>key (row, column)</th><th>s<sub>j</sub></th><th>s<sub>j</sub> − max</th>
    <th>α<sub>j</sub> at T</th><th>α<sub>j</sub> at T = 1</th>
    <th>α<sub>j</sub> ‖W<sub>O</sub> v<sub>j</sub>‖</th></tr></thead>
    <tbody>${rows}</tbody></table>
    <p>α<sub>j</sub> ‖W<sub>O</sub> v<sub>j</sub>‖: what key j really passes on, its weight times the size of its
    value
    after this head's slice of the output projection (Kobayashi et al. 2020).</p>`;
}

// The study page. First view: the optimisation history (/history: a sample of a long study, the best-so-far line and
// every failure exact) and the first page of the trials table (/trials: sorted, filtered and paged on the server).
// Once that is drawn, every trial (/data) is loaded for the plots further down, each drawn when it comes into view.
// Refreshed when the study changes. Text from the database goes into the page through textContent only (never
// innerHTML), and into Plotly hover text through esc().
'use strict';

const PAGE = JSON.parse(document.getElementById('page-data').textContent);
const QS = encodeURIComponent(PAGE.study);
const POLL_MS = 3000;
const PAGE_SIZE = 50;
const PARCOORDS_MAX = 1000;
const STATUS_COLORS = {
  ok: '#2a9d5c', running: '#3b82f6', pruned: '#9ca3af', oom: '#dc2626', failed: '#991b1b',
  timeout: '#d97706', config_error: '#7c3aed', interrupted: '#6b7280',
};
const PHASE_COLORS = ['#4c78a8', '#f58518', '#54a24b', '#b279a2', '#e45756', '#72b7b2', '#eeca3b', '#9d755d'];
const BASE_LAYOUT = {
  margin: {l: 60, r: 20, t: 30, b: 45}, font: {family: 'system-ui, sans-serif', size: 12},
  paper_bgcolor: 'rgba(0,0,0,0)', plot_bgcolor: '#fafafa', hovermode: 'closest',
  legend: {orientation: 'h', y: 1.12},
};
const CONFIG = {displaylogo: false, responsive: true};

let D = null;  // every trial: loaded after the first view
let H = null;  // the history as first drawn
let version = null;
const state = {sort: {key: 'number', dir: 1}, filters: {}, search: '', page: 0, selected: new Set(),
  launchedOnly: false};
let columns = [];

function esc(s) {
  return String(s ?? '').replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}
function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined && text !== null) e.textContent = text;
  return e;
}
function fmtNum(v, nd) {
  // As the CLI writes numbers (autotune/units.py): the server rounded them to these decimals; no separators.
  if (v === null || v === undefined) return '-';
  if (typeof v === 'number') return v.toFixed(nd ?? 1);
  return String(v);
}
function idxs(pred) {
  const out = [];
  for (let i = 0; i < D.trials.number.length; i++) if (pred(i)) out.push(i);
  return out;
}
function gl(n) { return n > 2000 ? 'scattergl' : 'scatter'; }  // WebGL only where SVG would be slow
function simTag() { return PAGE.simulated ? ' (SIMULATED)' : ''; }
function plot(id, traces, layout) {
  const div = document.getElementById(id);
  Plotly.react(div, traces, Object.assign({}, BASE_LAYOUT, layout || {}), CONFIG);
}
function noData(id, message) {
  plot(id, [], {xaxis: {visible: false}, yaxis: {visible: false},
    annotations: [{text: esc(message), showarrow: false, xref: 'paper', yref: 'paper', x: 0.5, y: 0.5,
      font: {size: 14, color: '#6b7280'}}]});
}

// ---------- plots ----------
function historyFromFull() {
  // Every point, in the shape /history sends (the page draws both the same way).
  const T = D.trials;
  const ok = idxs(i => T.throughput[i] !== null);
  const best = {x: [], y: []};
  let prev = null;
  for (let i = 0; i < T.number.length; i++) {
    const b = D.best_so_far[i];
    if (b !== null && b !== prev) { best.x.push(T.number[i]); best.y.push(b); prev = b; }
  }
  if (best.x.length && best.x[best.x.length - 1] !== T.number[T.number.length - 1]) {
    best.x.push(T.number[T.number.length - 1]); best.y.push(prev);
  }
  const pred = idxs(i => T.launched[i] && T.predicted[i] !== null);
  const bad = {};
  for (let i = 0; i < T.number.length; i++) {
    if (T.status[i] === 'ok' || T.status[i] === 'running') continue;
    const g = (bad[T.status[i]] ||= {x: [], y: [], reason: []});
    g.x.push(T.number[i]); g.y.push(T.cls[i]); g.reason.push(T.reason[i]);
  }
  return {version: D.version, n: T.number.length, sampled: false, reasons: D.reasons, bad, best,
    ok: {x: ok.map(i => T.number[i]), y: ok.map(i => T.throughput[i]), layout: ok.map(i => D.layouts[T.layout[i]])},
    predicted: {x: pred.map(i => T.number[i]), y: pred.map(i => T.predicted[i])}};
}

function drawHistory(h) {
  const note = document.getElementById('history-note');
  note.hidden = !h.sampled;
  if (h.sampled) {
    document.getElementById('history-note-text').textContent = `A sample of the ${h.n_points.toLocaleString()} ` +
      'points: every failure and the best-so-far line exact, the slowest and fastest trial of each slice.';
  }
  if (!h.n) return noData('plot-history', 'No trial yet');
  const traces = [{
    type: gl(h.ok.x.length), mode: 'markers', name: 'throughput' + simTag(), x: h.ok.x, y: h.ok.y,
    marker: {color: STATUS_COLORS.ok, size: 7},
    text: h.ok.layout.map(esc), hovertemplate: 'trial %{x}: %{y:.1f} tokens/s/GPU<br>%{text}<extra></extra>',
  }, {
    type: 'scatter', mode: 'lines', name: 'best so far', x: h.best.x, y: h.best.y,
    line: {color: '#111827', width: 2, shape: 'hv'}, hoverinfo: 'skip',
  }, {
    type: gl(h.predicted.x.length), mode: 'markers', name: 'predicted', visible: 'legendonly', x: h.predicted.x,
    y: h.predicted.y, marker: {color: '#9ca3af', symbol: 'circle-open', size: 6},
  }];
  for (const [st, g] of Object.entries(h.bad)) {
    traces.push({
      type: gl(g.x.length), mode: 'markers', name: st, x: g.x, y: g.y,
      yaxis: 'y2', marker: {color: STATUS_COLORS[st] || '#444', symbol: st === 'pruned' ? 'line-ns-open' : 'x',
        size: 8}, text: g.reason.map(k => esc(h.reasons[k]).slice(0, 160)),
      hovertemplate: 'trial %{x}: %{y}<br>%{text}<extra></extra>',
    });
  }
  // A left margin wide enough for the class names, not automargin: that draws every point twice.
  const classes = Object.values(h.bad).flatMap(g => g.y);
  const widest = classes.reduce((m, c) => Math.max(m, c.length), 0);
  plot('plot-history', traces, {
    height: 460, xaxis: Object.assign({title: {text: 'trial'}, anchor: 'y2'}, intAxis(traces.flatMap(t => t.x))),
    margin: {l: Math.max(60, 24 + 6.5 * widest), r: 20, t: 30, b: 45},
    yaxis: {title: {text: 'tokens/s/GPU' + simTag()}, domain: [0.34, 1]},
    yaxis2: {domain: [0, 0.26], type: 'category', title: {text: 'no number', standoff: 4}},
  });
}

function refTrials() {
  const T = D.trials;
  const has = i => Object.values(D.trials.phases).some(col => col[i] !== null);
  const out = [];
  const seen = new Set();
  const add = (i, label) => { if (i >= 0 && !seen.has(i) && has(i)) { seen.add(i); out.push([i, label]); } };
  let best = -1;
  for (let i = 0; i < T.number.length; i++) if (T.throughput[i] !== null && (best < 0 || T.throughput[i] > T.throughput[best])) best = i;
  add(best, `best #${best >= 0 ? T.number[best] : ''}`);
  const stock = T.origin.indexOf('stock');
  if (stock >= 0) add(stock, `verl example #${T.number[stock]}`);
  const first = T.launched.indexOf(true);
  if (first >= 0) add(first, `first #${T.number[first]}`);
  for (const n of state.selected) { const i = T.number.indexOf(n); add(i, `#${n}`); }
  return out;
}

function drawPhases() {
  const rows = refTrials();
  if (!rows.length) return noData('plot-phases', 'No trial with phase timings yet');
  const labels = rows.map(r => r[1]);
  const traces = D.phase_names.map((ph, k) => ({
    type: 'bar', orientation: 'h', name: ph, y: labels, x: rows.map(([i]) => D.trials.phases[ph][i]),
    marker: {color: PHASE_COLORS[k % PHASE_COLORS.length]},
    hovertemplate: `${ph}: %{x:.1f} s<extra>%{y}</extra>`,
  }));
  plot('plot-phases', traces, {barmode: 'stack', height: 120 + 34 * rows.length,
    xaxis: {title: {text: 'seconds in the measured step' + simTag()}}, yaxis: {autorange: 'reversed', automargin: true}});
}

function drawMemory() {
  const T = D.trials;
  const pred = idxs(i => T.launched[i] && T.pred_mem[i] !== null);
  const meas = idxs(i => T.mem[i] !== null);
  const oom = idxs(i => T.status[i] === 'oom');
  const prunedOom = idxs(i => T.cls[i].startsWith('predicted OOM') && T.pred_mem[i] !== null);
  const traces = [
    {type: gl(T.number.length), mode: 'markers', name: 'predicted peak (launched)', x: pred.map(i => T.number[i]),
      y: pred.map(i => T.pred_mem[i]), marker: {color: '#4c78a8', size: 6}},
    {type: gl(T.number.length), mode: 'markers', name: 'measured peak', x: meas.map(i => T.number[i]),
      y: meas.map(i => T.mem[i]), marker: {color: '#f58518', symbol: 'diamond', size: 7}},
    {type: gl(T.number.length), mode: 'markers', name: 'OOM (launched)', x: oom.map(i => T.number[i]),
      y: oom.map(i => T.mem[i] ?? T.pred_mem[i] ?? D.capacity_gib), marker: {color: '#dc2626', symbol: 'x', size: 10}},
    {type: gl(T.number.length), mode: 'markers', name: 'predicted OOM (pruned)', x: prunedOom.map(i => T.number[i]),
      y: prunedOom.map(i => T.pred_mem[i]), marker: {color: '#dc2626', symbol: 'circle-open', size: 6, opacity: 0.6},
      text: prunedOom.map(i => esc(D.reasons[T.reason[i]]).slice(0, 160)),
      hovertemplate: 'trial %{x}: %{y:.1f} GiB<br>%{text}<extra></extra>'},
  ];
  const annotations = [];
  const shapes = [];
  if (D.capacity_gib) {
    shapes.push({type: 'line', xref: 'paper', x0: 0, x1: 1, y0: D.capacity_gib, y1: D.capacity_gib,
      line: {color: '#dc2626', dash: 'dash', width: 2}});
    annotations.push({xref: 'paper', x: 1, y: D.capacity_gib, xanchor: 'right', yanchor: 'bottom', showarrow: false,
      text: `GPU capacity ${D.capacity_gib.toFixed(1)} GiB`, font: {color: '#dc2626'}});
  }
  if (!meas.length) {
    annotations.push({xref: 'paper', yref: 'paper', x: 0, y: 1.0, xanchor: 'left', yanchor: 'top', showarrow: false,
      text: D.simulated ? 'simulated study: nothing measured, predictions only' : 'no measured peak yet',
      font: {color: '#6b7280'}});
  }
  if (!T.number.length) return noData('plot-memory', 'No trial yet');
  plot('plot-memory', traces, {height: 380, shapes, annotations,
    xaxis: Object.assign({title: {text: 'trial'}}, intAxis(traces.flatMap(t => t.x))),
    yaxis: {title: {text: 'peak GiB per GPU'}, rangemode: 'tozero'}});
}

function drawHeat(id, h) {  // its title is the HTML caption above it, where Plotly's toolbar cannot cover it
  if (!h || !h.x.length) return noData(id, 'No trial yet');
  plot(id, [{type: 'heatmap', x: h.x, y: h.y, z: h.z,
    text: h.text, texttemplate: '%{z:.0f}<br>%{text}', colorscale: 'Viridis', hoverongaps: false,
    colorbar: {title: {text: 'best tok/s/GPU'}},
    hovertemplate: `${h.xname}=%{x}, ${h.yname}=%{y}<br>best %{z:.1f} tokens/s/GPU${simTag()}<br>%{text}<extra></extra>`}],
  {height: 340, margin: {l: 60, r: 20, t: 30, b: 45}, xaxis: {type: 'category', title: {text: h.xname}},
    yaxis: {type: 'category', title: {text: h.yname}, automargin: true}});
}

// Whole-number values (tp, pp, a token budget, trial numbers) get whole-number ticks: Plotly's own fall on 1.5 or
// 2.5 over a short range. A few values: those values; more: Plotly's steps, whole over a range that wide.
const FEW_TICKS = 12;

function intTickvals(vals) {
  const nums = vals.filter(v => v !== null && v !== undefined);
  if (!nums.length || !nums.every(v => Number.isInteger(v))) return null;
  const uniq = [...new Set(nums)].sort((a, b) => a - b);
  return uniq.length <= FEW_TICKS ? uniq : null;
}

function intAxis(vals) {  // the layout of a cartesian axis over these values
  const ticks = intTickvals(vals);
  return ticks ? {tickmode: 'array', tickvals: ticks} : {};
}

function catValues(vals) {
  // values -> numbers for axes; categorical (strings, booleans, null) get an index and tick labels
  const numeric = vals.every(v => typeof v === 'number');
  if (numeric) {
    const ticks = intTickvals(vals);
    return ticks ? {values: vals, tickvals: ticks, ticktext: ticks.map(String)} : {values: vals};
  }
  const uniq = [...new Set(vals.map(v => String(v)))].sort();
  const pos = new Map(uniq.map((u, k) => [u, k]));
  return {values: vals.map(v => pos.get(String(v))), tickvals: uniq.map((_, k) => k), ticktext: uniq};
}

function drawParallel() {
  const T = D.trials;
  let ok = idxs(i => T.throughput[i] !== null);
  const note = document.getElementById('parallel-note');
  note.textContent = '';
  if (ok.length > PARCOORDS_MAX) {  // the best ones: what the view is for, and WebGL-heavy beyond that
    ok = ok.sort((a, b) => T.throughput[b] - T.throughput[a]).slice(0, PARCOORDS_MAX);
    note.textContent = `The best ${PARCOORDS_MAX} of ${idxs(i => T.throughput[i] !== null).length} trials with a throughput.`;
  }
  if (ok.length < 2) return noData('plot-parallel', 'Needs two trials with a throughput');
  const first = ['tp', 'pp', 'vpp', 'cp', 'ep', 'etp', 'rollout_tp', 'gpu_memory_utilization'];
  const order = [...first.filter(p => D.varying.includes(p)), ...D.varying.filter(p => !first.includes(p))];
  const dims = order.map(p => {
    const c = catValues(ok.map(i => T.params[p][i]));
    return Object.assign({label: p, values: c.values}, c.tickvals ? {tickvals: c.tickvals, ticktext: c.ticktext} : {});
  }).filter(d => new Set(d.values).size > 1);
  const thr = ok.map(i => T.throughput[i]);
  dims.push({label: 'tokens/s/GPU', values: thr});
  // Labels apart: axes at least as far apart as the widest tick text (drawn left of its axis) needs, labels at
  // 45 degrees (parallel, so they never cross) in a top margin as tall as the longest needs; wider than the card
  // when there are many parameters (the card scrolls sideways).
  const ctx = document.createElement('canvas').getContext('2d');
  ctx.font = `11px ${BASE_LAYOUT.font.family}`;
  const px = t => Math.ceil(ctx.measureText(String(t)).width);
  const ticks = dims.map(d => Math.max(px('0.000k'), ...(d.ticktext || []).map(px)));  // numbers: a few digits
  const spacing = Math.max(...ticks) + 20;
  const longest = Math.max(...dims.map(d => px(d.label)));
  const margin = {l: 20 + ticks[0], r: 110, t: 40 + Math.ceil(longest * Math.SQRT1_2), b: 30};
  const div = document.getElementById('plot-parallel');
  const width = Math.max(div.parentElement.clientWidth, margin.l + margin.r + spacing * (dims.length - 1));
  div.style.width = `${width}px`;
  plot('plot-parallel', [{type: 'parcoords', dimensions: dims, labelangle: -45, labelside: 'top',
    labelfont: {size: 11}, tickfont: {size: 11}, rangefont: {size: 10},
    line: {color: thr, colorscale: 'Viridis', showscale: true, colorbar: {title: {text: 'tok/s'}}}}],
  {height: 330 + margin.t, width, margin});
}

function drawSlice() {
  const sel = document.getElementById('slice-param');
  if (!sel.options.length || sel.dataset.params !== D.varying.join(',')) {
    const keep = sel.value;
    sel.replaceChildren(...D.varying.map(p => el('option', {value: p}, p)));
    sel.dataset.params = D.varying.join(',');
    if (D.varying.includes(keep)) sel.value = keep;
  }
  const p = sel.value;
  const T = D.trials;
  const ok = idxs(i => T.throughput[i] !== null);
  if (!p || !ok.length) return noData('plot-slice', 'No trial with a throughput yet');
  const xs = ok.map(i => T.params[p][i]);
  const numeric = xs.every(v => typeof v === 'number');
  plot('plot-slice', [{type: gl(T.number.length), mode: 'markers', x: numeric ? xs : xs.map(v => String(v)),
    y: ok.map(i => T.throughput[i]), marker: {color: ok.map(i => T.number[i]), colorscale: 'Blues', showscale: true,
      colorbar: {title: {text: 'trial'}}, size: 8, line: {width: 0.5, color: '#333'}},
    text: ok.map(i => `#${T.number[i]} ` + esc(D.layouts[T.layout[i]])), hovertemplate: '%{text}<br>%{y:.1f}<extra></extra>'}],
  {height: 360, xaxis: Object.assign({title: {text: p}, type: numeric ? '-' : 'category'}, numeric ? intAxis(xs) : {}),
    yaxis: {title: {text: 'tokens/s/GPU' + simTag()}}});
}

function drawTimeline() {
  const T = D.trials;
  if (!T.number.length) return noData('plot-timeline', 'No trial yet');
  const groups = {};
  const now = Date.now();
  for (let i = 0; i < T.number.length; i++) {
    if (T.start[i] === null) continue;
    const g = (groups[T.status[i]] ||= {x: [], y: [], text: []});
    const start = D.t0_ms + T.start[i] * 1000;
    const end = T.end[i] === null ? now : D.t0_ms + T.end[i] * 1000;
    g.x.push(start, end, null);
    g.y.push(T.number[i], T.number[i], null);
  }
  const traces = Object.entries(groups).map(([st, g]) => ({
    type: gl(T.number.length), mode: 'lines+markers', name: st, x: g.x, y: g.y,
    line: {color: STATUS_COLORS[st] || '#444', width: 4}, marker: {size: 4, color: STATUS_COLORS[st] || '#444'},
    hovertemplate: `trial %{y} (${st})<br>%{x}<extra></extra>`,
  }));
  plot('plot-timeline', traces, {height: 360, xaxis: {type: 'date', title: {text: 'time (UTC)'}},
    yaxis: Object.assign({title: {text: 'trial'}}, intAxis(T.number))});
}

function drawFailures() {
  const fc = D.failure_counts;
  if (!fc.length) return noData('plot-failures', 'No failure and no pruned candidate');
  plot('plot-failures', [{type: 'bar', orientation: 'h', y: fc.map(r => esc(r[0])), x: fc.map(r => r[1]),
    marker: {color: fc.map(r => r[0].startsWith('predicted OOM') || r[0] === 'OOM' ? '#dc2626' : '#9ca3af')},
    hovertemplate: '%{y}: %{x} trials<extra></extra>'}],
  {height: 80 + 26 * fc.length, yaxis: {autorange: 'reversed', automargin: true}, xaxis: {title: {text: 'trials'}}});
}

async function drawImportance() {
  const ev = document.getElementById('evaluator').value;
  const msg = document.getElementById('importance-message');
  try {
    const r = await fetch(`/api/study/${QS}/importance?evaluator=${encodeURIComponent(ev)}`);
    const j = await r.json();
    if (!j.ok) { msg.textContent = j.message || j.detail; return noData('plot-importance', 'Not enough data yet'); }
    msg.textContent = `${j.evaluator} over ${j.n_complete} completed trials (Optuna's get_param_importances)` +
      (j.completed > j.n_complete ? `; ${j.completed} now, recomputed as more complete.` : '.');
    const imp = j.importances.slice().reverse();
    plot('plot-importance', [{type: 'bar', orientation: 'h', y: imp.map(r => r[0]), x: imp.map(r => r[1]),
      marker: {color: '#4c78a8'}, hovertemplate: '%{y}: %{x:.3f}<extra></extra>'}],
    {height: 80 + 22 * imp.length, yaxis: {automargin: true}, xaxis: {title: {text: 'importance'}}});
  } catch (e) { msg.textContent = 'importance unavailable: ' + e; }
}

// ---------- trials table (a page at a time from the server) ----------
let tableSeq = 0;
let headSig = '';
let textTimer = null;

function buildHead() {
  const thead = document.querySelector('#trials thead');
  const r1 = el('tr'); const r2 = el('tr', {class: 'filters'});
  for (const c of columns) {
    const th = el('th', {'data-key': c.key, class: (c.num ? 'num ' : '') + (c.nosort ? '' : 'sortable')}, c.label);
    if (state.sort.key === c.key) th.classList.add(state.sort.dir > 0 ? 'asc' : 'desc');
    if (!c.nosort) th.addEventListener('click', () => {
      state.sort = {key: c.key, dir: state.sort.key === c.key ? -state.sort.dir : (c.num ? -1 : 1)};
      state.page = 0; buildHead(); reloadTable();
    });
    r1.appendChild(th);
    const fh = el('th');
    if (!c.nofilter) {
      let input;
      if (c.options && c.key !== 'reason' && c.key !== 'layout') {
        input = el('select', {'data-filter': c.key});
        input.appendChild(el('option', {value: ''}, 'all'));
        for (const v of c.options) input.appendChild(el('option', {value: '=' + v}, v));
      } else {
        input = el('input', {'data-filter': c.key, type: 'text', placeholder: 'filter'});
      }
      input.value = state.filters[c.key] || '';
      if (input.tagName === 'SELECT') {
        input.addEventListener('change', () => { state.filters[c.key] = input.value; state.page = 0; reloadTable(); });
      } else {
        input.addEventListener('input', () => { state.filters[c.key] = input.value; state.page = 0; reloadTable(150); });
      }
      fh.appendChild(input);
    }
    r2.appendChild(fh);
  }
  thead.replaceChildren(r1, r2);
}

function tableQuery() {
  const p = new URLSearchParams({sort: state.sort.key, desc: state.sort.dir < 0 ? '1' : '0', page: state.page,
    size: PAGE_SIZE});
  if (state.search.trim()) p.set('search', state.search);
  if (state.launchedOnly) p.set('launched', '1');
  for (const [k, v] of Object.entries(state.filters)) if (v && v.trim()) p.set('f.' + k, v);
  return p;
}

// The table is marked busy from the moment a change is asked for until its page is shown (the latest one wins).
function reloadTable(delay) {
  const seq = ++tableSeq;
  document.getElementById('trials').setAttribute('aria-busy', 'true');
  clearTimeout(textTimer);
  const go = () => fetch(`/api/study/${QS}/trials?${tableQuery()}`).then(r => {
    if (!r.ok) throw new Error(`trials: HTTP ${r.status}`);
    return r.json();
  }).then(j => { if (seq === tableSeq) showTable(j); }).catch(e => setLive('error: ' + e.message, 'offline'));
  if (delay) { return new Promise(res => { textTimer = setTimeout(() => go().then(res), delay); }); }
  return go();
}

function showTable(j) {
  const sig = JSON.stringify(j.columns);
  columns = j.columns;
  if (sig !== headSig) { headSig = sig; buildHead(); }
  state.page = j.page;
  const tbody = document.querySelector('#trials tbody');
  const frag = document.createDocumentFragment();
  for (const row of j.rows) {
    const v = Object.fromEntries(columns.map((c, k) => [c.key, row[k]]));
    const tr = el('tr', {'data-number': v.number, class: 'st-' + v.status});
    for (const c of columns) {
      const td = el('td', {class: c.num ? 'num' : (c.wide ? 'reason' : '')});
      if (c.key === 'sel') {
        const cb = el('input', {type: 'checkbox', title: 'compare phase timings'});
        cb.checked = state.selected.has(v.number);
        cb.addEventListener('change', () => {
          if (cb.checked) state.selected.add(v.number); else state.selected.delete(v.number);
          draw('plot-phases');
        });
        td.appendChild(cb);
      } else if (c.key === 'number') {
        td.appendChild(el('a', {href: `/study/${QS}/trial/${v.number}`}, String(v.number)));
      } else if (c.key === 'status') {
        td.appendChild(el('span', {class: 'badge st-' + v.status}, v.status));
      } else {
        const x = v[c.key];
        td.textContent = c.num ? fmtNum(x, 1) : (x === null || x === undefined ? '-' : String(x));
        if (c.wide) td.title = String(x);
      }
      tr.appendChild(td);
    }
    frag.appendChild(tr);
  }
  tbody.replaceChildren(frag);
  document.getElementById('trial-count').textContent = `${j.matched} of ${j.total} trials`;
  document.getElementById('page-info').textContent = `page ${j.page + 1} / ${j.pages}`;
  document.getElementById('trials').setAttribute('aria-busy', 'false');
  document.body.dataset.trials = String(j.total);
}

// ---------- loading and refreshing ----------
// The plots below the history are drawn when they come into view (and redrawn there when the data changed), from
// every trial's data, which is loaded once the first view is ready: none of it is on the way to the first view.
const timings = window.dashboardTimings = {};
function timed(name, f) {
  const t0 = performance.now();
  try { f(); } catch (e) { console.error(name, e); }
  timings[name] = Math.round(performance.now() - t0);
}
const DRAWERS = {
  'plot-phases': drawPhases, 'plot-memory': drawMemory,
  'plot-heat-tp-pp': () => drawHeat('plot-heat-tp-pp', D.heat_tp_pp),
  'plot-heat-rollout': () => drawHeat('plot-heat-rollout', D.heat_rollout),
  'plot-parallel': drawParallel, 'plot-slice': drawSlice, 'plot-timeline': drawTimeline,
  'plot-failures': drawFailures, 'plot-importance': drawImportance, 'failures-body': loadFailures,
};
const NEEDS_DATA = id => id !== 'plot-importance' && id !== 'failures-body';
let started = false;  // the first view is drawn: the rest may load
let full = null;  // the promise of every trial's data for the current version
const visible = new Set();
const dirty = new Set(Object.keys(DRAWERS));

function loadFull() {
  if (!full) {
    full = fetch(`/api/study/${QS}/data`).then(r => {
      if (!r.ok) throw new Error(`data: HTTP ${r.status}`);
      return r.json();
    }).then(j => { D = j; return j; });
    full.catch(e => { full = null; setLive('error: ' + e.message, 'offline'); });
  }
  return full;
}
function draw(id) {
  if (!started) { dirty.add(id); return; }
  dirty.delete(id);
  if (!NEEDS_DATA(id)) return timed(id, DRAWERS[id]);
  loadFull().then(() => timed(id, DRAWERS[id]), () => dirty.add(id));
}
const observer = new IntersectionObserver(entries => {
  for (const e of entries) {
    if (e.isIntersecting) { visible.add(e.target.id); if (dirty.has(e.target.id)) draw(e.target.id); }
    else visible.delete(e.target.id);
  }
}, {rootMargin: '300px'});
for (const id of Object.keys(DRAWERS)) observer.observe(document.getElementById(id));
function drawVisible() {
  for (const id of Object.keys(DRAWERS)) if (visible.has(id) && dirty.has(id)) draw(id);
}

async function loadFailures() {
  const r = await fetch(`/study/${QS}/fragment/failures`);
  if (r.ok) document.getElementById('failures-body').innerHTML = await r.text();  // server-rendered, autoescaped
}

async function json(respOrPromise) {
  const r = await respOrPromise;
  if (!r.ok) throw new Error(`${new URL(r.url).pathname}: HTTP ${r.status}`);
  return r.json();
}

// The first view: the history and the first page of the table, asked for by the page's head (or again on a change).
async function loadFirst(first) {
  if (first) timings['at: scripts run'] = Math.round(performance.now());
  const [h, t] = await Promise.all([
    json(first ? first.history : fetch(`/api/study/${QS}/history`)),
    first ? json(first.table) : reloadTable(),
  ]);
  if (first) timings['at: first view data in'] = Math.round(performance.now());
  H = h;
  version = h.version;
  document.body.dataset.version = h.version;
  if (first) timed('table', () => showTable(t));
  timed('plot-history', () => drawHistory(h));
}

async function refreshFragments() {
  const r = await fetch(`/study/${QS}/fragment/summary`);
  if (r.ok) document.getElementById('summary').innerHTML = await r.text();  // server-rendered, autoescaped
}

function setLive(text, cls) {
  const live = document.getElementById('live');
  live.textContent = text;
  live.className = 'live ' + cls;
}

async function poll() {
  try {
    const r = await fetch(`/api/study/${QS}/version`);
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    const live = await r.json();
    const v = live.version;
    if (v !== version) {
      full = null;  // every view is redrawn from the new data, the ones in view now, the others when they come
      for (const id of Object.keys(DRAWERS)) dirty.add(id);
      await loadFirst(null);
      await refreshFragments();
      drawVisible();
    }
    // A tuner alive on the study (its registry row beats) is tuning even when no trial is running at this instant
    // (proposing, pruning, a trial of milliseconds); once every tuner ended the study is idle at once.
    if (live.running) setLive(`live · ${live.running} running`, 'running');
    else if (live.active) setLive(`live · tuning (last write ${Math.round(live.last_write_s)} s ago)`, 'running');
    else setLive('live · idle', 'idle');
  } catch (e) {
    setLive('offline: ' + e.message, 'offline');
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

async function saveNote() {
  const status = document.getElementById('study-note-status');
  status.textContent = 'saving...';
  const r = await fetch(`/api/study/${QS}/note`, {method: 'POST', headers: {'Content-Type': 'application/json'},
    body: JSON.stringify({note: document.getElementById('study-note').value})});
  status.textContent = r.ok ? 'saved' : `not saved: HTTP ${r.status}`;
}

function wire() {
  document.getElementById('save-study-note').addEventListener('click', saveNote);
  document.getElementById('evaluator').addEventListener('change', () => draw('plot-importance'));
  document.getElementById('slice-param').addEventListener('change', () => draw('plot-slice'));
  document.getElementById('history-all').addEventListener('click', () => {
    loadFull().then(() => timed('plot-history (every point)', () => drawHistory(historyFromFull())));
  });
  document.getElementById('trial-search').addEventListener('input', e => {
    state.search = e.target.value; state.page = 0; reloadTable(150);
  });
  document.getElementById('launched-only').addEventListener('change', e => {
    state.launchedOnly = e.target.checked; state.page = 0; reloadTable();
  });
  document.getElementById('clear-filters').addEventListener('click', () => {
    state.filters = {}; state.search = ''; state.launchedOnly = false; state.page = 0;
    document.getElementById('trial-search').value = '';
    document.getElementById('launched-only').checked = false;
    buildHead(); reloadTable();
  });
  document.getElementById('prev-page').addEventListener('click', () => { state.page = Math.max(0, state.page - 1); reloadTable(); });
  document.getElementById('next-page').addEventListener('click', () => { state.page += 1; reloadTable(); });
}

wire();
// Ready: the history drawn and the first page of the table shown (painted by the next frame). Then the rest loads:
// every trial's data, when the browser is idle, and the plots in view are drawn from it.
loadFirst(window.FIRST).then(() => new Promise(r => requestAnimationFrame(() => setTimeout(r))))
  .then(() => {
    document.body.dataset.ready = '1';
    timings['at: ready'] = Math.round(performance.now());
    started = true;
    const rest = () => { drawVisible(); loadFull().catch(() => {}); };
    if (window.requestIdleCallback) requestIdleCallback(rest, {timeout: 500}); else setTimeout(rest, 50);
  })
  .catch(e => setLive('error: ' + e.message, 'offline'))
  .finally(() => setTimeout(poll, POLL_MS));

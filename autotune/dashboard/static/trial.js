// The trial page: phase timings, memory breakdown and per-step plots from the JSON embedded in the page.
'use strict';
const P = JSON.parse(document.getElementById('page-data').textContent);
const QS = encodeURIComponent(P.study);
const LAYOUT = {margin: {l: 60, r: 20, t: 30, b: 45}, font: {family: 'system-ui, sans-serif', size: 12},
  paper_bgcolor: 'rgba(0,0,0,0)', plot_bgcolor: '#fafafa', legend: {orientation: 'h', y: 1.15}};
const CONFIG = {displaylogo: false, responsive: true};
// Names from the database (phases, memory terms, metric keys) go into Plotly labels, which read a subset of HTML.
function esc(s) {
  return String(s ?? '').replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}
const COLORS = ['#4c78a8', '#f58518', '#54a24b', '#b279a2', '#e45756', '#72b7b2', '#eeca3b', '#9d755d', '#bab0ac', '#ff9da6'];

function empty(id, text) {
  Plotly.newPlot(id, [], Object.assign({}, LAYOUT, {xaxis: {visible: false}, yaxis: {visible: false}, height: 200,
    annotations: [{text, showarrow: false, xref: 'paper', yref: 'paper', x: 0.5, y: 0.5, font: {color: '#6b7280'}}]}), CONFIG);
}

function phases() {
  const meas = P.phase_timings || {};
  const pred = P.predicted_phases || {};
  const names = [...new Set([...Object.keys(pred), ...Object.keys(meas)])].filter(n => n !== 'step');
  if (!names.length) return empty('plot-trial-phases', 'No phase timings (not launched, or not recorded)');
  const traces = [{type: 'bar', name: 'predicted', x: names.map(esc), y: names.map(n => pred[n] ?? null), marker: {color: '#9ca3af'}}];
  if (Object.keys(meas).length) traces.push({type: 'bar', name: 'measured' + (P.simulated ? ' (SIMULATED)' : ''),
    x: names.map(esc), y: names.map(n => meas[n] ?? null), marker: {color: '#4c78a8'}});
  Plotly.newPlot('plot-trial-phases', traces, Object.assign({}, LAYOUT, {barmode: 'group', height: 340,
    yaxis: {title: {text: 'seconds'}}}), CONFIG);
}

function memory() {
  const pm = P.predicted_memory;
  if (!pm || !pm.moments) return empty('plot-trial-memory', 'No memory prediction (pruned by a constraint)');
  const moments = Object.keys(pm.moments);
  const terms = [...new Set(moments.flatMap(m => Object.keys(pm.moments[m].terms_gib)))];
  const traces = terms.map((t, k) => ({type: 'bar', name: esc(t), x: moments.map(esc),
    y: moments.map(m => pm.moments[m].terms_gib[t] ?? 0),
    marker: {color: COLORS[k % COLORS.length]}, hovertemplate: `${esc(t)}: %{y:.1f} GiB<extra>%{x}</extra>`}));
  const worst = pm.worst_case && pm.worst_case.moment_peaks_gib;
  if (worst) traces.push({type: 'scatter', mode: 'markers', name: 'worst case peak', x: moments.map(esc),
    y: moments.map(m => worst[m] ?? null), marker: {symbol: 'diamond', size: 11, color: '#111827'},
    hovertemplate: 'worst case: %{y:.1f} GiB<extra>%{x}</extra>'});
  const shapes = []; const annotations = [];
  if (P.capacity_gib) {
    shapes.push({type: 'line', xref: 'paper', x0: 0, x1: 1, y0: P.capacity_gib, y1: P.capacity_gib, line: {color: '#dc2626', dash: 'dash'}});
    annotations.push({xref: 'paper', x: 1, y: P.capacity_gib, xanchor: 'right', yanchor: 'bottom', showarrow: false,
      text: `capacity ${P.capacity_gib.toFixed(1)} GiB`, font: {color: '#dc2626'}});
  }
  if (P.peak_memory_gib !== null && P.peak_memory_gib !== undefined) {
    shapes.push({type: 'line', xref: 'paper', x0: 0, x1: 1, y0: P.peak_memory_gib, y1: P.peak_memory_gib, line: {color: '#f58518', width: 2}});
    annotations.push({xref: 'paper', x: 0, y: P.peak_memory_gib, xanchor: 'left', yanchor: 'bottom', showarrow: false,
      text: `measured peak ${P.peak_memory_gib.toFixed(1)} GiB`, font: {color: '#f58518'}});
  }
  Plotly.newPlot('plot-trial-memory', traces, Object.assign({}, LAYOUT, {barmode: 'stack', height: 380, shapes, annotations,
    yaxis: {title: {text: 'GiB per GPU'}}, legend: {font: {size: 10}}}), CONFIG);
}

function steps() {
  const sel = document.getElementById('step-metric');
  if (!sel || !P.steps.length) return;
  const draw = () => {
    const m = sel.value;
    Plotly.newPlot('plot-steps', [{type: 'scatter', mode: 'lines+markers', x: P.steps.map(s => s.step),
      y: P.steps.map(s => s[m] ?? null), marker: {color: '#4c78a8'}}],
    Object.assign({}, LAYOUT, {height: 260, xaxis: {title: {text: 'step'}, dtick: 1}, yaxis: {title: {text: esc(m)}}}), CONFIG);
  };
  const pref = ['perf/throughput'].find(m => [...sel.options].some(o => o.value === m));
  if (pref) sel.value = pref;
  sel.addEventListener('change', draw);
  draw();
}

document.getElementById('save-trial-note').addEventListener('click', async () => {
  const status = document.getElementById('trial-note-status');
  status.textContent = 'saving...';
  const r = await fetch(`/api/study/${QS}/trial/${P.number}/note`, {method: 'POST',
    headers: {'Content-Type': 'application/json'}, body: JSON.stringify({note: document.getElementById('trial-note').value})});
  status.textContent = r.ok ? 'saved' : `not saved: HTTP ${r.status}`;
});

if (P.status === 'running') {
  setInterval(async () => {
    const r = await fetch(`/api/study/${QS}/trial/${P.number}`);
    if (r.ok && (await r.json()).status !== 'running') location.reload();
  }, 3000);
}
phases(); memory(); steps();
document.body.dataset.ready = '1';

// The trial page's Profile card: time per phase stacked by kind, and per rank for the phase picked.
'use strict';
(function () {
  const el = document.getElementById('profile-data');
  if (!el) return;
  const PR = JSON.parse(el.textContent);
  const LAYOUT = {margin: {l: 60, r: 20, t: 30, b: 60}, font: {family: 'system-ui, sans-serif', size: 12},
    paper_bgcolor: 'rgba(0,0,0,0)', plot_bgcolor: '#fafafa', legend: {orientation: 'h', y: 1.18}, barmode: 'stack'};
  const CONFIG = {displaylogo: false, responsive: true};
  const COLOR = {gemm: '#4c78a8', attention: '#72b7b2', other: '#54a24b', communication: '#e45756', memory: '#eeca3b',
    idle: '#bab0ac'};
  // Names come from the database (phases, rank labels): Plotly reads a subset of HTML in labels.
  const esc = s => String(s ?? '').replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
  const phaseName = p => esc(p.phase + (p.source === 'probe' ? ' (probe)' : ''));

  function phases() {
    const x = PR.phases.map(phaseName);
    const traces = PR.kinds.map(k => ({type: 'bar', name: k, x, marker: {color: COLOR[k]},
      y: PR.phases.map(p => (p.shares[k] || 0) * p.seconds),
      customdata: PR.phases.map(p => 100 * (p.shares[k] || 0)),
      hovertemplate: `${k}: %{y:.3f} s (%{customdata:.0f}%)<extra>%{x}</extra>`}));
    Plotly.newPlot('plot-profile-phases', traces, Object.assign({}, LAYOUT, {height: 340,
      yaxis: {title: {text: 'seconds'}}}), CONFIG);
  }

  function ranks() {
    const sel = document.getElementById('profile-phase');
    const draw = () => {
      const p = PR.phases[Number(sel.value)];
      const x = p.per_rank.map(r => esc(r.label));
      const traces = PR.kinds.map(k => ({type: 'bar', name: k, x, marker: {color: COLOR[k]},
        y: p.per_rank.map(r => r.kinds_s[k] || 0), hovertemplate: `${k}: %{y:.3f} s<extra>%{x}</extra>`}));
      Plotly.newPlot('plot-profile-ranks', traces, Object.assign({}, LAYOUT, {height: 340,
        yaxis: {title: {text: 'seconds'}}}), CONFIG);
    };
    const upd = PR.phases.findIndex(p => p.phase === 'update_actor');
    if (upd >= 0) sel.value = String(upd);
    sel.addEventListener('change', draw);
    draw();
  }

  if (PR.phases && PR.phases.length) {
    phases();
    ranks();
  }
  document.getElementById('profile').dataset.ready = '1';
})();

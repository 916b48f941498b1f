// weft report: draws the page's charts from the JSON document in #weft-data
// (docs/reports.md). Line, bar and scatter charts use Chart.js (inlined from Debian's
// libjs-chart.js); lanes (timelines, PFC pauses) are drawn on a canvas and the topology as
// SVG by the code below. Every chart drawn is listed in window.weftCharts.
(function () {
  'use strict';
  const doc = JSON.parse(document.getElementById('weft-data').textContent);
  const palette = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f',
                   '#bcbd22', '#17becf', '#393b79', '#ad494a', '#637939', '#7b4173', '#3182bd', '#e6550d'];
  const color = (i) => palette[i % palette.length];
  window.weftCharts = [];

  function el(tag, attrs, parent) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'text') e.textContent = v; else e.setAttribute(k, v);
    }
    if (parent) parent.appendChild(e);
    return e;
  }
  function svg(tag, attrs, parent) {
    const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (parent) parent.appendChild(e);
    return e;
  }
  function fmt(v) {
    if (!isFinite(v)) return String(v);
    const a = Math.abs(v);
    if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(2);
    return Number(v.toPrecision(4)).toString();
  }
  function legend(parent, kinds) {
    const box = el('div', {class: 'legend'}, parent);
    kinds.forEach((k, i) => {
      const key = el('span', {class: 'key'}, box);
      el('i', {style: 'background:' + (k.color || color(i))}, key);
      key.appendChild(document.createTextNode(k.name));
    });
  }

  // The y range of values that hardly vary. One constant value (a learning rate that never
  // changes): Chart.js would span v - 1 to v + 1 and draw 0.01 as 0; the axis runs from 0 to
  // twice the value. Positive values within 1% of each other (flows that got the same rate):
  // a range of a few thousandths would make them look apart; the axis starts at 0.
  function honestRange(values) {
    const ys = values.filter((v) => Number.isFinite(v));
    if (ys.length === 0) return {};
    const lo = Math.min(...ys), hi = Math.max(...ys);
    if (lo === hi && lo !== 0) return lo > 0 ? {min: 0, max: 2 * lo} : {min: 2 * lo, max: 0};
    if (lo > 0 && hi - lo <= 0.01 * hi) return {beginAtZero: true};
    return {};
  }

  // Chart.js: lines over a numeric x axis (series of x and y arrays).
  function lineChart(box, c) {
    const canvas = el('canvas', {}, box);
    const datasets = c.series.map((s, i) => ({
      label: s.name,
      data: s.x.map((x, j) => ({x: x, y: s.y[j]})),
      borderColor: s.color || color(s.run !== undefined ? s.run : i),  // (a run's series: its colour)
      backgroundColor: s.color || color(s.run !== undefined ? s.run : i),
      borderWidth: 1.5,
      borderDash: s.dashed ? [6, 3] : s.dotted ? [2, 2] : [],
      pointRadius: s.points ? 3 : 0,
      showLine: !s.points_only,
      stepped: s.stepped ? 'before' : false,
      fill: false,
      parsing: false,
    }));
    const y = {type: c.log_y ? 'logarithmic' : 'linear', title: {display: true, text: c.y},
               beginAtZero: !c.log_y && !!c.from_zero};
    if (!c.log_y) Object.assign(y, honestRange(c.series.flatMap((s) => s.y)));
    if (c.y_max !== undefined) Object.assign(y, {min: 0, max: c.y_max});
    return new Chart(canvas, {
      type: 'line',
      data: {datasets: datasets},
      plugins: c.y_max !== undefined ? [offScale] : [],
      options: {
        animation: false, responsive: true, maintainAspectRatio: false, normalized: true,
        interaction: {mode: 'nearest', intersect: false},
        plugins: {legend: {display: c.series.length > 1 || !!c.legend}},
        scales: {x: {type: 'linear', title: {display: true, text: c.x}}, y: y},
      },
    });
  }

  // Points above an axis that ends below them (a chart with y_max: warm-up steps far above
  // the rest) are named at the top edge with their values; chart.$weftOffScale lists them.
  const offScale = {
    id: 'weftOffScale',
    afterDatasetsDraw(chart) {
      const ctx = chart.ctx, area = chart.chartArea, max = chart.scales.y.max;
      const placed = [];
      ctx.save();
      ctx.font = '11px sans-serif';
      ctx.fillStyle = '#b00020';
      ctx.textBaseline = 'top';
      chart.data.datasets.forEach((d) => {
        d.data.forEach((p) => {
          if (!(p.y > max)) return;
          const x = chart.scales.x.getPixelForValue(p.x);
          const text = '↑ ' + fmt(p.y);
          const w = ctx.measureText(text).width;
          // Beside the labels already placed on this edge (where they were drawn), not over them.
          const left = Math.min(Math.max(x, area.left), area.right - w);
          let row = 0;
          while (placed.some((q) => q.row === row && left < q.left + q.width + 4 && q.left < left + w + 4)) ++row;
          ctx.fillText(text, left, area.top + 2 + row * 13);
          placed.push({x: p.x, y: p.y, row: row, left: left, width: w});
        });
      });
      ctx.restore();
      chart.$weftOffScale = placed.map((q) => ({x: q.x, y: q.y}));
    },
  };

  // A dashed horizontal line across the plot at `limit.value`, named at its right end.
  const limitLine = {
    id: 'weftLimit',
    afterDatasetsDraw(chart, args, options) {
      if (!options.limit) return;
      const y = chart.scales.y.getPixelForValue(options.limit.value);
      const area = chart.chartArea;
      const ctx = chart.ctx;
      ctx.save();
      ctx.strokeStyle = '#b00020';
      ctx.setLineDash([6, 3]);
      ctx.lineWidth = 2;
      ctx.beginPath(); ctx.moveTo(area.left, y); ctx.lineTo(area.right, y); ctx.stroke();
      ctx.fillStyle = '#b00020';
      ctx.font = '11px sans-serif';
      ctx.textAlign = 'right';
      ctx.fillText(options.limit.name + ' ' + fmt(options.limit.value), area.right - 4, y - 5);
      ctx.restore();
    },
  };

  // Chart.js: bars per category, stacked when asked, with an optional limit line.
  function barChart(box, c) {
    const canvas = el('canvas', {}, box);
    const datasets = c.series.map((s, i) => ({label: s.name, data: s.values, backgroundColor: s.color || color(i),
                                               maxBarThickness: 90, stack: c.stacked ? 'all' : undefined}));
    let top = 0;
    c.categories.forEach((_, j) => {
      let sum = 0;
      c.series.forEach((s) => { sum += c.stacked ? s.values[j] : 0; top = Math.max(top, s.values[j]); });
      top = Math.max(top, sum);
    });
    if (c.limit) top = Math.max(top, c.limit.value);
    return new Chart(canvas, {
      type: 'bar',
      data: {labels: c.categories, datasets: datasets},
      plugins: [limitLine],
      options: {
        animation: false, responsive: true, maintainAspectRatio: false,
        plugins: {weftLimit: {limit: c.limit}},
        scales: {x: {stacked: !!c.stacked, title: {display: !!c.x, text: c.x}},
                 y: {stacked: !!c.stacked, beginAtZero: true, suggestedMax: top * 1.08,
                     title: {display: true, text: c.y}}},
      },
    });
  }

  // Chart.js: points; points with a `mark` carry their label beside them, each where it
  // covers no point and no label placed before it (right, left, above, below, then further
  // out, with a leader line from the point); chart.$weftMarks lists the boxes drawn.
  const markLabels = {
    id: 'weftMarks',
    afterDatasetsDraw(chart) {
      const ctx = chart.ctx, area = chart.chartArea, h = 12;
      const boxes = [], dots = [];
      chart.data.datasets.forEach((d, i) => chart.getDatasetMeta(i).data.forEach((at) => {
        const r = (d.pointRadius || 3) + 1;
        dots.push({left: at.x - r, right: at.x + r, top: at.y - r, bottom: at.y + r});
      }));
      const apart = (b, o) => !(b.left < o.right && o.left < b.right && b.top < o.bottom && o.top < b.bottom);
      const free = (b) => b.left >= area.left && b.right <= area.right && b.top >= area.top && b.bottom <= area.bottom &&
                          boxes.every((o) => apart(b, o)) && dots.every((o) => apart(b, o));
      ctx.save();
      ctx.font = '11px sans-serif';
      ctx.textBaseline = 'top';
      chart.data.datasets.forEach((d, i) => {
        const meta = chart.getDatasetMeta(i);
        d.data.forEach((p, j) => {
          const at = meta.data[j];
          if (!p.mark || !at) return;
          const w = ctx.measureText(p.mark).width;
          let chosen = null;
          for (let ring = 0; ring < 8 && !chosen; ++ring) {
            const gap = 6 + ring * 14;
            for (const [dx, dy] of [[gap, -h / 2], [-gap - w, -h / 2], [-w / 2, -gap - h], [-w / 2, gap],
                                    [gap, -gap - h], [-gap - w, -gap - h], [gap, gap], [-gap - w, gap]]) {
              const b = {left: at.x + dx, top: at.y + dy, right: at.x + dx + w, bottom: at.y + dy + h};
              if (free(b)) { chosen = b; break; }
            }
          }
          if (!chosen) return;  // no room anywhere near: unlabelled (the memory chart names the same layouts)
          if (Math.hypot((chosen.left + chosen.right) / 2 - at.x, (chosen.top + chosen.bottom) / 2 - at.y) > 6 + w / 2 + h) {
            ctx.strokeStyle = '#9aa3b5';
            ctx.beginPath();
            ctx.moveTo(at.x, at.y);
            ctx.lineTo(Math.min(Math.max(at.x, chosen.left), chosen.right), Math.min(Math.max(at.y, chosen.top), chosen.bottom));
            ctx.stroke();
          }
          ctx.fillStyle = '#1d2330';
          ctx.fillText(p.mark, chosen.left, chosen.top);
          boxes.push(Object.assign({mark: p.mark}, chosen));
        });
      });
      ctx.restore();
      chart.$weftMarks = boxes;
    },
  };
  function scatterChart(box, c) {
    const canvas = el('canvas', {}, box);
    // Sorted by x: with parsing off Chart.js takes a dataset's x range from its first and last
    // points, and a point outside that range was not drawn.
    const datasets = c.series.map((s, i) => ({
      label: s.name, data: s.points.slice().sort((a, b) => a.x - b.x), parsing: false, backgroundColor: s.color || color(i),
      pointRadius: s.radius || 3, pointStyle: s.style || 'circle',
    }));
    return new Chart(canvas, {
      type: 'scatter',
      data: {datasets: datasets},
      plugins: [markLabels],
      options: {
        animation: false, responsive: true, maintainAspectRatio: false,
        plugins: {tooltip: {callbacks: {label: (t) => (t.raw.label ? t.raw.label + ': ' : '') +
                                                   fmt(t.raw.x) + ', ' + fmt(t.raw.y)}}},
        scales: {x: {type: c.log_x ? 'logarithmic' : 'linear', title: {display: true, text: c.x}},
                 y: Object.assign({type: c.log_y ? 'logarithmic' : 'linear', title: {display: true, text: c.y}},
                                  c.log_y ? {} : honestRange(c.series.flatMap((s) => s.points.map((p) => p.y))))},
      },
    });
  }

  // Lanes: spans [lane, kind, start, end] on a shared time axis (a canvas).
  function lanesChart(box, c) {
    const labelWidth = 190, laneHeight = 18, top = 8, axis = 28;
    const width = Math.max(600, box.clientWidth || 1100);
    const height = top + c.lanes.length * laneHeight + axis;
    const canvas = el('canvas', {width: width, height: height, style: 'width:' + width + 'px;height:' + height + 'px'}, box);
    const ctx = canvas.getContext('2d');
    let t0 = Infinity, t1 = -Infinity;
    for (const s of c.spans) { t0 = Math.min(t0, s[2]); t1 = Math.max(t1, s[3]); }
    if (c.range) { t0 = c.range[0]; t1 = c.range[1]; }
    if (!(t1 > t0)) { t0 = 0; t1 = 1; }
    const plotWidth = width - labelWidth - 10;
    const xOf = (t) => labelWidth + (t - t0) / (t1 - t0) * plotWidth;
    ctx.font = '11px sans-serif';
    ctx.textBaseline = 'middle';
    c.lanes.forEach((name, i) => {
      const y = top + i * laneHeight;
      if (i % 2 === 0) { ctx.fillStyle = '#f4f6f9'; ctx.fillRect(labelWidth, y, plotWidth, laneHeight); }
      ctx.fillStyle = '#1d2330';
      ctx.fillText(name.length > 30 ? name.slice(0, 29) + '…' : name, 4, y + laneHeight / 2);
    });
    const kindColor = c.kinds.map((k, i) => k.color || color(i));
    for (const s of c.spans) {
      const x = xOf(s[2]);
      const w = Math.max(1, xOf(s[3]) - x);
      ctx.fillStyle = kindColor[s[1]];
      ctx.fillRect(x, top + s[0] * laneHeight + 2, w, laneHeight - 4);
    }
    const yAxis = top + c.lanes.length * laneHeight;
    ctx.strokeStyle = '#8a92a3';
    ctx.beginPath(); ctx.moveTo(labelWidth, yAxis); ctx.lineTo(labelWidth + plotWidth, yAxis); ctx.stroke();
    ctx.fillStyle = '#4a5366';
    ctx.textBaseline = 'top';
    // Ticks at round numbers (1, 2 or 5 times a power of ten), about six of them.
    const raw = (t1 - t0) / 6, power = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * power).find((v) => v >= raw);
    ctx.textAlign = 'center';
    for (let t = Math.ceil(t0 / step) * step; t <= t1 + step * 1e-9; t += step) {
      const x = xOf(t);
      ctx.beginPath(); ctx.moveTo(x, yAxis); ctx.lineTo(x, yAxis + 4); ctx.stroke();
      ctx.fillText(fmt(Number(t.toPrecision(12))), x, yAxis + 6);
    }
    ctx.textAlign = 'right';
    ctx.fillText(c.x, labelWidth - 6, yAxis + 6);
    legend(box, c.kinds);
    return {canvas: canvas, lanes: c.lanes.length, spans: c.spans.length};
  }

  // The topology: nodes by level (GPUs at the bottom), links coloured by utilization.
  function utilColor(u) {
    const v = Math.max(0, Math.min(1, u));
    const stops = [[0, [200, 205, 214]], [0.5, [240, 190, 40]], [1, [200, 30, 30]]];
    let a = stops[0], b = stops[2];
    if (v <= 0.5) { a = stops[0]; b = stops[1]; } else { a = stops[1]; b = stops[2]; }
    const f = (v - a[0]) / (b[0] - a[0]);
    const m = a[1].map((x, i) => Math.round(x + (b[1][i] - x) * f));
    return 'rgb(' + m.join(',') + ')';
  }
  function topologyChart(box, c) {
    const width = Math.max(600, box.clientWidth || 1100);
    const levels = Math.max(1, ...c.nodes.map((n) => n.level + 1));
    const rowGap = 90, height = levels * rowGap + 20;
    const root = svg('svg', {width: width, height: height, viewBox: '0 0 ' + width + ' ' + height}, box);
    const perLevel = [];
    c.nodes.forEach((n) => { (perLevel[n.level] = perLevel[n.level] || []).push(n); });
    const pos = {};
    perLevel.forEach((row, level) => {
      if (!row) return;
      row.forEach((n, i) => {
        pos[n.name] = {x: 20 + (width - 40) * (i + 0.5) / row.length, y: height - 30 - level * rowGap};
      });
    });
    const linkGroup = svg('g', {}, root);
    for (const l of c.links) {
      const a = pos[l.a], b = pos[l.b];
      if (!a || !b) continue;
      const line = svg('line', {x1: a.x, y1: a.y, x2: b.x, y2: b.y, stroke: utilColor(l.utilization),
                                'stroke-width': l.utilization > 0.05 ? 2 : 1}, linkGroup);
      svg('title', {}, line).textContent = l.a + ' – ' + l.b + ': ' + Math.round(100 * l.utilization) + '% utilized';
    }
    const nodeGroup = svg('g', {}, root);
    const small = c.nodes.length > 80;
    for (const n of c.nodes) {
      const p = pos[n.name];
      const node = svg('circle', {cx: p.x, cy: p.y, r: n.gpu ? (small ? 2 : 5) : (small ? 4 : 8),
                                  fill: n.gpu ? '#2c7fb8' : '#1d2330'}, nodeGroup);
      svg('title', {}, node).textContent = n.name;
      if (!small) {
        const t = svg('text', {x: p.x, y: p.y + (n.gpu ? 18 : -12), 'text-anchor': 'middle', 'font-size': 11}, nodeGroup);
        t.textContent = n.name;
      }
    }
    legend(box, [{name: 'idle', color: utilColor(0)}, {name: '50% utilized', color: utilColor(0.5)},
                 {name: '100% utilized', color: utilColor(1)}, {name: 'GPU', color: '#2c7fb8'},
                 {name: 'switch', color: '#1d2330'}]);
    return {svg: root, nodes: c.nodes.length, links: c.links.length};
  }

  function table(parent, t) {
    const tab = el('table', {class: 'figures'}, parent);
    const head = el('tr', {}, tab);
    t.columns.forEach((c) => el('th', {text: c}, head));
    t.rows.forEach((r) => {
      const tr = el('tr', {}, tab);
      r.forEach((v) => el('td', {text: typeof v === 'number' ? fmt(v) : String(v)}, tr));
    });
  }

  const draw = {line: lineChart, bars: barChart, scatter: scatterChart, lanes: lanesChart, topology: topologyChart};
  const main = document.getElementById('weft-report');
  document.title = doc.title;
  const header = el('header', {}, document.body);
  el('h1', {text: doc.title}, header);
  if (doc.subtitle) el('p', {text: doc.subtitle}, header);
  document.body.insertBefore(header, main);
  for (const s of doc.sections) {
    const section = el('section', {}, main);
    el('h2', {text: s.title}, section);
    for (const n of s.notes || []) el('p', {class: 'note', text: n}, section);
    if (s.table) table(section, s.table);
    const charts = el('div', {class: 'charts'}, section);
    for (const c of s.charts || []) {
      const wide = c.wide || c.type === 'lanes' || c.type === 'topology';
      const box = el('div', {class: 'chart ' + c.type + (wide ? ' wide' : ''), 'data-chart': c.id}, charts);
      el('h3', {text: c.title}, box);
      if (c.how) el('p', {class: 'how', text: c.how}, box);
      const inner = el('div', {class: 'box'}, box);
      try {
        const drawn = draw[c.type](inner, c);
        window.weftCharts.push({id: c.id, type: c.type, chart: drawn});
      } catch (e) {
        el('p', {class: 'error', text: 'this chart could not be drawn: ' + e.message}, inner);
        console.error('weft report: chart ' + c.id + ': ' + e.message);
      }
    }
  }
  const footer = el('footer', {text: doc.footer || ''}, document.body);
  footer.setAttribute('id', 'weft-footer');
})();

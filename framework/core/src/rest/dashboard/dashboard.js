// The Weir dashboard: reads the job's REST API once a second per panel and draws it; the
// actions call the same API with the token kept in this tab's sessionStorage.
'use strict';

(() => {
  const SVG_NS = 'http://www.w3.org/2000/svg';
  const TOKEN_KEY = 'weir-token';
  const REFRESH_MS = 1000;
  const RATE_WINDOW_MS = 60 * 1000;
  const PALETTE = ['#1f5fbf', '#d1495b', '#2e933c', '#8a4fbf', '#e08e0b', '#00798c', '#6c757d', '#b5651d'];

  const $ = (id) => document.getElementById(id);

  /** What the page knows between refreshes. */
  const state = {
    jobId: new URLSearchParams(location.search).get('job'),
    job: null,
    backups: [],
    rates: new Map(),
    firstSeen: new Map(),
    limit: [],
    pending: null,
    configNames: null,
    configLoading: false,
    vertexOptions: '',
  };

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  /** One call to the REST API: its JSON, or an ApiError with the API's own message. */
  async function api(method, path, body) {
    const headers = { Accept: 'application/json' };
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (method !== 'GET' && token) headers.Authorization = 'Bearer ' + token;
    const resp = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: 'no-store',
      credentials: 'omit',
    });
    let json = null;
    try {
      json = await resp.json();
    } catch (_) {
      json = null;
    }
    if (!resp.ok) {
      const message = json && Array.isArray(json.errors) ? json.errors.join('; ') : `${resp.status} ${resp.statusText}`;
      throw new ApiError(resp.status, message);
    }
    return json;
  }

  // ---------------------------------------------------------------- formatting

  function fmtNumber(x) {
    if (x === null || x === undefined || Number.isNaN(x)) return '–';
    const a = Math.abs(x);
    if (a >= 1e9) return (x / 1e9).toFixed(a >= 1e10 ? 0 : 1) + 'G';
    if (a >= 1e6) return (x / 1e6).toFixed(a >= 1e7 ? 0 : 1) + 'M';
    if (a >= 1e3) return (x / 1e3).toFixed(a >= 1e4 ? 0 : 1) + 'k';
    if (a > 0 && a < 10 && !Number.isInteger(x)) return x.toFixed(1);
    return String(Math.round(x));
  }

  function fmtBytes(x) {
    if (x === null || x === undefined) return '–';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    let v = x;
    while (v >= 1024 && i < units.length - 1) {
      v /= 1024;
      i += 1;
    }
    return (i === 0 ? String(Math.round(v)) : v.toFixed(v >= 10 ? 0 : 1)) + ' ' + units[i];
  }

  function fmtMs(x) {
    if (x === null || x === undefined) return '–';
    if (x >= 60000) return (x / 60000).toFixed(1) + ' min';
    if (x >= 1000) return (x / 1000).toFixed(x >= 10000 ? 0 : 1) + ' s';
    if (x >= 10 || Number.isInteger(x)) return Math.round(x) + ' ms';
    return x.toFixed(2) + ' ms';
  }

  function fmtClock(ms) {
    const d = new Date(ms);
    return d.toLocaleTimeString([], { hour12: false });
  }

  function ellipsis(text, n) {
    return text.length > n ? text.slice(0, n - 1) + '…' : text;
  }

  // ---------------------------------------------------------------- SVG helpers

  function el(name, attrs, parent, text) {
    const e = document.createElementNS(SVG_NS, name);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  function size(svg, fallbackW, fallbackH) {
    const r = svg.getBoundingClientRect();
    return [Math.max(120, Math.round(r.width) || fallbackW), Math.max(60, Math.round(r.height) || fallbackH)];
  }

  /**
   * A line chart: `series` is [{name, color, points: [[x, y], ...], dashed, marks}], where
   * `marks` draws each point as a circle carrying `data-series`, `data-x` and `data-value`.
   */
  function lineChart(svg, opts) {
    clear(svg);
    const [W, H] = size(svg, 400, 200);
    svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
    const m = { l: 50, r: 10, t: 18, b: 18 };
    const all = opts.series.flatMap((s) => s.points);
    // Text widths as drawn (an estimate where the browser cannot measure).
    const widthOf = (t, chars) => {
      const w = t.getComputedTextLength ? t.getComputedTextLength() : 0;
      return w > 0 ? w : chars * 6;
    };
    let titleEnd = 0;
    if (opts.title) {
      const t = el('text', { x: 2, y: 11, class: 'chart-title' }, svg, opts.title);
      titleEnd = 2 + widthOf(t, opts.title.length) + 12;
    }
    // The legend runs from the right, on the title's row while it fits beside the title,
    // then on rows of its own below it; the plot starts below the last row.
    let lx = W - m.r;
    let row = 0;
    let limit = titleEnd;
    for (const s of [...opts.series].reverse()) {
      const label = el('text', { class: 'legend-text', 'text-anchor': 'end' }, svg, s.name);
      const width = widthOf(label, s.name.length) + 4;
      if (lx - width - 12 < limit && lx < W - m.r) {
        row += 1;
        lx = W - m.r;
        limit = m.l;
      }
      const y = 11 + row * 14;
      label.setAttribute('x', lx);
      label.setAttribute('y', y);
      el('rect', { x: lx - width - 12, y: y - 7, width: 9, height: 9, fill: s.color }, svg);
      lx -= width + 22;
    }
    m.t += row * 14;
    if (all.length === 0) {
      el('text', { x: W / 2, y: H / 2, class: 'tick', 'text-anchor': 'middle' }, svg, opts.empty || 'no data yet');
      return;
    }
    let [x0, x1] = opts.xDomain || [Math.min(...all.map((p) => p[0])), Math.max(...all.map((p) => p[0]))];
    if (x1 === x0) {
      x0 -= 1;
      x1 += 1;
    }
    const yMax = Math.max(1, ...all.map((p) => p[1])) * 1.1;
    const X = (x) => m.l + ((x - x0) / (x1 - x0)) * (W - m.l - m.r);
    const Y = (y) => H - m.b - (y / yMax) * (H - m.t - m.b);
    for (let i = 0; i <= 3; i += 1) {
      const v = (yMax / 3) * i;
      el('line', { x1: m.l, x2: W - m.r, y1: Y(v), y2: Y(v), class: i === 0 ? 'axis' : 'grid' }, svg);
      el('text', { x: m.l - 4, y: Y(v) + 3, class: 'tick', 'text-anchor': 'end' }, svg, opts.yFormat(v));
    }
    el('text', { x: m.l, y: H - 4, class: 'tick' }, svg, opts.xFormat(x0));
    el('text', { x: W - m.r, y: H - 4, class: 'tick', 'text-anchor': 'end' }, svg, opts.xFormat(x1));
    for (const s of opts.series) {
      if (s.points.length === 0) continue;
      const d = s.points.map((p, i) => `${i === 0 ? 'M' : 'L'}${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`).join(' ');
      el('path', { d, stroke: s.color, class: s.dashed ? 'series dashed' : 'series' }, svg);
      if (s.marks) {
        for (const p of s.points) {
          const c = el('circle', {
            cx: X(p[0]).toFixed(1), cy: Y(p[1]).toFixed(1), r: 3, fill: s.color,
            class: 'cp-point', 'data-series': s.key, 'data-x': p[0], 'data-value': p[1],
          }, svg);
          el('title', {}, c, `${opts.xName} ${p[0]}: ${s.name} ${s.format(p[1])}`);
        }
      }
    }
  }

  // ---------------------------------------------------------------- the job graph

  /**
   * Columns by longest path from a source (Kahn's topological order), rows within a column by
   * the mean row of their inputs, then graph order. Returns Map id -> {col, row}.
   */
  function layout(nodes) {
    const ids = new Set(nodes.map((n) => n.id));
    const inputs = new Map(nodes.map((n) => [n.id, [...new Set((n.inputs || []).map((i) => i.id))].filter((i) => ids.has(i) && i !== n.id)]));
    const outputs = new Map(nodes.map((n) => [n.id, []]));
    const indeg = new Map();
    for (const n of nodes) {
      indeg.set(n.id, inputs.get(n.id).length);
      for (const i of inputs.get(n.id)) outputs.get(i).push(n.id);
    }
    const col = new Map();
    const queue = nodes.filter((n) => indeg.get(n.id) === 0).map((n) => n.id);
    queue.forEach((id) => col.set(id, 0));
    while (queue.length) {
      const id = queue.shift();
      for (const t of outputs.get(id)) {
        col.set(t, Math.max(col.get(t) || 0, col.get(id) + 1));
        indeg.set(t, indeg.get(t) - 1);
        if (indeg.get(t) === 0) queue.push(t);
      }
    }
    let last = Math.max(0, ...col.values());
    for (const n of nodes) if (!col.has(n.id)) col.set(n.id, ++last);
    const order = new Map(nodes.map((n, i) => [n.id, i]));
    const place = new Map();
    const columns = Math.max(...col.values()) + 1;
    for (let c = 0; c < columns; c += 1) {
      const here = nodes.filter((n) => col.get(n.id) === c).map((n) => n.id);
      const key = (id) => {
        const rows = inputs.get(id).filter((i) => place.has(i)).map((i) => place.get(i).row);
        return rows.length ? rows.reduce((a, b) => a + b, 0) / rows.length : order.get(id);
      };
      here.sort((a, b) => key(a) - key(b) || order.get(a) - order.get(b));
      here.forEach((id, row) => place.set(id, { col: c, row }));
    }
    return place;
  }

  function backupLine(vertexId) {
    const mine = state.backups.filter((b) => b.uid === vertexId);
    if (mine.length === 0) return null;
    const degraded = mine.filter((b) => b.degraded).length;
    const lagging = mine.filter((b) => !b.degraded && b.backupLag > 0).length;
    const promotions = mine.reduce((a, b) => a + (b.promotions || 0), 0);
    let what;
    if (degraded) what = `${degraded} degraded`;
    else if (lagging) what = `${mine.length - lagging} attached, ${lagging} catching up`;
    else what = 'attached';
    const text = `backup ×${mine.length}: ${what}` + (promotions ? ` · ${promotions} promoted` : '');
    return { text, degraded: degraded > 0 };
  }

  function drawGraph(job) {
    const svg = $('graph');
    clear(svg);
    const nodes = job.plan.nodes;
    const vertices = new Map(job.vertices.map((v) => [v.id, v]));
    const place = layout(nodes);
    const BW = 228;
    const BH = 80;
    const GX = 56;
    const GY = 14;
    const cols = Math.max(1, ...[...place.values()].map((p) => p.col + 1));
    const rows = Math.max(1, ...[...place.values()].map((p) => p.row + 1));
    const W = cols * BW + (cols - 1) * GX + 8;
    const H = rows * BH + (rows - 1) * GY + 8;
    svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
    svg.setAttribute('preserveAspectRatio', 'xMinYMin meet');
    const defs = el('defs', {}, svg);
    const marker = el('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' }, defs);
    el('path', { d: 'M0,0 L10,5 L0,10 z' }, marker);
    const pos = (id) => {
      const p = place.get(id);
      return [4 + p.col * (BW + GX), 4 + p.row * (BH + GY)];
    };
    for (const n of nodes) {
      const seen = new Set();
      for (const i of n.inputs || []) {
        if (!place.has(i.id) || seen.has(i.id)) continue;
        seen.add(i.id);
        const [ax, ay] = pos(i.id);
        const [bx, by] = pos(n.id);
        const x1 = ax + BW;
        const y1 = ay + BH / 2;
        const x2 = bx - 2;
        const y2 = by + BH / 2;
        const mx = (x1 + x2) / 2;
        el('path', { d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`, class: 'edge', 'marker-end': 'url(#arrow)' }, svg);
        el('text', { x: mx, y: (y1 + y2) / 2 - 4, class: 'edge-label', 'text-anchor': 'middle' }, svg, (i.ship_strategy || '').toLowerCase());
      }
    }
    for (const n of nodes) {
      const v = vertices.get(n.id) || {};
      const level = v['backpressure-level'] || 'ok';
      const [x, y] = pos(n.id);
      const g = el('g', {
        class: `vertex ${level}`,
        transform: `translate(${x},${y})`,
        'data-id': n.id,
        'data-parallelism': n.parallelism,
        'data-backpressure': level,
        'data-col': place.get(n.id).col,
      }, svg);
      el('title', {}, g, `${v.name || n.description} (id ${n.id})`);
      el('rect', { width: BW, height: BH, rx: 6 }, g);
      el('text', { x: 8, y: 17, class: 'name' }, g, ellipsis(v.name || n.description, 30));
      el('text', { x: 8, y: 34, class: 'parallelism' }, g, `parallelism ${n.parallelism} · ${level}`);
      el('text', { x: 8, y: 51, class: 'rates' }, g,
        `in ${fmtNumber(v['records-in-per-second'] || 0)}/s · out ${fmtNumber(v['records-out-per-second'] || 0)}/s`);
      const b = backupLine(n.id);
      if (b) el('text', { x: 8, y: 69, class: b.degraded ? 'backup degraded' : 'backup' }, g, ellipsis(b.text, 34));
    }
  }

  // ---------------------------------------------------------------- rates

  function recordRates(job) {
    const t = job.now;
    const sources = new Set(job.plan.nodes.filter((n) => !(n.inputs || []).length).map((n) => n.id));
    for (const v of job.vertices) {
      const rate = sources.has(v.id) ? v['records-out-per-second'] : v['records-in-per-second'];
      if (!state.rates.has(v.id)) state.rates.set(v.id, []);
      state.rates.get(v.id).push([t, rate || 0]);
    }
    const limit = job['source-rate-limit'];
    if (limit !== null && limit !== undefined) {
      const p = job.vertices.filter((v) => sources.has(v.id)).reduce((a, v) => a + v.parallelism, 0);
      state.limit.push([t, limit * Math.max(1, p)]);
    }
    const from = t - RATE_WINDOW_MS;
    for (const [id, pts] of state.rates) {
      while (pts.length && pts[0][0] < from) pts.shift();
      if (!job.vertices.some((v) => v.id === id)) state.rates.delete(id);
    }
    while (state.limit.length && state.limit[0][0] < from) state.limit.shift();
  }

  function drawRates(job) {
    const names = new Map(job.vertices.map((v) => [v.id, v.name]));
    const series = [...state.rates.entries()].map(([id, pts], i) => ({
      name: ellipsis(names.get(id) || id, 18), color: PALETTE[i % PALETTE.length], points: pts,
    }));
    if (state.limit.length) series.push({ name: 'rate limit', color: '#444', points: state.limit, dashed: true });
    const now = job.now;
    // The last minute, or since the page started if that is shorter.
    const first = Math.min(now, ...series.filter((s) => s.points.length).map((s) => s.points[0][0]));
    lineChart($('rates'), {
      series,
      xDomain: [Math.max(now - RATE_WINDOW_MS, first), now],
      yFormat: (v) => fmtNumber(v),
      xFormat: (x) => (x === now ? 'now' : `-${Math.round((now - x) / 1000)} s`),
      title: 'records/s (sources: out, others: in)',
    });
  }

  // ---------------------------------------------------------------- checkpoints

  function drawCheckpoints(cp) {
    const c = cp.counts || {};
    $('cp-completed').textContent = c.completed ?? '–';
    $('cp-failed').textContent = c.failed ?? '–';
    $('cp-in-progress').textContent = c.in_progress ?? '–';
    const restored = cp.latest && cp.latest.restored;
    $('cp-restored').textContent = restored ? `#${restored.id}` : 'none';
    $('cp-restored').title = `restarts: ${c.restored ?? 0}`;
    const done = (cp.history || []).filter((r) => r.status === 'COMPLETED').sort((a, b) => a.id - b.id);
    const pick = (f) => done.map((r) => [r.id, r[f] || 0]);
    lineChart($('cp-times'), {
      title: 'ms per checkpoint id',
      xName: 'checkpoint',
      series: [
        { key: 'duration', name: 'duration', color: PALETTE[0], points: pick('end_to_end_duration'), marks: true, format: fmtMs },
        { key: 'alignment', name: 'alignment', color: PALETTE[1], points: pick('alignment_duration'), marks: true, format: fmtMs },
        { key: 'start_delay', name: 'start delay', color: PALETTE[2], points: pick('start_delay'), marks: true, format: fmtMs },
        { key: 'async', name: 'async part', color: PALETTE[4], points: pick('async_duration'), marks: true, format: fmtMs },
      ],
      yFormat: fmtMs,
      xFormat: (x) => `#${Math.round(x)}`,
      empty: 'no completed checkpoint yet',
    });
    lineChart($('cp-sizes'), {
      title: 'state size, bytes written, in-flight data stored',
      xName: 'checkpoint',
      series: [
        { key: 'size', name: 'state size', color: PALETTE[3], points: pick('state_size'), marks: true, format: fmtBytes },
        { key: 'written', name: 'written', color: PALETTE[5], points: pick('checkpointed_size'), marks: true, format: fmtBytes },
        // Unaligned checkpoints: the in-flight data their barriers overtook (0 when aligned).
        { key: 'persisted', name: 'in flight stored', color: PALETTE[7], points: pick('persisted_data'), marks: true, format: fmtBytes },
      ],
      yFormat: fmtBytes,
      xFormat: (x) => `#${Math.round(x)}`,
      empty: 'no completed checkpoint yet',
    });
  }

  // ---------------------------------------------------------------- failovers

  function drawFailovers(ex, job) {
    const entries = (ex.exceptionHistory && ex.exceptionHistory.entries) || [];
    const list = $('failovers');
    clear(list);
    $('failovers-empty').hidden = entries.length > 0;
    for (const e of entries) {
      const li = document.createElement('li');
      const kind = e.failover || 'failed';
      li.className = kind;
      li.dataset.kind = kind;
      li.dataset.timestamp = String(e.timestamp);
      const key = `${kind}@${e.timestamp}@${e.taskName || e.attempt}`;
      if (!state.firstSeen.has(key)) state.firstSeen.set(key, Number(document.body.dataset.refreshes || 0) + 1);
      li.dataset.shownAtRefresh = String(state.firstSeen.get(key));
      if (e.recoveryMs !== null && e.recoveryMs !== undefined) li.dataset.recoveryMs = String(e.recoveryMs);
      if (e.recordsReplayed !== null && e.recordsReplayed !== undefined) li.dataset.recordsReplayed = String(e.recordsReplayed);
      const what = document.createElement('div');
      const title = document.createElement('span');
      title.className = 'what';
      const parts = [];
      if (kind === 'promotion') {
        title.textContent = 'Backup promoted';
        parts.push(e.taskName || e.uid);
        parts.push(`recovered in ${fmtMs(e.recoveryMs)}`);
        parts.push(`${fmtNumber(e.recordsReplayed)} records replayed`);
      } else if (kind === 'restart') {
        title.textContent = `Restart (attempt ${e.attempt + 1})`;
        parts.push(e.recoveryMs === null ? 'restarting…' : `recovered in ${fmtMs(e.recoveryMs)}`);
        parts.push('replays from the last checkpoint');
      } else {
        title.textContent = 'Job failed';
      }
      parts.push(fmtClock(e.timestamp));
      what.appendChild(title);
      what.appendChild(document.createTextNode(' · ' + parts.join(' · ')));
      const cause = document.createElement('div');
      cause.className = 'cause';
      cause.textContent = e.stacktrace;
      cause.title = e.stacktrace;
      li.appendChild(what);
      li.appendChild(cause);
      list.appendChild(li);
    }
    const svg = $('failover-strip');
    clear(svg);
    const [W, H] = size(svg, 400, 44);
    svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
    const t0 = job ? job['start-time'] : Math.min(...entries.map((e) => e.timestamp), Date.now());
    const t1 = job ? job.now : Date.now();
    const X = (t) => 8 + ((t - t0) / Math.max(1, t1 - t0)) * (W - 16);
    el('line', { x1: 8, x2: W - 8, y1: H / 2, y2: H / 2, class: 'axis' }, svg);
    el('text', { x: 8, y: H - 2, class: 'tick' }, svg, 'start ' + fmtClock(t0));
    el('text', { x: W - 8, y: H - 2, class: 'tick', 'text-anchor': 'end' }, svg, 'now');
    for (const e of entries) {
      const x = X(e.timestamp);
      const kind = e.failover || 'failed';
      const mark = kind === 'promotion'
        ? el('path', { d: `M${x},${H / 2 - 7} L${x + 6},${H / 2} L${x},${H / 2 + 7} L${x - 6},${H / 2} z`, class: 'marker-promotion' }, svg)
        : el('circle', { cx: x, cy: H / 2, r: 6, class: `marker-${kind}` }, svg);
      el('title', {}, mark, `${kind} at ${fmtClock(e.timestamp)}: ${e.stacktrace}`);
    }
  }

  // ---------------------------------------------------------------- refresh

  function setError(id, e) {
    $(id).textContent = e ? `cannot read: ${e.message}` : '';
  }

  async function findJob() {
    const o = await api('GET', '/jobs/overview');
    const jobs = o.jobs || [];
    const live = jobs.find((j) => ['RUNNING', 'RESTARTING', 'INITIALIZING'].includes(j.state));
    const chosen = live || jobs[0];
    return chosen ? chosen.jid : null;
  }

  function updateHeader(job) {
    $('job-name').textContent = job.name;
    const s = $('job-state');
    s.textContent = job.state;
    s.className = `state ${job.state}`;
    $('job-uptime').textContent = `up ${fmtMs(job.duration)}`;
    document.title = `${job.name} · Weir`;
    const options = job.vertices.map((v) => `${v.id}\u0000${v.name}\u0000${v.parallelism}`).join('\u0001');
    if (options !== state.vertexOptions) {
      state.vertexOptions = options;
      const sel = $('rs-vertex');
      const was = sel.value;
      clear(sel);
      for (const v of job.vertices) {
        const o = document.createElement('option');
        o.value = v.id;
        o.textContent = `${ellipsis(v.name, 28)} (p=${v.parallelism})`;
        o.dataset.parallelism = String(v.parallelism);
        sel.appendChild(o);
      }
      if (job.vertices.some((v) => v.id === was)) sel.value = was;
      const o = sel.selectedOptions[0];
      if (o) $('rs-p').value = o.dataset.parallelism;
    }
  }

  async function loadConfigNames(id) {
    const cfg = await api('GET', `/jobs/${id}/config`);
    state.configNames = cfg;
    const sel = $('set-name');
    const was = sel.value;
    clear(sel);
    for (const name of Object.keys(cfg).sort()) {
      const o = document.createElement('option');
      o.value = name;
      o.textContent = name;
      sel.appendChild(o);
    }
    if (was in cfg) sel.value = was;
    syncSettingValue();
  }

  function syncSettingValue() {
    const name = $('set-name').value;
    if (state.configNames && name in state.configNames) $('set-value').value = state.configNames[name];
  }

  async function refresh() {
    if (!state.jobId) {
      state.jobId = await findJob();
      if (!state.jobId) {
        $('job-name').textContent = 'no job registered with this server';
        return;
      }
    }
    const id = state.jobId;
    const [job, backups, cps, ex] = await Promise.allSettled([
      api('GET', `/jobs/${id}`),
      api('GET', `/jobs/${id}/backups`),
      api('GET', `/jobs/${id}/checkpoints`),
      api('GET', `/jobs/${id}/exceptions?maxExceptions=50`),
    ]);
    if (backups.status === 'fulfilled') state.backups = backups.value.backups || [];
    if (job.status === 'fulfilled') {
      state.job = job.value;
      updateHeader(job.value);
      recordRates(job.value);
      drawGraph(job.value);
      drawRates(job.value);
      if (!state.configNames && !state.configLoading) {
        state.configLoading = true;
        loadConfigNames(id)
          .catch((e) => setError('graph-error', e))
          .finally(() => {
            state.configLoading = false;
          });
      }
    }
    setError('graph-error', job.status === 'rejected' ? job.reason : null);
    setError('rates-error', job.status === 'rejected' ? job.reason : null);
    if (cps.status === 'fulfilled') drawCheckpoints(cps.value);
    setError('checkpoints-error', cps.status === 'rejected' ? cps.reason : null);
    if (ex.status === 'fulfilled') drawFailovers(ex.value, state.job);
    setError('failovers-error', ex.status === 'rejected' ? ex.reason : null);
    const failed = [job, backups, cps, ex].some((r) => r.status === 'rejected');
    $('connection').textContent = failed ? 'some panels could not be read' : `updated ${fmtClock(Date.now())}`;
    document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes || 0) + 1);
  }

  async function loop() {
    try {
      await refresh();
    } catch (e) {
      $('connection').textContent = `server unreachable: ${e.message}`;
    }
    setTimeout(loop, REFRESH_MS);
  }

  // ---------------------------------------------------------------- token

  function showToken() {
    const has = !!sessionStorage.getItem(TOKEN_KEY);
    $('token-state').textContent = has ? 'token set (this tab only)' : 'no token';
    $('token-forget').hidden = !has;
    $('token-set').textContent = has ? 'Change token' : 'Set token';
  }

  function tokenHandlers() {
    $('token-set').addEventListener('click', () => {
      $('token-form').hidden = false;
      $('token-set').hidden = true;
      $('token-input').focus();
    });
    $('token-cancel').addEventListener('click', () => {
      $('token-form').hidden = true;
      $('token-set').hidden = false;
      $('token-set').focus();
    });
    $('token-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const t = $('token-input').value.trim();
      if (t) sessionStorage.setItem(TOKEN_KEY, t);
      $('token-input').value = '';
      $('token-form').hidden = true;
      $('token-set').hidden = false;
      showToken();
      $('token-set').focus();
    });
    $('token-forget').addEventListener('click', () => {
      sessionStorage.removeItem(TOKEN_KEY);
      showToken();
      $('token-set').focus();
    });
    showToken();
  }

  // ---------------------------------------------------------------- actions

  function result(text, kind) {
    const r = $('action-result');
    r.textContent = text;
    r.className = kind || '';
  }

  /** Shows the plan of an action and keeps it until Apply or Cancel. */
  function propose(planNodes, apply) {
    const plan = $('action-plan');
    clear(plan);
    for (const n of planNodes) plan.appendChild(n);
    state.pending = apply;
    $('action-box').hidden = false;
    result('', '');
    $('action-apply').focus();
  }

  function span(text, cls) {
    const s = document.createElement('span');
    s.textContent = text;
    if (cls) s.className = cls;
    return s;
  }

  function text(t) {
    return document.createTextNode(t);
  }

  function refused(e) {
    if (e instanceof ApiError && e.status === 401) {
      return `Refused by the job (401): ${e.message}${sessionStorage.getItem(TOKEN_KEY) ? '' : ' — set the token (top right) to act on the job.'}`;
    }
    if (e instanceof ApiError) return `Refused by the job (${e.status}): ${e.message}`;
    return `Failed: ${e.message}`;
  }

  async function waitSavepoint(id, trigger) {
    for (;;) {
      const s = await api('GET', `/jobs/${id}/savepoints/${trigger}`);
      if (s.status && s.status.id === 'COMPLETED') return s.operation || {};
      await new Promise((r) => setTimeout(r, 500));
    }
  }

  function savepointAction(stop) {
    const id = state.jobId;
    const dir = $('sp-dir').value.trim();
    const nodes = stop
      ? [span('Stops the job', 'fast-restart'), text(`: a savepoint into ${dir || '(no directory)'}, then every subtask ends. Start the job from the savepoint to resume.`)]
      : [span('Live', 'live'), text(`: the job keeps running while a savepoint is written into ${dir || '(no directory)'}.`)];
    propose(nodes, async () => {
      const trig = stop
        ? await api('POST', `/jobs/${id}/stop`, { targetDirectory: dir })
        : await api('POST', `/jobs/${id}/savepoints`, { 'target-directory': dir, 'cancel-job': false });
      result(`Savepoint ${trig['request-id']} in progress…`, '');
      const op = await waitSavepoint(id, trig['request-id']);
      if (op['failure-cause']) throw new Error(op['failure-cause']['stack-trace']);
      return `Savepoint written to ${op.location}` + (stop ? '; the job stops.' : '.');
    });
  }

  function rescaleAction() {
    const id = state.jobId;
    const sel = $('rs-vertex');
    const vid = sel.value;
    const from = sel.selectedOptions[0] ? sel.selectedOptions[0].dataset.parallelism : '?';
    const to = Number($('rs-p').value);
    propose([span('Live', 'live'), text(`: ${vid} goes from parallelism ${from} to ${to} at a checkpoint barrier; its input pauses while state moves, nothing restarts.`)], async () => {
      const r = await api('PATCH', `/jobs/${id}/vertices/${encodeURIComponent(vid)}`, { parallelism: to });
      const changes = (r.changes || []).map((c) => `${c.uid} ${c.from}→${c.to}`).join(', ') || 'no change';
      return `Rescaled at checkpoint ${r.checkpoint}: ${changes}; input paused ${fmtMs(r.pauseMs)}, took ${fmtMs(r.durationMs)}.`;
    });
  }

  async function settingAction() {
    const id = state.jobId;
    const name = $('set-name').value;
    const value = $('set-value').value;
    if (!name) {
      result('No live setting to change (the job has not been read yet).', 'error');
      return;
    }
    let plan;
    try {
      plan = await api('POST', `/jobs/${id}/config/plan`, { [name]: value });
    } catch (e) {
      result(refused(e), 'error');
      return;
    }
    const nodes = [];
    for (const c of plan.changes || []) {
      nodes.push(text(`${c.name}: ${c.old} → ${c.new} — `));
      nodes.push(c.applies === 'live' ? span('applies live', 'live') : span('needs a fast restart', 'fast-restart'));
      nodes.push(text(c.why ? ` (${c.why}). ` : '. '));
    }
    propose(nodes, async () => {
      const r = await api('PATCH', `/jobs/${id}/config`, { [name]: value });
      state.configNames = null;
      return 'Applied: ' + (r.changes || []).map((c) => `${c.name} = ${c.new} (${c.applies})`).join(', ');
    });
  }

  function actionHandlers() {
    $('sp-plan').addEventListener('click', () => savepointAction(false));
    $('stop-plan').addEventListener('click', () => savepointAction(true));
    $('rs-plan').addEventListener('click', rescaleAction);
    $('set-plan').addEventListener('click', () => {
      settingAction().catch((e) => result(refused(e), 'error'));
    });
    $('set-name').addEventListener('change', syncSettingValue);
    $('rs-vertex').addEventListener('change', () => {
      const o = $('rs-vertex').selectedOptions[0];
      if (o) $('rs-p').value = o.dataset.parallelism;
    });
    $('action-cancel').addEventListener('click', () => {
      state.pending = null;
      $('action-box').hidden = true;
      result('Cancelled.', '');
    });
    $('action-apply').addEventListener('click', async () => {
      const apply = state.pending;
      if (!apply) return;
      state.pending = null;
      $('action-box').hidden = true;
      result('Sent…', '');
      try {
        result(await apply(), 'done');
      } catch (e) {
        result(refused(e), 'error');
      }
    });
  }

  function start() {
    tokenHandlers();
    actionHandlers();
    loop();
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();

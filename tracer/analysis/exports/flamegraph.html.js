'use strict';
/*
 * ada's flame graph page (ada export -f html; tracer/analysis/exports/html.py inlines this
 * and the data). Plain DOM and SVG, nothing fetched. Two views of one set of call paths:
 *   callees  the flame graph: roots at the bottom, each frame's callees above it, frames as
 *            wide as their total time; children in name order (the same stacks line up)
 *   callers  the icicle of one function: it on top, below it the functions that called it,
 *            then theirs, each as wide as the function's time through that path
 * A click zooms on a frame (click the bottom frame, or Reset, to go back), a right-click
 * shows the callers of its function, the search box marks frames whose name contains the
 * text and says how much of the time they cover. window.flame is the page's state, for the
 * tests that drive it in a browser.
 */
(function () {
  const data = JSON.parse(document.getElementById('flame-data').textContent);
  const ROW = 18, FONT = 12, CHAR = 7.2, MIN_PX = 0.5;

  document.head.insertAdjacentHTML('beforeend', `<style>
    body { font: 13px sans-serif; margin: 8px; }
    #bar { display: flex; gap: 8px; align-items: center; flex-wrap: wrap; margin-bottom: 6px; }
    #bar h1 { font-size: 15px; margin: 0 12px 0 0; }
    #status { color: #555; }
    svg { display: block; width: 100%; }
    g.frame rect { stroke: #fff; stroke-width: 0.5; cursor: pointer; }
    g.frame text { font: ${FONT}px monospace; pointer-events: none; fill: #000; }
    g.frame.match rect { fill: #e040e0 !important; }
    g.frame.above rect { opacity: 0.55; }
    #tip { position: fixed; background: #ffffe8; border: 1px solid #888; padding: 4px 6px;
           font: 12px monospace; pointer-events: none; display: none; white-space: pre; }
    #legend span { display: inline-block; margin-right: 10px; }
    #legend i { display: inline-block; width: 10px; height: 10px; margin-right: 3px; }
  </style>`);
  document.body.innerHTML = `
    <div id="bar"><h1></h1>
      <label>threads <select id="view"></select></label>
      <label>view <select id="mode"><option value="">callees (flame graph)</option></select></label>
      <input id="search" placeholder="search (part of a name)" size="24">
      <button id="reset">Reset zoom</button>
      <span id="status"></span></div>
    <div id="legend"></div>
    <svg id="chart"></svg><div id="tip"></div>`;
  const $ = id => document.getElementById(id);
  $('bar').querySelector('h1').textContent = data.title;

  /* colours: a hue per module, the lightness varied by name so neighbours differ */
  const hash = s => { let h = 2166136261; for (const c of s) h = Math.imul(h ^ c.charCodeAt(0), 16777619); return h >>> 0; };
  const hue = m => (hash(data.modules[m]) % 360);
  const colour = (fn) => `hsl(${hue(data.functions[fn][1])}, 70%, ${58 + hash(data.functions[fn][0]) % 20}%)`;
  $('legend').innerHTML = data.modules.map((m, i) =>
    `<span><i style="background:hsl(${hue(i)},70%,65%)"></i>${escape(m)}</span>`).join('');

  function escape(s) {
    return s.replace(/[&<>"]/g, c => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[c]));
  }

  function time(ns) {
    for (const [unit, size] of [['s', 1e9], ['ms', 1e6], ['us', 1e3]])
      if (ns >= size) return `${(ns / size).toFixed(ns >= 100 * size ? 0 : 2)} ${unit}`;
    return `${ns} ns`;
  }

  /* ---- trees ---------------------------------------------------------------------------- */
  function node(fn, parent) {
    return { fn, parent, children: new Map(), calls: 0, total: 0, self: 0,
             depth: parent ? parent.depth + 1 : -1 };
  }

  /* The callees tree of a view: a node per path, under a root that is every root path. */
  function calleesTree(view) {
    const root = node(-1, null), nodes = new Map();
    const get = p => {
      let n = nodes.get(p);
      if (n === undefined) {
        const up = data.up[p];
        const parent = up < 0 ? root : get(up);
        n = node(data.fn[p], parent);
        n.path = p;
        parent.children.set(p, n);
        nodes.set(p, n);
      }
      return n;
    };
    view.paths.forEach((p, i) => {
      const n = get(p);
      n.calls = view.calls[i]; n.total = view.total[i]; n.self = view.self[i];
      if (data.up[p] < 0) { root.total += n.total; root.calls += n.calls; }
    });
    return root;
  }

  /* The callers tree of function fn in a view: each path that ends in fn (its outermost
   * call on that path: a recursion counts once), read upwards from fn to its root. */
  function callersTree(view, fn) {
    const root = node(fn, null);
    const inView = new Map(view.paths.map((p, i) => [p, i]));
    for (const [p, i] of inView) {
      if (data.fn[p] !== fn) continue;
      let outer = true;
      for (let u = data.up[p]; u >= 0; u = data.up[u]) if (data.fn[u] === fn) { outer = false; break; }
      if (!outer) continue;
      root.calls += view.calls[i]; root.total += view.total[i]; root.self += view.self[i];
      let at = root;
      for (let u = data.up[p]; u >= 0; u = data.up[u]) {
        const key = data.fn[u];
        let n = at.children.get(key);
        if (n === undefined) { n = node(key, at); at.children.set(key, n); }
        n.calls += view.calls[i]; n.total += view.total[i];
        at = n;
      }
    }
    root.depth = 0;
    const deepen = n => { for (const c of n.children.values()) { c.depth = n.depth + 1; deepen(c); } };
    deepen(root);
    return root;
  }

  const name = n => n.fn < 0 ? 'all' : data.functions[n.fn][0];
  const sorted = n => [...n.children.values()].sort((a, b) => name(a) < name(b) ? -1 : name(a) > name(b) ? 1 : b.total - a.total);
  /* a frame's stack from the outermost frame, ';' between (the folded stacks' form) */
  const stack = n => { const s = []; for (; n !== null && n.fn >= 0; n = n.parent) s.push(name(n)); return s.reverse().join(';'); };

  /* ---- drawing -------------------------------------------------------------------------- */
  const state = { view: 0, callers: null, zoom: null, search: '', tree: null };
  window.flame = state;

  function build() {
    const view = data.views[state.view];
    state.tree = state.callers === null ? calleesTree(view) : callersTree(view, state.callers);
    state.zoom = state.tree;
  }

  function draw() {
    const svg = $('chart'), width = svg.clientWidth || 1200;
    const tree = state.tree, zoom = state.zoom, icicle = state.callers !== null;
    const frames = [];
    /* the zoomed frame's ancestors, full width */
    for (let a = zoom; a !== null; a = a.parent) frames.push({ n: a, x: 0, w: width, above: a !== zoom });
    const scale = zoom.total > 0 ? width / zoom.total : 0;
    const lay = (n, x) => {
      let cx = x;
      for (const c of sorted(n)) {
        const w = c.total * scale;
        if (w >= MIN_PX) { frames.push({ n: c, x: cx, w }); lay(c, cx); }
        cx += w;
      }
    };
    lay(zoom, 0);
    const base = tree.fn < 0 ? -1 : 0;  /* the callees' root is depth -1 */
    const depth = Math.max(...frames.map(f => f.n.depth)) - base + 1;
    svg.setAttribute('height', depth * ROW);
    const y = n => icicle ? (n.depth - base) * ROW : (depth - 1 - (n.depth - base)) * ROW;
    const needle = state.search.toLowerCase();
    let matched = 0;
    const parts = frames.map(f => {
      const label = name(f.n), match = needle !== '' && label.toLowerCase().includes(needle);
      if (match && !f.above) {
        let inner = false;  /* count a frame under a matching one once */
        for (let a = f.n.parent; a !== null && a !== zoom.parent; a = a.parent) if (name(a).toLowerCase().includes(needle)) { inner = true; break; }
        if (!inner) matched += f.n.total;
      }
      const text = f.w > 3 * CHAR ? (label.length * CHAR <= f.w - 6 ? label
        : label.slice(0, Math.max(0, Math.floor((f.w - 6) / CHAR) - 2)) + '..') : '';
      const fill = f.n.fn < 0 ? '#ccc' : colour(f.n.fn);
      f.n.key = f.n.key || Math.random().toString(36).slice(2);
      return `<g class="frame${match ? ' match' : ''}${f.above ? ' above' : ''}" data-key="${f.n.key}"` +
        ` data-name="${escape(label)}" data-stack="${escape(stack(f.n))}" data-total="${f.n.total}"` +
        ` data-calls="${f.n.calls}" data-self="${f.n.self}"><rect x="${f.x.toFixed(2)}" y="${y(f.n)}"` +
        ` width="${Math.max(f.w - 0.5, 0.5).toFixed(2)}" height="${ROW - 1}" fill="${fill}"/>` +
        `<text x="${(f.x + 3).toFixed(2)}" y="${y(f.n) + ROW - 5}">${escape(text)}</text></g>`;
    });
    svg.innerHTML = parts.join('');
    state.byKey = new Map(frames.map(f => [f.n.key, f.n]));
    const whole = tree.total;
    $('status').textContent = (state.callers !== null ? `callers of ${name(tree)}; ` : '') +
      `${time(whole)} in ${tree.calls.toLocaleString()} call(s)` +
      (zoom !== tree ? `; zoomed on ${name(zoom)}` : '') +
      (needle !== '' ? `; "${state.search}" matches ${whole ? (100 * matched / whole).toFixed(1) : 0}% of the time` : '');
    state.frames = frames.length;
  }

  /* ---- interaction ---------------------------------------------------------------------- */
  const frameOf = ev => { const g = ev.target.closest('g.frame'); return g ? state.byKey.get(g.dataset.key) : undefined; };
  $('chart').addEventListener('click', ev => {
    const n = frameOf(ev);
    if (n === undefined) return;
    state.zoom = n === state.zoom && n.parent !== null ? n.parent : n;
    draw();
  });
  $('chart').addEventListener('contextmenu', ev => {
    const n = frameOf(ev);
    if (n === undefined || n.fn < 0) return;
    ev.preventDefault();
    showCallers(n.fn);
  });
  $('chart').addEventListener('mousemove', ev => {
    const n = frameOf(ev), tip = $('tip');
    if (n === undefined) { tip.style.display = 'none'; return; }
    const whole = state.tree.total || 1;
    tip.textContent = `${name(n)}${n.fn >= 0 ? '  (' + data.modules[data.functions[n.fn][1]] + ')' : ''}\n` +
      `calls ${n.calls.toLocaleString()}\ntotal ${time(n.total)} (${(100 * n.total / whole).toFixed(1)}%)` +
      (state.callers === null ? `\nself  ${time(n.self)}` : '') +
      (n.fn >= 0 ? '\nclick: zoom; right-click: its callers' : '');
    tip.style.display = 'block';
    tip.style.left = Math.min(ev.clientX + 12, window.innerWidth - tip.offsetWidth - 4) + 'px';
    tip.style.top = (ev.clientY + 14) + 'px';
  });
  $('chart').addEventListener('mouseleave', () => { $('tip').style.display = 'none'; });
  $('reset').addEventListener('click', () => { state.zoom = state.tree; draw(); });
  $('search').addEventListener('input', ev => { state.search = ev.target.value; draw(); });
  $('view').innerHTML = data.views.map((v, i) => `<option value="${i}">${escape(v.name)}</option>`).join('');
  $('view').addEventListener('change', ev => { state.view = Number(ev.target.value); build(); draw(); });
  $('mode').addEventListener('change', ev => {
    state.callers = ev.target.value === '' ? null : Number(ev.target.value); build(); draw();
  });
  window.addEventListener('resize', () => draw());

  function showCallers(fn) {
    const mode = $('mode');
    if (![...mode.options].some(o => o.value === String(fn)))
      mode.insertAdjacentHTML('beforeend', `<option value="${fn}">callers of ${escape(data.functions[fn][0])}</option>`);
    mode.value = String(fn);
    state.callers = fn;
    build();
    draw();
  }
  state.showCallers = showCallers;
  state.draw = draw;

  build();
  if (data.callers !== null) {
    const fn = data.functions.findIndex(f => f[0] === data.callers);
    if (fn >= 0) showCallers(fn); else draw();
  } else {
    draw();
  }
})();

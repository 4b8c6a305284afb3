// The conformance dashboard. Data arrive as data/*.js files that call
// window.dashboardLoaded(name, payload); each is loaded by a <script> tag on demand (fetch() of
// a local file is blocked on file://). Every text from a result row is put into the page with
// textContent / createTextNode: this file never hands the page a string to parse as markup.
"use strict";

(function () {
  const UNEXPECTED = ["fail", "crash", "timeout", "xpass"];
  const PAGE = 200; // cases or diff entries shown before "show more"
  const VIEWS = ["matrix", "diff", "history", "tolerances"];
  const data = {}; // name -> payload
  const waiting = {}; // name -> [callbacks]
  const state = { family: "", status: "", exporter: "", text: "", open: new Set() };
  let index = null;

  window.dashboardLoaded = function (name, payload) {
    data[name] = payload;
    (waiting[name] || []).forEach((callback) => callback(payload));
    delete waiting[name];
  };

  function load(name, callback) {
    if (name in data) {
      callback(data[name]);
      return;
    }
    if (waiting[name]) {
      waiting[name].push(callback);
      return;
    }
    waiting[name] = [callback];
    const script = document.createElement("script");
    script.src = "data/" + name + ".js";
    script.onerror = () => {
      delete waiting[name];
      note("could not load data/" + name + ".js");
    };
    document.head.appendChild(script);
  }

  // --------------------------------------------------------------- DOM helpers (text only)
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key === "class") node.className = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      node.appendChild(typeof child === "object" ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  function note(message) {
    document.getElementById("matrix-note").textContent = message;
  }

  // --------------------------------------------------------------- counting
  function total(counts) {
    return Object.values(counts).reduce((a, b) => a + b, 0);
  }

  function tone(counts) {
    if (UNEXPECTED.some((s) => counts[s])) return "unexpected";
    const ran = total(counts) - (counts.skip || 0);
    if (ran === 0) return "skip";
    if (counts.pass === ran) return "pass";
    if (counts.xfail && !counts.pass && !counts.vacuous) return "xfail";
    if (counts.vacuous && !counts.pass && !counts.xfail) return "vacuous";
    return counts.xfail ? "mixed" : "vacuous";
  }

  function rate(counts) {
    const skipped = counts.skip || 0;
    const ran = total(counts) - skipped;
    if (ran === 0) return skipped + " skip";
    return (counts.pass || 0) + "/" + ran + (skipped ? " · " + skipped + " skip" : "");
  }

  function countsTitle(counts) {
    return Object.keys(counts)
      .sort()
      .map((s) => s + " " + counts[s])
      .join(", ");
  }

  function statusMatches(status) {
    if (!state.status) return true;
    if (state.status === "unexpected") return UNEXPECTED.includes(status);
    return status === state.status;
  }

  function countsMatch(counts) {
    return Object.keys(counts).some((s) => counts[s] && statusMatches(s));
  }

  // --------------------------------------------------------------- header and tabs
  function header() {
    const run = index.runs.length
      ? index.runs.map((r) => [r.commit, r.started, r.command].filter(Boolean).join(" · ")).join("; ")
      : index.run;
    document.getElementById("run").textContent = "Run: " + run;
    const counts = index.counts;
    const parts = Object.keys(counts).map((s) => s + " " + counts[s]);
    const line = document.getElementById("headline");
    line.textContent =
      index.total + " cases · pass " + index.passed + "/" + index.counted + " of those that ran · " +
      parts.join(" · ") + (index.completeness ? " · " + index.completeness : "");
  }

  function show(view) {
    for (const name of VIEWS) {
      document.getElementById("view-" + name).hidden = name !== view;
      document.getElementById("tab-" + name).classList.toggle("active", name === view);
    }
    if (view === "diff") renderDiff();
    if (view === "history") renderHistory();
    if (view === "tolerances") renderTolerances();
  }

  function renderTolerances() {
    const view = document.getElementById("view-tolerances");
    if (view.dataset.done) return;
    const table = index.tolerances;
    if (!table) {
      view.appendChild(el("p", {}, "This build could not read the tolerance table (see the README's Tolerances section)."));
    } else {
      view.appendChild(el("p", {}, "The bounds every comparison used (the README's Tolerances section is the same table)."));
      view.appendChild(el("table", { id: "tolerance-table" },
        el("thead", {}, el("tr", {}, ...table.columns.map((c) => el("th", {}, c)))),
        el("tbody", {}, ...table.rows.map((row) => el("tr", {}, ...row.map((cell) => el("td", {}, cell)))))));
      view.appendChild(el("ul", {}, ...table.rules.map((rule) => el("li", {}, rule))));
    }
    view.dataset.done = "1";
  }

  // --------------------------------------------------------------- matrix
  function columns() {
    return index.columns
      .map((column, i) => ({ ...column, i }))
      .filter((column) => !state.exporter || column.exporter === state.exporter);
  }

  function textMatch(subject) {
    return !state.text || subject.toLowerCase().includes(state.text);
  }

  function renderMatrix() {
    const table = document.getElementById("matrix");
    clear(table);
    const cols = columns();
    table.appendChild(
      el("thead", {}, el("tr", {}, el("th", {}, "op / model"), ...cols.map((c) => el("th", {}, c.label))))
    );
    const body = el("tbody");
    let shown = 0;
    index.families.forEach((family, f) => {
      if (state.family && family.name + "\u0000" + family.kind !== state.family) return;
      if (!countsMatch(family.counts)) return;
      const subjects = family.subjects.filter(textMatch);
      if (state.text && !subjects.length && !family.name.toLowerCase().includes(state.text)) return;
      shown++;
      const open = state.open.has(f) || !!state.family || !!state.text;
      const label = (open ? "▾ " : "▸ ") + family.kind + "s · " + family.name + " (" + family.subjects.length + ")";
      const row = el("tr", { class: "family", "data-family": family.name },
        el("th", { class: "subject", onclick: () => toggle(f) }, label));
      for (const column of cols) row.appendChild(cell(family.cells[column.i], () => toggle(f)));
      body.appendChild(row);
      if (open) {
        if (family.file in data) subjectRows(body, family, data[family.file], cols);
        else load(family.file, () => renderMatrix());
      }
    });
    table.appendChild(body);
    note(shown ? "" : "No family matches the filters.");
    window.dashboardRendered = (window.dashboardRendered || 0) + 1;
  }

  function cell(counts, onclick) {
    if (!counts || !countsMatch(counts)) return el("td", { class: "cell empty" });
    return el("td", { class: "cell st-" + tone(counts), title: countsTitle(counts), onclick }, rate(counts));
  }

  function subjectRows(body, family, payload, cols) {
    const bySubject = new Map();
    for (const c of payload.cases) {
      const key = c.s + ":" + c.c;
      if (!bySubject.has(key)) bySubject.set(key, []);
      bySubject.get(key).push(c);
    }
    payload.subjects.forEach((subject, s) => {
      const textHit = textMatch(subject);
      const colCases = cols.map((column) =>
        (bySubject.get(s + ":" + column.i) || []).filter(
          (c) => textHit || c.id.toLowerCase().includes(state.text)
        )
      );
      const all = colCases.flat();
      if (!all.length || !all.some((c) => statusMatches(c.st))) return;
      const row = el("tr", { class: "subject-row", "data-subject": subject }, el("th", { class: "subject" }, subject));
      colCases.forEach((cases, k) => {
        const counts = {};
        for (const c of cases) counts[c.st] = (counts[c.st] || 0) + 1;
        row.appendChild(
          cell(counts, () => listCases(subject + " · " + cols[k].label, cases.filter((c) => statusMatches(c.st))))
        );
      });
      body.appendChild(row);
    });
  }

  function toggle(f) {
    if (state.open.has(f)) state.open.delete(f);
    else state.open.add(f);
    renderMatrix();
  }

  // --------------------------------------------------------------- case list
  function fact(list, name, value) {
    if (value === undefined || value === null || value === "") return;
    list.appendChild(el("dt", {}, name));
    list.appendChild(el("dd", {}, value));
  }

  function caseBlock(c) {
    const facts = el("dl", { class: "facts" });
    fact(facts, "stage", c.sg);
    fact(facts, "shapes", c.sh);
    fact(facts, "sample", c.n);
    if (c.ma !== undefined || c.mr !== undefined) {
      fact(facts, "error", "max abs " + c.ma + " (atol " + c.at + ") · max rel " + c.mr + " (rtol " + c.rt + ")");
    }
    fact(facts, "expectation", c.x);
    fact(facts, "status since", c.since);
    return el(
      "div",
      { class: "case", "data-status": c.st },
      el("div", {}, el("span", { class: "badge st-" + tone({ [c.st]: 1 }) }, c.st), el("span", { class: "id" }, c.id)),
      facts,
      c.h ? el("pre", { class: "headline" }, c.h) : null,
      c.m && c.m !== c.h ? el("details", {}, el("summary", {}, "full message"), el("pre", { class: "message" }, c.m)) : null,
      el("div", {}, "repro: ", el("code", { class: "repro" }, c.r))
    );
  }

  function paged(container, items, render) {
    let shown = 0;
    const more = el("button", { type: "button", class: "more" });
    const next = () => {
      const end = Math.min(items.length, shown + PAGE);
      for (; shown < end; shown++) container.insertBefore(render(items[shown]), more);
      more.textContent = "show " + Math.min(PAGE, items.length - shown) + " more of " + (items.length - shown);
      more.hidden = shown >= items.length;
    };
    more.addEventListener("click", next);
    container.appendChild(more);
    next();
  }

  function listCases(title, cases) {
    const section = document.getElementById("cases");
    section.hidden = false;
    document.getElementById("cases-title").textContent = title + " (" + cases.length + " cases)";
    const list = document.getElementById("cases-list");
    clear(list);
    paged(list, cases, caseBlock);
    section.scrollIntoView({ block: "nearest" });
  }

  // --------------------------------------------------------------- diff
  const DIFF_GROUPS = [
    ["broken", "Broken: passed in the baseline, not now"],
    ["fixed", "Fixed: pass now, did not in the baseline"],
    ["changed", "Changed: another status change"],
    ["new", "New: not in the baseline"],
    ["removed", "Removed: only in the baseline"],
  ];

  function renderDiff() {
    const view = document.getElementById("view-diff");
    if (view.dataset.done) return;
    clear(view);
    if (!index.diff) {
      view.appendChild(el("p", {}, "Nothing to compare with: build with --baseline ROWS, or with --history of an earlier dashboard, to see what changed since."));
      view.dataset.done = "1";
      return;
    }
    view.appendChild(el("p", { id: "diff-against" }, "Compared with " + index.diff_against + "."));
    view.appendChild(
      el("p", { id: "diff-counts" },
        DIFF_GROUPS.map(([key]) => key + " " + index.diff[key]).join(" · "))
    );
    load("diff", (diff) => {
      for (const [key, title] of DIFF_GROUPS) {
        const items = diff[key];
        const group = el("div", { class: "diff-group", id: "diff-" + key }, el("h3", {}, title + " (" + items.length + ")"));
        view.appendChild(group);
        paged(group, items, (item) =>
          el("div", { class: "case", "data-status": item.now || item.was },
            el("div", {},
              el("span", { class: "badge" }, [item.was, item.now].filter(Boolean).join(" → ")),
              el("span", { class: "id" }, item.id)),
            item.sg ? el("div", {}, "stage: " + item.sg) : null,
            item.m ? el("pre", { class: "message" }, item.m) : null,
            item.r ? el("div", {}, "repro: ", el("code", { class: "repro" }, item.r)) : null)
        );
      }
      view.dataset.done = "1";
    });
  }

  // --------------------------------------------------------------- history
  const SVG = "http://www.w3.org/2000/svg";

  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  const COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"];

  function renderHistory() {
    const view = document.getElementById("view-history");
    if (view.dataset.done) return;
    load("history", (history) => {
      clear(view);
      const runs = history.runs;
      view.appendChild(el("p", {}, runs.length + " run(s) in the history; pass rate of the cases that ran, per exporter and opset."));
      const series = new Map();
      runs.forEach((run, r) => {
        for (const line of run.rates || []) {
          const key = line.exporter + " opset" + line.opset;
          if (!series.has(key)) series.set(key, []);
          series.get(key).push([r, line.ran ? line.passed / line.ran : null, line.passed + "/" + line.ran]);
        }
      });
      const width = 640, height = 240, left = 40, bottom = 20, right = 160;
      const chart = svg("svg", { class: "trend", width, height, viewBox: "0 0 " + width + " " + height });
      const x = (r) => left + (runs.length > 1 ? (r * (width - left - right)) / (runs.length - 1) : 0);
      const y = (v) => 10 + (1 - v) * (height - bottom - 10);
      for (const v of [0, 0.5, 1]) {
        chart.appendChild(svg("line", { x1: left, x2: width - right, y1: y(v), y2: y(v), stroke: "#ddd" }));
        chart.appendChild(svg("text", { x: 4, y: y(v) + 4, class: "axis" }, Math.round(v * 100) + "%"));
      }
      [...series.entries()].forEach(([key, points], k) => {
        const colour = COLOURS[k % COLOURS.length];
        const shown = points.filter((p) => p[1] !== null);
        chart.appendChild(svg("polyline", {
          points: shown.map((p) => x(p[0]) + "," + y(p[1])).join(" "), fill: "none", stroke: colour, "stroke-width": 2,
        }));
        for (const p of shown) {
          const dot = svg("circle", { cx: x(p[0]), cy: y(p[1]), r: 3, fill: colour });
          dot.appendChild(svg("title", {}, key + " · " + runs[p[0]].run + " · " + p[2]));
          chart.appendChild(dot);
        }
        chart.appendChild(svg("text", { x: width - right + 8, y: 14 + k * 14, fill: colour }, key));
      });
      view.appendChild(chart);
      const table = el("table", { id: "history-table" },
        el("thead", {}, el("tr", {}, el("th", {}, "run"), el("th", {}, "cases"), ...[...series.keys()].map((k) => el("th", {}, k)))));
      const body = el("tbody");
      runs.forEach((run, r) => {
        const row = el("tr", {}, el("th", { class: "subject" }, run.run), el("td", {}, run.cases));
        for (const points of series.values()) {
          const point = points.find((p) => p[0] === r);
          row.appendChild(el("td", {}, point ? point[2] : ""));
        }
        body.appendChild(row);
      });
      table.appendChild(body);
      view.appendChild(table);
      const answer = el("p", { id: "since-answer" });
      const input = el("input", { id: "since-id", type: "search", size: 70, placeholder: "op::abs::s000::f32::static::opset20::cpu::ours" });
      const ask = el("form", { id: "since-form" }, el("label", {}, "Since when has a case its status? ", input), el("button", { type: "submit" }, "look up"));
      ask.addEventListener("submit", (event) => {
        event.preventDefault();
        since(input.value.trim(), answer);
      });
      view.appendChild(ask);
      view.appendChild(answer);
      view.dataset.done = "1";
    });
  }

  // A case's status and the first run of the history since which it has had it, from its
  // family's data file (the id's second field names the op or model).
  function since(id, answer) {
    const subject = id.split("::")[1];
    const family = index.families.find((f) => f.subjects.includes(subject));
    if (!family) {
      answer.textContent = "No case with that id in this run.";
      return;
    }
    load(family.file, (payload) => {
      const found = payload.cases.find((c) => c.id === id);
      answer.textContent = found
        ? found.id + ": " + found.st + " since " + found.since
        : "No case with that id in this run.";
    });
  }

  // --------------------------------------------------------------- filters and start
  function filters() {
    const family = document.getElementById("filter-family");
    index.families.forEach((f) =>
      family.appendChild(el("option", { value: f.name + "\u0000" + f.kind }, f.kind + "s · " + f.name))
    );
    const exporter = document.getElementById("filter-exporter");
    [...new Set(index.columns.map((c) => c.exporter))].forEach((e) => exporter.appendChild(el("option", { value: e }, e)));
    const update = () => {
      state.family = family.value;
      state.status = document.getElementById("filter-status").value;
      state.exporter = exporter.value;
      state.text = document.getElementById("filter-text").value.trim().toLowerCase();
      renderMatrix();
    };
    for (const id of ["filter-family", "filter-status", "filter-exporter"]) {
      document.getElementById(id).addEventListener("change", update);
    }
    document.getElementById("filter-text").addEventListener("input", update);
    document.getElementById("filters").addEventListener("submit", (event) => event.preventDefault());
  }

  function start(payload) {
    index = payload;
    header();
    filters();
    // A small run opens every family; a large one starts folded, each family loaded on demand.
    if (index.total <= 3000) index.families.forEach((_, f) => state.open.add(f));
    for (const name of VIEWS) {
      document.getElementById("tab-" + name).addEventListener("click", () => show(name));
    }
    show("matrix");
    renderMatrix();
  }

  load("index", start);
})();

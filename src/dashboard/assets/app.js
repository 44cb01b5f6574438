// hptune dashboard: polls for what changed and updates the page in place; sorts, filters and
// pages the trial table; opens a trial's details; shows tooltips. No dependencies.
(() => {
  "use strict";
  const $ = (s, root = document) => root.querySelector(s);
  const POLL_MS = 2000;
  const live = $("#live");
  const banner = $("#banner");
  const page = document.body.dataset.page;

  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  const fmtNum = (v) => {
    if (v === null || v === undefined || v === "") return "—";
    if (typeof v !== "number") return esc(v);
    if (v === 0) return "0";
    const a = Math.abs(v);
    if (a < 1e-3 || a >= 1e5) return v.toExponential(2).replace(/\.?0+e/, "e").replace("e+", "e");
    return String(Number(v.toPrecision(4)));
  };
  const seconds = (t) => (t ? Date.parse(t) / 1000 : NaN);
  const fmtDur = (s) => {
    if (!isFinite(s)) return "—";
    if (s < 60) return s.toFixed(1) + " s";
    if (s < 3600) return (s / 60).toFixed(1) + " min";
    return (s / 3600).toFixed(1) + " h";
  };
  const fmtTime = (t) => (t ? esc(t.slice(0, 19).replace("T", " ")) : "—");

  function setLive(ok, message) {
    live.hidden = false;
    live.classList.toggle("stale", !ok);
    live.textContent = ok ? "live · " + new Date().toLocaleTimeString() : "not updating";
    banner.hidden = ok;
    if (!ok) banner.textContent = "Cannot read the database: " + message + " — trying again.";
  }

  function poll(step) {
    const tick = async () => {
      try {
        await step();
        setLive(true);
      } catch (e) {
        setLive(false, e.message);
      }
      setTimeout(tick, POLL_MS);
    };
    setTimeout(tick, POLL_MS);
  }

  async function fetchText(url) {
    const r = await fetch(url);
    const text = await r.text();
    if (!r.ok) {
      let message = r.statusText;
      try { message = JSON.parse(text).error || message; } catch (_) { /* an HTML page */ }
      throw new Error(message);
    }
    return text;
  }

  // Tooltips: the marks' <title> shown at once, beside the pointer.
  const tip = document.createElement("div");
  tip.className = "tooltip";
  tip.style.cssText = "position:fixed;pointer-events:none;z-index:20;background:#111827;color:#f9fafb;padding:6px 9px;border-radius:6px;font-size:12px;white-space:pre;box-shadow:0 4px 14px rgba(0,0,0,.2);display:none";
  document.body.appendChild(tip);
  document.addEventListener("mouseover", (e) => {
    let node = e.target;
    while (node && node.tagName !== "svg" && node.nodeType === 1 && !node.dataset.tip && !node.querySelector(":scope > title")) node = node.parentNode;
    if (!node || node.nodeType !== 1 || node.tagName === "svg" || !node.closest("svg.figure")) return;
    const title = node.querySelector(":scope > title");
    if (title) { node.dataset.tip = title.textContent; title.remove(); }
    tip.textContent = node.dataset.tip;
    tip.style.display = "block";
  });
  document.addEventListener("mousemove", (e) => {
    if (tip.style.display === "none") return;
    tip.style.left = Math.min(e.clientX + 14, innerWidth - tip.offsetWidth - 8) + "px";
    tip.style.top = e.clientY + 14 + "px";
  });
  document.addEventListener("mouseout", (e) => {
    if (e.target.closest && e.target.closest("svg.figure [data-tip]")) tip.style.display = "none";
  });

  if (page === "studies") {
    document.addEventListener("click", (e) => {
      const row = e.target.closest("tr[data-href]");
      if (row && !e.target.closest("a")) location.href = row.dataset.href;
    });
    poll(async () => { $("#studies-body").innerHTML = await fetchText("/?fragment=studies"); });
    performance.mark("hptune-ready");
  }
  if (page === "study") study();

  function study() {
    const init = JSON.parse($("#study-data").textContent);
    const base = "/studies/" + encodeURIComponent(init.study);
    const trials = new Map(init.trials.map((t) => [t.number, t]));
    let revision = init.revision;
    // The trials on the Pareto front (several objectives): it comes whole with each change,
    // as a new trial can push trials that did not change off it.
    let front = new Set(init.front);
    let historyBy = "number";
    let openTrialNumber = null;
    const view = { sort: "number", desc: false, page: 0, filter: "", state: "" };
    const PAGE = 50;
    const duration = (t) => (t.started_at && t.finished_at ? seconds(t.finished_at) - seconds(t.started_at) : NaN);
    const columns = [
      { key: "number", label: "#", num: true, get: (t) => t.number, show: (t) => t.number },
      { key: "state", label: "State", get: (t) => t.state, show: (t) => `<span class="badge ${t.state}">${t.state}</span>${t.infeasible ? ' <span class="badge infeasible">infeasible</span>' : ""}${front.has(t.number) ? ' <span class="badge front">front</span>' : ""}` },
      // One column per objective (the first's key is "value", as with one).
      ...init.objectives.map((metric, i) => {
        const get = init.objectives.length > 1 ? (t) => (t.values || [])[i] : (t) => t.value;
        return { key: i ? `value${i}` : "value", label: metric, num: true, get, show: (t) => fmtNum(get(t)) };
      }),
      ...init.params.map((p) => ({ key: p, label: p, num: true, get: (t) => t.params[p], show: (t) => fmtNum(t.params[p]) })),
      { key: "duration", label: "Duration", num: true, get: duration, show: (t) => fmtDur(duration(t)) },
      { key: "started", label: "Started", get: (t) => t.started_at || "", show: (t) => fmtTime(t.started_at) },
      { key: "error", label: "Error", get: (t) => t.infeasible || t.error || "", show: (t) => `<span class="muted">${esc((t.infeasible || t.error || "").slice(0, 80))}</span>` },
    ];
    const columnOf = (name) => columns.find((c) => c.key === name || c.label === name || (name === "value" && c.key === "value"));

    function matches(t) {
      if (view.state && t.state !== view.state) return false;
      const f = view.filter.trim();
      if (!f) return true;
      return f.split(/\s+/).every((term) => {
        const m = term.match(/^([\w.#-]+)(<=|>=|<|>|=)(.+)$/);
        const col = m && columnOf(m[1] === "#" ? "number" : m[1]);
        if (col) {
          const v = col.get(t);
          const want = Number(m[3]);
          if (m[2] === "=") return String(v) === m[3] || v === want;
          if (typeof v !== "number" || !isFinite(want)) return false;
          return { "<": v < want, ">": v > want, "<=": v <= want, ">=": v >= want }[m[2]];
        }
        const text = [t.number, t.state, t.value, t.error, ...Object.values(t.params)].join(" ").toLowerCase();
        return text.includes(term.toLowerCase());
      });
    }

    function compare(a, b) {
      const col = columnOf(view.sort) || columns[0];
      const va = col.get(a), vb = col.get(b);
      const missingA = va === undefined || va === null || (typeof va === "number" && isNaN(va));
      const missingB = vb === undefined || vb === null || (typeof vb === "number" && isNaN(vb));
      if (missingA || missingB) return missingA - missingB;
      const order = typeof va === "number" && typeof vb === "number" ? va - vb : String(va).localeCompare(String(vb));
      return (view.desc ? -order : order) || a.number - b.number;
    }

    function bestNumber() {
      // Several objectives have a front, drawn above, rather than one best trial.
      if (init.objectives.length > 1) return null;
      let best = null;
      for (const t of trials.values()) {
        if (t.state !== "succeeded" || t.value === null || t.infeasible) continue;
        if (!best || (init.goal === "minimize" ? t.value < best.value : t.value > best.value)) best = t;
      }
      return best && best.number;
    }

    function renderTable() {
      const head = columns.map((c) => `<th class="sortable${c.num ? " num" : ""}" data-sort="${esc(c.key)}">${esc(c.label)}${view.sort === c.key ? `<span class="arrow">${view.desc ? "▼" : "▲"}</span>` : ""}</th>`).join("");
      $("#trial-table thead").innerHTML = `<tr>${head}</tr>`;
      const rows = [...trials.values()].filter(matches).sort(compare);
      const pages = Math.max(1, Math.ceil(rows.length / PAGE));
      view.page = Math.min(view.page, pages - 1);
      const best = bestNumber();
      const shown = rows.slice(view.page * PAGE, (view.page + 1) * PAGE);
      $("#trial-table tbody").innerHTML = shown.length
        ? shown.map((t) => `<tr class="clickable${t.number === best || front.has(t.number) ? " best-row" : ""}" data-trial="${t.number}" data-state="${t.state}">${columns.map((c) => `<td${c.num ? ' class="num mono"' : ""}>${c.show(t)}</td>`).join("")}</tr>`).join("")
        : `<tr><td colspan="${columns.length}" class="empty-row">${trials.size ? "No trial matches the filter." : "No trials yet: they appear here as the study runs."}</td></tr>`;
      $("#pager").innerHTML = `<span>${rows.length} of ${trials.size} trials</span><span><button data-page="-1" ${view.page === 0 ? "disabled" : ""}>Previous</button> page ${view.page + 1} of ${pages} <button data-page="1" ${view.page >= pages - 1 ? "disabled" : ""}>Next</button></span>`;
    }

    $("#trial-table").addEventListener("click", (e) => {
      const th = e.target.closest("th[data-sort]");
      if (!th) return;
      view.desc = view.sort === th.dataset.sort ? !view.desc : false;
      view.sort = th.dataset.sort;
      renderTable();
    });
    $("#pager").addEventListener("click", (e) => {
      const b = e.target.closest("button[data-page]");
      if (b) { view.page += Number(b.dataset.page); renderTable(); }
    });
    $("#filter").addEventListener("input", (e) => { view.filter = e.target.value; view.page = 0; renderTable(); });
    $("#state-filter").addEventListener("change", (e) => { view.state = e.target.value; view.page = 0; renderTable(); });

    async function openTrial(number) {
      openTrialNumber = number;
      $("#drawer-body").innerHTML = await fetchText(`${base}/trials/${number}?fragment=1`);
      $("#drawer").hidden = false;
      history.replaceState(null, "", "#trial=" + number);
    }
    function closeTrial() {
      openTrialNumber = null;
      $("#drawer").hidden = true;
      history.replaceState(null, "", location.pathname);
    }
    document.addEventListener("click", (e) => {
      const target = e.target.closest("main [data-trial]");
      if (!target) return;
      e.preventDefault();
      openTrial(Number(target.dataset.trial)).catch((err) => setLive(false, err.message));
    });
    $("#drawer-close").addEventListener("click", closeTrial);
    document.addEventListener("keydown", (e) => { if (e.key === "Escape") closeTrial(); });

    const historyToggle = $("#history-by");
    historyToggle && historyToggle.addEventListener("click", async (e) => {
      const b = e.target.closest("button[data-by]");
      if (!b) return;
      historyBy = b.dataset.by;
      historyToggle.querySelectorAll("button").forEach((x) => x.classList.toggle("on", x === b));
      await refreshFigure($('.figure-slot[data-kind="history"]'));
    });

    async function refreshFigure(slot) {
      const kind = slot.dataset.kind;
      const by = kind === "history" && historyBy === "time" ? "?by=time" : "";
      slot.innerHTML = await fetchText(`${base}/figures/${kind}${by}`);
      slot.dataset.revision = revision;
    }

    // The figures follow the table at once on a small study, and at most every 10 s on a
    // large one that changes all the time: drawing them costs the machine the controller runs on.
    let figuresStale = false;
    let figuresAt = Date.now();
    async function refreshFigures() {
      const every = trials.size > 1000 ? 10000 : 0;
      if (!figuresStale || Date.now() - figuresAt < every) return;
      figuresStale = false;
      figuresAt = Date.now();
      await Promise.all([...document.querySelectorAll(".figure-slot")].map(refreshFigure));
    }

    poll(async () => {
      await refreshFigures();
      const changes = JSON.parse(await fetchText(`/api/studies/${encodeURIComponent(init.study)}/changes?since=${revision}`));
      // Another study of this name (the database was replaced), or a restarted server, which
      // counts revisions from 1 again: start over from its page.
      if (changes.instance !== init.instance || changes.revision < revision) { location.reload(); return; }
      if (changes.revision === revision) return;
      revision = changes.revision;
      for (const t of changes.trials) trials.set(t.number, t);
      if (changes.front) front = new Set(changes.front);
      if (changes.summary) $("#summary").innerHTML = changes.summary;
      renderTable();
      figuresStale = true;
      await refreshFigures();
      if (openTrialNumber !== null && changes.trials.some((t) => t.number === openTrialNumber)) await openTrial(openTrialNumber);
      document.body.dataset.revision = revision;
    });

    renderTable();
    document.body.dataset.revision = revision;
    // The page is drawn: benchmarks read this mark (bench/dashboard_scale.py).
    performance.mark("hptune-ready");
    const hash = location.hash.match(/^#trial=(\d+)$/);
    if (hash) openTrial(Number(hash[1]));
  }
})();

/* hippo-engine web page: index statistics (GET /stats): graph sizes, documents by status, the
 * extractor, the storage and the version, drawn as definition lists (nested objects nest); the server
 * process's requests per route ("requests") as a table.
 */
"use strict";

(function () {
  const hippo = window.hippo;
  const { el, fmt, api, status } = hippo;
  const $ = (id) => document.getElementById(id);

  const label = (key) => String(key).replace(/_/g, " ");

  function value(v) {
    if (v === null || v === undefined) return "–";
    if (typeof v === "number") return fmt.number(v);
    if (typeof v === "boolean") return v ? "yes" : "no";
    if (Array.isArray(v) && v.every((x) => x === null || typeof x !== "object")) return v.join(", ") || "–";
    if (typeof v === "object") return JSON.stringify(v);
    return String(v);
  }

  /** A definition list of an object's plain values; nested objects become their own lists. */
  function list(obj, depth) {
    const dl = el("dl", { className: "kv" });
    for (const [key, v] of Object.entries(obj)) {
      const nested = v && typeof v === "object" && !Array.isArray(v) && depth < 3;
      dl.append(el("dt", { text: label(key) }), el("dd", {}, nested ? list(v, depth + 1) : value(v)));
    }
    return dl;
  }

  const COLUMNS = [["method", "method"], ["route", "route"], ["requests", "requests"], ["client_errors", "4xx"],
    ["server_errors", "5xx"], ["p50_ms", "p50 ms"], ["p90_ms", "p90 ms"], ["p99_ms", "p99 ms"], ["max_ms", "max ms"]];

  /** The requests card: since when and which process, then one table row per method and route. */
  function requestsCard(req) {
    const head = el("tr", {}, COLUMNS.map(([, title]) => el("th", { text: title, attrs: { scope: "col" } })));
    const rows = (req.routes || []).map((r) => el("tr", {}, COLUMNS.map(([key]) =>
      el("td", { className: key === "method" || key === "route" ? "" : "num", text: value(r[key]) }))));
    const table = el("table", { className: "requests-table" },
      el("caption", { text: "Per route since " + (req.since || "–") + " (process " + value(req.process) +
        ", " + value(req.total) + " requests)" }), el("thead", {}, head), el("tbody", {}, rows));
    return el("section", { className: "card stat-card requests-card" }, el("h3", { text: "requests" }), table);
  }

  async function refresh() {
    if (!hippo.workspaceExists()) {
      $("stats").replaceChildren();
      status($("stats-status"), "Workspace " + hippo.settings.workspace +
        " holds no documents yet: adding one on the Documents tab creates it.", "info");
      return;
    }
    status($("stats-status"), "Loading…", "busy");
    try {
      const data = (await api("GET", "stats")) || {};
      const plain = {};
      const cards = [];
      for (const [key, v] of Object.entries(data)) {
        if (key === "requests" && v && Array.isArray(v.routes)) {
          cards.push(requestsCard(v));
        } else if (v && typeof v === "object" && !Array.isArray(v)) {
          cards.push(el("section", { className: "card stat-card" }, el("h3", { text: label(key) }), list(v, 1)));
        } else {
          plain[key] = v;
        }
      }
      if (Object.keys(plain).length) {
        cards.unshift(el("section", { className: "card stat-card" }, el("h3", { text: "index" }), list(plain, 1)));
      }
      $("stats").replaceChildren(...cards);
      const ws = hippo.settings.workspace || "default";
      status($("stats-status"), "Workspace " + ws + ", read " + new Date().toLocaleTimeString() + ".", "info");
    } catch (err) {
      status($("stats-status"), "Could not read the statistics: " + err.message, "error");
    }
  }

  hippo.stats = {
    init() {
      $("stats-refresh").addEventListener("click", refresh);
      hippo.onShow.stats = refresh;
    },
    refresh,
  };
})();

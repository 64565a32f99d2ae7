/* hippo-engine web page: shared helpers (DOM building, JSON API calls, settings, tabs) and start-up.
 *
 * Plain JavaScript, no build step. The other scripts (graph.js, search.js, documents.js, stats.js)
 * add their parts to the `hippo` namespace; this file starts them once the page has loaded.
 * Text from the server (passages, titles, answers, errors) is only ever set through textContent or
 * text nodes, never parsed as HTML.
 */
"use strict";

(function () {
  const hippo = (window.hippo = window.hippo || {});
  const store = window.sessionStorage;
  const WORKSPACE_RE = /^[a-z0-9][a-z0-9_-]{0,62}$/;

  /** Build an element: el("li", {className, text, attrs: {name: value}, on: {click: fn}}, ...children).
   *  Children that are strings become text nodes. */
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    const p = props || {};
    if (p.className) node.className = p.className;
    if (p.text !== undefined && p.text !== null) node.textContent = String(p.text);
    for (const [name, value] of Object.entries(p.attrs || {})) {
      if (value === true) node.setAttribute(name, "");
      else if (value !== undefined && value !== null && value !== false) node.setAttribute(name, String(value));
    }
    for (const [type, fn] of Object.entries(p.on || {})) node.addEventListener(type, fn);
    for (const child of children.flat()) {
      if (child !== undefined && child !== null && child !== false) node.append(child);
    }
    return node;
  }

  /** An error answered by the API ({"error": {"message", "type"}}) or a failed request. */
  class ApiError extends Error {
    constructor(message, status, type) {
      super(message);
      this.name = "ApiError";
      this.status = status;
      this.type = type || "";
    }
  }

  const settings = {
    workspace: store.getItem("hippo.workspace") || "",
    apiKey: store.getItem("hippo.apiKey") || "",
  };

  /** The path prefix of the chosen workspace ("" for the default one). */
  function prefix() {
    return settings.workspace ? "w/" + encodeURIComponent(settings.workspace) + "/" : "";
  }

  /** Call the JSON API: api("POST", "retrieve", {body}); paths are relative to the page, under the
   *  chosen workspace unless scoped is false. Resolves to the parsed JSON, rejects with ApiError. */
  async function api(method, path, options) {
    const o = options || {};
    const url = new URL((o.scoped === false ? "" : prefix()) + path, document.baseURI);
    for (const [key, value] of Object.entries(o.query || {})) {
      if (value !== undefined && value !== null && value !== "") url.searchParams.set(key, String(value));
    }
    const headers = { Accept: "application/json" };
    if (o.body !== undefined) headers["Content-Type"] = "application/json";
    if (settings.apiKey) headers["X-API-Key"] = settings.apiKey;
    let response;
    try {
      response = await fetch(url, {
        method, headers, cache: "no-store", credentials: "same-origin",
        body: o.body === undefined ? undefined : JSON.stringify(o.body),
      });
    } catch (err) {
      throw new ApiError("cannot reach the server (" + err.message + ")", 0, "network");
    }
    const text = await response.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch (err) {
      data = null;
    }
    if (!response.ok) {
      const e = data && data.error;
      let message = (e && e.message) || (data && typeof data.detail === "string" && data.detail) ||
        response.status + " " + response.statusText;
      if (response.status === 401 || response.status === 403) message += " (enter the API key at the top)";
      throw new ApiError(message, response.status, e && e.type);
    }
    return data;
  }

  /** Show a message in a status element; kind: "info", "busy", "ok" or "error". */
  function status(node, message, kind) {
    node.textContent = message || "";
    node.dataset.kind = message ? kind || "info" : "";
    if (node.id === "global-status") node.hidden = !message;
  }

  const fmt = {
    /** A score with 4 significant digits. */
    score(x) {
      return typeof x === "number" && isFinite(x) ? Number(x.toPrecision(4)).toString() : "–";
    },
    /** A share (0..1) as a percentage. */
    pct(x) {
      return typeof x === "number" && isFinite(x) ? (100 * x).toFixed(1) + "%" : "–";
    },
    /** A time given as epoch seconds, epoch milliseconds or an ISO string. */
    time(t) {
      if (t === undefined || t === null || t === "") return "–";
      const d = typeof t === "number" ? new Date(t < 1e12 ? t * 1000 : t) : new Date(t);
      return isNaN(d.getTime()) ? String(t) : d.toLocaleString();
    },
    number(x) {
      return typeof x === "number" ? x.toLocaleString(undefined, { maximumFractionDigits: 4 }) : String(x);
    },
    /** Shorten text to n characters. */
    short(text, n) {
      const s = String(text || "").replace(/\s+/g, " ").trim();
      return s.length > n ? s.slice(0, n - 1) + "…" : s;
    },
  };

  /** A passage stored as "title\ntext" (how titled documents are indexed): [title, body]. */
  function splitTitle(text) {
    const s = String(text || "");
    const cut = s.indexOf("\n");
    if (cut > 0 && cut <= 200) return [s.slice(0, cut).trim(), s.slice(cut + 1).trim()];
    return ["", s];
  }

  /** A bar showing value / max (decorative: the number is always written beside it). */
  function bar(value, max, className) {
    const fill = el("span", { className: "bar-fill" });
    const ratio = max > 0 && value > 0 ? Math.min(1, value / max) : 0;
    fill.style.width = (100 * ratio).toFixed(1) + "%";
    return el("span", { className: "bar " + (className || ""), attrs: { "aria-hidden": "true" } }, fill);
  }

  // ----------------------------------------------------------------------------- tabs
  const TABS = ["search", "documents", "stats"];
  const onShow = {};

  function showTab(name, focusTab) {
    if (!TABS.includes(name)) name = "search";
    for (const t of TABS) {
      const tab = document.getElementById("tab-" + t);
      const selected = t === name;
      tab.setAttribute("aria-selected", String(selected));
      tab.tabIndex = selected ? 0 : -1;
      document.getElementById("panel-" + t).hidden = !selected;
      if (selected && focusTab) tab.focus();
    }
    if (location.hash !== "#" + name) history.replaceState(null, "", "#" + name);
    if (onShow[name]) onShow[name]();
  }

  function initTabs() {
    const list = document.querySelector('[role="tablist"]');
    for (const t of TABS) document.getElementById("tab-" + t).addEventListener("click", () => showTab(t));
    list.addEventListener("keydown", (event) => {
      const current = TABS.findIndex((t) => document.getElementById("tab-" + t).getAttribute("aria-selected") === "true");
      const moves = { ArrowRight: current + 1, ArrowLeft: current - 1, Home: 0, End: TABS.length - 1 };
      if (!(event.key in moves)) return;
      event.preventDefault();
      showTab(TABS[(moves[event.key] + TABS.length) % TABS.length], true);
    });
    window.addEventListener("hashchange", () => showTab(location.hash.slice(1)));
  }

  // ----------------------------------------------------------------------------- settings
  //: the workspaces the server has (GET /workspaces); null until known
  let known = null;

  /** Fill the workspace list from the server; remembers which workspaces exist. */
  async function loadWorkspaces() {
    const list = document.getElementById("workspace-list");
    try {
      const data = await api("GET", "workspaces", { scoped: false });
      const items = Array.isArray(data) ? data : (data && data.workspaces) || [];
      known = new Set(items.map((w) => (typeof w === "string" ? w : w.name)));
      list.replaceChildren(...items.map((w) => {
        const name = typeof w === "string" ? w : w.name;
        const count = typeof w === "object" && w.documents !== undefined && w.documents !== null
          ? " (" + w.documents + " documents)" : "";
        return el("option", { attrs: { value: name }, text: name + count });
      }));
    } catch (err) {
      known = null;
      if (err.status === 401 || err.status === 403) status(document.getElementById("global-status"), err.message, "error");
    }
  }

  /** Whether the chosen workspace exists (a named one is made by its first document); true when unknown. */
  function workspaceExists() {
    return !settings.workspace || known === null || known.has(settings.workspace);
  }

  function initSettings() {
    const form = document.getElementById("settings-form");
    const workspace = document.getElementById("workspace");
    const key = document.getElementById("api-key");
    workspace.value = settings.workspace;
    key.value = settings.apiKey;
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const typed = workspace.value.trim();
      const name = typed === "default" ? "" : typed;
      if (name && !WORKSPACE_RE.test(name)) {
        status(document.getElementById("global-status"),
          "A workspace name is 1 to 63 lower-case letters, digits, _ or -, starting with a letter or digit.", "error");
        workspace.focus();
        return;
      }
      const changed = name !== settings.workspace;
      settings.workspace = name;
      settings.apiKey = key.value;
      store.setItem("hippo.workspace", name);
      if (key.value) store.setItem("hippo.apiKey", key.value);
      else store.removeItem("hippo.apiKey");
      status(document.getElementById("global-status"), "", "");
      if (changed) {
        for (const part of ["search", "documents"]) if (hippo[part]) hippo[part].reset();
      }
      if (hippo.search) hippo.search.loadModes();
      loadWorkspaces().then(() => {
        const current = TABS.find((t) => !document.getElementById("panel-" + t).hidden);
        if (onShow[current]) onShow[current]();
      });
    });
  }

  Object.assign(hippo, { el, api, ApiError, status, fmt, splitTitle, bar, settings, showTab, onShow, loadWorkspaces,
    workspaceExists });

  document.addEventListener("DOMContentLoaded", () => {
    initSettings();
    initTabs();
    for (const part of ["graph", "search", "documents", "stats"]) {
      if (hippo[part] && hippo[part].init) hippo[part].init();
    }
    loadWorkspaces().then(() => showTab(location.hash.slice(1) || "search"));
  });
})();

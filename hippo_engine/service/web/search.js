/* hippo-engine web page: the query form, the ranked passages with score bars and their explanations
 * (seeds, shares, paths; POST /retrieve with explain, or POST /explain on demand) and the answer with
 * clickable citations (POST /answer).
 */
"use strict";

(function () {
  const hippo = window.hippo;
  const { el, fmt, api, status } = hippo;
  //: how explanations name a passage's node (its title follows)
  const PASSAGE_NODE = "passage: ";
  const CITATION_RE = /\[(\s*\d+\s*(?:[-–,]\s*\d+\s*)*)\]/g;
  const state = { query: "", mode: "", passages: [], explanations: new Map() };

  const $ = (id) => document.getElementById(id);

  function readForm() {
    const form = $("query-form");
    if (!form.reportValidity()) return null;
    if (!hippo.workspaceExists()) {
      status($("search-status"), "Workspace " + hippo.settings.workspace +
        " holds no documents yet: add some on the Documents tab.", "error");
      return null;
    }
    const query = $("query").value.trim();
    if (!query) return null;
    const top_k = Math.max(1, Math.min(50, parseInt($("top-k").value, 10) || 5));
    return { query, top_k, mode: $("mode").value };
  }

  function busy(on, message) {
    $("retrieve-button").disabled = on;
    $("answer-button").disabled = on;
    $("results").setAttribute("aria-busy", String(on));
    status($("search-status"), message, on ? "busy" : "info");
  }

  // ----------------------------------------------------------------------------- explanations
  function seedsTable(ex) {
    const seeds = [...(ex.seeds || [])].sort((a, b) => b.share - a.share);
    const shown = seeds.slice(0, 12);
    const rest = seeds.slice(12);
    const maxShare = Math.max(1e-12, ...seeds.map((s) => s.share), ex.score > 0 ? ex.dense_prior / ex.score : 0);
    const row = (name, weight, contribution, share, cls) => el("tr", { className: cls || "" },
      el("th", { text: name, attrs: { scope: "row" } }),
      el("td", { className: "num", text: weight }),
      el("td", { className: "num", text: fmt.score(contribution) }),
      el("td", { className: "share" }, hippo.bar(share, maxShare, "share-bar"), el("span", { text: fmt.pct(share) })));
    const rows = shown.map((s) => row(s.entity + (s.kind === "community" ? " (community)" : ""),
      fmt.score(s.weight), s.contribution, s.share, "seed-row"));
    if (rest.length) {
      const share = rest.reduce((sum, s) => sum + s.share, 0);
      const contribution = rest.reduce((sum, s) => sum + s.contribution, 0);
      rows.push(row(rest.length + " more seeds", "", contribution, share, "more-row"));
    }
    if (ex.dense_prior) {
      rows.push(row("dense prior (passage seeds)", "", ex.dense_prior, ex.score > 0 ? ex.dense_prior / ex.score : 0,
        "prior-row"));
    }
    return el("table", { className: "seeds" },
      el("caption", { text: "Seeds: each one's part of the score" }),
      el("thead", {}, el("tr", {}, ["Seed", "Weight", "Contribution", "Share"].map((h) =>
        el("th", { text: h, attrs: { scope: "col" } })))),
      el("tbody", {}, rows));
  }

  function pathItem(path) {
    const chain = el("p", { className: "chain" });
    (path.nodes || []).forEach((node, i) => {
      if (i > 0) {
        const edge = (path.edges || [])[i - 1] || {};
        chain.append(el("span", { className: "edge-kind", text: " —" + (edge.kind || "") + "→ " }));
      }
      const name = String(node);
      if (name.startsWith(PASSAGE_NODE)) {
        chain.append(el("span", { className: "node passage-node", text: name.slice(PASSAGE_NODE.length),
          attrs: { title: "passage" } }));
      } else {
        chain.append(el("span", { className: i === 0 ? "node seed-node" : "node", text: name }));
      }
    });
    const facts = [];
    for (const edge of path.edges || []) {
      for (const text of edge.text || []) facts.push(el("li", { text }));
    }
    return el("li", { className: "path" },
      el("span", { className: "path-share" }, hippo.bar(path.share, 1, "share-bar"),
        el("span", { text: fmt.pct(path.share) + " of the score" })),
      chain, facts.length ? el("ul", { className: "facts" }, facts) : null);
  }

  // how a passage got its rank, in a reader's words (explanations' placed_by)
  const PLACED = {
    ppr: "Placed by the graph walk (PPR)",
    score: "Placed by its score (the parts below add up to it)",
    dense_first: "Placed among the first by its closeness to the query (setting dense_first)",
    dense_agree: "Placed first: the closest passage to the query, near the top of the graph's ranking " +
      "(setting dense_agree)",
    dense_fallback: "Placed by its closeness to the query alone (no graph walk)",
    dense: "Placed by its closeness to the query alone",
  };

  function renderExplanation(box, ex) {
    const bits = [PLACED[ex.placed_by || "ppr"] || "Placed by " + ex.placed_by, "score " + fmt.score(ex.score)];
    if (ex.ranked_score !== undefined && Math.abs(ex.ranked_score - ex.score) > 1e-12) {
      bits.push("ranked score " + fmt.score(ex.ranked_score));
    }
    if (ex.dense_rank) bits.push("dense rank " + ex.dense_rank + " (similarity " + fmt.score(ex.dense_score) + ")");
    if (ex.dense_term) bits.push("dense term " + fmt.score(ex.dense_term) + " of the score");
    const parts = [el("p", { className: "summary", text: bits.join(" · ") + "." })];
    if (ex.walk) parts.push(el("p", { className: "note", text: ex.walk }));
    if (ex.walk_detail) parts.push(el("p", { className: "muted small", text: "Settings: " + ex.walk_detail }));
    if (ex.used_fallback) {
      parts.push(el("p", { className: "note", text: "Dense fallback: " + (ex.fallback_reason || "no seed") }));
    }
    if ((ex.seeds || []).length || ex.dense_prior) parts.push(seedsTable(ex));
    if (ex.check !== undefined) {
      parts.push(el("p", { className: "muted small",
        text: "The terms add up to the score within " + Number(ex.check).toExponential(1) + "." }));
    }
    const paths = ex.paths || [];
    parts.push(el("h4", { text: "Paths from the seeds" }));
    parts.push(paths.length ? el("ol", { className: "paths" }, paths.map(pathItem))
      : el("p", { className: "muted", text: "No walk from a seed reaches this passage." }));
    box.replaceChildren(...parts);
  }

  async function toggleExplanation(button, box, passage) {
    const open = button.getAttribute("aria-expanded") === "true";
    button.setAttribute("aria-expanded", String(!open));
    box.hidden = open;
    if (open) return;
    hippo.graph.highlight(passage.id);
    if (box.dataset.loaded) return;
    let ex = state.explanations.get(passage.id);
    if (!ex && state.mode && state.mode !== "hipporag2") {
      status(box, "Explanations follow the graph ranking (mode hipporag2); mode " + state.mode + " ranked this " +
        "passage " + (state.mode === "naive" ? "by its similarity to the query alone." : "from its HiRAG context."),
      "info");
      return;
    }
    if (!ex) {
      status(box, "Explaining…", "busy");
      try {
        const data = await api("POST", "explain", { body: { query: state.query, passage_ids: [passage.id] } });
        const list = Array.isArray(data) ? data : (data && data.explanations) || [];
        ex = list.find((x) => x.passage_id === passage.id) || list[0];
      } catch (err) {
        status(box, "Could not explain: " + err.message, "error");
        return;
      }
    }
    if (!ex) {
      status(box, "The server gave no explanation for this passage.", "info");
      return;
    }
    state.explanations.set(passage.id, ex);
    box.dataset.kind = "";
    box.dataset.loaded = "1";
    renderExplanation(box, ex);
  }

  // ----------------------------------------------------------------------------- passages
  function passageCard(p, index, maxScore) {
    const [title, body] = hippo.splitTitle(p.text);
    const number = index + 1;
    const boxId = "explain-" + number;
    const box = el("div", { className: "explain", attrs: { id: boxId, role: "region", "aria-label": "Why passage " +
      number + " ranked" } });
    box.hidden = true;
    const why = el("button", { className: "why secondary", text: "Why this rank?",
      attrs: { type: "button", "aria-expanded": "false", "aria-controls": boxId } });
    why.addEventListener("click", () => toggleExplanation(why, box, p));
    const text = el("p", { className: "passage-text", text: body });
    const docs = (p.doc_ids || []).length
      ? el("p", { className: "doc-ids muted small", text: "document " + p.doc_ids.join(", ") }) : null;
    return el("li", { className: "card passage", attrs: { "data-id": p.id, tabindex: "-1",
      "aria-labelledby": "passage-title-" + number } },
    el("div", { className: "passage-head" },
      el("span", { className: "rank", text: "[" + number + "]" }),
      el("h3", { className: "passage-title", text: title || fmt.short(body, 80),
        attrs: { id: "passage-title-" + number } }),
      el("span", { className: "score", text: fmt.score(p.score) })),
    hippo.bar(p.score, maxScore, "score-bar"),
    text, docs, why, box);
  }

  function renderCandidateFacts() {
    const first = state.explanations.values().next().value;
    const facts = (first && first.candidate_facts) || [];
    const box = $("candidate-facts");
    box.hidden = !facts.length;
    $("candidate-facts-list").replaceChildren(...facts.map((f) => {
      const fact = Array.isArray(f.fact) ? f.fact.join(" · ") : String(f.fact);
      return el("li", { className: f.kept ? "kept" : "dropped",
        text: (f.kept ? "kept: " : "dropped: ") + fact + " (" + fmt.score(f.score) + ")" });
    }));
  }

  function renderPassages(passages) {
    state.passages = passages;
    const maxScore = Math.max(1e-12, ...passages.map((p) => Number(p.score) || 0));
    $("results").replaceChildren(...passages.map((p, i) => passageCard(p, i, maxScore)));
    $("results-empty").hidden = passages.length > 0;
    $("results-empty").textContent = "No passage matched.";
    renderCandidateFacts();
  }

  /** Scroll to passage number n (1-based), mark it and select its node in the graph. */
  function focusPassage(n) {
    const card = $("results").children[n - 1];
    if (!card) return;
    for (const c of $("results").querySelectorAll(".highlight")) c.classList.remove("highlight");
    card.classList.add("highlight");
    card.scrollIntoView({ block: "nearest", behavior: "smooth" });
    card.focus({ preventScroll: true });
    hippo.graph.highlight(card.dataset.id);
  }

  function focusPassageId(id) {
    const index = state.passages.findIndex((p) => p.id === id);
    if (index >= 0) focusPassage(index + 1);
  }

  // ----------------------------------------------------------------------------- answer
  function citationButton(n) {
    const p = state.passages[n - 1];
    const title = p ? hippo.splitTitle(p.text)[0] || fmt.short(p.text, 60) : "";
    return el("button", { className: "cite", text: String(n),
      attrs: { type: "button", "aria-label": "Passage " + n + (title ? ": " + title : ""), title },
      on: { click: () => focusPassage(n) } });
  }

  /** The marker's numbers ("1, 3", "2-4") within the shown passages, or null. */
  function citedNumbers(marker) {
    const numbers = [];
    for (const part of marker.split(",")) {
      const range = part.split(/[-–]/).map((x) => parseInt(x, 10));
      const [a, b] = range.length === 2 ? range : [range[0], range[0]];
      if (!(a >= 1 && b >= a && b - a < 50)) return null;
      for (let n = a; n <= b; n++) numbers.push(n);
    }
    return numbers.every((n) => n <= state.passages.length) ? numbers : null;
  }

  function renderAnswer(data) {
    const text = String(data.answer || "");
    const out = $("answer-text");
    out.replaceChildren();
    let last = 0;
    for (const match of text.matchAll(CITATION_RE)) {
      const numbers = citedNumbers(match[1]);
      if (!numbers) continue;
      out.append(text.slice(last, match.index));
      const group = el("span", { className: "cite-group" }, "[");
      numbers.forEach((n, i) => group.append(...(i ? [", "] : []), citationButton(n)));
      group.append("]");
      out.append(group);
      last = match.index + match[0].length;
    }
    out.append(text.slice(last) || (text ? "" : "(no answer)"));
    const cited = (data.citations || []).map((c) => state.passages.findIndex((p) => p.id === c.id) + 1)
      .filter((n) => n > 0);
    if (!out.querySelector("button.cite") && cited.length) {   // the reader's markers were not kept in the text
      const group = el("span", { className: "cite-group" }, " [");
      [...new Set(cited)].forEach((n, i) => group.append(...(i ? [", "] : []), citationButton(n)));
      group.append("]");
      out.append(group);
    }
    const sources = (data.citations || []).map((c) => {
      const index = state.passages.findIndex((p) => p.id === c.id);
      const title = hippo.splitTitle(c.text)[0] || fmt.short(c.text, 80);
      return index >= 0
        ? el("li", {}, el("button", { className: "link", text: "[" + (index + 1) + "] " + title,
          attrs: { type: "button" }, on: { click: () => focusPassage(index + 1) } }))
        : el("li", { text: title });
    });
    $("answer-sources").replaceChildren(...(sources.length
      ? [el("h3", { text: "Sources" }), el("ul", {}, sources)] : []));
    $("answer-notes").replaceChildren(...(data.notes || []).map((n) => el("li", { text: String(n) })));
    $("answer").hidden = false;
  }

  // ----------------------------------------------------------------------------- actions
  async function loadGraph(query, top) {
    try {
      hippo.graph.draw(await api("GET", "subgraph", { query: { query, top_k: Math.min(top, 10) } }));
    } catch (err) {
      hippo.graph.clear("Could not draw the graph: " + err.message);
    }
  }

  async function retrieve() {
    const form = readForm();
    if (!form) return;
    busy(true, "Retrieving…");
    $("answer").hidden = true;
    const body = { query: form.query, top_k: form.top_k, explain: true };
    if (form.mode) body.mode = form.mode;
    const graph = loadGraph(form.query, form.top_k);
    try {
      const data = await api("POST", "retrieve", { body });
      const result = (data.results || [])[0] || { passages: [] };
      state.query = form.query;
      state.mode = result.mode || form.mode;
      state.explanations = new Map((result.explanations || []).map((x) => [x.passage_id, x]));
      renderPassages(result.passages || []);
      busy(false, (result.passages || []).length + " passages (mode " + (state.mode || "default") + ").");
    } catch (err) {
      busy(false, "");
      status($("search-status"), "Retrieval failed: " + err.message, "error");
    }
    await graph;
    if (state.mode && state.mode !== "hipporag2" && hippo.graph.instance()) {
      status($("graph-info"), "The graph shows the graph ranking's seeds and passages (hipporag2); the list " +
        "is ranked by mode " + state.mode + ".", "info");
    }
  }

  async function answer() {
    const form = readForm();
    if (!form) return;
    busy(true, "Answering (the reader may take a while)…");
    const body = { question: form.query, top_k: form.top_k };
    if (form.mode) body.mode = form.mode;
    const graph = loadGraph(form.query, form.top_k);
    try {
      const data = await api("POST", "answer", { body });
      state.query = form.query;
      state.mode = form.mode;
      state.explanations = new Map();
      renderPassages(data.passages || []);
      renderAnswer(data);
      busy(false, "Answered from " + (data.passages || []).length + " passages.");
    } catch (err) {
      busy(false, "");
      status($("search-status"), "Answer failed: " + err.message, "error");
    }
    await graph;
  }

  function reset() {
    state.query = "";
    state.passages = [];
    state.explanations = new Map();
    $("results").replaceChildren();
    $("results-empty").hidden = false;
    $("results-empty").textContent = "Run a query to see ranked passages and why they ranked.";
    $("candidate-facts").hidden = true;
    $("answer").hidden = true;
    status($("search-status"), "", "");
    hippo.graph.clear("");
  }

  /** Fill the mode list from the server's modes (GET /modes): every registered mode, with its summary. */
  async function loadModes() {
    const select = $("mode");
    try {
      const data = await api("GET", "modes", { scoped: false });
      const options = (data.modes || []).map((m) => el("option", {
        attrs: { value: m.name, title: m.summary || "" }, text: m.name + (m.summary ? " (" + m.summary + ")" : "") }));
      select.replaceChildren(select.options[0], ...options);
    } catch (err) {      // without the key: the settings form's message says so; asked again once it is entered
      if (err.status !== 401 && err.status !== 403) {
        status($("search-status"), "Could not list the modes: " + err.message, "error");
      }
    }
  }

  hippo.search = {
    init() {
      loadModes();
      $("query-form").addEventListener("submit", (event) => {
        event.preventDefault();
        retrieve();
      });
      $("answer-button").addEventListener("click", answer);
      hippo.graph.onPassage = focusPassageId;
    },
    reset, retrieve, answer, focusPassage, loadModes,
  };
})();

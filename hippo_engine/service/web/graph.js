/* hippo-engine web page: the graph around a query's seed entities and top passages (GET /subgraph),
 * drawn with Cytoscape.js (vendor/cytoscape.min.js), with the same nodes listed as buttons for
 * keyboard and screen-reader users. Labels are drawn on a canvas (never parsed as HTML).
 */
"use strict";

(function () {
  const hippo = window.hippo;
  const { el } = hippo;
  let cy = null;
  let onPassage = null;

  const COLORS = { query: "#212529", seed: "#d9480f", entity: "#1c7ed6", passage: "#2b8a3e", other: "#868e96" };
  //: where /subgraph puts a result passage: node id "passage:<passage id>"
  const PASSAGE = "passage:";

  const STYLE = [
    {
      selector: "node",
      style: {
        "background-color": COLORS.other, label: "data(short)", "font-size": 10, color: "#212529",
        "text-valign": "bottom", "text-margin-y": 3, "text-wrap": "ellipsis", "text-max-width": 130,
        "text-background-color": "#ffffff", "text-background-opacity": 0.8, "text-background-padding": 1,
        width: "data(size)", height: "data(size)", "border-width": 1, "border-color": "#ffffff",
      },
    },
    { selector: "node.entity", style: { "background-color": COLORS.entity } },
    { selector: "node.seed", style: { "background-color": COLORS.seed, "font-weight": "bold" } },
    { selector: "node.passage", style: { "background-color": COLORS.passage, shape: "round-rectangle" } },
    { selector: "node.query", style: { "background-color": COLORS.query, shape: "star", "font-weight": "bold" } },
    { selector: "node:selected", style: { "border-width": 4, "border-color": "#fab005" } },
    {
      selector: "edge",
      style: { width: 1.5, "line-color": "#adb5bd", "curve-style": "bezier", opacity: 0.85 },
    },
    { selector: "edge.fact", style: { "line-color": "#495057" } },
    { selector: "edge.context", style: { "line-style": "dashed", "line-color": "#69db7c" } },
    { selector: "edge.synonymy", style: { "line-style": "dotted", "line-color": "#f783ac", width: 2 } },
    { selector: "edge.seed, edge.dense", style: { "line-color": "#ced4da", width: 1 } },
  ];

  /** The classes of a node: its kind ("query", "seed", "entity", "passage"); a seed is also an entity. */
  function nodeClasses(n) {
    const kind = String(n.kind || "other").toLowerCase();
    return kind === "seed" ? ["entity", "seed"] : [kind];
  }

  function elements(data) {
    const nodes = (data && data.nodes) || [];
    const maxByKind = {};
    for (const n of nodes) maxByKind[n.kind] = Math.max(maxByKind[n.kind] || 1e-12, Number(n.score) || 0);
    const ids = new Set(nodes.map((n) => String(n.id)));
    const out = nodes.map((n) => {
      const score = Number(n.score) || 0;
      const size = n.kind === "query" ? 30 : 14 + 28 * Math.sqrt(Math.max(0, score) / maxByKind[n.kind]);
      return {
        group: "nodes",
        data: {
          id: String(n.id), label: String(n.label || n.id), short: hippo.fmt.short(n.label || n.id, 36),
          kind: String(n.kind || ""), score: n.score === null || n.score === undefined ? null : score, size,
        },
        classes: nodeClasses(n),
      };
    });
    ((data && data.edges) || []).forEach((e) => {
      if (!ids.has(String(e.source)) || !ids.has(String(e.target))) return;
      out.push({
        group: "edges",
        data: { source: String(e.source), target: String(e.target), kind: String(e.kind || "") },
        classes: String(e.kind || "").split("+").map((k) => k.trim().toLowerCase()).filter(Boolean),
      });
    });
    return out;
  }

  /** Say what a node is under the graph, select it, and open its passage for a passage node. */
  function pick(id) {
    if (!cy) return;
    const node = cy.getElementById(id);
    if (node.empty()) return;
    cy.nodes().unselect();
    node.select();
    const d = node.data();
    const kind = node.hasClass("seed") ? "seed entity (share of the scores)" : d.kind || "node";
    const score = d.score === null ? "" : ", score " + hippo.fmt.score(d.score);
    hippo.status(document.getElementById("graph-info"),
      kind + ": " + d.label + " (" + node.degree() + " edges shown" + score + ")", "info");
    if (d.kind === "passage" && d.id.startsWith(PASSAGE) && onPassage) onPassage(d.id.slice(PASSAGE.length));
  }

  function renderList(data) {
    const list = document.getElementById("graph-list");
    const nodes = (data && data.nodes) || [];
    const edges = (data && data.edges) || [];
    const groups = [["query", "Query"], ["seed", "Seed entities"], ["passage", "Passages"],
      ["entity", "Other entities"]];
    const items = groups.map(([cls, title]) => {
      const members = nodes.filter((n) => {
        const c = nodeClasses(n);
        return cls === "entity" ? c.includes("entity") && !c.includes("seed") : c.includes(cls);
      });
      if (!members.length) return null;
      return el("li", {}, el("strong", { text: title + " (" + members.length + ")" }),
        el("ul", {}, members.map((n) => el("li", {},
          el("button", { className: "link", text: hippo.fmt.short(n.label || n.id, 80),
            attrs: { type: "button", title: String(n.label || n.id), "data-node": String(n.id) },
            on: { click: () => pick(String(n.id)) } })))));
    });
    list.replaceChildren(el("li", { text: nodes.length + " nodes, " + edges.length + " edges" }), ...items);
  }

  /** Draw a /subgraph answer ({"nodes": [...], "edges": [...]}); an empty one clears the graph. */
  function draw(data) {
    const container = document.getElementById("graph");
    if (cy) cy.destroy();
    cy = null;
    renderList(data);
    if (typeof window.cytoscape !== "function") {
      hippo.status(document.getElementById("graph-info"), "The graph library did not load.", "error");
      return;
    }
    cy = window.cytoscape({
      container, elements: elements(data), style: STYLE,
      minZoom: 0.2, maxZoom: 4, boxSelectionEnabled: false, selectionType: "single",
    });
    const level = (n) => (n.hasClass("query") ? 4 : n.hasClass("seed") ? 3 : n.hasClass("passage") ? 1 : 2);
    cy.layout({ name: "concentric", concentric: level,
      levelWidth: () => 1, animate: false, minNodeSpacing: 18 }).run();
    if (cy.nodes().length > 2) {
      cy.layout({ name: "cose", animate: false, randomize: false, nodeRepulsion: () => 9000,
        idealEdgeLength: () => 70, numIter: 600, fit: true, padding: 24 }).run();
    }
    cy.on("tap", "node", (event) => pick(event.target.id()));
    hippo.status(document.getElementById("graph-info"), cy.nodes().length
      ? "Select a node to see it here; a passage node opens its passage."
      : "No graph for this query.", "info");
  }

  function clear(message) {
    if (cy) cy.destroy();
    cy = null;
    document.getElementById("graph-list").replaceChildren();
    hippo.status(document.getElementById("graph-info"), message || "", "info");
  }

  /** Select a result passage's node without opening anything (its card was opened). */
  function highlight(passageId) {
    if (!cy) return;
    const node = cy.getElementById(PASSAGE + passageId);
    cy.nodes().unselect();
    if (!node.empty()) node.select();
  }

  hippo.graph = {
    init() {
      hippo.onShow.search = () => { if (cy) cy.resize(); };
    },
    draw, clear, highlight,
    /** The Cytoscape instance (or null): tests read its node count. */
    instance: () => cy,
    set onPassage(fn) { onPassage = fn; },
  };
})();

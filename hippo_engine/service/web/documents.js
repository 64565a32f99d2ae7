/* hippo-engine web page: the documents view. Add a document (POST /documents, then follow its job
 * with GET /jobs/{id} until it is done), list them by status with paging (GET /documents), delete one
 * (DELETE /documents/{id}, confirmed in place) and retry the failed ones (POST /documents/retry).
 */
"use strict";

(function () {
  const hippo = window.hippo;
  const { el, fmt, api, status } = hippo;
  const LIMIT = 20;
  const POLL_MS = 800;
  const FINISHED = new Set(["done", "failed"]);
  const state = { offset: 0, total: 0, jobs: new Map() };

  const $ = (id) => document.getElementById(id);

  // ----------------------------------------------------------------------------- jobs
  function jobSummary(job) {
    const p = job.progress || {};
    const bits = ["indexed", "pending", "processing", "failed"]
      .filter((k) => p[k]).map((k) => p[k] + " " + k);
    return "Job " + fmt.short(job.job_id, 20) + ": " + job.status + (bits.length ? " (" + bits.join(", ") + ")" : "");
  }

  function renderJob(item, job) {
    item.dataset.status = job.status;
    item.replaceChildren(
      el("span", { className: "job-line", text: jobSummary(job) }),
      el("ul", { className: "job-docs" }, (job.documents || []).map((d) => el("li", {},
        el("code", { text: d.id }), " ",
        el("span", { className: "badge", text: d.status, attrs: { "data-status": d.status } }),
        d.error ? el("span", { className: "error-text", text: " " + d.error }) : null))));
  }

  async function poll(jobId) {
    const item = state.jobs.get(jobId);
    if (!item) return;
    try {
      const job = await api("GET", "jobs/" + encodeURIComponent(jobId));
      renderJob(item, job);
      if (FINISHED.has(job.status)) {
        state.jobs.delete(jobId);
        refresh();
        return;
      }
    } catch (err) {
      item.dataset.status = "unknown";
      item.replaceChildren(el("span", { className: "error-text", text: "Job " + jobId + ": " + err.message }));
      if (err.status === 404) {
        state.jobs.delete(jobId);
        return;
      }
    }
    setTimeout(() => poll(jobId), POLL_MS);
  }

  /** Show a new job at the top of the jobs list and follow it until it finishes. */
  function track(jobId, documents) {
    const item = el("li", { className: "job", attrs: { "data-job": jobId, "data-status": "pending" } });
    renderJob(item, { job_id: jobId, status: "pending", documents: (documents || []).map((id) =>
      ({ id: typeof id === "string" ? id : id.id, status: "pending" })) });
    $("jobs").prepend(item);
    while ($("jobs").children.length > 10) $("jobs").lastElementChild.remove();
    state.jobs.set(jobId, item);
    setTimeout(() => poll(jobId), POLL_MS / 2);
  }

  async function add(event) {
    event.preventDefault();
    const form = $("doc-form");
    if (!form.reportValidity()) return;
    const doc = { text: $("doc-text").value };
    if (!doc.text.trim()) {
      status($("docs-status"), "The text is empty.", "error");
      return;
    }
    const title = $("doc-title").value.trim();
    const id = $("doc-id").value.trim();
    if (title) doc.title = title;
    if (id) doc.id = id;
    $("add-button").disabled = true;
    try {
      const data = await api("POST", "documents", { body: { documents: [doc] } });
      track(data.job_id, data.documents);
      form.reset();
      if (!hippo.workspaceExists()) await hippo.loadWorkspaces();   // the first document made it
      status($("docs-status"), "Added; indexing in the background (job " + data.job_id + ").", "ok");
      refresh();
    } catch (err) {
      status($("docs-status"), "Could not add the document: " + err.message, "error");
    } finally {
      $("add-button").disabled = false;
    }
  }

  async function retry() {
    try {
      const data = await api("POST", "documents/retry");
      if (data && data.job_id) {
        track(data.job_id, data.documents);
        status($("docs-status"), "Retrying " + (data.documents || []).length + " failed documents.", "ok");
      } else {
        status($("docs-status"), "No failed document to retry.", "info");
      }
    } catch (err) {
      status($("docs-status"), "Retry failed: " + err.message, "error");
    }
  }

  // ----------------------------------------------------------------------------- list
  async function remove(id) {
    try {
      const data = await api("DELETE", "documents/" + encodeURIComponent(id));
      const gone = data && Array.isArray(data.unknown) && data.unknown.includes(id) ? " (it was already gone)" : "";
      status($("docs-status"), "Deleted " + id + gone + ".", "ok");
    } catch (err) {
      status($("docs-status"), "Could not delete " + id + ": " + err.message, "error");
    }
    await refresh();
    $("docs-heading").focus();
  }

  /** Replace a row's Delete button by "Delete?" Yes / No. */
  function confirmDelete(cell, id, button) {
    const yes = el("button", { className: "danger", text: "Yes, delete",
      attrs: { type: "button", "aria-label": "Yes, delete " + id } });
    const no = el("button", { className: "secondary", text: "No",
      attrs: { type: "button", "aria-label": "Keep " + id } });
    const ask = el("span", { className: "confirm" }, el("span", { text: "Delete? " }), yes, " ", no);
    yes.addEventListener("click", () => {
      yes.disabled = true;
      remove(id);
    });
    no.addEventListener("click", () => {
      cell.replaceChildren(button);
      button.focus();
    });
    cell.replaceChildren(ask);
    yes.focus();
  }

  function row(d) {
    const actions = el("td", { className: "actions" });
    const del = el("button", { className: "secondary", text: "Delete",
      attrs: { type: "button", "aria-label": "Delete " + d.id } });
    del.addEventListener("click", () => confirmDelete(actions, d.id, del));
    actions.append(del);
    return el("tr", { attrs: { "data-id": d.id, "data-status": d.status } },
      el("td", {}, el("code", { text: d.id })),
      el("td", { text: d.title || "–" }),
      el("td", {}, el("span", { className: "badge", text: d.status, attrs: { "data-status": d.status } }),
        d.error ? el("span", { className: "error-text", text: " " + d.error }) : null),
      el("td", { text: fmt.time(d.updated) }),
      actions);
  }

  /** The list of a workspace that has no document yet (no call: the server would answer 404). */
  function showEmptyWorkspace() {
    $("docs-body").replaceChildren(el("tr", {}, el("td", { attrs: { colspan: "5" },
      text: "Workspace " + hippo.settings.workspace + " holds no documents yet: adding one creates it." })));
    $("docs-range").textContent = "";
    $("docs-prev").disabled = true;
    $("docs-next").disabled = true;
  }

  async function refresh() {
    const filter = $("doc-status-filter").value;
    if (!hippo.workspaceExists()) return showEmptyWorkspace();
    try {
      const data = await api("GET", "documents", { query: { status: filter, offset: state.offset, limit: LIMIT } });
      const docs = data.documents || [];
      state.total = data.total || 0;
      if (!docs.length && state.offset > 0 && state.total > 0) {
        state.offset = Math.max(0, state.offset - LIMIT);
        return refresh();
      }
      $("docs-body").replaceChildren(...(docs.length ? docs.map(row)
        : [el("tr", {}, el("td", { text: "No documents" + (filter ? " with status " + filter : "") + ".",
          attrs: { colspan: "5" } }))]));
      const first = docs.length ? state.offset + 1 : 0;
      $("docs-range").textContent = first + "–" + (state.offset + docs.length) + " of " + state.total;
      $("docs-prev").disabled = state.offset === 0;
      $("docs-next").disabled = state.offset + LIMIT >= state.total;
    } catch (err) {
      status($("docs-status"), "Could not list the documents: " + err.message, "error");
    }
  }

  function page(step) {
    state.offset = Math.max(0, state.offset + step * LIMIT);
    refresh();
  }

  hippo.documents = {
    init() {
      $("doc-form").addEventListener("submit", add);
      $("docs-refresh").addEventListener("click", refresh);
      $("docs-retry").addEventListener("click", retry);
      $("docs-prev").addEventListener("click", () => page(-1));
      $("docs-next").addEventListener("click", () => page(1));
      $("doc-status-filter").addEventListener("change", () => {
        state.offset = 0;
        refresh();
      });
      $("docs-heading").tabIndex = -1;
      hippo.onShow.documents = refresh;
    },
    refresh,
    reset() {
      state.offset = 0;
      $("jobs").replaceChildren();
      state.jobs.clear();
    },
  };
})();

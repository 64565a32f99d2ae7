"""Comparing two indexes: used by tests and by the reproduction scripts to show that
re-indexing is idempotent and that insert/delete equal a from-scratch build."""
from __future__ import annotations

import numpy as np


def snapshot_index(rag) -> dict:
    """Everything an index holds, in a comparable form: store rows (text, vector), graph nodes,
    edges with weights, synonymy lists, and documents (doc id -> passage ids)."""
    st = rag.index_state.mirrored_stores
    snap: dict = {}
    for ns, s in st.items():
        snap[ns] = {k: (s.text(k), s.matrix[s.row(k)].copy()) for k in s.ids}
    g = rag.graph
    snap["nodes"] = sorted(g.node_ids)
    snap["edges"] = g.edge_dict()
    snap["synonymy"] = {k: dict(v) for k, v in rag.index_state.synonymy.items()}
    snap["documents"] = rag.index_state.all_documents()
    return snap


def diff_snapshots(a: dict, b: dict, vec_atol: float = 1e-6, weight_atol: float = 1e-9) -> list[str]:
    """Human-readable differences between two snapshots (empty list: the same index)."""
    out = []
    for ns in ("passage", "entity", "fact"):
        ka, kb = a[ns].keys(), b[ns].keys()
        if ka != kb:
            out.append(f"{ns} store: {len(ka - kb)} ids only in first, {len(kb - ka)} only in second")
            continue
        texts = sum(a[ns][k][0] != b[ns][k][0] for k in ka)
        if texts:
            out.append(f"{ns} store: {texts} texts differ")
        if ka:
            va = np.stack([a[ns][k][1] for k in sorted(ka)])
            vb = np.stack([b[ns][k][1] for k in sorted(ka)])
            d = float(np.abs(va - vb).max())
            if d > vec_atol:
                out.append(f"{ns} store: vectors differ by up to {d:.2e}")
    if a["nodes"] != b["nodes"]:
        out.append(f"nodes differ: {len(set(a['nodes']) ^ set(b['nodes']))} not shared")
    ea, eb = a["edges"], b["edges"]
    if ea.keys() != eb.keys():
        only_a, only_b = len(ea.keys() - eb.keys()), len(eb.keys() - ea.keys())
        out.append(f"edges differ: {only_a} only in first, {only_b} only in second")
    else:
        worst = max((abs(w - eb[e]) for e, w in ea.items()), default=0.0)
        if worst > weight_atol:
            out.append(f"edge weights differ by up to {worst:.2e}")
    if a["synonymy"] != b["synonymy"]:
        out.append("synonymy neighbour lists differ")
    da, db = a.get("documents"), b.get("documents")
    if da is not None and db is not None and da != db:
        changed = sum(da.get(d) != db.get(d) for d in da.keys() | db.keys())
        out.append(f"documents differ: {changed} document id(s) with other passages or only in one index")
    return out

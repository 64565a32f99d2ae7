"""Workspaces through the HTTP routes: each prefix reaches its own memory, reads of a missing
workspace are 404, writes create it (the real Workspaces: tests/service/integration/test_http_server.py)."""
import pytest
from http_fakes import FakeWorkspaces, make_client


def test_each_prefix_reaches_its_own_memory(client, ws):
    client.post("/w/alpha/documents", json={"documents": [{"id": "a1", "text": "alpha secret"}]})
    client.post("/documents", json={"documents": [{"id": "d1", "text": "default words"}]})
    client.post("/w/beta/documents", json={"documents": [{"id": "b1", "text": "beta words"}]})
    assert set(ws.memories["alpha"].docs) == {"a1"} and set(ws.memories["beta"].docs) == {"b1"}
    assert set(ws.memories[None].docs) == {"d1"}
    hits = client.post("/w/beta/retrieve", json={"query": "alpha secret"}).json()["results"][0]["passages"]
    assert [p["doc_ids"] for p in hits] == [["b1"]]
    assert client.get("/w/beta/documents/a1").status_code == 404
    assert client.get("/documents/a1").status_code == 404
    assert client.get("/w/alpha/documents/a1").json()["text"] == "alpha secret"
    assert client.delete("/w/beta/documents/a1").status_code == 404 and "a1" in ws.memories["alpha"].docs
    job = client.post("/w/alpha/documents", json={"documents": [{"text": "more"}]}).json()["job_id"]
    assert client.get(f"/w/alpha/jobs/{job}").status_code == 200
    assert client.get(f"/w/beta/jobs/{job}").status_code == 404


@pytest.mark.parametrize("method, path, body", [
    ("GET", "/w/ghost/documents", None), ("GET", "/w/ghost/stats", None), ("GET", "/w/ghost/jobs/j", None),
    ("POST", "/w/ghost/retrieve", {"query": "a"}), ("POST", "/w/ghost/answer", {"question": "a"}),
    ("POST", "/w/ghost/explain", {"query": "a"}), ("GET", "/w/ghost/subgraph?query=a", None),
    ("POST", "/w/ghost/documents/delete", {"ids": ["a"]}), ("POST", "/w/ghost/documents/retry", None),
    ("DELETE", "/w/ghost/documents/a", None)])
def test_reads_of_a_missing_workspace_are_404_and_create_nothing(client, ws, method, path, body):
    r = client.request(method, path, json=body)
    assert r.status_code == 404 and "no workspace 'ghost'" in r.json()["error"]["message"]
    assert "ghost" not in ws.memories


@pytest.mark.parametrize("name", ["Upper", "-dash", "a" * 64, "sp ace", "dot.s"])
def test_bad_workspace_names_are_422(client, name):
    r = client.post(f"/w/{name}/documents", json={"documents": [{"text": "x"}]})
    assert r.status_code in (404, 422) and r.json()["error"]


def test_deleting_a_workspace_removes_its_memory_only(client, ws):
    client.post("/w/alpha/documents", json={"documents": [{"id": "a1", "text": "alpha"}]})
    client.post("/w/beta/documents", json={"documents": [{"id": "b1", "text": "beta"}]})
    assert client.delete("/workspaces/alpha").status_code == 200
    assert client.get("/w/alpha/stats").status_code == 404
    assert client.get("/w/beta/documents/b1").status_code == 200


def test_a_workspace_deleted_by_another_process_reads_as_404(tmp_path):
    """This process still holds the memory it opened; its folder is gone (another worker deleted it)."""
    class FolderWorkspaces(FakeWorkspaces):
        def path(self, name):
            return tmp_path / name

    ws = FolderWorkspaces()
    with make_client(ws) as c:
        (tmp_path / "alpha").mkdir()
        c.post("/w/alpha/documents", json={"documents": [{"id": "a1", "text": "alpha"}]})
        assert c.get("/w/alpha/documents/a1").status_code == 200
        (tmp_path / "alpha").rmdir()                       # what DELETE /workspaces/alpha did elsewhere
        r = c.get("/w/alpha/documents/a1")
        assert r.status_code == 404 and "no workspace 'alpha'" in r.json()["error"]["message"]
        assert "alpha" in ws.memories                     # the stale memory was not used

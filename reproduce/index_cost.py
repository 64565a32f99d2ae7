"""What the LLM-free index costs against a dense-only index of the same passages (issue 26, point 4).

    python -m reproduce index-cost [--corpus musique 2wiki narrativeqa] [--limit N] [--work DIR]
        [--out-dir DIR] [--name README]
    python -m reproduce index-cost --render RESULT.json [RESULT.json ...] [--out-dir DIR] [--name README]

Per corpus, in one process with one encoder (the engine's default, loaded once, warm) and the spaCy
pipeline loaded before the clock starts, three runs in this order, each into a fresh folder:

1. **dense-only index**: the documents split into passages as ``index()`` splits them, every passage
   encoded and written to a SQLite passage store (what a vector-only RAG index does);
2. **ner index**: ``HippoRAG(extractor="ner").index(docs)`` from the raw documents (split, spaCy,
   passages, sentences and entities encoded, synonymy, graph);
3. the dense-only index again.

The ratio is the ner index's time over the mean of the two dense-only runs, measured both in wall seconds
and in CPU seconds of the process (all threads; less sensitive to the other processes of a shared machine,
and what an idle machine with every core busy would take). The encoder's time per kind of text (passages,
facts = sentences, entities) and spaCy's time are measured around those calls; token counts (special
tokens included, as the encoder sees them) give the **token ratio** (all texts the ner index encodes /
the passages), the part of the ratio that no batching can lower while every vector stays bit-identical.
Entities per passage: distinct entities linked to a passage (its title included), averaged over passages.

Corpora: the MuSiQue subset (1,890 passages), 2WikiMultihopQA (6,119) and NarrativeQA (4,111 chunks of 10
long documents), from ``../shared/data`` (``--data-root``). The result (markdown and JSON) goes to
``reproduce/results/index_cost/``; the load (``uptime``) is recorded before and after each run.
``--render`` measures nothing: it writes one page from saved JSON results (runs of several commits or
corpora side by side).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from hippo_engine.models.encoder import Encoder

from .common import REPO_ROOT, RESULTS_DIR, commit_label, peak_rss_mb, uptime, write_result
from .harness import without_options

OUT_DIR = RESULTS_DIR / "index_cost"
DATA_ROOT = REPO_ROOT.parent / "shared" / "data"
#: corpus name -> its corpus file under the data root
CORPORA = {"musique": "musique/hipporag_v1_train/musique_train_corpus.json",
           "2wiki": "2wikimultihopqa/2wikimultihopqa_corpus.json",
           "narrativeqa": "narrativeqa/narrativeqa_dev_10_doc_corpus.json"}
GOAL = 2.5


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``index-cost`` command's options."""
    ap.add_argument("--corpus", nargs="+", choices=tuple(CORPORA), default=list(CORPORA),
                    help="corpora to measure (default: all three)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N documents of each corpus")
    ap.add_argument("--data-root", type=Path, default=DATA_ROOT, help="the shared data folder (default %(default)s)")
    ap.add_argument("--work", type=Path, default=None, help="index folders (default: a temporary folder, removed)")
    ap.add_argument("--out-dir", type=Path, default=OUT_DIR, help="result folder (default %(default)s)")
    ap.add_argument("--name", default="README", help="result file name without extension (default %(default)s)")
    ap.add_argument("--sentence-vectors", choices=("encode", "pooled"), default="encode",
                    help="the ner index's sentence vectors: encoded alone (default) or pooled from their passage's "
                         "forward pass (issue 43)")
    ap.add_argument("--render", type=Path, nargs="+", default=None, metavar="JSON",
                    help="measure nothing: write the page (and one JSON) from these saved results, in order")


# ----------------------------------------------------------------------------- measuring
class Clock:
    """Wall and process-CPU seconds of a block (``with clock:``), added to ``wall`` and ``cpu``."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0

    def __enter__(self) -> Clock:
        self._t, self._c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        self.wall += time.perf_counter() - self._t
        self.cpu += time.process_time() - self._c


class TimedEncoder(Encoder):
    """``inner`` with each call's wall and CPU seconds added up by what it encodes (the word after
    "Embedding " in the writer's progress label: passages, facts, entities)."""

    def __init__(self, inner: Encoder):
        self.inner, self.name, self.dim = inner, inner.name, inner.dim
        self.clocks: dict[str, Clock] = {}
        self.spans = [0, 0]

    def encode(self, texts: Sequence[str], *, instruction: str | None = None, show_progress: bool = False,
               desc: str = "Encoding") -> np.ndarray:
        what = desc.removeprefix("Embedding ").split(" ")[0]
        with self.clocks.setdefault(what, Clock()):
            return self.inner.encode(texts, instruction=instruction, show_progress=show_progress, desc=desc)

    def encode_spans(self, texts: Sequence[str], spans: Sequence[tuple[int, int, int]]):
        """Passages with their sentences pooled (``sentence_vectors="pooled"``), timed as passages; the spans
        pooled and asked for are counted in ``spans``."""
        with self.clocks.setdefault("passages", Clock()):
            out = self.inner.encode_spans(texts, spans)
        self.spans = [self.spans[0] + int(out[2].sum()), self.spans[1] + len(spans)]
        return out

    def __getattr__(self, name: str):   # tokenizer, max_length, ...: the inner encoder's
        return getattr(self.inner, name)


def load_docs(name: str, data_root: Path, limit: int | None) -> list[str]:
    """The corpus ``name`` as ``"title\\ntext"`` documents (file order, duplicates dropped)."""
    from hippo_engine.evaluation.datasets import corpus_docs

    path = data_root / CORPORA[name]
    if not path.is_file():
        raise FileNotFoundError(f"{path}: corpus {name!r} not found (see ../shared/data/SOURCES.md)")
    return corpus_docs(json.loads(path.read_text(encoding="utf-8")), str(path))[:limit]


def dense_index(encoder: TimedEncoder, docs: Sequence[str], folder: Path) -> dict:
    """The dense-only index of ``docs`` in ``folder``: split as ``index()`` splits, every passage
    encoded and written to a SQLite passage store in one transaction."""
    from hippo_engine.config import HippoConfig
    from hippo_engine.index.documents import split_documents
    from hippo_engine.index.encoding import encode_into
    from hippo_engine.index.stopwatch import Stopwatch
    from hippo_engine.store.db import IndexDB

    cfg = HippoConfig().index
    encoder.clocks.clear()
    load = os.getloadavg()[0]
    with Clock() as clock:
        batch = split_documents(docs, None, "index", cfg.chunk_size, cfg.chunk_overlap,
                                getattr(encoder, "tokenizer", None))
        db = IndexDB(folder / "index.sqlite")
        try:
            store = db.embedding_store("passage", encoder.dim)
            ids = list(batch.passages)
            with db.transaction():
                encode_into(encoder, store, ids, [batch.passages[p] for p in ids], "passages", Stopwatch(),
                            step=131072)
        finally:
            db.close()
    return {"wall_s": clock.wall, "cpu_s": clock.cpu, "passages": len(batch.passages), "load": [load, _load()]}


def ner_index(encoder: TimedEncoder, docs: Sequence[str], folder: Path, sentence_vectors: str = "encode") -> dict:
    """``HippoRAG(extractor="ner").index(docs)`` in ``folder`` (spaCy loaded before the clock);
    times, per-stage timings, encoder and spaCy time, and what the index holds."""
    from hippo_engine import HippoRAG

    rag = HippoRAG(folder, encoder=encoder, extractor="ner", show_progress=False, sentence_vectors=sentence_vectors)
    encoder.spans = [0, 0]
    try:
        rag.ner.pipeline()
        spacy = Clock()
        run = rag.ner.run

        def timed_run(passages):
            with spacy:
                return run(passages)
        rag.ner.run = timed_run   # type: ignore[method-assign]   # a clock around the call, nothing else
        encoder.clocks.clear()
        load = os.getloadavg()[0]
        with Clock() as clock:
            report = rag.index(list(docs))
        out = {"wall_s": clock.wall, "cpu_s": clock.cpu, "load": [load, _load()],
               "timings": report.get("timings", {}), "spacy": vars(spacy).copy(),
               "encode": {k: vars(c).copy() for k, c in encoder.clocks.items()},
               "sentence_vectors": sentence_vectors, "pooled_spans": list(encoder.spans)}
        out.update(index_contents(rag, encoder))
        return out
    finally:
        rag.close()


def index_contents(rag, encoder: Encoder) -> dict:
    """Counts of what a ner index holds: passages, facts, entities, their tokens, entities per passage."""
    st = rag.index_state
    texts = {k: [st.stores[k].text(i) for i in st.stores[k].ids] for k in ("passage", "fact", "entity")}
    tokens = {k: token_count(encoder, v) for k, v in texts.items()}
    hyper = st.content.passage_hyperedges
    per = [len({e for h in hyper.get(p, ()) for e in h.entities}) for p in st.stores["passage"].ids]
    return {"counts": {k: len(v) for k, v in texts.items()}, "tokens": tokens,
            "entities_per_passage": float(np.mean(per)) if per else 0.0,
            "token_ratio": sum(tokens.values()) / max(1, tokens["passage"])}


def token_count(encoder: Encoder, texts: Sequence[str]) -> int:
    """Tokens the encoder sees for ``texts`` (special tokens included); for an encoder without a
    tokenizer (test fakes), words + 2 per text."""
    tokenize = getattr(encoder, "tokenize", None)
    if tokenize is None:
        return sum(len(t.split()) + 2 for t in texts)
    return int(sum(len(x) for x in tokenize(list(texts))))


def _load() -> float:
    return os.getloadavg()[0]


def measure(name: str, docs: Sequence[str], encoder: TimedEncoder, work: Path, sentence_vectors: str = "encode"
            ) -> dict:
    """dense-only, ner, dense-only again on ``docs``; the ratios."""
    folder = work / name
    shutil.rmtree(folder, ignore_errors=True)
    d1 = dense_index(encoder, docs, folder / "dense1")
    print(f"{name}: dense-only {d1['wall_s']:.1f} s wall, {d1['cpu_s']:.1f} s CPU", flush=True)
    ner = ner_index(encoder, docs, folder / "ner", sentence_vectors)
    print(f"{name}: ner {ner['wall_s']:.1f} s wall, {ner['cpu_s']:.1f} s CPU", flush=True)
    d2 = dense_index(encoder, docs, folder / "dense2")
    print(f"{name}: dense-only again {d2['wall_s']:.1f} s wall, {d2['cpu_s']:.1f} s CPU", flush=True)
    if d1["passages"] != ner["counts"]["passage"]:
        raise RuntimeError(f"{name}: the dense-only index has {d1['passages']} passages, the ner index "
                           f"{ner['counts']['passage']}")
    dense_wall, dense_cpu = (d1["wall_s"] + d2["wall_s"]) / 2, (d1["cpu_s"] + d2["cpu_s"]) / 2
    return {"corpus": name, "documents": len(docs), "dense": [d1, d2], "ner": ner,
            "ratio_wall": ner["wall_s"] / dense_wall, "ratio_cpu": ner["cpu_s"] / dense_cpu}


# ----------------------------------------------------------------------------- report

def markdown(results: list[dict]) -> str:
    """The result page from measured ``results`` (each with its run's ``meta``): the ratios, then where
    the ner index's time goes."""
    runs = list(dict.fromkeys(json.dumps(r.get("meta", {}), sort_keys=True) for r in results))
    lines = ["# Index cost: LLM-free (`extractor=\"ner\"`) index against a dense-only index (issue 26, point 4)", "",
             (__doc__ or "").split("\n\n", 2)[2].split("\n\nCorpora:")[0].strip(), "", "Runs:", ""]
    for m in map(json.loads, runs):
        lines += [f"- `{m.get('command', '?')}` at engine commit `{m.get('commit', '?')}`; load (`uptime`) "
                  f"before `{m.get('uptime_before', '?')}`, after `{m.get('uptime_after', '?')}`; peak RSS "
                  f"{m.get('peak_rss_mb', float('nan')):.0f} MiB; {m.get('encoder', '?')}"]
    lines += ["", "The machine (2 cores) is shared: wall seconds depend on the other processes; CPU seconds "
              "much less.", "",
              f"| corpus | engine | passages | entities / passage | dense-only wall s (1st, 2nd) | ner index wall s | "
              f"**ratio wall** | dense-only CPU s | ner CPU s | **ratio CPU** | token ratio | goal <= {GOAL} |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        d1, d2, n = r["dense"][0], r["dense"][1], r["ner"]
        met = "met" if max(r["ratio_wall"], r["ratio_cpu"]) <= GOAL else "not met"
        lines.append(f"| {r['corpus']} | `{r.get('meta', {}).get('commit', '?')}` | {n['counts']['passage']:,} | "
                     f"{n['entities_per_passage']:.1f} | {d1['wall_s']:.1f}, {d2['wall_s']:.1f} | {n['wall_s']:.1f} | "
                     f"**{r['ratio_wall']:.2f}x** | {(d1['cpu_s'] + d2['cpu_s']) / 2:.1f} | {n['cpu_s']:.1f} | "
                     f"**{r['ratio_cpu']:.2f}x** | {n['token_ratio']:.2f} | {met} |")
    lines += ["", "## Where the ner index's time goes", "",
              "| corpus | engine | spaCy wall / CPU s | passages wall / CPU s | facts wall / CPU s | "
              "entities wall / CPU s | rest wall / CPU s | tokens: passages / facts / entities | facts, entities | "
              "load (1 min) dense, ner, dense |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        n, enc = r["ner"], r["ner"]["encode"]
        parts = [n["spacy"]] + [enc.get(k, {"wall": 0.0, "cpu": 0.0}) for k in ("passages", "facts", "entities")]
        rest = {"wall": n["wall_s"] - sum(p["wall"] for p in parts), "cpu": n["cpu_s"] - sum(p["cpu"] for p in parts)}
        tok, cnt = n["tokens"], n["counts"]
        loads = ", ".join(f"{x['load'][0]:.1f}-{x['load'][1]:.1f}" for x in (r["dense"][0], n, r["dense"][1]))
        lines.append(f"| {r['corpus']} | `{r.get('meta', {}).get('commit', '?')}` | "
                     + " | ".join(f"{p['wall']:.1f} / {p['cpu']:.1f}" for p in [*parts, rest])
                     + f" | {tok['passage']:,} / {tok['fact']:,} / {tok['entity']:,} | "
                     f"{cnt['fact']:,}, {cnt['entity']:,} | {loads} |")
    lines += ["", "Stage timings of each ner index (`index()` report, wall seconds):", ""]
    for r in results:
        t = r["ner"]["timings"]
        lines.append(f"- {r['corpus']} (`{r.get('meta', {}).get('commit', '?')}`): "
                     + ", ".join(f"{k} {v:.1f}" for k, v in t.items() if v >= 0.05))
    return "\n".join(lines) + "\n"


def read_results(paths: Sequence[Path]) -> list[dict]:
    """The results saved in ``paths`` (this command's JSON files), in order."""
    out: list[dict] = []
    for p in paths:
        try:
            data = json.loads(Path(p).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise SystemExit(f"{p}: not a result file of this command ({e})") from e
        if not isinstance(data, list) or not all(isinstance(r, dict) and "ner" in r for r in data):
            raise SystemExit(f"{p}: not a result file of this command (a list of results per corpus)")
        out += data
    return out


def run(args: argparse.Namespace, argv: Sequence[str], *, encoder: Encoder | None = None) -> int:
    """Measure every chosen corpus (or, with ``--render``, read saved results); print and write the
    result. ``encoder``: tests pass a fake (default: the engine's default model)."""
    if args.render:
        results = read_results(args.render)
    else:
        results = measure_all(args, argv, encoder)
    out = write_result(args.out_dir / f"{args.name}.md", markdown(results))
    write_result(args.out_dir / f"{args.name}.json", json.dumps(results, indent=1) + "\n")
    print(out)
    return 0


def measure_all(args: argparse.Namespace, argv: Sequence[str], encoder: Encoder | None) -> list[dict]:
    """Every chosen corpus measured with one warm encoder; each result with its run's ``meta``."""
    from hippo_engine.models.encoder import TransformersEncoder

    if args.limit is not None and args.limit <= 0:
        raise SystemExit("--limit must be positive")
    corpora = {c: load_docs(c, args.data_root, args.limit) for c in args.corpus}
    timed = TimedEncoder(encoder or TransformersEncoder())
    timed.encode(["warm-up text"] * 20)
    before = uptime()
    tmp = None if args.work else tempfile.mkdtemp(prefix="index_cost_")
    work = Path(args.work or tmp)
    try:
        results = [measure(name, docs, timed, work, args.sentence_vectors) for name, docs in corpora.items()]
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    shown = list(argv[1:] if argv[:1] == ["index-cost"] else argv)
    meta = {"command": " ".join(["python -m reproduce index-cost", *map(shlex.quote, _public(shown))]),
            "commit": commit_label(), "uptime_before": before,
            "uptime_after": uptime(), "peak_rss_mb": peak_rss_mb(), "encoder": repr(timed.inner)}
    for r in results:
        r["meta"] = meta
        print(f"{r['corpus']}: ratio {r['ratio_wall']:.2f}x wall, {r['ratio_cpu']:.2f}x CPU "
              f"(token ratio {r['ner']['token_ratio']:.2f}, {r['ner']['entities_per_passage']:.1f} entities/passage)")
    return results


def _public(argv: Sequence[str]) -> list[str]:
    """``argv`` without the options that name folders of the machine the run was made on."""
    return without_options(argv, ("--work", "--data-root", "--out-dir"))


if __name__ == "__main__":
    import sys

    from .common import module_main
    sys.exit(module_main(sys.modules[__name__]))

"""Encoder runtimes for one query (issue 41, item 2): today's encoder against torch's options and ONNX Runtime.

    python -m reproduce encoder-runtime [--limit N] [--rounds R] [--skip NAME ...] [--data DIR]

The packaged embedder (all-MiniLM-L6-v2) on the first N MuSiQue questions, each alone and each with its mentions
(``NERExtractor.query_entities``, the packaged spaCy pipeline) in one call. Every candidate (:data:`CANDIDATES`)
but today's ``encode`` runs today's batching (:class:`Batched`) and pooling over another forward pass: torch eager
(1 or 2 threads, ``no_grad`` or ``inference_mode``), oneDNN, TorchScript, ``torch.compile`` (a fresh inductor
cache: the cold first use), ONNX Runtime on the model exported once per run from the packaged weights (left out
where ``onnxruntime`` is not installed). Timed in one process after a warm-up, each question through every
candidate in an order shuffled per question (fixed seed: they share the noise, and none always follows the same
neighbour, whom threads left spinning by a 2-thread call would slow); p50/p90 over questions x rounds. Exactness
over every text: the largest absolute difference from today's vector, the vectors bit-identical to today's, and
to themselves alone and in one call with all the others (determinism). Written:
``reproduce/results/latency/encoder_runtime.md`` (command, load, library versions) and ``encoder_runtime.json``.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, distribution, version
from importlib.util import find_spec
from pathlib import Path

import numpy as np

from hippo_engine.models.encoder import _MIN_GEMM_ROWS

from . import common
from .common import RESULTS_DIR, setup_logging, write_result
from .harness import option
from .query_latency import json_safe, percentile

OUT = RESULTS_DIR / "latency" / "encoder_runtime.md"
MUSIQUE = "musique/hipporag_v1_train"
#: name -> what it is (the report's second column); the first is the reference
CANDIDATES = {
    "today": "`TransformersEncoder.encode` (1-thread workers: a call's batches on both cores)",
    "today-2calls": "today's query path: `encode([q])`, then `encode(mentions)`",
    "torch-1t-nograd": "eager, 1 torch thread, no_grad",
    "torch-1t": "eager, 1 torch thread, inference_mode",
    "torch-2t": "eager, 2 torch threads, inference_mode",
    "torch-1t-nofloor": "eager, 1 thread, inference_mode, no row floor",
    "mkldnn-1t": "`torch.utils.mkldnn.to_mkldnn`, 1 thread",
    "jit-1t": "`torch.jit.trace` + `freeze` + `optimize_for_inference`, 1 thread",
    "compile-1t": "`torch.compile(dynamic=True)` (inductor), 1 thread",
    "ort-1t": "ONNX Runtime, sequential, intra_op 1",
    "ort-2t": "ONNX Runtime, sequential, intra_op 2 (not spinning)",
    "ort-1t-nofloor": "ONNX Runtime, intra_op 1, no row floor",
}
#: packages a candidate needs beyond the engine's (the install size is reported)
NEW_PACKAGES = ("onnxruntime", "flatbuffers", "onnx", "ml_dtypes")
VERSIONS = ("torch", "transformers", "tokenizers", "numpy", "spacy", "onnxruntime", "onnx")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``encoder-runtime`` command's options."""
    option(ap, "--data-root")
    ap.add_argument("--limit", type=int, default=50, help="the first N MuSiQue questions (default 50)")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds over the questions (default 3)")
    ap.add_argument("--skip", nargs="+", default=[], choices=[c for c in CANDIDATES if c != "today"],
                    metavar="NAME", help="candidates left out (e.g. compile-1t)")
    ap.add_argument("--out", type=Path, default=OUT, help="result markdown (default %(default)s)")
    ap.add_argument("--verbose", action="store_true", help="debug logging")


# ----------------------------------------------------------------------------- the shared batching
@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """torch's intra-op thread count set to ``n`` for the block (``None``: left alone), restored after."""
    import torch

    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def pool(hidden, n_real: int, length: int):
    """Today's pooling of one batch's last hidden state: mean over tokens, L2-normalised, float32 numpy."""
    import torch

    h = torch.as_tensor(hidden)[:n_real].float()
    return torch.nn.functional.normalize(h.sum(dim=1) / float(length), p=2.0, dim=-1).cpu().numpy()


@dataclass
class Batched:
    """``encode(texts)`` with the encoder's tokenizer and batch plan over ``forward(input_ids) -> last hidden
    state`` (ids an int64 array of one length), in the calling thread, ``threads`` torch threads, ``grad`` the
    autograd mode; every batch filled up to ``min_rows`` rows (batch x tokens) with copies of its first text."""

    encoder: object
    forward: Callable[[np.ndarray], object]
    threads: int | None = 1
    grad: str = "inference_mode"
    min_rows: int = _MIN_GEMM_ROWS

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Rows of unit length in input order, float32."""
        import torch

        enc = self.encoder
        ids = enc.tokenize(texts)   # type: ignore[attr-defined]
        out = np.empty((len(texts), enc.dim), dtype=np.float32)   # type: ignore[attr-defined]
        mode = torch.inference_mode if self.grad == "inference_mode" else torch.no_grad
        with torch_threads(self.threads), mode():
            for idx in enc.plan_batches([len(x) for x in ids]):   # type: ignore[attr-defined]
                batch = np.asarray([ids[i] for i in idx], dtype=np.int64)
                rows = max(len(idx), -(-self.min_rows // batch.shape[1]))
                padded = np.concatenate([batch, np.repeat(batch[:1], rows - len(idx), axis=0)])
                out[idx] = pool(self.forward(padded), len(idx), batch.shape[1])
        return out


def ids_to_hidden(model):
    """A module ``input_ids -> last_hidden_state`` (all-ones attention mask, zero token types), as today's
    encoder calls the model; what is traced, compiled and exported."""
    import torch

    class IdsToHidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids):
            return self.model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                              token_type_ids=torch.zeros_like(input_ids)).last_hidden_state

    return IdsToHidden().eval()


def on_tensors(module) -> Callable[[np.ndarray], object]:
    """``module`` called on the ids as a torch tensor."""
    import torch

    return lambda ids: module(torch.from_numpy(ids))


# ----------------------------------------------------------------------------- candidates
@dataclass
class Candidate:
    """One runtime: ``encode(texts)``, its ``query(q, mentions)`` call and its first-use figures."""

    name: str
    encode: Callable[[Sequence[str]], np.ndarray]
    setup_s: float = 0.0
    notes: dict = field(default_factory=dict)
    two_calls: bool = False

    def query(self, q: str, mentions: Sequence[str]) -> None:
        """The question with its mentions: one call, or today's two calls."""
        if self.two_calls:
            self.encode([q])
            if mentions:
                self.encode(list(mentions))
        else:
            self.encode([q, *mentions])


def export_onnx(model, path: Path) -> dict:
    """Export ``model`` (ids -> last hidden state) to ``path`` once, dynamic batch and sequence axes; seconds
    and size."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    example = torch.full((2, 12), 1000, dtype=torch.long)
    axes = {"input_ids": {0: "batch", 1: "tokens"}, "last_hidden_state": {0: "batch", 1: "tokens"}}
    with torch.no_grad():
        torch.onnx.export(ids_to_hidden(model), (example,), str(path), input_names=["input_ids"],
                          output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=17, dynamo=False)
    return {"export_s": time.perf_counter() - t, "onnx_mb": path.stat().st_size / 2**20}


def ort_forward(path: Path, threads: int) -> Callable[[np.ndarray], object]:
    """An ONNX Runtime session of ``path`` (CPU, sequential, ``threads`` intra-op threads) as a forward pass."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")   # no thread left spinning after a call
    session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return lambda ids: session.run(None, {"input_ids": ids})[0]


def torch_module(name: str, model, tmp: str):
    """The ids -> hidden module of a torch candidate: eager; ``mkldnn-1t`` a copy with its linear layers on oneDNN
    (the engine's model untouched); ``jit-1t`` traced, frozen and optimised for inference; ``compile-1t``
    ``torch.compile(dynamic=True)``, inductor's cache under ``tmp``."""
    import torch
    from torch.utils import mkldnn

    if name == "mkldnn-1t":
        return mkldnn.to_mkldnn(ids_to_hidden(copy.deepcopy(model)))
    if name == "compile-1t":
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = f"{tmp}/inductor"
        return torch.compile(ids_to_hidden(model), dynamic=True)
    if name == "jit-1t":
        with torch.no_grad():
            traced = torch.jit.trace(ids_to_hidden(model), torch.full((2, 12), 1000, dtype=torch.long),
                                     check_trace=False)
            return torch.jit.optimize_for_inference(torch.jit.freeze(traced.eval()))
    return ids_to_hidden(model)


def forward_of(name: str, enc, tmp: str, notes: dict) -> Callable[[np.ndarray], object]:
    """The forward pass of the candidate ``name`` (ONNX: the file exported under ``tmp`` by the first ``ort-``
    candidate, its export time and size put in ``notes``; inductor's cache under ``tmp``)."""
    if name.startswith("ort-"):
        onnx_file = Path(tmp) / "all-MiniLM-L6-v2.onnx"
        if not onnx_file.exists():
            notes.update(export_onnx(enc.model, onnx_file))
        return ort_forward(onnx_file, 2 if name == "ort-2t" else 1)
    return on_tensors(torch_module(name, enc.model, tmp))


def build(name: str, enc, tmp: str) -> Candidate:
    """The candidate ``name`` over the encoder ``enc``: today's ``encode``, or :class:`Batched` over its forward
    pass with the name's threads (``-2t``: 2; ONNX Runtime: its own), autograd mode and row floor."""
    t = time.perf_counter()
    notes: dict = {}
    fn: Callable[[Sequence[str]], np.ndarray] = enc.encode
    if not name.startswith("today"):
        threads = None if name.startswith("ort-") else 2 if name.endswith("-2t") else 1
        fn = Batched(enc, forward_of(name, enc, tmp, notes), threads,
                     "no_grad" if name.endswith("-nograd") else "inference_mode",
                     1 if name.endswith("-nofloor") else _MIN_GEMM_ROWS).encode
    return Candidate(name, fn, time.perf_counter() - t, notes, two_calls=name == "today-2calls")


# ----------------------------------------------------------------------------- inputs and figures
def load_inputs(data: Path, limit: int) -> tuple[list[str], list[list[str]]]:
    """The first ``limit`` MuSiQue questions and each one's mentions (the packaged spaCy pipeline)."""
    from hippo_engine.evaluation.datasets import load_dataset
    from hippo_engine.index.ner import NERExtractor

    questions = list(load_dataset(data / MUSIQUE).head(limit).questions)
    return questions, NERExtractor().query_entities(questions)


def first_pass(c: Candidate, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, float]:
    """``(each text alone, all texts in one call, seconds of the pass alone)``: the warm-up (and compilation)."""
    t = time.perf_counter()
    alone = np.stack([c.encode([x])[0] for x in texts])
    seconds = time.perf_counter() - t
    return alone, c.encode(list(texts)), seconds


def exactness(alone: np.ndarray, together: np.ndarray, reference: np.ndarray) -> dict:
    """Largest |difference| from the reference vectors, rows bit-identical to them and to themselves in one call."""
    return {"max_abs_diff": float(np.abs(alone - reference).max()),
            "identical_to_today": int((alone == reference).all(axis=1).sum()),
            "alone_equals_batched": int((alone == together).all(axis=1).sum()), "texts": len(alone),
            "vectors": alone}


def time_queries(cands: Sequence[Candidate], questions: Sequence[str], mentions: Sequence[Sequence[str]],
                 rounds: int, clock: Callable[[], float] = time.perf_counter, seed: int = 0
                 ) -> dict[str, dict[str, list[float]]]:
    """ms per call of each candidate: ``q`` (the question alone; not for a two-call candidate, the same call as
    today's) and ``qm`` (with its mentions), every question ``rounds`` times, the candidates in an order shuffled
    per question (``seed``)."""
    samples: dict[str, dict[str, list[float]]] = {c.name: {"q": [], "qm": []} for c in cands}
    rng = np.random.default_rng(seed)
    for _ in range(rounds):
        for q, ms in zip(questions, mentions, strict=True):
            order = [cands[i] for i in rng.permutation(len(cands))]
            for c in order:
                if not c.two_calls:
                    t = clock()
                    c.encode([q])
                    samples[c.name]["q"].append(1000 * (clock() - t))
            for c in order:
                t = clock()
                c.query(q, ms)
                samples[c.name]["qm"].append(1000 * (clock() - t))
    return samples


def summary(samples: dict[str, list[float]], base: dict[str, list[float]]) -> dict:
    """p50/p90 of each shape and the speed-up of the p50 over today's."""
    out: dict = {}
    for shape in ("q", "qm"):
        p50, ref = percentile(samples[shape], 50), percentile(base[shape], 50)
        out[shape] = {"p50": p50, "p90": percentile(samples[shape], 90), "speedup": ref / p50 if p50 > 0 else None}
    return out


def packages() -> dict[str, dict]:
    """The versions of the libraries that shape the figures, and the installed size (MiB, from the package's file
    list) of those ONNX Runtime brings (``None`` where not installed)."""
    def size(name: str) -> float:
        files = [Path(f.locate()) for f in distribution(name).files or []]
        return sum(f.stat().st_size for f in files if f.is_file()) / 2**20

    out: dict[str, dict] = {"versions": {}, "install": {}}
    for kind, names, get in (("versions", VERSIONS, version), ("install", NEW_PACKAGES, size)):
        for name in names:
            try:
                out[kind][name] = get(name)
            except PackageNotFoundError:
                out[kind][name] = None
    return out


# ----------------------------------------------------------------------------- run and report
def measure(args: argparse.Namespace, enc=None) -> dict:
    """Every figure (``enc``: the encoder, the packaged one when ``None``)."""
    from hippo_engine.models.encoder import TransformersEncoder

    enc = enc or TransformersEncoder()
    questions, mentions = load_inputs(args.data, args.limit)
    texts = list(dict.fromkeys([*questions, *(m for ms in mentions for m in ms)]))
    names = [n for n in CANDIDATES if n not in args.skip]
    if find_spec("onnxruntime") is None:   # not an engine dependency: `pip install onnxruntime` to measure it
        print("onnxruntime is not installed: its candidates are left out", flush=True)
        names = [n for n in names if not n.startswith("ort-")]
    cands, firsts, exact = [], {}, {}   # type: ignore[var-annotated]
    with tempfile.TemporaryDirectory(prefix="encoder-runtime-") as tmp:
        for name in names:
            c = build(name, enc, tmp)
            alone, together, firsts[name] = first_pass(c, texts)
            exact[name] = exactness(alone, together, alone if name == "today" else exact["today"]["vectors"])
            if "ort-1t" in exact:   # ONNX Runtime's vectors by thread count and row floor
                exact[name]["identical_to_ort_1t"] = int((alone == exact["ort-1t"]["vectors"]).all(axis=1).sum())
            cands.append(c)
            print(f"{name}: built in {c.setup_s:.1f} s, first pass {firsts[name]:.1f} s, "
                  f"max |diff| {exact[name]['max_abs_diff']:.2e}", flush=True)
        load = common.uptime()
        samples = time_queries(cands, questions, mentions, args.rounds)
    rows = [{"name": c.name, "what": CANDIDATES[c.name], "setup_s": c.setup_s, "first_pass_s": firsts[c.name],
             **c.notes, **summary(samples[c.name], samples["today"]),
             **{k: v for k, v in exact[c.name].items() if k != "vectors"}, "samples": samples[c.name]}
            for c in cands]
    return {"load_timed": load, "rounds": args.rounds, **inputs(enc, questions, mentions, texts), "rows": rows}


def inputs(enc, questions: Sequence[str], mentions: Sequence[Sequence[str]], texts: Sequence[str]) -> dict:
    """What was encoded: counts, mentions per question, token lengths (min / median / max)."""
    lengths = [len(x) for x in enc.tokenize(texts)]
    q, m, per_q = lengths[:len(questions)], lengths[len(questions):] or [0], [len(ms) for ms in mentions]
    return {"questions": len(questions), "texts": len(texts),
            "mentions_per_question": {str(k): per_q.count(k) for k in sorted(set(per_q))},
            "question_tokens": [min(q), int(np.median(q)), max(q)],
            "mention_tokens": [min(m), int(np.median(m)), max(m)]}


def _ms(v: float | None, texts: int | None = None) -> str:
    """A figure in ms (or ``v/texts``), ``n/a`` where missing."""
    return "n/a" if v is None or v != v else f"{v:.1f}" if texts is None else f"{v}/{texts}"


def table(rows: Sequence[dict]) -> list[str]:
    """The markdown table: one row per candidate."""
    lines = ["| candidate | what | q alone p50 / p90 ms | x today | q + mentions p50 / p90 ms | x today | "
             "max abs diff vs today | = today (bits) | alone = batched (bits) | = ort-1t (bits) | built s | "
             "first pass s |", "| --- " * 12 + "|"]
    for r in rows:
        q, qm = r["q"], r["qm"]
        speed = [f"{s['speedup']:.2f}" if s["speedup"] and s["p50"] == s["p50"] else "n/a" for s in (q, qm)]
        built = f"{r['setup_s']:.1f}" + (f" (export {r['export_s']:.1f}, {r['onnx_mb']:.0f} MiB)"
                                         if "export_s" in r else "")
        lines.append(f"| {r['name']} | {r['what']} | {_ms(q['p50'])} / {_ms(q['p90'])} | {speed[0]} | "
                     f"{_ms(qm['p50'])} / {_ms(qm['p90'])} | {speed[1]} | {r['max_abs_diff']:.2e} | "
                     f"{r['identical_to_today']}/{r['texts']} | {r['alone_equals_batched']}/{r['texts']} | "
                     f"{_ms(r.get('identical_to_ort_1t'), r['texts'])} | {built} | {r['first_pass_s']:.1f} |")
    return lines


def markdown(run: dict, command: str) -> str:
    """The report."""
    sizes = ", ".join(f"{k} {v:.0f} MiB" if v is not None else f"{k} not installed" for k, v in run["install"].items())
    return "\n".join([
        "# Encoder runtimes for one query (issue 41, item 2)", "", "```bash", command, "```", "",
        "See `reproduce/encoder_runtime.py` for what each candidate is. Wall milliseconds per call in one process, "
        "after a warm-up (each candidate's first pass over every text alone), the candidates alternated per "
        f"question; p50/p90 over {run['questions']} MuSiQue questions x {run['rounds']} rounds. *q alone*: "
        "`encode([q])`; *q + mentions*: `encode([q, *mentions])` in one call (today-2calls: two calls); *x today*: "
        "today's p50 / the candidate's. Exactness over all "
        f"{run['texts']} distinct texts (questions and mentions), each encoded alone: *max abs diff* from today's "
        "vector, how many are bit-identical to today's, and how many are bit-identical to the same text in one "
        "call with all the others, and (ONNX Runtime) how many to ort-1t's. "
        "*built s*: building the candidate (export, session, trace, compile call); "
        "*first pass s*: the first pass over every text alone (compilation happens there).", "",
        f"Inputs: question tokens min / median / max {run['question_tokens']}; mentions (the packaged spaCy "
        f"pipeline's `query_entities`) per question: {run['mentions_per_question']}, tokens "
        f"min / median / max {run['mention_tokens']} (special tokens included).", "",
        f"Machine: {common.machine()}. Versions: "
        + ", ".join(f"{k} {v or 'not installed'}" for k, v in run["versions"].items()) + ".", "",
        f"Load before: `{run['load_before']}`; when the timing began: `{run['load_timed']}`; "
        f"after: `{run['load_after']}`.", "", *table(run["rows"]), "",
        f"Install size of the packages ONNX Runtime brings: {sizes}.", ""])


def run(args: argparse.Namespace, argv: Sequence[str], *, encoder=None) -> int:
    """Measure, print and write the report and its JSON (``encoder``: for tests)."""
    setup_logging(args.verbose)
    if args.limit <= 0 or args.rounds <= 0:
        raise SystemExit("--limit and --rounds must be positive")
    load_before = common.uptime()
    figures = measure(args, encoder)
    result = {"load_before": load_before, **figures, "load_after": common.uptime(), **packages(),
              "machine": common.machine()}
    shown = [("DIR" if i and argv[i - 1] in ("--data", "--out") else a) for i, a in enumerate(argv)]
    command = "python -m reproduce " + " ".join(shlex.quote(a) for a in shown)
    path = write_result(args.out, markdown(result, command))
    write_result(args.out.with_suffix(".json"), json.dumps({"command": command, **json_safe(result)}, indent=1) + "\n")
    print("\n".join(table(result["rows"])))
    print(path)
    return 0


if __name__ == "__main__":
    from .common import module_main
    sys.exit(module_main(sys.modules[__name__]))

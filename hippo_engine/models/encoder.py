"""Text encoders. ``Encoder`` is the interface; ``TransformersEncoder`` the implementation (its worker threads:
:mod:`.threads`)."""
from __future__ import annotations

import logging
import math
import os
from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from hippo_engine.models.encoder_files import check_settings, check_texts, max_length_of, model_path
from hippo_engine.models.packed import PackedBert, packable, plan_packs
from hippo_engine.models.spans import encode_spans, mean_pool
from hippo_engine.models.threads import on_one_thread, release_free_memory, run_batches
from hippo_engine.progress import SHOWN
from hippo_engine.system import usable_cpus


class Encoder(ABC):
    """Maps texts to L2-normalised float32 vectors of size ``dim``."""

    name: str
    dim: int

    @abstractmethod
    def encode(self, texts: Sequence[str], *, instruction: str | None = None,
               show_progress: bool = False, desc: str = "Encoding") -> np.ndarray:
        """Return an array of shape (len(texts), dim), dtype float32, rows of unit length."""

    def encode_groups(self, groups: Sequence[tuple[Sequence[str], str | None]]) -> list[np.ndarray]:
        """Several lists of texts, each with its instruction (``(texts, instruction)``), in one call: the
        vectors of each list, as :meth:`encode` gives them. An encoder may run them in one forward pass
        (a query and its entity mentions); this default encodes each list in turn."""
        return [self.encode(texts, instruction=instruction) for texts, instruction in groups]

    def encode_spans(self, texts: Sequence[str], spans: Sequence[tuple[int, int, int]]):
        """The vectors of ``texts`` and of character spans ``(text, start, end)`` of them taken from the same
        forward pass (:mod:`.spans`): (text vectors, span vectors, which spans were pooled). This default
        pools none: those spans are to be encoded alone."""
        return self.encode(texts), np.zeros((len(spans), self.dim), np.float32), np.zeros(len(spans), bool)


# --------------------------------------------------------------------------------------------
# Hugging Face transformers implementation
# --------------------------------------------------------------------------------------------

logger = logging.getLogger(__name__)

#: Every matrix multiplication is given at least this many rows (batch * tokens).
#: With torch 2.13's MKL/oneDNN on x86-64 (AVX2), sgemm with fewer than 12 rows takes kernels
#: whose rounding differs from the large-M kernel (measured: M in {1,2,3,5,6,7,9,10,11} with
#: 2 or 8 threads, {1,2,3} with 1, 3 or 4 threads; every M from 12 to 2100 gives results
#: bit-identical to each other and across thread counts). Padding tiny batches with
#: throw-away copies keeps every text on the large-M kernel, so its vector does not depend
#: on how many other texts share its batch. 16 leaves a margin over 12; a larger floor costs
#: latency on single short queries (the floor's rows are computed and thrown away).
_MIN_GEMM_ROWS = 16
#: A call of at most this many texts (and at most one batch's token budget) runs as packed forward passes
#: (:mod:`.packed`): a query and its mentions, a few queries batched together; larger calls keep the
#: length-grouped plan
PACK_MAX_TEXTS = 64
#: A small call is split into one pack per worker where each pack gets at least this many tokens
PACK_SPLIT_TOKENS = 64
#: Default token budget of one forward pass = ``batch_size`` texts of this many tokens
#: (64 x 64 = 4096 rows). Short texts (entities: ~5 tokens) are packed into large batches,
#: long ones into small batches that keep the activations small; measured on the 2-core AMD
#: EPYC (AVX2) box, one thread: ~2.1k tokens/s at 51x5 rows vs ~2.7k at 819x5 rows.
_TOKENS_PER_BATCH_SLOT = 64


class TransformersEncoder(Encoder):
    """Sentence encoder on top of a Hugging Face ``AutoModel``: mean pooling + L2 normalisation.

    This reproduces sentence-transformers models such as ``all-MiniLM-L6-v2`` (the default)
    and ``all-mpnet-base-v2`` without depending on sentence-transformers at run time.

    Batching. All texts of one :meth:`encode` call are tokenized once, grouped by *exact*
    token length and run in batches of texts of that one length: a batch of length-``L``
    texts holds ``max(1, max_batch_tokens // L)`` of them (default budget ``batch_size x
    64`` tokens), so short strings (entities, facts) are packed into large matrix products
    and long passages into small ones of the same cost. Batches carry no padding at all
    (short entity strings never pay for a long neighbour), and the attention mask is all
    ones. Rows are returned in input order.

    Threads. On the CPU, batches are spread over ``num_workers`` Python threads (default:
    one per usable core), each running its forward passes with a single intra-op torch
    thread; torch releases the GIL inside its kernels, so the workers run in parallel. This
    avoids OpenMP's fork/join barriers, which on a busy 2-core machine made 2-thread forward
    passes several times slower than 1-thread ones (measured on a quarter of the MuSiQue
    subset's 35k texts at load ~3: 326 s with 2 OpenMP threads and 64-text batches, 74 s
    with 2 workers and the token budget, bit-identical vectors). While :meth:`encode` runs,
    the process-wide torch thread count is set to 1 and restored afterwards.

    Determinism. A text's vector is bit-identical whatever else is encoded in the same call
    (alone, together with others, in any order, with any ``batch_size``), for a fixed
    model, dtype, ``max_length``, machine and library build. Two ingredients make this so:
    (1) no padding, so attention never sees a different padded length; (2) every matrix
    multiplication gets at least ``_MIN_GEMM_ROWS`` rows: small batches are padded with
    throw-away copies of their first text, because BLAS uses differently-rounding kernels
    for very small row counts. Beyond that threshold oneDNN/MKL compute each output row
    independently of the others and of the thread count (verified on AVX2 for 16 to 17,000
    rows; other ISAs or BLAS builds are checked by ``tests/test_embedding.py``). Which
    worker thread runs a batch does not matter either.

    Padding to bucketed lengths is deliberately not used: with a masked attention the
    softmax and the flash-attention blocks see a different key count, so a text's vector
    would change in its last bits with its batch neighbours. Exact-length batches need no
    padding at all.

    Instructions. ``encode(texts, instruction=...)`` prepends the instruction verbatim:
    the model sees ``f"{instruction}{text}"`` — include any separator yourself
    (e.g. ``"Represent this question for retrieving passages: "``). The default models
    were trained without instructions, so the engine leaves it ``None`` for them.

    Args:
        model_name_or_path: a name accepted by
            :func:`hippo_engine.models.assets.resolve_embedding_model` (``None`` = the
            packaged ``all-MiniLM-L6-v2``), a local directory, or a hub id.
        batch_size: sets the default token budget of a forward pass, ``batch_size x 64``.
        max_batch_tokens: token budget of a forward pass (``None``: ``batch_size x 64``).
        dtype: ``"float32"`` or ``"bfloat16"`` (model weights/activations in bf16; pooling
            and normalisation in float32).
        max_length: truncation length in tokens (special tokens included). ``None`` =
            ``max_seq_length`` from the model's ``sentence_bert_config.json`` when present
            (256 for all-MiniLM-L6-v2), else the tokenizer's ``model_max_length`` capped
            at 512.
        device: torch device string, e.g. ``"cpu"`` or ``"cuda"``.
        num_threads: if given, calls ``torch.set_num_threads`` (process-wide!) at load; used
            inside :meth:`encode` only when ``num_workers`` is 1.
        num_workers: parallel forward passes on the CPU (``None``: one per usable core; 1:
            run in the calling thread with the process's torch thread count; with several
            torch threads a vector can then depend on its batch on some CPUs, as an AVX-512
            Xeon's multi-threaded matrix products split rows differently by batch size).
        pack: run a call of a few short texts (a query and its entity mentions) as one packed forward
            pass where that is exact (:meth:`packing`); False: always the length-grouped batches.

    bfloat16 is slower than float32 on CPUs without native bf16 instructions (measured on the
    AVX2 AMD EPYC box: 7 vs 56 GFLOP/s for a 384x1536 matrix product).
    """

    def __init__(self, model_name_or_path: str | None = None, *, batch_size: int = 64,
                 dtype: str = "float32", max_length: int | None = None, device: str = "cpu",
                 num_threads: int | None = None,
                 max_batch_tokens: int | None = None,
                 num_workers: int | None = None, pack: bool = True) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        from hippo_engine.models.assets import DEFAULT_EMBEDDER

        check_settings(batch_size, dtype, max_length, max_batch_tokens, num_workers, num_threads)
        if num_threads is not None:
            torch.set_num_threads(num_threads)

        self.name: str = model_name_or_path if model_name_or_path is not None else DEFAULT_EMBEDDER
        path = model_path(self.name, model_name_or_path)
        self.path = path
        self.batch_size = int(batch_size)
        self.max_batch_tokens = int(max_batch_tokens if max_batch_tokens is not None
                                    else batch_size * _TOKENS_PER_BATCH_SLOT)
        self.dtype = dtype
        self.device = torch.device(device)
        if num_workers is None:
            num_workers = usable_cpus() if self.device.type == "cpu" else 1
        self.num_workers = int(num_workers)
        self._torch_dtype = torch.bfloat16 if dtype == "bfloat16" else torch.float32

        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path)
            model = AutoModel.from_pretrained(path)
        except OSError as e:
            where = "local directory" if os.path.isdir(path) else "hub id (or HF cache entry)"
            raise OSError(f"could not load embedding model {self.name!r} from {where} "
                          f"{path!r}: {e}") from e
        self.model = model.to(device=self.device, dtype=self._torch_dtype).eval()
        self.dim: int = int(self.model.config.hidden_size)
        self.max_length = max_length_of(max_length, path, self.tokenizer, self.model.config)

        #: the packed forward pass, chosen on first use (see :meth:`packing`; ``pack=False``: never)
        self._packed: PackedBert | None = None
        self._pack_checked = not pack
        self._pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self._use_token_type_ids = "token_type_ids" in getattr(self.tokenizer, "model_input_names", ())
        logger.info("loaded embedding model %s from %s (dim=%d, max_length=%d, dtype=%s, "
                    "device=%s, workers=%d, torch threads=%d)", self.name, path, self.dim,
                    self.max_length, dtype, self.device, self.num_workers, torch.get_num_threads())

    def __repr__(self) -> str:
        return (f"TransformersEncoder(name={self.name!r}, dim={self.dim}, dtype={self.dtype!r}, "
                f"max_length={self.max_length}, batch_size={self.batch_size}, "
                f"max_batch_tokens={self.max_batch_tokens}, num_workers={self.num_workers}, "
                f"device={str(self.device)!r})")

    # ---------------------------------------------------------------------------------------
    def tokenize(self, texts: Sequence[str], *, instruction: str | None = None) -> list[list[int]]:
        """Token ids (special tokens included, truncated to ``max_length``) for each text."""
        if instruction:
            texts = [f"{instruction}{t}" for t in texts]
        enc = self.tokenizer(list(texts), add_special_tokens=True, truncation=True,
                             max_length=self.max_length, padding=False,
                             return_attention_mask=False, return_token_type_ids=False)
        return enc["input_ids"]

    def texts_per_batch(self, length: int) -> int:
        """How many texts of ``length`` tokens one forward pass holds."""
        return max(1, self.max_batch_tokens // max(1, int(length)))

    def plan_batches(self, lengths: Sequence[int]) -> list[np.ndarray]:
        """Group input positions into batches of equal token length.

        A batch of length-``L`` texts holds at most :meth:`texts_per_batch` ``(L)`` texts.
        Batches come in increasing length; within a length, input order is kept.
        """
        length_array = np.asarray(lengths, dtype=np.int64)
        order = np.argsort(length_array, kind="stable")
        batches: list[np.ndarray] = []
        if len(order) == 0:
            return batches
        sorted_lengths = length_array[order]
        cuts = np.flatnonzero(np.diff(sorted_lengths)) + 1
        for group in np.split(order, cuts):
            size = self.texts_per_batch(int(length_array[group[0]]))
            for start in range(0, len(group), size):
                batches.append(group[start:start + size])
        return batches

    def encode(self, texts: Sequence[str], *, instruction: str | None = None,
               show_progress: bool = False, desc: str = "Encoding") -> np.ndarray:
        """Embed ``texts``; returns float32 array (len(texts), dim) of unit-length rows.

        ``instruction`` (optional) is prepended verbatim: the model sees
        ``f"{instruction}{text}"``. An empty input gives an array of shape (0, dim).
        """
        check_texts(texts)
        ids = self.tokenize(texts, instruction=instruction) if len(texts) else []
        return self._encode_ids(ids, show_progress, desc)

    def encode_groups(self, groups: Sequence[tuple[Sequence[str], str | None]]) -> list[np.ndarray]:
        """Every group's texts tokenized with its instruction and encoded together: a query and its
        mentions (a few texts) in one packed forward pass (:meth:`packing`); vectors as :meth:`encode`'s."""
        ids: list[list[int]] = []
        for texts, instruction in groups:
            check_texts(texts)
            ids += self.tokenize(texts, instruction=instruction) if len(texts) else []
        flat = self._encode_ids(ids, False, "Encoding")
        ends = np.cumsum([len(texts) for texts, _ in groups]).tolist()
        return [flat[e - len(texts):e] for (texts, _), e in zip(groups, ends, strict=True)]

    def _encode_ids(self, ids: list[list[int]], show_progress: bool, desc: str) -> np.ndarray:
        """Vectors of token id lists: packed forward passes for a few short texts (:meth:`packing`), else the
        length-grouped plan of batches (see the class docstring)."""
        import torch

        n = len(ids)
        out = np.empty((n, self.dim), dtype=np.float32)
        if n == 0:
            return out
        lengths = [len(x) for x in ids]
        tokens = sum(lengths)
        packed = self.packing() if n <= PACK_MAX_TEXTS and tokens <= self.max_batch_tokens else None
        if packed is not None:      # a few texts: packs of mixed lengths, one per worker where worth it
            forward, batches = packed.embed, plan_packs(lengths, min(self.num_workers,
                                                                     max(1, tokens // PACK_SPLIT_TOKENS)))
        else:
            forward, batches = self._forward, self.plan_batches(lengths)
        logger.debug("%s: %d texts in %d batches (%d distinct token lengths)", desc, n,
                     len(batches), len(set(lengths)))

        progress = SHOWN.bar(total=n, desc=desc, unit="text") if show_progress else None

        def run(idx: np.ndarray) -> None:
            with torch.inference_mode():  # thread-local: entered in each worker
                out[idx] = forward([ids[i] for i in idx])

        run_batches(run, batches, lambda: [max(lengths[i] for i in b) for b in batches], progress, self.num_workers,
                    self._on_workers)
        if tokens > self.max_batch_tokens or n > 1000:     # large activations only: a few ms a call
            release_free_memory()
        return out

    def packing(self) -> PackedBert | None:
        """The packed forward pass (:mod:`.packed`) where it gives exactly the vectors of the usual plan:
        a float32 BERT model on the CPU, checked once on this machine (None: the usual plan only)."""
        if not self._pack_checked:     # (a call racing this first look takes the usual plan: the same vectors)
            self._pack_checked = True
            if self.device.type == "cpu" and self.dtype == "float32" and packable(self.model):
                packed = PackedBert(self.model, _MIN_GEMM_ROWS)
                self._packed = packed if self._agrees(packed) else None
                if self._packed is None:
                    logger.info("%s: packed forward passes differ from length-grouped ones here; not packing",
                                self.name)
        return self._packed

    def _agrees(self, packed: PackedBert) -> bool:
        """Whether ``packed`` gives bit-identical vectors to the usual plan on probe texts of mixed lengths."""
        import torch

        ids = self.tokenize(list(_PROBE_TEXTS))
        with torch.inference_mode():    # both on the thread count their calls run with (see on_one_thread)
            usual = on_one_thread(self._on_workers, lambda: np.vstack([self._forward([x]) for x in ids]))
            return bool(np.array_equal(usual, on_one_thread(self._on_workers, packed.embed, ids)))

    @property
    def _on_workers(self) -> bool:
        """Whether batches run on worker threads of one torch thread each (a CPU encoder with several workers:
        :mod:`.threads`)."""
        return self.num_workers > 1 and self.device.type == "cpu"

    def _forward(self, batch_ids: list[list[int]]) -> np.ndarray:
        """Embed one batch of equal-length token sequences (no padding needed)."""
        return mean_pool(self.token_states(batch_ids))

    def encode_spans(self, texts: Sequence[str], spans: Sequence[tuple[int, int, int]]):
        """Texts and spans of them pooled from one forward pass per text (:func:`.spans.encode_spans`)."""
        return encode_spans(self, texts, spans)

    def each_batch(self, ids: list[list[int]], fn) -> None:
        """Hook for pooling spans of texts (:mod:`.spans`): ``fn(positions, token states)`` for each batch of
        the length-grouped plan of token id lists ``ids``, on the encoder's workers (states: a float32 tensor
        (batch, length, dim), as :meth:`encode` pools them)."""
        import torch

        lengths = [len(x) for x in ids]
        batches = self.plan_batches(lengths)

        def run(idx: np.ndarray) -> None:
            with torch.inference_mode():
                fn(idx, self.token_states([ids[i] for i in idx]))

        run_batches(run, batches, lambda: [lengths[b[0]] for b in batches], None, self.num_workers, self._on_workers)

    def token_states(self, batch_ids: list[list[int]]):
        """The last layer's float32 token states (batch, length, dim) of equal-length token id lists."""
        import torch

        n_real = len(batch_ids)
        length = len(batch_ids[0])
        n_rows = max(n_real, math.ceil(_MIN_GEMM_ROWS / length))
        input_ids = torch.tensor(batch_ids, dtype=torch.long)
        if n_rows > n_real:  # throw-away copies: keep BLAS on its large-M kernels
            input_ids = torch.cat([input_ids, input_ids[:1].expand(n_rows - n_real, -1)])
        input_ids = input_ids.to(self.device)
        inputs = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
        if self._use_token_type_ids:
            inputs["token_type_ids"] = torch.zeros_like(input_ids)
        return self.model(**inputs).last_hidden_state[:n_real].float()


#: texts of mixed token lengths, short and long, that :meth:`TransformersEncoder.packing` checks packing on
_PROBE_TEXTS = ("Which river flows through the capital of the country where the author was born?", "Paris",
                "the Eiffel Tower", "Marie Curie", "1867")

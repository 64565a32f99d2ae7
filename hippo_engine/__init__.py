"""hippo-engine: HippoRAG 2-style long-term memory for LLM applications."""
from importlib.metadata import PackageNotFoundError, version

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

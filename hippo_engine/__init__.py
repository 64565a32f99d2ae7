"""hippo-engine: HippoRAG 2-style long-term memory for LLM applications."""
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("hippo-engine")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

from hippo_engine.config import ConfigError, HippoConfig  # noqa: E402
from hippo_engine.hipporag import HippoRAG  # noqa: E402

__all__ = ["HippoRAG", "HippoConfig", "ConfigError", "__version__"]

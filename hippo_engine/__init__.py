"""hippo-engine: HippoRAG 2-style long-term memory for LLM applications."""
from .config import ConfigError, HippoConfig
from .hipporag import HippoRAG

__all__ = ["HippoRAG", "HippoConfig", "ConfigError"]
__version__ = "0.1.0"

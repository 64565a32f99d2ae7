import importlib.util
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")



def _installed() -> bool:
    """Whether the package is installed with its data (``evaluation`` and ``prompts`` are installed under it
    from the repository's top level: a checkout that was never installed has neither) and its dependencies."""
    try:
        return all(importlib.util.find_spec(m) is not None
                   for m in ("hippo_engine.prompts", "hippo_engine.evaluation", "pydantic", "numpy"))
    except ModuleNotFoundError:
        return False


def pytest_configure(config):
    if not _installed():
        pytest.exit("hippo-engine is not installed in this Python (" + sys.executable + "): install it with its "
                    "test tools first, as the README's Quick start says: pip install -c constraints.txt -e \".[test]\"",
                    returncode=4)


SHARED = Path(__file__).resolve().parents[1].parent / "shared"
MUSIQUE = SHARED / "data" / "musique" / "hipporag_v1_train"


#: test folders and modules that use real services or whole pipelines: a real PostgreSQL or FalkorDB server,
#: several processes, the kill harness, the benchmark commands, the real models (marked
#: ``integration``; CI runs them after the fast tier)
INTEGRATION = ("store/postgres/", "store/falkordb/", "reliability/", "reproduce/", "store/test_lock.py",
               "test_real_models.py",
               "test_ner_memory.py", "models/", "llm/test_local_llm.py", "llm/test_llamacpp.py", "service/integration/",
               "test_parsers_fuzz.py", "integrations/")


def pytest_collection_modifyitems(config, items):
    """Mark the integration tiers by where a test lives (see :data:`INTEGRATION`); ``slow`` stays
    a per-test mark for real-model tests elsewhere."""
    root = Path(__file__).parent
    for item in items:
        rel = Path(str(item.fspath)).resolve().relative_to(root).as_posix()
        if any(rel.startswith(p) or rel == p for p in INTEGRATION) or "[postgres" in item.nodeid \
                or "[falkordb" in item.nodeid:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def musique_dir():
    if not MUSIQUE.exists():
        pytest.skip(f"benchmark data not found at {MUSIQUE}")
    return MUSIQUE

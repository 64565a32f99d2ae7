import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
MUSIQUE = SHARED / "data" / "musique" / "hipporag_v1_train"


@pytest.fixture(scope="session")
def musique_dir():
    if not MUSIQUE.exists():
        pytest.skip(f"benchmark data not found at {MUSIQUE}")
    return MUSIQUE

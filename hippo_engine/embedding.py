"""Text encoders. ``Encoder`` is the interface; ``TransformersEncoder`` the implementation."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Optional, Sequence

import numpy as np


class Encoder(ABC):
    """Maps texts to L2-normalised float32 vectors of size ``dim``."""

    name: str
    dim: int

    @abstractmethod
    def encode(self, texts: Sequence[str], *, instruction: Optional[str] = None,
               show_progress: bool = False, desc: str = "Encoding") -> np.ndarray:
        """Return an array of shape (len(texts), dim), dtype float32, rows of unit length."""

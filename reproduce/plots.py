"""Recall@k curves as PNG files (matplotlib, Agg backend: no display needed).

Needs the optional extra ``plot`` (``pip install -e ".[plot]"``, i.e. matplotlib). Without it the
tables are still written; only the PNG is skipped, with a warning.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

logger = logging.getLogger(__name__)


def matplotlib_available() -> bool:
    """True when matplotlib can be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def plot_recall_curves(series: Mapping[str, Mapping[int, float]], path: Path, title: str,
                       subtitle: str | None = None) -> Path | None:
    """Draw one Recall@k curve per method and save it as a PNG.

    Args:
        series: ``{method label: {k: recall in [0, 1]}}``; methods without values are skipped.
        path: where to write the PNG (parent folders are created).
        title: the figure title; ``subtitle`` (optional) goes in smaller type below it.

    Returns the path written, or ``None`` when matplotlib is missing or nothing was plotted.
    """
    series = {label: dict(v) for label, v in series.items() if v}
    if not series:
        logger.warning("no recall values to plot for %s", path)
        return None
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib is not installed (pip install -e '.[plot]'); skipping %s", path)
        return None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7.0, 4.6), dpi=110)
    markers = "osD^vP*Xh<>"
    all_ks: set[int] = set()
    for i, (label, values) in enumerate(series.items()):
        ks = sorted(values)
        all_ks.update(ks)
        ax.plot(ks, [100.0 * values[k] for k in ks], marker=markers[i % len(markers)], markersize=4,
                linewidth=1.5, label=label)
    ax.set_xscale("log")
    ticks = sorted(all_ks)
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(k) for k in ticks])
    ax.minorticks_off()
    ax.set_xlabel("k (passages retrieved)")
    ax.set_ylabel("Recall@k (%)")
    ax.set_ylim(0, 100)
    ax.grid(True, which="major", alpha=0.3)
    ax.set_title(title if not subtitle else f"{title}\n{subtitle}", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    logger.info("wrote %s", path)
    return path

"""Loss and test-accuracy curves per config (mean over seeds, band = min..max), as a PNG."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence


def plot(records: List[Dict[str, Any]], path: Path, title: str,
         groups: Optional[Sequence[Sequence[str]]] = None) -> None:
    """One row per group of config names (default: all in one row): training loss (log scale)
    and test accuracy against epochs. "none" is drawn in black in every row."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    by_name = {r["name"]: r for r in records}
    groups = groups or [[r["name"] for r in records]]
    fig, axes = plt.subplots(len(groups), 2, figsize=(13, 4.2 * len(groups)), squeeze=False)
    for row, names in zip(axes, groups):
        names = [n for n in names if n in by_name]
        colours = iter(plt.cm.tab10(np.linspace(0, 1, 10)))
        for name in names:
            runs = by_name[name]["runs"]
            colour = "black" if name == "none" else next(colours)
            for ax, key, scale in ((row[0], "train_loss", 1.0), (row[1], "test_acc", 100.0)):
                y = scale * np.array([run["curves"][key] for run in runs])
                x = np.arange(1, y.shape[1] + 1)
                ax.plot(x, y.mean(axis=0), color=colour, lw=2 if name == "none" else 1.3, label=name)
                if len(runs) > 1:
                    ax.fill_between(x, y.min(axis=0), y.max(axis=0), color=colour, alpha=0.1, lw=0)
        row[0].set_yscale("log")
        row[0].set_ylabel("training loss (full training set)")
        row[1].set_ylabel("test accuracy, %")
        lo = min(100 * min(min(run["curves"]["test_acc"][len(run["curves"]["test_acc"]) // 3:])
                           for run in by_name[n]["runs"]) for n in names)
        row[1].set_ylim(max(lo - 1, 0), 100)
        for ax in row:
            ax.set_xlabel("epoch")
            ax.grid(alpha=0.3)
        row[0].legend(fontsize=8, loc="upper right")  # the loss panel's upper right stays empty
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)

"""Where a run's files go: ``<root>/<timestamp>/`` unless --out names a folder."""

from __future__ import annotations

import json
import os
import time


def results_dir(out: str | None, root: str) -> str:
    path = out or os.path.join(root, time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(path, exist_ok=True)
    return path


def save_json(path: str, data: dict) -> str:
    with open(path, "w") as f:
        json.dump(data, f, indent=1)
    return path


def pyplot():
    """matplotlib.pyplot on the Agg backend, or None with the reason printed (the chart is then skipped)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        print(f"chart skipped: matplotlib is not importable ({e})")
        return None
    return plt

"""matplotlib for every plot the package writes: pyplot on the file-only Agg backend, and
one way to write a figure (tight layout, a PNG through a temp file, the figure closed)."""

import logging
from pathlib import Path

from fairseq_layernorm_plugins.atomic import atomic_path


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend, with matplotlib's own logging at
    WARNING (fairseq's logging setup would otherwise print its font search at DEBUG)."""
    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # before its import logs anything
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def distinct_colours(n):
    """``n`` colours that all differ: matplotlib's tab10 up to 10, tab20 up to 20, beyond that
    evenly spaced on turbo (a plot's default colour cycle repeats after 10 lines)."""
    if n <= 20:
        cmap = pyplot().get_cmap("tab10" if n <= 10 else "tab20")
        return [cmap(i) for i in range(n)]
    cmap = pyplot().get_cmap("turbo")
    return [cmap(i / (n - 1)) for i in range(n)]


def save_figure(fig, path, dpi=110):
    """Write ``fig`` as ``path`` (a PNG, through a temp file) and close it; returns the path."""
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format="png")
    pyplot().close(fig)
    return Path(path)

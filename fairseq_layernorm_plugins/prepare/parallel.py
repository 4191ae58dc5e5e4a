"""Run a line-to-line function over many lines on all cores, with a progress bar."""

import multiprocessing as mp
import sys

from tqdm import tqdm

_FN = None


def _init(fn):
    global _FN
    _FN = fn


def _apply(chunk):
    return [_FN(item) for item in chunk]


def map_lines(fn, items, workers=2, desc=None, chunk_size=2000):
    """``[fn(x) for x in items]`` in order, over ``workers`` processes; ``fn`` must pickle
    (the tokenisers and BPE appliers here do). Shows a progress bar on stderr."""
    items = list(items)
    chunks = [items[i : i + chunk_size] for i in range(0, len(items), chunk_size)]
    out = []
    with tqdm(total=len(items), desc=desc, unit=" lines", file=sys.stderr, mininterval=2, disable=not items) as bar:
        if workers <= 1 or len(chunks) <= 1:
            _init(fn)
            results = map(_apply, chunks)
            pool = None
        else:
            pool = mp.get_context("fork" if sys.platform.startswith("linux") else "spawn").Pool(workers, _init, (fn,))
            results = pool.imap(_apply, chunks)
        try:
            for result in results:
                out.extend(result)
                bar.update(len(result))
        finally:
            if pool is not None:
                pool.close()
                pool.join()
    return out


class Compose:
    """``Compose(f, g)(x) == g(f(x))``; a None from any step (a dropped line) stops there."""

    def __init__(self, *fns):
        self.fns = fns

    def __call__(self, item):
        for fn in self.fns:
            if item is None:
                return None
            item = fn(item)
        return item

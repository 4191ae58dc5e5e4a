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
    return list(imap_ordered(fn, items, workers, desc, chunk_size))


def imap_ordered(fn, items, workers=2, desc=None, chunk_size=2000, unit=" lines"):
    """``fn(x)`` for each of ``items``, yielded in order as they are computed by ``workers``
    processes (so that a long run's results need not all be held at once), with a progress bar
    on stderr."""
    items = list(items)
    chunks = [items[i : i + chunk_size] for i in range(0, len(items), chunk_size)]
    with tqdm(total=len(items), desc=desc, unit=unit, file=sys.stderr, mininterval=2, disable=not items) as bar:
        if workers <= 1 or len(chunks) <= 1:
            _init(fn)
            results = map(_apply, chunks)
            pool = None
        else:
            pool = mp.get_context("fork" if sys.platform.startswith("linux") else "spawn").Pool(workers, _init, (fn,))
            results = pool.imap(_apply, chunks)
        try:
            for result in results:
                bar.update(len(result))
                yield from result
        finally:
            if pool is not None:
                pool.terminate()  # a consumer that stopped early leaves nothing running
                pool.join()


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

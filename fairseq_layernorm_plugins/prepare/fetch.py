"""Getting the corpora: download with progress and retries, or use local archives;
unpack with validation (a corrupt, truncated or incomplete archive is a one-line
error naming it)."""

import logging
import os
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

from tqdm import tqdm

from fairseq_layernorm_plugins.prepare.steps import file_checksum
from fairseq_layernorm_plugins.prepare.textio import DataError

logger = logging.getLogger(__name__)


def verify(path, expected, source=None):
    """Raise a one-line DataError if ``path``'s sha256 is not ``expected``."""
    check_digest(path, "sha256", expected, source)


def check_digest(path, algorithm, expected, source=None):
    """Raise a one-line DataError if ``path``'s ``algorithm`` digest (a :mod:`hashlib` name)
    is not ``expected``."""
    actual = file_checksum(path, algorithm)
    if actual != expected:
        raise DataError(
            f"{source or path}: {algorithm} {actual} is not the expected {expected} (corrupt or another version)"
        )


def download(url, destination, retries=3, wait=5.0, checksum=None, hint=None):
    """Fetch ``url`` to ``destination`` (via ``destination.part``, renamed when complete
    and, with ``checksum``, only if its sha256 matches); an existing ``destination`` is
    reused (and verified). Retries with a growing wait; when every attempt fails the
    DataError names the URL, the destination and ``hint`` (what else the user can do)."""
    destination = Path(destination)
    if destination.exists():
        if checksum:
            verify(destination, checksum)
        return destination
    destination.parent.mkdir(parents=True, exist_ok=True)
    part = destination.with_name(destination.name + ".part")
    for attempt in range(1, retries + 1):
        try:
            with urllib.request.urlopen(url, timeout=60) as response, open(part, "wb") as out:
                total = int(response.headers.get("Content-Length") or 0) or None
                with tqdm(
                    total=total, unit="B", unit_scale=True, desc=destination.name, file=sys.stderr, mininterval=2
                ) as bar:
                    while block := response.read(1 << 20):
                        out.write(block)
                        bar.update(len(block))
            if total is not None and part.stat().st_size != total:
                raise OSError(f"got {part.stat().st_size} of {total} bytes")
            if checksum:
                verify(part, checksum, source=url)
            os.replace(part, destination)
            return destination
        except (OSError, DataError) as err:
            logger.warning("download of %s failed (attempt %d/%d): %s", url, attempt, retries, err)
            if attempt == retries:
                part.unlink(missing_ok=True)
                raise DataError(
                    f"{url}: download failed after {retries} attempts ({err}); fetch it yourself "
                    f"to {destination}" + (f" or {hint}" if hint else "")
                ) from None
            time.sleep(wait * attempt)


def extract(archive, destination, required):
    """Unpack the tar ``archive`` into ``destination`` after checking that it reads to
    the end and holds every member path in ``required`` (names written ``./NAME``, as
    ``tar -czf A.tgz .`` stores them, count as ``NAME``)."""
    archive = Path(archive)
    if not archive.is_file():
        raise DataError(f"{archive}: archive not found")
    try:
        with tarfile.open(archive) as tar:
            names = {name.removeprefix("./") for name in tar.getnames()}  # reads every header: catches truncation early
            missing = sorted(set(required) - names)
            if missing:
                raise DataError(f"{archive}: missing {', '.join(missing)}")
            tar.extractall(destination, filter="data")
    except (tarfile.TarError, EOFError, OSError) as err:
        reason = " ".join(str(err).split())  # tarfile's "could not be opened" lists each method on a line
        raise DataError(f"{archive}: corrupt or truncated archive ({reason})") from None
    return Path(destination)

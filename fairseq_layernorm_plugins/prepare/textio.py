"""Reading parallel text safely, writing it, and binarising it with fairseq-preprocess."""

import subprocess
import sys
from pathlib import Path


class DataError(ValueError):
    """Bad input data; the message is one line naming the file (and line)."""


def read_lines(path):
    """Lines of a UTF-8 text file without their newline; a clear error on bad bytes."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    lines = []
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                lines.append(raw.decode("utf-8").rstrip("\r\n"))
            except UnicodeDecodeError as err:
                raise DataError(f"{path}:{number}: invalid UTF-8 ({err.reason} at byte {err.start})") from None
    if not any(line.strip() for line in lines):
        raise DataError(f"{path}: empty or all-blank file")
    return lines


def read_parallel(src_path, tgt_path):
    """Aligned (source, target) line pairs; misaligned files are an error naming both."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise DataError(f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}: not aligned")
    return list(zip(src, tgt))


def aligned(name_a, a, name_b, b, what):
    """Raise a DataError naming both files if ``a`` and ``b`` differ in length."""
    if len(a) != len(b):
        raise DataError(f"{name_a} has {len(a)} {what} but {name_b} has {len(b)}: not aligned")


def write_lines(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in lines)


def fairseq_preprocess(trainpref, validpref, testpref, destdir, src, tgt, joined=False, workers=2, nwords=None):
    """Binarise with the real ``fairseq-preprocess`` (from the running environment).
    ``testpref`` may be a list: fairseq names those splits test, test1, test2, ...
    ``nwords``: ``--nwordssrc N --nwordstgt N`` (each dictionary keeps its N - 4 most frequent
    types beside the four special symbols; default: every type of train)."""
    if isinstance(testpref, (list, tuple)):
        testpref = ",".join(map(str, testpref))
    cmd = [
        str(Path(sys.executable).parent / "fairseq-preprocess"),
        "--source-lang",
        src,
        "--target-lang",
        tgt,
        "--trainpref",
        str(trainpref),
        "--validpref",
        str(validpref),
        "--testpref",
        str(testpref),
        "--destdir",
        str(destdir),
        "--workers",
        str(workers),
    ]
    cmd += ["--joined-dictionary"] if joined else []
    cmd += ["--nwordssrc", str(nwords), "--nwordstgt", str(nwords)] if nwords else []
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"fairseq-preprocess failed:\n{proc.stderr[-3000:]}")

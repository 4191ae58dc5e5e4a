#!/usr/bin/env python
"""Collect the offline install bundle for a GPU compute node (run on a machine with network).

    python scripts/gpu/collect.py [--out gpu_bundle] [--python-version 3.12]

The bundle holds what a node with its own CUDA build of torch lacks, and nothing it has:

* ``wheels/``: ``scripts/gpu/requirements.txt`` exactly, as manylinux x86-64 wheels for
  ``--python-version`` (antlr4-python3-runtime, an sdist on PyPI, is built into a wheel
  here), plus the fairseq-fixed sdist, which the node compiles against its own torch;
* ``project.tar.gz``: this repository's files as they are in the working tree (not what git ignores,
  nor runs saved part-trained by ``scripts/run_state.py``);
* ``data/iwslt14-mini/``: the IWSLT14-mini data-bin and test references the GPU check
  trains and scores on (``--data``; prepared from ``--iwslt-dir`` when missing).

A ``built/`` folder that ``install.sh`` left in the bundle (fairseq as a node compiled it) is
kept as it is and counted in the size.

Idempotent: files already downloaded are kept, files no requirement names any more are
removed. Prints each part's size and fails past ``--limit-mib`` (64 MiB). When pip fails,
the package index is asked once on its own: a failure while it answers (a bad pin, a
missing wheel) is reported as pip's error, and only an index that does not answer as a
network problem (:class:`IndexUnreachable`). On the node:
``scripts/gpu/install.sh`` then ``scripts/gpu/check.py`` (docs/cluster.md).
"""

import argparse
import os
import shutil
import ssl
import subprocess
import sys
import tarfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = Path(__file__).with_name("requirements.txt")
SKLEARN = Path(__file__).with_name("requirements-scikit-learn.txt")  # --with-scikit-learn
SDISTS = {"fairseq-fixed"}  # downloaded as source: compiled on the node
BUILT_HERE = {"antlr4-python3-runtime"}  # sdist-only on PyPI and pure Python: built into a wheel here
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)
DATA_FILES = ("stamp.json", "test.raw.de", "test.raw.en", "test.tok.de", "test.tok.en")
DEFAULT_INDEX = "https://pypi.org/simple"


class CollectError(RuntimeError):
    """A step of the collection failed; the message is one line."""


class IndexUnreachable(CollectError):
    """pip failed and the package index does not answer: a network problem, not the pins'."""


def requirements(*paths):
    """[(name, version)] of the pinned lines of ``paths`` (``name==version  # comment``;
    default: requirements.txt), each name once."""
    pins = {}
    for path in paths or (REQUIREMENTS,):
        for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            spec = line.split("#", 1)[0].strip()
            if not spec:
                continue
            if spec.count("==") != 1:
                raise CollectError(f"{path}:{number}: expected 'name==version', got {spec!r}")
            name, version = (part.strip() for part in spec.split("=="))
            if pins.setdefault(_canonical(name), (name, version)) != (name, version):
                raise CollectError(
                    f"{path}:{number}: {name} pinned twice, to {pins[_canonical(name)][1]} and {version}"
                )
    return list(pins.values())


def _canonical(name):
    from packaging.utils import canonicalize_name

    return canonicalize_name(name)


def distribution_of(filename):
    """(canonical name, version) of a wheel or sdist file name, None for anything else."""
    from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename

    try:
        name, version = (
            parse_wheel_filename(filename) if filename.endswith(".whl") else parse_sdist_filename(filename)
        )[:2]
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None
    return str(name), str(version)


def index_url():
    """The index pip downloads from: ``PIP_INDEX_URL``, else pip's configured ``index-url``,
    else PyPI."""
    if os.environ.get("PIP_INDEX_URL"):
        return os.environ["PIP_INDEX_URL"].split()[0]
    proc = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.rpartition(".")[2] == "index-url" and value.strip("'\" "):
            return value.strip("'\" ").split()[0]
    return DEFAULT_INDEX


def index_reachable(url=None, timeout=15.0):
    """Whether the package index at ``url`` (default: :func:`index_url`) answers at all, any
    HTTP status included: one HEAD request for pip's own project page (never the index's list
    of every project); a ``file:`` index is reachable when its folder exists."""
    url = (url or index_url()).rstrip("/")
    if url.startswith("file:"):
        return Path(urllib.request.url2pathname(urllib.parse.urlparse(url).path)).is_dir()
    context = ssl.create_default_context(cafile=os.environ.get("PIP_CERT") or None)
    try:
        urllib.request.urlopen(urllib.request.Request(f"{url}/pip/", method="HEAD"), timeout=timeout, context=context)
    except urllib.error.HTTPError:
        return True  # it answered
    except (urllib.error.URLError, OSError, ValueError):
        return False
    return True


def pip(*args, label):
    """Run ``python -m pip ARGS``; on failure raise with pip's last error line:
    :class:`IndexUnreachable` if the package index does not answer (:func:`index_reachable`),
    else :class:`CollectError`."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", *args, "--disable-pip-version-check"], capture_output=True, text=True
    )
    if proc.returncode:
        errors = [line for line in (proc.stderr + proc.stdout).splitlines() if line.startswith("ERROR")] or (
            proc.stderr or proc.stdout
        ).splitlines()
        message = f"{label}: pip exited {proc.returncode}: {errors[-1] if errors else '(no output)'}"
        url = index_url()
        if not index_reachable(url):
            raise IndexUnreachable(f"{message} (the package index {url} does not answer)")
        raise CollectError(message)
    return proc.stdout


def collect_wheels(wheels, python_version, platforms=PLATFORMS, pins=None):
    """Download the pinned requirements into ``wheels`` (see the module docstring); remove
    files of other versions. Returns the file names."""
    pins = requirements() if pins is None else pins
    wheels.mkdir(parents=True, exist_ok=True)
    have = {distribution_of(p.name) for p in wheels.iterdir()}
    wanted = {(_canonical(n), v) for n, v in pins}
    binary = [f"{n}=={v}" for n, v in pins if n not in SDISTS | BUILT_HERE]
    for name, version in pins:
        if (_canonical(name), version) in have:
            continue
        if name in SDISTS:  # metadata is read with this environment's torch and cython, not a fresh build env
            pip(
                "download",
                "--no-deps",
                "--no-binary",
                name,
                "--no-build-isolation",
                "-d",
                str(wheels),
                f"{name}=={version}",
                label=name,
            )
        elif name in BUILT_HERE:
            pip("wheel", "--no-deps", "-w", str(wheels), f"{name}=={version}", label=name)
    missing = [spec for spec in binary if (_canonical(spec.split("==")[0]), spec.split("==")[1]) not in have]
    if missing:
        platform_args = [arg for platform in platforms for arg in ("--platform", platform)]
        pip(
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            python_version,
            "--implementation",
            "cp",
            *platform_args,
            "-d",
            str(wheels),
            *missing,
            label="wheels",
        )
    for path in wheels.iterdir():
        if distribution_of(path.name) not in wanted:
            path.unlink()
    found = {distribution_of(p.name) for p in wheels.iterdir()}
    if wanted - found:
        raise CollectError(f"{wheels}: still missing {sorted(f'{n}=={v}' for n, v in wanted - found)}")
    return sorted(p.name for p in wheels.iterdir())


def tracked_files(repo=REPO):
    """The repository's files git does not ignore (tracked, or new and not ignored)."""
    out = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [name for name in out.split("\0") if name and (repo / name).is_file()]


def pack_project(output, repo=REPO):
    """``output`` (.tar.gz): the repository's files (not the ignored ones) as in the working tree, under
    ``fairseq_layernorm_plugins/``, but for the runs saved there part-trained (``scripts/run_state.py``:
    tens of MB of checkpoints, carried to a node on their own); written to a temp file, then renamed."""
    from fairseq_layernorm_plugins.atomic import atomic_path
    from fairseq_layernorm_plugins.runs.run_state import LAST, STATE

    names = tracked_files(repo)
    saved_runs = {
        Path(name).parent for name in names if Path(name).name == STATE and (repo / name).with_name(LAST).is_file()
    }
    with atomic_path(output) as tmp, tarfile.open(tmp, "w:gz") as tar:
        for name in names:
            if Path(name).parent not in saved_runs:
                tar.add(repo / name, arcname=f"fairseq_layernorm_plugins/{name}", recursive=False)
    return output


def stage_data(prepared, out):
    """Copy what the GPU check reads from a prepared IWSLT14-mini folder (``bin/``, the
    test references, the stamp) into ``out``, replacing it."""
    from fairseq_layernorm_plugins.atomic import atomic_directory

    prepared = Path(prepared)
    missing = [name for name in ("bin", *DATA_FILES) if not (prepared / name).exists()]
    if missing:
        raise CollectError(
            f"{prepared}: not a prepared IWSLT14-mini folder (missing {', '.join(missing)}); "
            "run scripts/prepare_iwslt14_mini.py or pass --iwslt-dir"
        )
    with atomic_directory(out) as tmp:
        shutil.copytree(prepared / "bin", tmp / "bin")
        for name in DATA_FILES:
            shutil.copy2(prepared / name, tmp / name)
    return out


def size(path):
    path = Path(path)
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default=str(REPO / "gpu_bundle"), help="the bundle folder (default: gpu_bundle)")
    parser.add_argument("--python-version", default="3.12", help="the node's CPython, for the wheels (default 3.12)")
    parser.add_argument(
        "--data",
        default=str(REPO / "data" / "iwslt14-mini-gpu"),
        help="prepared IWSLT14-mini folder for the check (default: data/iwslt14-mini-gpu, made if missing)",
    )
    parser.add_argument(
        "--iwslt-dir",
        default=str(REPO.parent / "shared" / "data" / "iwslt14"),
        help="the IWSLT14 files to prepare --data from (default: ../shared/data/iwslt14)",
    )
    parser.add_argument(
        "--test-lines", type=int, default=1000, help="evenly spaced test lines when preparing --data (default 1000)"
    )
    parser.add_argument("--no-data", action="store_true", help="leave the check's data out")
    parser.add_argument(
        "--with-scikit-learn",
        action="store_true",
        help="also carry scikit-learn and scipy (about 42 MiB), for a node without them (fairseq imports scikit-learn)",
    )
    parser.add_argument("--limit-mib", type=float, default=64.0, help="fail when the bundle is larger (default 64)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        print(f"collect: wheels for CPython {args.python_version} manylinux x86-64 ...", flush=True)
        pins = requirements(REQUIREMENTS, *([SKLEARN] if args.with_scikit_learn else []))
        names = collect_wheels(out / "wheels", args.python_version, pins=pins)
        pack_project(out / "project.tar.gz")
        if args.no_data:
            shutil.rmtree(out / "data", ignore_errors=True)
        else:
            if not (Path(args.data) / "stamp.json").is_file():
                from fairseq_layernorm_plugins.prepare.iwslt14_mini import prepare
                from fairseq_layernorm_plugins.prepare.textio import DataError

                print(f"collect: preparing IWSLT14-mini in {args.data} ...", flush=True)
                try:
                    prepare(args.iwslt_dir, args.data, test_lines=args.test_lines)
                except DataError as err:
                    raise CollectError(str(err)) from None
            (out / "data").mkdir(exist_ok=True)
            stage_data(args.data, out / "data" / "iwslt14-mini")
    except CollectError as err:
        sys.exit(f"collect: error: {err}")
    parts = {name: out / name for name in ("wheels", "project.tar.gz", "data", "built")}  # built/: install.sh's
    total = size(out)
    for label, path in parts.items():
        if path.exists():
            print(f"  {label:15s} {size(path) / 2**20:6.1f} MiB")
    print(
        f"collect: {out}: {len(names)} wheel/sdist files, {total / 2**20:.1f} MiB in all (limit {args.limit_mib:g} MiB)"
    )
    if total > args.limit_mib * 2**20:
        sys.exit(
            f"collect: error: {out} is {total / 2**20:.1f} MiB, over the {args.limit_mib:g} MiB a node may receive"
        )


if __name__ == "__main__":
    main()

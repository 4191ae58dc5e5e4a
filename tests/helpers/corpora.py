"""Standard-shaped corpora built from real segments in ../shared/data, for the
preparation tests (nothing here is written into the repository)."""

import re
import shutil
import tarfile
from pathlib import Path

from fairseq_layernorm_plugins.prepare.iwslt14 import TEST_SETS

HEADER_TAGS = ("url", "keywords", "talkid", "title", "description")


def xml_to_train_tags(xml_path, max_segments=None):
    """A ``train.tags.de-en.*``-format text made from an IWSLT xml file: per talk its
    <url>/<keywords>/<talkid>/<title>/<description> lines, then one segment a line."""
    out, n = [], 0
    for line in Path(xml_path).read_text(encoding="utf-8").splitlines():
        tag = re.match(r"\s*<(\w+)", line)
        if tag and tag.group(1) in HEADER_TAGS:
            out.append(line.strip())
        elif "<seg id" in line and (max_segments is None or n < max_segments):
            out.append(re.sub(r"\s*<seg id=\"\d+\">\s*|\s*</seg>\s*", "", line))
            n += 1
    return out


def build_iwslt14_archive(orig_dir, destination, train_from=("IWSLT14.TED.tst2010", "IWSLT14.TED.tst2011"), drop=()):
    """A ``de-en.tgz`` laid out like the real one: train.tags.de-en.{de,en} made from the
    ``train_from`` xml files, and the five dev/test xml files. ``drop`` leaves members out."""
    staging = Path(destination).with_suffix(".staging") / "de-en"
    staging.mkdir(parents=True)
    for lang in ("de", "en"):
        lines = [line for name in train_from for line in xml_to_train_tags(Path(orig_dir) / f"{name}.de-en.{lang}.xml")]
        (staging / f"train.tags.de-en.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
        for name in TEST_SETS:
            shutil.copy(Path(orig_dir) / f"{name}.de-en.{lang}.xml", staging)
    for name in drop:
        (staging / name).unlink()
    with tarfile.open(destination, "w:gz") as tar:
        tar.add(staging, arcname="de-en")
    shutil.rmtree(staging.parent)
    return Path(destination)

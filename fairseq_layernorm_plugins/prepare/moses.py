"""The Moses text steps of fairseq's ``prepare-iwslt14.sh`` / ``prepare-wmt14en2de.sh``,
with sacremoses in place of the Perl scripts (same output; see the tests).

Every function here maps one line to one line (or a pair to a pair, or None to drop
it), so :func:`fairseq_layernorm_plugins.prepare.parallel.map_lines` can run them on
all cores.
"""

import re

import regex
from sacremoses import MosesPunctNormalizer, MosesTokenizer

_SEG = re.compile(r'<seg id="[0-9]*">\s*')
_END_SEG = re.compile(r"\s*</seg>\s*")
_WHITESPACE = re.compile(r"\s+")
_LAST_WORD_PERIOD = re.compile(r"^(\S+)\.$")
_CONTROL = regex.compile(r"\p{C}")


class PerlMosesTokenizer(MosesTokenizer):
    """sacremoses' tokenizer plus the one rule of today's ``tokenizer.perl`` it lacks:
    a period ending the last word is split off even after a non-breaking prefix
    ("... in den u.s.a." -> "u.s.a ."). Without it 31 of the 13,500 IWSLT14 test lines
    differ from fairseq's; with it none do."""

    def handles_nonbreaking_prefixes(self, text):
        text = super().handles_nonbreaking_prefixes(text)
        head, _, last = text.rpartition(" ")
        match = _LAST_WORD_PERIOD.match(last)
        if match:
            last = match.group(1) + " ."
        return f"{head} {last}" if head else last


class Tokenize:
    """``tokenizer.perl -l LANG [-a]`` on one line (escaping on, no ``-x``: only blank
    lines pass through untouched, as in the Perl script)."""

    def __init__(self, lang, aggressive_dash_splits=False):
        self.tokenizer = PerlMosesTokenizer(lang=lang)
        self.aggressive = aggressive_dash_splits

    def __call__(self, line):
        if not line.strip():
            return line
        return self.tokenizer.tokenize(line, aggressive_dash_splits=self.aggressive, return_str=True, escape=True)


class NormalizePunctuation:
    """``normalize-punctuation.perl -l LANG`` then ``remove-non-printing-char.perl``
    (every Unicode "other" character, \\p{C}, becomes a space)."""

    def __init__(self, lang):
        self.normalizer = MosesPunctNormalizer(lang=lang)

    def __call__(self, line):
        return _CONTROL.sub(" ", self.normalizer.normalize(line))


def lowercase(line):
    """``lowercase.perl``."""
    return line.lower()


def strip_train_tags(line):
    """prepare-iwslt14.sh on ``train.tags.*``: drop <url>/<talkid>/<keywords> lines,
    unwrap <title> and <description>; None drops the line."""
    if "<url>" in line or "<talkid>" in line or "<keywords>" in line:
        return None
    for tag in ("title", "description"):
        line = line.replace(f"<{tag}>", "").replace(f"</{tag}>", "")
    return line


def xml_segments(lines):
    """The ``<seg id="N"> ... </seg>`` texts of an IWSLT xml / WMT sgm file, as the
    recipes' grep + sed extract them."""
    return [_END_SEG.sub("", _SEG.sub("", line)) for line in lines if "<seg id" in line]


def straight_apostrophe(line):
    """The recipes' ``sed -e "s/\\’/\\'/g"`` on dev/test text before tokenising."""
    return line.replace("\u2019", "'")


def _squeeze(text):
    return _WHITESPACE.sub(" ", text.replace("|", "")).strip()


class CleanCorpus:
    """``clean-corpus-n.perl -ratio R CORPUS L1 L2 OUT MIN MAX`` on one pair: squeeze
    whitespace, drop "|", and drop pairs with an empty side, a side outside MIN..MAX
    words, or a length ratio above R. Returns the cleaned pair or None."""

    def __init__(self, min_len=1, max_len=175, ratio=1.5):
        self.min_len, self.max_len, self.ratio = min_len, max_len, ratio

    def __call__(self, pair):
        src, tgt = map(_squeeze, pair)
        if not src or not tgt:
            return None
        ns, nt = len(src.split(" ")), len(tgt.split(" "))
        if not (self.min_len <= ns <= self.max_len and self.min_len <= nt <= self.max_len):
            return None
        if ns / nt > self.ratio or nt / ns > self.ratio:
            return None
        return src, tgt

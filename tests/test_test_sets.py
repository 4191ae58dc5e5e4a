"""Several test sets, as the B2T paper scores WMT (newstest2010-2016 and their mean):
``prepare_wmt14`` adds them (local files or the statmt.org archives SacreBLEU scores
from), ``evaluate`` scores each and their mean, and the B2T recipes compare on the mean."""

import json
import tarfile

import pytest
from conftest import shared_data
from test_evaluate import TINY_RECIPE, sacrebleu_cli

from fairseq_layernorm_plugins.prepare import wmt14
from fairseq_layernorm_plugins.prepare.textio import DataError, read_lines, write_lines
from fairseq_layernorm_plugins.recipes.config import load_recipe
from fairseq_layernorm_plugins.runs.evaluate import evaluate
from fairseq_layernorm_plugins.runs.launch import Launch, train

LINES = 60


def head(path, out, n=LINES):
    write_lines(out, read_lines(path)[:n])
    return out


def write_sgm(lines, path, lang):
    """A WMT sgm file as statmt.org's: one <doc>, one <seg> a line."""
    segs = [f'<seg id="{i}">{line}</seg>' for i, line in enumerate(lines, 1)]
    write_lines(
        path,
        [
            '<srcset setid="x" srclang="any">',
            f'<doc sysid="ref" docid="d" origlang="{lang}">',
            *segs,
            "</doc>",
            "</srcset>",
        ],
    )


@pytest.fixture(scope="module")
def small_wmt(tmp_path_factory):
    """Sources of LINES-line real WMT text, newstest2011 as a wmt11-test.tgz shaped like
    statmt.org's, newstest2015/2016 as plain files in a folder."""
    root = tmp_path_factory.mktemp("wmt")
    news, plain = shared_data("wmt_news_other", "de-en"), shared_data("wmt14", "plain")
    local = root / "local"
    local.mkdir()
    sources = wmt14.Sources(
        train=[{lang: head(news / f"newstest2012.{lang}", local / f"train.{lang}", 400) for lang in ("en", "de")}],
        valid=[{lang: head(plain / f"newstest2013.{lang}", local / f"valid.{lang}") for lang in ("en", "de")}],
        test=[{lang: head(plain / f"newstest2014.{lang}", local / f"test.{lang}") for lang in ("en", "de")}],
    )
    folder = root / "newstests"
    folder.mkdir()
    for name in ("newstest2015", "newstest2016"):
        for lang in ("en", "de"):
            head(news / f"{name}.{lang}", folder / f"{name}.{lang}")
    archives = root / "archives"
    archives.mkdir()
    archive, _, members = wmt14.statmt_test_set("newstest2011", "en", "de")
    with tarfile.open(archives / archive, "w:gz") as tar:
        for lang, member in members.items():
            write_sgm(read_lines(news / f"newstest2011.{lang}")[:LINES], root / "sgm", lang)
            tar.add(root / "sgm", arcname=member)
    return root, sources, folder, archives, news


@pytest.fixture(scope="module")
def prepared(small_wmt):
    root, sources, folder, archives, _ = small_wmt
    out = root / "data"
    stamp = wmt14.prepare(
        out,
        sources,
        archive_dir=archives,
        merges=300,
        extra_tests=("newstest2011", "newstest2014", "newstest2015", "newstest2016"),
        extra_test_dirs=[folder],
    )
    return out, stamp


def test_statmt_test_sets_are_sacrebleus():
    assert wmt14.statmt_test_set("newstest2016", "en", "de") == (
        "wmt16-test.tgz",
        "https://data.statmt.org/wmt16/translation-task/test.tgz",
        {"en": "test/newstest2016-ende-src.en.sgm", "de": "test/newstest2016-ende-ref.de.sgm"},
    )
    assert wmt14.EXTRA_TESTS == (
        "newstest2010",
        "newstest2011",
        "newstest2012",
        "newstest2013",
        "newstest2015",
        "newstest2016",
    )
    with pytest.raises(DataError, match="newstest2099: not a WMT news test set"):
        wmt14.statmt_test_set("newstest2099", "en", "de")


def test_extra_test_sets_become_test1_test2_test3(prepared, small_wmt):
    out, stamp = prepared
    news = small_wmt[4]
    assert stamp["test_sets"] == {
        "newstest2014": "test",
        "newstest2011": "test1",
        "newstest2015": "test2",
        "newstest2016": "test3",
    }
    assert stamp["sizes"] == {
        "train": stamp["sizes"]["train"],
        "valid": LINES,
        "test": LINES,
        "test1": LINES,
        "test2": LINES,
        "test3": LINES,
    }
    for split, name in (("test1", "newstest2011"), ("test2", "newstest2015"), ("test3", "newstest2016")):
        for lang in ("en", "de"):
            assert read_lines(out / f"{split}.raw.{lang}") == read_lines(news / f"{name}.{lang}")[:LINES]
            assert (out / "bin" / f"{split}.en-de.{lang}.bin").is_file()
        assert read_lines(out / f"{split}.tok.en")[0] != read_lines(out / f"{split}.en")[0]  # tokenised, then BPE


def test_unknown_test_set_is_one_line_error_and_no_output(small_wmt, tmp_path):
    _, sources, folder, archives, _ = small_wmt
    with pytest.raises(DataError, match="newstest2099"):
        wmt14.prepare(
            tmp_path / "out",
            sources,
            archive_dir=archives,
            merges=300,
            extra_tests=("newstest2099",),
            extra_test_dirs=[folder],
        )
    assert not (tmp_path / "out").exists()


def test_evaluate_scores_each_set_and_their_mean(prepared, tmp_path):
    out, _ = prepared
    recipe_file = tmp_path / "tiny.yaml"
    recipe_file.write_text(
        TINY_RECIPE.format(arch="transformer_b2t")
        .replace("src, target_lang: tgt", "en, target_lang: de")
        .replace(
            "generate: {beam: 2, average_last: 2}",
            "generate: {beam: 2, lenpen: 0.6, test_sets_lenpen: 1.0, extra: [--max-len-b, '20'], "
            "test_sets: [newstest2011, newstest2014, newstest2016]}",
        )
        .replace("checkpoint: {no_save: true}", "checkpoint: {no_epoch_checkpoints: true}")
    )
    run_dir = tmp_path / "run"
    train(
        Launch(
            load_recipe(recipe_file),
            str(out / "bin"),
            str(run_dir / "checkpoints"),
            cpu_workers=1,
            extra=["--max-update", "4"],
        ),
        run_dir,
    )
    result = evaluate(run_dir, echo=lambda *_: None)
    assert list(result["test_sets"]) == ["newstest2011", "newstest2014", "newstest2016"]
    cli = {
        name: round(sacrebleu_cli(out / f"{split}.raw.de", run_dir / f"{split}.hyp.detok.de"), 2)
        for name, split in (("newstest2011", "test1"), ("newstest2014", "test"), ("newstest2016", "test3"))
    }
    assert {name: s["sacrebleu"]["score"] for name, s in result["test_sets"].items()} == cli
    assert {name: s["lenpen"] for name, s in result["test_sets"].items()} == {
        "newstest2011": 1.0,
        "newstest2014": 0.6,
        "newstest2016": 1.0,
    }
    assert "'lenpen': 0.6" in (run_dir / "generate-test.log").read_text()  # what fairseq-generate ran with
    assert "'lenpen': 1.0" in (run_dir / "generate-test3.log").read_text()
    mean = result["bleu"]["sacrebleu_mean"]
    assert mean["score"] == round(sum(cli.values()) / 3, 2) and mean["sets"] == cli
    assert (
        result["bleu"]["sacrebleu"] == result["test_sets"]["newstest2014"]["sacrebleu"]
    )  # the main test set, as before
    assert json.loads((run_dir / "results.json").read_text()) == result


@pytest.mark.parametrize(
    "name", ["wmt14/b2t/b2t", "wmt14/b2t_released/2022/b2t", "wmt14/b2t_released/2023/b2t", "wmt14/b2t/preln"]
)
def test_b2t_recipes_compare_on_the_mean_of_newstest2010_2016(name):
    recipe = load_recipe(name)
    assert recipe.data["generate"]["test_sets"] == list(wmt14.B2T_TEST_SETS)
    assert (recipe.data["generate"]["lenpen"], recipe.data["generate"]["test_sets_lenpen"]) == (
        0.6,
        1.0,
    )  # the authors' README
    assert recipe.data["paper"]["compare"] == "sacrebleu_mean"

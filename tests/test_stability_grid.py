"""scripts/stability_grid.py end to end on a tiny budget: one real IWSLT14-mini cell, the
report files, resuming, refusing a different budget, and the stall threshold's formula."""

import json
import math
import sys

import pytest
from conftest import REPO, shared_data

sys.path.insert(0, str(REPO / "scripts"))
import stability_grid  # noqa: E402

from fairseq_layernorm_plugins.experiments.curves import unigram_bits  # noqa: E402


def test_unigram_bits_is_entropy_of_target_tokens_with_end_of_sentence(tmp_path):
    (tmp_path / "train.en").write_text("a a b\nb\n", encoding="utf-8")
    # tokens a a b </s> b </s>: p(a) = p(b) = p(</s>) = 1/3
    assert math.isclose(unigram_bits(tmp_path), math.log2(3))
    (tmp_path / "train.en").write_text("a a\n", encoding="utf-8")
    # a a </s>: p = 2/3, 1/3
    assert math.isclose(unigram_bits(tmp_path), -(2 / 3 * math.log2(2 / 3) + 1 / 3 * math.log2(1 / 3)))


def grid(tmp_path, capsys, *extra):
    """``scripts/stability_grid.py`` with one tiny cell and ``extra``, in this process (its
    training and decoding are fairseq processes of their own): (exit status, stdout, stderr),
    where an exit with a message is status 1 and the message on stderr, as Python's own."""
    argv = ["--iwslt-dir", str(shared_data("iwslt14")), "--data", str(tmp_path / "data")]
    argv += ["--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "grid"), "--methods", "preln"]
    argv += ["--depths", "1L-1L", "--lrs", "0.001", "--warmups", "0", "--width", "16", "--max-tokens", "512"]
    capsys.readouterr()
    try:
        stability_grid.main([*argv, "--test-lines", "5", *extra])
        code = 0
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else 1
        if isinstance(exit.code, str):
            print(exit.code, file=sys.stderr)
    out, err = capsys.readouterr()
    return code, out, err


def test_one_cell_end_to_end_resumes_and_refuses_another_budget(tmp_path, capsys):
    """One real IWSLT14-mini cell through the script's main: its record, report and heat map;
    run again, nothing is retrained and hand-written sections of OUT.md are kept; another
    budget is refused with one error line naming OUT.json, which stays as it was."""
    code, _, err = grid(tmp_path, capsys, "--updates", "3")
    assert code == 0, err[-3000:]
    report = json.loads((tmp_path / "grid.json").read_text())
    assert report["budget"] == {
        "updates": 3,
        "max_tokens": 512,
        "width": 16,
        "seed": 1,
        "test_lines": 5,
        "optimizer": "adam",
    }
    (cell,) = report["cells"]
    assert (cell["method"], cell["depth"], cell["lr"], cell["warmup"]) == ("preln", "1L-1L", 0.001, 0)
    assert math.isfinite(cell["valid_nll"]) and cell["status"] in ("trained", "stalled")
    assert cell["status"] == ("stalled" if cell["valid_nll"] >= unigram_bits(tmp_path / "data") else "trained")
    markdown = (tmp_path / "grid.md").read_text()
    assert "python scripts/stability_grid.py --iwslt-dir" in markdown
    assert "| method | 1L-1L lr 0.001 no warm-up |" in markdown
    assert f"{cell['valid_nll']:.2f} / {cell['bleu']:.2f}" in markdown.split("| preln |")[1].splitlines()[0]
    assert (tmp_path / "grid.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "![final validation NLL per cell](grid.png)" in markdown
    written = "\n## Another grid\n\nits table\n\n## Findings\n\nwritten by hand\n"
    (tmp_path / "grid.md").write_text(markdown + written)

    code, out, _ = grid(tmp_path, capsys, "--updates", "3")  # the cell is in grid.json: nothing is retrained
    assert code == 0 and "1 of 1 cells already" in out
    assert (tmp_path / "grid.md").read_text() == markdown + written  # re-rendered, the hand-written sections kept
    assert json.loads((tmp_path / "grid.json").read_text())["cells"] == [cell]

    code, _, err = grid(tmp_path, capsys, "--updates", "4")
    assert code != 0
    assert err.strip().splitlines()[-1].startswith(f"error: {tmp_path / 'grid.json'} holds cells made with")
    assert json.loads((tmp_path / "grid.json").read_text())["cells"] == [cell]


@pytest.mark.parametrize("optimizer", ["adam", "radam"])
def test_cell_optimizer(optimizer):
    recipe = stability_grid.cell_recipe("admin", "18L-18L", 1e-3, 0, 300, 64, 1024, optimizer)
    assert recipe.fairseq["optimizer"] == {"_name": optimizer, "adam_betas": "(0.9, 0.98)", "weight_decay": 0.0001}
    assert recipe.fairseq["lr_scheduler"] == {"_name": "fixed"}  # no warm-up: constant lr


def test_a_cell_made_with_other_options_or_arch_defaults_is_made_again():
    """OUT.json's cells are kept only where their recorded spec is the one the grid would make
    now: another fairseq option or another architecture default makes the cell again; a cell
    recorded before cells recorded a spec is kept."""
    import argparse

    args = argparse.Namespace(updates=3, width=16, max_tokens=512, optimizer="adam")
    cells = [
        ("preln", "2L-2L", 1e-3, 0),
        ("postln", "2L-2L", 1e-3, 60),
        ("admin", "2L-2L", 1e-3, 0),
        ("b2t", "2L-2L", 2e-3, 0),
    ]
    records = [dict(zip(("method", "depth", "lr", "warmup"), cell, strict=True)) for cell in cells]
    current = stability_grid.cell_spec(cells[0], args)
    assert current["arch_defaults"]["encoder_normalize_before"] is True  # Pre-LN, filled in by its arch
    records[0]["spec"] = current
    records[1]["spec"] = stability_grid.cell_spec(cells[1], args)
    changed_default = json.loads(json.dumps(stability_grid.cell_spec(cells[2], args)))
    changed_default["arch_defaults"]["init_style"] = "fairseq"
    records[2]["spec"] = changed_default
    kept = stability_grid.kept_cells(records, set(cells), args)
    assert set(kept) == {cells[0], cells[1], cells[3]}  # the last: no spec recorded
    other_width = stability_grid.kept_cells(records, set(cells), argparse.Namespace(**{**vars(args), "width": 32}))
    assert set(other_width) == {cells[3]}
    # a command that makes other cells keeps these as they are, whatever they were made with
    assert set(stability_grid.kept_cells(records, {cells[0]}, argparse.Namespace(**{**vars(args), "width": 32}))) == {
        cells[1],
        cells[2],
        cells[3],
    }

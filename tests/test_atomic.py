"""All-or-nothing outputs: files and directories appear complete or not at all."""

import json
import os

import pytest

from fairseq_layernorm_plugins.atomic import atomic_directory, atomic_path, write_json, write_text


def test_atomic_directory_leaves_nothing_on_failure(tmp_path):
    out = tmp_path / "prepared"
    with pytest.raises(RuntimeError):
        with atomic_directory(out) as tmp:
            (tmp / "train.de").write_text("halb geschrieben\n")
            raise RuntimeError("interrupted")
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_atomic_directory_replaces_old_output_only_when_complete(tmp_path):
    out = tmp_path / "prepared"
    out.mkdir()
    (out / "old").write_text("old\n")
    with atomic_directory(out) as tmp:
        (tmp / "new").write_text("new\n")
        assert (out / "old").exists()  # still the old output while the new one is written
    assert [p.name for p in out.iterdir()] == ["new"]
    assert [p.name for p in tmp_path.iterdir()] == ["prepared"]  # the old one, set aside, is gone


def test_atomic_path_keeps_the_old_file_when_the_writer_fails(tmp_path):
    out = tmp_path / "table.md"
    out.write_text("old table\n")
    with pytest.raises(RuntimeError):
        with atomic_path(out) as tmp:
            tmp.write_text("half a tab")
            assert out.read_text() == "old table\n"  # untouched while the new one is written
            raise RuntimeError("plot failed")
    assert out.read_text() == "old table\n"
    assert [p.name for p in tmp_path.iterdir()] == ["table.md"]


def test_atomic_path_keeps_the_suffix_and_makes_parents(tmp_path):
    """savefig, torch.save and tarfile read the format from the suffix the writer sees."""
    out = tmp_path / "plots" / "curves.png"
    with atomic_path(out) as tmp:
        assert tmp.parent == out.parent and tmp.suffix == ".png" and str(os.getpid()) in tmp.name
        tmp.write_bytes(b"\x89PNG")
    assert out.read_bytes() == b"\x89PNG"
    assert [p.name for p in out.parent.iterdir()] == ["curves.png"]


def test_write_json_and_text_replace_whole_files(tmp_path):
    out = tmp_path / "results.json"
    out.write_text("{" * 10_000)
    assert write_json(out, {"bleu": 26.59, "runs": [1, 2]}) == out
    assert json.loads(out.read_text()) == {"bleu": 26.59, "runs": [1, 2]}
    assert write_text(tmp_path / "a" / "b.txt", "Grüße\n").read_text(encoding="utf-8") == "Grüße\n"


def test_atomic_directory_replaces_nothing_when_its_check_refuses(tmp_path):
    """``check`` runs when the new directory is complete, before the old one is set aside: a
    refusal (the old one holds a file its writer must not delete) leaves the old one as it was."""
    out = tmp_path / "prepared"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")

    def refuse(destination):
        assert destination == out and (destination / "notes.txt").is_file()
        raise ValueError(f"{destination}: holds notes.txt")

    with pytest.raises(ValueError, match="holds notes.txt"):
        with atomic_directory(out, check=refuse) as tmp:
            (tmp / "new").write_text("new\n")
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["prepared"]  # the new one is removed

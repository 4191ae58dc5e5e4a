"""Corpus preparation: validated inputs and all-or-nothing outputs."""

import pytest

from fairseq_layernorm_plugins.prepare.textio import DataError, read_lines, read_parallel


def test_misaligned_files_name_both(tmp_path):
    (tmp_path / "a.de").write_text("eins\nzwei\n")
    (tmp_path / "a.en").write_text("one\n")
    with pytest.raises(DataError, match=r"a\.de has 2 lines but .*a\.en has 1: not aligned"):
        read_parallel(tmp_path / "a.de", tmp_path / "a.en")


def test_invalid_utf8_names_file_and_line(tmp_path):
    (tmp_path / "bad.de").write_bytes("gut\nüber\n".encode() + b"schl\xe9cht\n")
    with pytest.raises(DataError, match=r"bad\.de:3: invalid UTF-8"):
        read_lines(tmp_path / "bad.de")


@pytest.mark.parametrize("content", ["", "\n  \n\t\n"])
def test_empty_or_blank_file(tmp_path, content):
    (tmp_path / "empty.en").write_text(content)
    with pytest.raises(DataError, match=r"empty\.en: empty or all-blank"):
        read_lines(tmp_path / "empty.en")


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match=r"nope\.en: file not found"):
        read_lines(tmp_path / "nope.en")

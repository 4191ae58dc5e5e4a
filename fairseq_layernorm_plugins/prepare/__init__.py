"""Corpus preparation (not a fairseq plugin: nothing here registers anything)."""

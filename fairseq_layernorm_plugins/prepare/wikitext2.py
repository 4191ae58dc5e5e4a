"""``fairseq-ln-prepare wikitext2``: WikiText-2 for fairseq's language_modeling task (the
CPU-scale corpus, from ../shared/data/wikitext2 when present); see ``wikitext.py``."""

from fairseq_layernorm_plugins.prepare.wikitext import command


def main(argv=None):
    return command("wikitext2", argv)


if __name__ == "__main__":
    main()

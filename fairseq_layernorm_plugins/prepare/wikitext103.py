"""``fairseq-ln-prepare wikitext103``: WikiText-103 for fairseq's language_modeling task
(the B2T paper's Table 3 corpus); see ``wikitext.py``."""

from fairseq_layernorm_plugins.prepare.wikitext import command


def main(argv=None):
    return command("wikitext103", argv)


if __name__ == "__main__":
    main()

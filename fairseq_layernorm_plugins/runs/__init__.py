"""One run of a recipe: launched here or on a cluster (``launch``, ``slurm``), its checkpoints
kept and resumed (``checkpoints``, ``run_state``), and scored on its test set (``evaluate``:
BLEU and the papers' decoding protocols; ``perplexity``: language models). A new task's metric
goes beside them. Not imported by ``--user-dir``."""

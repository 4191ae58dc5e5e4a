"""Install with ``pip install -e .`` (fairseq imports ``--user-dir`` by folder name).

Use ``scripts/setup_env.sh`` (or ``make venv``): it creates ``.venv`` and applies
``constraints.txt`` so that no step pulls another torch or CUDA wheels.
"""

from setuptools import find_packages, setup

FAIRSEQ = [
    # The official 0.12.2 does not import on Python >= 3.11 (dataclass mutable
    # defaults); fairseq-fixed is fairseq main (0.12.3) with the 3.11 fixes.
    "fairseq-fixed==0.12.3.1",
    "hydra-core==1.3.2",
    "omegaconf==2.3.0",
]

setup(
    name="fairseq_layernorm_plugins",
    version="0.1.0",
    description=(
        "fairseq plugins for LayerNorm placement and initialisation research: Pre-LN, Admin, T-Fixup, B2T connection"
    ),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",  # what is tested: CI runs 3.11, the GPU bundle targets 3.12
    packages=find_packages(include=["fairseq_layernorm_plugins", "fairseq_layernorm_plugins.*"]),
    install_requires=FAIRSEQ
    + [
        "torch>=2.13",  # what CI runs (constraints.txt pins it); a GPU node's own build is installed around with --no-deps
        "numpy",
        "sacrebleu>=2.0",
        "sacremoses>=0.0.53",
        "regex",  # \p{C} of remove-non-printing-char (sacremoses depends on it too)
        "subword-nmt>=0.3.8",
        "tqdm",
        "pyyaml",
    ],
    extras_require={
        "test": ["pytest>=7", "pytest-timeout", "pytest-xdist", "ruff==0.17.6"],
        "plots": ["matplotlib>=3.5"],
        "slurm": ["submitit>=1.4"],
        "tensorboard": ["tensorboardX>=2.5"],
        "spm": ["sentencepiece>=0.1.99"],
    },
)

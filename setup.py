"""Install with ``pip install -e .`` (fairseq imports ``--user-dir`` by folder name).

Use ``scripts/setup_env.sh`` (or ``make venv``): it creates ``.venv`` and applies
``constraints.txt`` so that no step pulls another torch or CUDA wheels.
"""
from setuptools import find_packages, setup

FAIRSEQ = [
    # The official 0.12.2 does not import on Python >= 3.11 (dataclass mutable
    # defaults); fairseq-fixed is fairseq main (0.12.3) with the 3.11 fixes.
    'fairseq-fixed==0.12.3.1; python_version >= "3.11"',
    'hydra-core==1.3.2; python_version >= "3.11"',
    'omegaconf==2.3.0; python_version >= "3.11"',
    'fairseq==0.12.2; python_version < "3.11"',
    'hydra-core==1.0.7; python_version < "3.11"',
    'omegaconf==2.0.6; python_version < "3.11"',
]

setup(
    name="fairseq_layernorm_plugins",
    version="0.1.0",
    description=(
        "fairseq plugins for LayerNorm placement and initialisation research: "
        "Pre-LN, Admin, T-Fixup, B2T connection"
    ),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.8",
    packages=find_packages(include=["fairseq_layernorm_plugins", "fairseq_layernorm_plugins.*"]),
    install_requires=FAIRSEQ
    + [
        "torch>=1.13",  # the exact version comes from constraints.txt
        "numpy",
        "sacrebleu>=2.0",
        "sacremoses>=0.0.53",
        "regex",  # \p{C} of remove-non-printing-char (sacremoses depends on it too)
        "subword-nmt>=0.3.8",
        "tqdm",
        "pyyaml",
    ],
    extras_require={
        "test": ["pytest>=7", "pytest-timeout", "pytest-xdist"],
        "plots": ["matplotlib>=3.5"],
        "slurm": ["submitit>=1.4"],
        "tensorboard": ["tensorboardX>=2.5"],
        "spm": ["sentencepiece>=0.1.99"],
    },
)

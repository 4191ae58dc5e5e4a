"""The GPU bundle's offline install: collect, then install.sh into a venv shaped like a GPU node
(a few minutes: fairseq compiles; its own file so that it runs beside the other tests)."""

import os
import subprocess
import sys

import pytest
from test_gpu_bundle import GPU, collect


@pytest.mark.slow(4)
def test_bundle_installs_offline_into_a_node_like_venv(tmp_path):
    """collect (network: the package index) -> a fresh venv holding only what a GPU node has
    (torch, numpy, cython, setuptools, sacrebleu, scikit-learn) -> install.sh with --no-index:
    fairseq compiled against that torch, the plugin imports, torch untouched; a rerun only checks."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    bundle = tmp_path / "bundle"
    try:
        collect.main(["--out", str(bundle), "--python-version", version, "--no-data"])
    except SystemExit as err:
        if "is a package index reachable" in str(err):
            pytest.skip(f"no package index: {err}")
        raise
    node = tmp_path / "node"
    subprocess.run([sys.executable, "-m", "venv", node], check=True)
    python = node / "bin" / "python"
    import torch

    node_packages = [
        f"torch=={torch.__version__.split('+')[0]}",
        "numpy",
        "cython",
        "setuptools",
        "sacrebleu",
        "scikit-learn",
    ]
    subprocess.run([python, "-m", "pip", "install", "-q", *node_packages], check=True, capture_output=True)
    env = {**os.environ, "PYTHON": str(python)}
    env.pop("PIP_CONSTRAINT", None)
    proc = subprocess.run(["bash", GPU / "install.sh", bundle], capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "compiling fairseq-fixed 0.12.3.1 against torch" in proc.stdout and "install: fairseq 0.12.3" in proc.stdout
    imported = subprocess.run(
        [
            python,
            "-c",
            "import fairseq_layernorm_plugins, sacremoses, subword_nmt, submitit, torch; "
            "from fairseq.data import data_utils_fast; print(torch.__version__)",
        ],
        capture_output=True,
        text=True,
    )
    assert imported.returncode == 0, imported.stderr[-2000:]
    assert imported.stdout.strip() == torch.__version__  # the node's torch, not another
    again = subprocess.run(["bash", GPU / "install.sh", bundle], capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0 and "fairseq-fixed 0.12.3.1 already installed" in again.stdout

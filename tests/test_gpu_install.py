"""The GPU bundle's offline install: collect, then install.sh into a venv shaped like a GPU node
(a minute or two; its own file so that it runs beside the other tests). fairseq is compiled once
per machine, by scripts/setup_env.sh through the bundle's own build step
(scripts/gpu/build_fairseq.sh); this node takes that wheel, as a node with the same stack takes
the one a first node kept."""

import http.server
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from helpers.gpu_node_venv import node_venv, site_packages
from test_gpu_bundle import GPU, built_against, collect


@pytest.mark.slow(2)
def test_bundle_installs_offline_into_a_node_like_venv(tmp_path):
    """collect (network: the package index) -> a fresh venv holding only what a GPU node has
    (pip, torch, numpy, cython, setuptools, sacrebleu, scikit-learn and what they require, as
    this machine has them: helpers/gpu_node_venv.py) -> install.sh with --no-index, BUNDLE/built/
    holding the wheel this machine's setup compiled (scripts/setup_env.sh): fairseq from that
    wheel with its compiled parts, the plugin imports, torch untouched (the same files); a rerun
    only checks."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    bundle = tmp_path / "bundle"
    kept = Path(sys.prefix) / "fairseq-built"  # scripts/setup_env.sh's build of fairseq-fixed
    assert (kept / "BUILT_AGAINST").is_file(), f"{kept}: no build kept; make the venv with scripts/setup_env.sh"
    if not collect.index_reachable():  # the only reason to skip: any other failure fails
        pytest.skip(f"the package index {collect.index_url()} does not answer")
    try:
        collect.main(["--out", str(bundle), "--python-version", version, "--no-data"])
    except SystemExit as err:
        if isinstance(err.__context__, collect.IndexUnreachable):
            pytest.skip(f"the package index stopped answering: {err}")
        pytest.fail(f"collect failed with the package index answering: {err}")
    shutil.copytree(kept, bundle / "built")  # as install.sh on a first node with this stack left it
    python, has = node_venv(tmp_path / "node", ["torch", "numpy", "cython", "setuptools", "sacrebleu", "scikit-learn"])
    assert not {"fairseq-fixed", "hydra-core", "omegaconf", "sacremoses", "subword-nmt", "submitit"} & set(has)
    node_torch = site_packages(python) / "torch" / "__init__.py"
    torch_inode = node_torch.stat().st_ino
    import torch

    assert (kept / "BUILT_AGAINST").read_text() == built_against(python) + "\n"  # the same stack as this machine's
    [wheel] = (bundle / "built").glob("fairseq_fixed-0.12.3.1-*.whl")
    env = {**os.environ, "PYTHON": str(python)}
    env.pop("PIP_CONSTRAINT", None)
    proc = subprocess.run(["bash", GPU / "install.sh", bundle], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"fairseq-fixed 0.12.3.1 from {wheel}" in proc.stdout and "compiling" not in proc.stdout
    assert "install: fairseq 0.12.3" in proc.stdout
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
    assert node_torch.stat().st_ino == torch_inode  # nor reinstalled
    again = subprocess.run(["bash", GPU / "install.sh", bundle], capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0 and "fairseq-fixed 0.12.3.1 already installed" in again.stdout


def test_setup_keeps_the_fairseq_wheel_it_compiled_with_its_stack():
    """scripts/setup_env.sh compiled fairseq-fixed through scripts/gpu/build_fairseq.sh: the kept
    wheel is the installed fairseq, BUILT_AGAINST names this interpreter's stack, and the
    compiled parts import."""
    from importlib.metadata import distribution

    kept = Path(sys.prefix) / "fairseq-built"
    [wheel] = kept.glob("fairseq_fixed-0.12.3.1-*.whl")
    assert (kept / "BUILT_AGAINST").read_text() == built_against(Path(sys.executable)) + "\n"
    assert distribution("fairseq-fixed").version == "0.12.3.1"
    assert "fairseq/data/data_utils_fast" in " ".join(str(f) for f in distribution("fairseq-fixed").files)
    assert wheel.stat().st_size > 1_000_000


def test_a_pip_failure_is_a_network_problem_only_when_the_index_does_not_answer(monkeypatch):
    """collect.pip: a failure with the index answering (a bad pin) is pip's own error, which the
    install test fails on; only with the index not answering is it IndexUnreachable (a skip)."""
    bad_pin = subprocess.CompletedProcess([], 1, "", "ERROR: No matching distribution found for sacremoses==0.0.0\n")
    monkeypatch.setattr(collect.subprocess, "run", lambda *args, **kwargs: bad_pin)
    monkeypatch.setattr(collect, "index_url", lambda: "https://index.example/simple")
    monkeypatch.setattr(collect, "index_reachable", lambda url: True)
    with pytest.raises(collect.CollectError) as err:
        collect.pip("download", "sacremoses==0.0.0", label="wheels")
    assert type(err.value) is collect.CollectError
    assert str(err.value) == "wheels: pip exited 1: ERROR: No matching distribution found for sacremoses==0.0.0"
    monkeypatch.setattr(collect, "index_reachable", lambda url: url != "https://index.example/simple")
    with pytest.raises(
        collect.IndexUnreachable, match=r"sacremoses==0.0.0 \(the package index https://index.example/simple"
    ):
        collect.pip("download", "sacremoses==0.0.0", label="wheels")


class _NotFound(http.server.BaseHTTPRequestHandler):
    def do_HEAD(self):
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_index_reachable_is_any_answer(tmp_path):
    """A server that answers, even 404, is reachable; a closed port or a missing file: index is not."""
    server = http.server.HTTPServer(("127.0.0.1", 0), _NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert collect.index_reachable(f"http://127.0.0.1:{server.server_port}/simple")
    finally:
        server.shutdown()
        server.server_close()
    assert not collect.index_reachable(f"http://127.0.0.1:{server.server_port}/simple", timeout=5)
    assert collect.index_reachable(tmp_path.as_uri()) and not collect.index_reachable((tmp_path / "no").as_uri())

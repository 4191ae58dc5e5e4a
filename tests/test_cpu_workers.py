"""``fairseq-ln-train RECIPE --cpu-workers N`` as a user runs it: N CPU processes training one
model (gloo, legacy_ddp, fairseq's --distributed-world-size N, each process its own rank), and
without --gpus or --cpu-workers on a machine without a GPU, one CPU process (said and recorded)."""

import json
import os
import re
import socket
import subprocess

import torch
from conftest import BIN

RECIPE = """
tokens_per_update: 1000
depths: {2L-2L: {}}
fairseq:
  task: {_name: translation, source_lang: src, target_lang: tgt}
  model: {_name: transformer_preln, encoder_embed_dim: 32, decoder_embed_dim: 32, encoder_ffn_embed_dim: 64,
          decoder_ffn_embed_dim: 64, encoder_attention_heads: 2, decoder_attention_heads: 2, dropout: 0.0}
  criterion: {_name: cross_entropy}
  optimizer: {_name: adam}
  lr_scheduler: {_name: fixed}
  optimization: {lr: [0.005], max_update: 2}
  dataset: {max_tokens: 1000, disable_validation: true}
  checkpoint: {no_epoch_checkpoints: true}
  common: {log_format: simple, log_interval: 1, seed: 1}
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ln_train(*args):
    """``fairseq-ln-train ARGS`` on a machine without a GPU (CUDA_VISIBLE_DEVICES hides any)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [str(BIN / "fairseq-ln-train"), *map(str, args)], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return proc.stdout


def test_cpu_workers_train_one_model_in_data_parallel(tiny_data_bin, tmp_path):
    """Two CPU processes x 500 tokens train one model: fairseq sees a world of 2 (one process
    group, rank 0 and rank 1), trains once, checks every update that both ranks' gradient norms
    agree (fairseq's _check_grad_norms), and the model rank 0 saves is, bit for bit, the model
    of one process accumulating the same two 500-token batches (--update-freq 2): each update
    used both ranks' gradients. Unconnected processes would each have trained on its own
    500-token batch, into the same save dir."""
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(RECIPE)
    printed = ln_train(
        recipe, "--cpu-workers", 2, "--data", tiny_data_bin, "--runs", tmp_path / "dp", "--master-port", free_port()
    )
    assert "2 CPU process(s) x 500 tokens x update-freq 1 = 1000 tokens/update" in printed
    run_dir = tmp_path / "dp" / "tiny" / "2L-2L.seed1"
    log = (run_dir / "train.log").read_text()
    assert "training on 2 devices" in log and "training on 1 devices" not in log
    assert "distributed init (rank 0)" in log and "distributed init (rank 1)" in log
    assert re.findall(r"'distributed_world_size': (\d+)", log) == ["2", "2"]  # each rank's config
    assert log.count("done training") == 1  # rank 1 logs warnings only
    assert json.loads((run_dir / "run.json").read_text())["cpu"] is True

    # the same two batches, accumulated by one process; no --cpu-workers: the default on a machine without a GPU
    printed = ln_train(
        recipe, "--data", tiny_data_bin, "--runs", tmp_path / "one", "--", "--max-tokens", 500, "--update-freq", 2
    )
    assert "1 CPU process(s) x 1000 tokens" in printed and " --cpu " in printed
    one_dir = tmp_path / "one" / "tiny" / "2L-2L.seed1"
    assert json.loads((one_dir / "run.json").read_text())["cpu"] is True
    one_log = (one_dir / "train.log").read_text()

    def losses(text):
        return re.findall(r"\| train_inner \| .* loss=([\d.]+),.* num_updates=(\d+),", text)

    assert losses(log) == losses(one_log) and len(losses(log)) == 2
    models = [
        torch.load(d / "checkpoints" / "checkpoint_last.pt", map_location="cpu", weights_only=False)["model"]
        for d in (run_dir, one_dir)
    ]
    assert models[0].keys() == models[1].keys()
    for key, value in models[0].items():
        assert torch.equal(value, models[1][key]), key


def test_no_gpu_and_no_device_flags_is_one_cpu_process(tiny_data_bin, tmp_path):
    """Without --gpus or --cpu-workers, where torch sees no GPU, the launcher says CPU and
    passes --cpu (it used to say "1 GPU(s)" and leave --cpu out)."""
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(RECIPE)
    printed = ln_train(recipe, "--data", tiny_data_bin, "--runs", tmp_path / "runs", "--dry-run").splitlines()
    assert printed[0].startswith("tiny@2L-2L: 1 CPU process(s) x 1000 tokens") and "GPU" not in printed[0]
    assert printed[1].split()[0] == str(BIN / "fairseq-train") and "--cpu" in printed[1].split()
    assert not (tmp_path / "runs").exists()

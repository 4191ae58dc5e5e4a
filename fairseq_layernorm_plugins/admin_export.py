"""Export a trained Admin model as a plain fairseq ``transformer`` (Post-LN) checkpoint
(Liu et al. 2020, App. C), loadable and decodable by stock fairseq without ``--user-dir``.

The exported checkpoint holds tensors and plain containers only (its model config a dict,
not the ``argparse.Namespace`` fairseq-train saves), so stock fairseq on torch >= 2.6 loads
it with torch's safe default (``weights_only=True``), no environment variable needed.
Decoded without ``--user-dir``, fairseq-fixed 0.12.3.1 (fairseq main) drops the test set's
last batch when its size is not a multiple of ``--required-batch-size-multiple`` (8): up to
7 sentences, never translated nor scored; decoded with
``--user-dir fairseq_layernorm_plugins`` (the plugin's ``keep_last_batch``, for every arch)
it translates every sentence, as fairseq 0.12.2 does without the plugin.

Sub-layer i computes LN(x_{i-1} * omega_i + f_i(x_{i-1})). Write x'_{i-1} = x_{i-1} * omega_i:

* i >= 2, x_{i-1} is the output of the previous LayerNorm: its gamma and beta are
  multiplied by omega_i (App. C), and the weights reading x_{i-1} inside f_i are
  divided by omega_i column-wise (self-attention q/k/v, the cross-attention query,
  fc1), so f'_i(x'_{i-1}) = f_i(x_{i-1});
* i = 1 of each stack, x_0 is the embedding output: the paper leaves this case open.
  With ``--layernorm-embedding`` x_0 is a LayerNorm output and is folded like the
  others (its gamma and beta times omega_1). Otherwise x_0 = scale * E[token] +
  P[position], folded exactly by multiplying the token embedding columns by omega_1
  and turning the sinusoidal positions into a *learned* position
  table (stock fairseq's ``--{encoder,decoder}-learned-pos``, which numbers positions
  the same way) holding P * omega_1. A decoder embedding tied to the output
  projection (or one matrix shared by all) is untied: the output projection keeps the
  original matrix.

Everything else is copied. Log-probabilities agree up to float rounding.
"""

import argparse
import copy

import torch
from fairseq.modules.sinusoidal_positional_embedding import SinusoidalPositionalEmbedding

from fairseq_layernorm_plugins._compat import load_checkpoint
from fairseq_layernorm_plugins.atomic import atomic_path

DROPPED_ARGS = ("admin_init", "admin_profile_batches", "admin_profile_mask_padding", "admin_profile_json")


def _fold_first_sublayer(state, stack, omega, args):
    """x_0 * omega_1: the embedding LayerNorm, or the token embedding columns (the input
    projection's rows) and a learned copy of the sinusoidal positions."""
    if f"{stack}.layernorm_embedding.weight" in state:
        for p in ("weight", "bias"):
            state[f"{stack}.layernorm_embedding.{p}"] = state[f"{stack}.layernorm_embedding.{p}"] * omega
        return
    if f"{stack}.project_in_dim.weight" in state:  # fairseq's transformer never builds one; another model might
        raise ValueError(f"{stack}: embeddings projected to the model width (project_in_dim) are not supported")
    embed = state[f"{stack}.embed_tokens.weight"]
    state[f"{stack}.embed_tokens.weight"] = embed * omega
    max_positions = getattr(args, f"max_{'source' if stack == 'encoder' else 'target'}_positions")
    padding_idx = 1  # fairseq's Dictionary always puts <pad> at index 1
    if getattr(args, f"{stack}_learned_pos"):
        state[f"{stack}.embed_positions.weight"] = state[f"{stack}.embed_positions.weight"] * omega
    elif not args.no_token_positional_embeddings:
        table = SinusoidalPositionalEmbedding.get_embedding(max_positions + padding_idx + 1, embed.size(1), padding_idx)
        state[f"{stack}.embed_positions.weight"] = table.to(embed.dtype) * omega
        state.pop(f"{stack}.embed_positions._float_tensor", None)
        setattr(args, f"{stack}_learned_pos", True)


def fold_admin_state_dict(state, args):
    """Return (plain Post-LN state dict, args) from an Admin model's state dict and args."""
    state = {k: v.clone() for k, v in state.items()}
    args = copy.deepcopy(args)
    # untie: a tied output projection is saved under its own key too, and every tensor
    # is a copy here, so it keeps the original matrix while the embedding is folded
    args.share_decoder_input_output_embed = False
    args.share_all_embeddings = False
    for stack, num_layers, sublayer_names in (
        ("encoder", args.encoder_layers, ("self_attn", "fc1")),
        ("decoder", args.decoder_layers, ("self_attn", "encoder_attn", "fc1")),
    ):
        previous_norm = None  # the LayerNorm that produced x_{i-1} (None: the embedding)
        for layer in range(num_layers):
            prefix = f"{stack}.layers.{layer}"
            omega = state.pop(f"{prefix}.omega")  # (num_sublayers, C)
            norms = (
                ("self_attn_layer_norm", "final_layer_norm")
                if stack == "encoder"
                else ("self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm")
            )
            for sub, name in enumerate(sublayer_names):
                w = omega[sub]
                if previous_norm is None:
                    _fold_first_sublayer(state, stack, w, args)
                else:
                    state[f"{previous_norm}.weight"] = state[f"{previous_norm}.weight"] * w  # gamma * omega
                    state[f"{previous_norm}.bias"] = state[f"{previous_norm}.bias"] * w  # beta * omega
                readers = ["q_proj"] if name == "encoder_attn" else ["q_proj", "k_proj", "v_proj"]
                weights = (
                    [f"{prefix}.fc1.weight"] if name == "fc1" else [f"{prefix}.{name}.{p}.weight" for p in readers]
                )
                for key in weights:
                    state[key] = state[key] / w  # W diag(1/omega): reads x'_{i-1}
                previous_norm = f"{prefix}.{norms[sub]}"
    args.arch = "transformer"
    args._name = "transformer"
    for name in DROPPED_ARGS:
        if hasattr(args, name):
            delattr(args, name)
    return state, args


def export_checkpoint(admin_path, out_path):
    """Write ``out_path``: a stock fairseq ``transformer`` checkpoint (model only, no
    optimizer state) equivalent to the Admin checkpoint at ``admin_path``."""
    ckpt = load_checkpoint(admin_path)  # weights_only=True, fairseq's own types allowed
    model_args = ckpt["cfg"]["model"]
    if not any(k.endswith(".omega") for k in ckpt["model"]):
        raise ValueError(f"{admin_path}: not an Admin checkpoint (no omega parameters)")
    if str(getattr(model_args, "arch", "")).startswith("s2t_"):
        raise ValueError(f"{admin_path}: a speech model; the export writes fairseq's text transformer only")
    if getattr(model_args, "encoder_normalize_before", False) or getattr(model_args, "decoder_normalize_before", False):
        raise ValueError(f"{admin_path}: Admin is Post-LN; this checkpoint is not")
    state, args = fold_admin_state_dict(ckpt["model"], model_args)
    cfg = copy.deepcopy({k: v for k, v in ckpt["cfg"].items() if k != "model"})
    cfg["model"] = vars(args)  # a dict: loadable with weights_only=True, without the plugin
    cfg["common"]["user_dir"] = None  # stock fairseq must not try to import the plugin
    out = {
        "args": None,
        "cfg": cfg,
        "model": state,
        "criterion": ckpt.get("criterion"),
        "optimizer_history": ckpt.get("optimizer_history", []),
        "task_state": ckpt.get("task_state", {}),
        "extra_state": {},
        "last_optimizer_state": None,
    }
    with atomic_path(out_path) as tmp:  # never a half-written checkpoint
        torch.save(out, tmp)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("admin_checkpoint")
    parser.add_argument("output", help="where to write the plain transformer checkpoint")
    args = parser.parse_args(argv)
    try:
        export_checkpoint(args.admin_checkpoint, args.output)
    except (ValueError, FileNotFoundError) as err:
        parser.exit(2, f"error: {err}\n")
    print(
        f"wrote {args.output}: a fairseq 'transformer' checkpoint (stock fairseq loads it; "
        "decode with --user-dir fairseq_layernorm_plugins to keep fairseq-fixed's dropped last batch)"
    )


if __name__ == "__main__":
    main()

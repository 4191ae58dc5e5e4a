"""The papers' analyses at initialisation, for any registered arch and depth, on real
batches from a data-bin (the models are built exactly as ``fairseq-train`` builds them;
Admin is profiled on the training batches ``fairseq-train`` profiles it on):

* :func:`grad_norms`: gradient norm of every parameter matrix after one backward pass;
  :func:`ffn_grad_norms` picks the FFN's second matrix per layer (Pre-LN paper Fig. 3);
* :func:`output_change`: ``|F(x, W) - F(x, W + delta)|^2`` per target token, for a random
  ``delta`` or for one Adam update (Admin Fig. 4), F = the decoder's output features;
* :func:`dependency`: ``beta_ii = sqrt(Var[f_i] / Var[combined_i])``, how much each
  sub-layer's (pre-normalisation) output depends on its own residual branch f_i
  (Admin Sec. 4.1, Fig. 7-8: the diagonal of its beta_ij), read at each method's own
  ``residual_connection``;
* :func:`layer_cosine`: mean cosine similarity between the outputs of every pair of
  layers of a stack (B2T Fig. 5);
* :func:`loss_and_scale`: the batch's NLL in bits per target token and the RMS of the
  decoder's output features (how far an initialisation starts from a uniform guess);
* :func:`omega_summary`: an Admin model's omega per sub-layer (mean, min and max over
  channels), to follow what training does to its profiled residual scale.

All of it goes through the model code: no method's formula is repeated here.
"""

import copy
import math

import torch
from fairseq import options, tasks

from fairseq_layernorm_plugins.admin_profiling import profiles, set_initial_omegas_
from layernorm_methods.admin import admin_layers


def training_args(data_bin, arch, *overrides):
    """The args ``fairseq-train DATA --arch ARCH --cpu OVERRIDES`` parses to (the arch's defaults applied)."""
    parser = options.get_training_parser()
    return options.parse_args_and_arch(parser, [str(data_bin), "--arch", arch, "--cpu", *map(str, overrides)])


def build(data_bin, arch, *overrides, seed=None):
    """(model, criterion, task) for ``fairseq-train DATA --arch ARCH OVERRIDES`` on CPU."""
    return build_from_args(training_args(data_bin, arch, *overrides), seed)


def build_from_args(args, seed=None):
    """(model, criterion, task) from parsed ``fairseq-train`` args, as fairseq-train builds them:
    the weights from ``seed``, by default the args' ``--seed``."""
    task = tasks.setup_task(args)
    torch.manual_seed(args.seed if seed is None else seed)
    model = task.build_model(args)
    return model, task.build_criterion(args), task


def load(data_bin, checkpoint):
    """(model, criterion, task) of a trained ``checkpoint`` on CPU: its own options and weights
    (Admin's omega included, not profiled again), the data at ``data_bin``."""
    from fairseq import checkpoint_utils

    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(checkpoint)], arg_overrides={"data": str(data_bin)}
    )
    return models[0].float(), task.build_criterion(cfg.criterion), task


def sample_batch(task, split="valid", sentences=32):
    """The first ``sentences`` pairs of ``split``, collated as fairseq does."""
    task.load_dataset(split)
    dataset = task.dataset(split)
    return dataset.collater([dataset[i] for i in range(min(sentences, len(dataset)))])


def prepare_model(model, task):
    """Admin: omega as ``fairseq-train`` sets it before its first update with the model's
    options (profiled on the first training batches of epoch 1, its ``--seed`` and
    ``--max-tokens``; or ``--admin-profile-from``); no-op for other archs."""
    if profiles(model):
        if model.args.max_tokens is None and model.args.batch_size is None:
            raise ValueError("profiling Admin as fairseq-train does needs its --max-tokens or --batch-size")
        from fairseq.dataclass.utils import convert_namespace_to_omegaconf

        set_initial_omegas_(convert_namespace_to_omegaconf(model.args), task, model)
    return model


def grad_norms(model, criterion, sample):
    """{parameter name: gradient L2 norm} after one backward of the training loss
    (eval mode: no dropout, so the numbers are reproducible)."""
    model.eval()
    model.zero_grad()
    loss, _, _ = criterion(model, sample)
    loss.backward()
    norms = {name: p.grad.norm().item() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    return norms


def ffn_grad_norms(norms, stack):
    """Per layer of ``stack`` ("encoder" / "decoder"): the gradient norm of fc2's weight."""
    keys = sorted(
        (k for k in norms if k.startswith(f"{stack}.layers.") and k.endswith("fc2.weight")),
        key=lambda k: int(k.split(".")[2]),
    )
    return [norms[k] for k in keys]


def features(model, sample):
    """F(x, W): decoder output features (T x C per sentence, padding removed), eval mode."""
    model.eval()
    with torch.no_grad():
        out, _ = model(**sample["net_input"], features_only=True)
    mask = sample["target"].ne(model.decoder.dictionary.pad())
    return out[mask]


def loss_and_scale(model, sample):
    """{"nll_bits": mean NLL of the target tokens in bits, "output_rms": root mean square of the
    decoder's output features (T x C per sentence, padding removed)}, eval mode."""
    model.eval()
    with torch.no_grad():
        out, extra = model(**sample["net_input"], features_only=True)  # B x T x C
        lprobs = model.get_normalized_probs((model.decoder.output_layer(out), extra), log_probs=True)  # B x T x V
    mask = sample["target"].ne(model.decoder.dictionary.pad())
    nll = -lprobs.gather(-1, sample["target"].unsqueeze(-1)).squeeze(-1)[mask]
    rms = out[mask].float().pow(2).mean().sqrt()
    return {"nll_bits": nll.double().mean().item() / math.log(2), "output_rms": rms.item()}


def output_change(model, criterion, sample, kind="adam", lr=1e-3, scale=1e-2, seed=0, relative=False):
    """Mean over target tokens of ``|F(x, W) - F(x, W*)|^2``: W* = W after one Adam step of
    ``lr`` on the batch loss (``kind="adam"``), or W + N(0, scale^2) noise on every
    parameter (``kind="random"``). ``relative`` divides by the mean ``|F(x, W)|^2``
    (for archs without a final LayerNorm, whose features have another scale)."""
    before = features(model, sample)
    changed = copy.deepcopy(model)
    if kind == "adam":
        changed.eval()
        optimizer = torch.optim.Adam(changed.parameters(), lr=lr)
        loss, _, _ = criterion(changed, sample)
        loss.backward()
        optimizer.step()
    else:
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in changed.parameters():
                p.add_(torch.randn(p.shape, generator=generator) * scale)
    after = features(changed, sample)
    change = (after - before).pow(2).sum(-1).mean().item()
    return change / before.pow(2).sum(-1).mean().item() if relative else change


def dependency(model, sample):
    """{"encoder" | "decoder": [beta_ii per sub-layer, bottom to top]}: each sub-layer's
    ``residual_connection(f, residual)`` output y (before any LayerNorm) and its branch
    f (T x B x C) give beta_ii = sqrt(Var[f] / Var[y]), each variance over the whole padded
    tensor, padding included, as Admin's profiling computes its own."""
    records = {"encoder": [], "decoder": []}
    originals = []
    for stack in records:
        for layer in getattr(model, stack).layers:
            original = layer.residual_connection

            def recording(x, residual, _original=original, _out=records[stack]):
                y = _original(x, residual)
                _out.append((x.float().var().item() / y.float().var().item()) ** 0.5)
                return y

            layer.residual_connection = recording
            originals.append(layer)
    try:
        features(model, sample)
    finally:
        for layer in originals:
            del layer.residual_connection  # back to the class's method
    return records


def layer_cosine(model, sample):
    """{"encoder" | "decoder": L x L list}: mean over tokens of the cosine similarity
    between the outputs of layers i and j (padding excluded)."""
    model.eval()
    net_input = sample["net_input"]
    with torch.no_grad():
        encoder_out = model.encoder(
            net_input["src_tokens"], src_lengths=net_input["src_lengths"], return_all_hiddens=True
        )
        _, extra = model.decoder(net_input["prev_output_tokens"], encoder_out=encoder_out, features_only=True)
    src_mask = net_input["src_tokens"].ne(model.encoder.dictionary.pad()).t()  # T x B, as the states
    tgt_mask = sample["target"].ne(model.decoder.dictionary.pad()).t()
    result = {}
    for stack, states, mask in (
        ("encoder", encoder_out["encoder_states"], src_mask),
        ("decoder", extra["inner_states"][1:], tgt_mask),
    ):
        outputs = [
            torch.nn.functional.normalize(s[mask].float(), dim=-1) for s in states[-len(getattr(model, stack).layers) :]
        ]
        result[stack] = [[(a * b).sum(-1).mean().item() for b in outputs] for a in outputs]
    return result


def omega_summary(model):
    """{"encoder" | "decoder": [{"mean", "min", "max"} of omega over its C channels, per
    sub-layer, bottom to top]} for each stack of Admin's layers (omega: num_sublayers x C);
    {} for other archs."""
    return {
        stack: [
            {"mean": row.mean().item(), "min": row.min().item(), "max": row.max().item()}
            for layer in layers
            for row in layer.omega.detach().float()
        ]
        for stack, layers in admin_layers(model).items()
    }

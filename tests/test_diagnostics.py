"""The diagnostics reproduce the papers' facts at initialisation on small models
(same seed and shape for every arch), on real IWSLT14-mini batches."""

import json
import statistics
import sys

import pytest
from conftest import shared_data

from fairseq_layernorm_plugins import diagnostics as D
from fairseq_layernorm_plugins.admin_profiling import profile_admin_
from fairseq_layernorm_plugins.prepare.iwslt14_mini import prepare

SMALL = (
    "--encoder-embed-dim 64 --decoder-embed-dim 64 --encoder-ffn-embed-dim 128 --decoder-ffn-embed-dim 128 "
    "--encoder-attention-heads 4 --decoder-attention-heads 4 --share-decoder-input-output-embed"
).split()


@pytest.fixture(scope="module")
def mini_bin(tmp_path_factory):
    out = tmp_path_factory.mktemp("diag") / "mini"
    prepare(shared_data("iwslt14"), out, test_lines=50)
    return out / "bin"


@pytest.fixture(scope="module")
def measured(mini_bin):
    """{(arch, layers): (grad norms, output change after one Adam update, dependency, cosine)}"""
    results = {}
    for arch in (
        "transformer_postln_iwslt_de_en",
        "transformer_preln_iwslt_de_en",
        "transformer_admin_iwslt_de_en",
        "transformer_tfixup_iwslt_de_en",
    ):
        for layers in (2, 12):
            model, criterion, task = D.build(
                mini_bin, arch, *SMALL, "--max-tokens", 1000, "--encoder-layers", layers, "--decoder-layers", layers
            )
            sample = D.sample_batch(task, sentences=16)
            D.prepare_model(model, task)
            results[arch.replace("_iwslt_de_en", "").replace("_postln", ""), layers] = (  # Post-LN as "transformer"
                D.grad_norms(model, criterion, sample),
                D.output_change(model, criterion, sample, "adam"),
                D.dependency(model, sample),
                D.layer_cosine(model, sample),
            )
    return results


def test_preln_last_ffn_gradient_is_smaller_than_postln(measured):
    """Pre-LN paper Fig. 3: at initialisation the top FFN's gradient is larger in Post-LN."""
    for stack in ("encoder", "decoder"):
        post = D.ffn_grad_norms(measured["transformer", 12][0], stack)
        pre = D.ffn_grad_norms(measured["transformer_preln", 12][0], stack)
        assert len(post) == len(pre) == 12
        assert pre[-1] < post[-1], (stack, pre[-1], post[-1])


def test_postln_output_change_grows_faster_with_depth(measured):
    """Admin Fig. 4: one Adam update moves a deeper Post-LN's output more than Pre-LN's.
    Measured here (seed 1, d=64, 16 sentences), growth from 2 to 12 layers: 45.7 vs 38.1
    with the papers' initialisation (1.20x); docs/diagnostics.md: 2.09x against fairseq's
    own transformer."""
    growth = {arch: measured[arch, 12][1] - measured[arch, 2][1] for arch in ("transformer", "transformer_preln")}
    assert growth["transformer"] > 1.1 * growth["transformer_preln"], growth


def test_admin_and_tfixup_output_change_stays_below_postln(measured):
    """Admin and T-Fixup bound the change: below Post-LN's at 12L-12L (neither is constant
    in depth at this scale; docs/diagnostics.md shows the curves). Measured here: Admin
    0.81x Post-LN's, T-Fixup 0.67x (the papers' initialisation)."""
    for arch in ("transformer_admin", "transformer_tfixup"):
        assert measured[arch, 12][1] < 0.95 * measured["transformer", 12][1], (arch, measured[arch, 12][1])


def test_preln_and_admin_depend_less_on_their_own_branch_in_upper_layers(measured):
    """Admin Sec. 4.1: beta_ii shrinks with depth in Pre-LN (and Admin at init), not in Post-LN."""
    top = {
        arch: statistics.mean(measured[arch, 12][2]["decoder"][-6:])
        for arch in ("transformer", "transformer_preln", "transformer_admin")
    }
    assert (
        top["transformer_preln"] < 0.6 * top["transformer"] and top["transformer_admin"] < 0.6 * top["transformer"]
    ), top
    assert len(measured["transformer", 12][2]["encoder"]) == 24 and len(measured["transformer", 12][2]["decoder"]) == 36


def test_layer_cosine_matrix_is_a_similarity_matrix(measured):
    cosine = measured["transformer_preln", 12][3]["encoder"]
    assert len(cosine) == 12 and all(abs(cosine[i][i] - 1) < 1e-4 for i in range(12))
    assert all(
        abs(cosine[i][j] - cosine[j][i]) < 1e-6 and -1 <= cosine[i][j] <= 1 + 1e-6 for i in range(12) for j in range(12)
    )


def test_omega_summary_of_a_profiled_admin_model_is_one_value_per_sublayer(mini_bin):
    """Profiling fills each sub-layer's omega with one value (the running ratio, which grows
    from 1 in forward order); archs without omega have none."""
    model, _, task = D.build(
        mini_bin, "transformer_admin_iwslt_de_en", *SMALL, "--max-tokens", 1000, "--encoder-layers", 3,
        "--decoder-layers", 2,
    )  # fmt: skip
    assert all(o == {"mean": 1.0, "min": 1.0, "max": 1.0} for o in D.omega_summary(model)["encoder"])
    D.prepare_model(model, task)
    summary = D.omega_summary(model)
    assert [len(summary["encoder"]), len(summary["decoder"])] == [6, 6]  # 3 layers x 2, 2 layers x 3 sub-layers
    for stack, rows in summary.items():
        assert all(o["min"] == o["max"] == pytest.approx(o["mean"]) for o in rows)
        means = [o["mean"] for o in rows]
        assert means == sorted(means) and means[-1] > 1, stack
    preln, _, _ = D.build(mini_bin, "transformer_preln_iwslt_de_en", *SMALL)
    assert D.omega_summary(preln) == {}


def test_an_admin_model_at_initialisation_has_the_omega_fairseq_train_profiles(mini_bin, tmp_path):
    """diagnose.py's Admin at initialisation is the model fairseq-train starts from: the same
    seed's weights, profiled on the same first training batches (dropout off, so that the
    two passes are identical), not on the validation batch the diagnostics then measure."""
    from conftest import REPO, run_cli

    options = (*SMALL, "--encoder-layers", 3, "--decoder-layers", 2, "--max-tokens", 1000, "--seed", 3)
    no_dropout = ("--dropout", 0, "--attention-dropout", 0, "--activation-dropout", 0)
    profile = tmp_path / "profile.json"
    run_cli(
        "fairseq-train", mini_bin, "--user-dir", REPO / "fairseq_layernorm_plugins", "--arch",
        "transformer_admin_iwslt_de_en", *options, *no_dropout, "--admin-profile-batches", 2,
        "--admin-profile-json", profile, "--cpu", "--optimizer", "adam", "--lr", "1e-3", "--max-update", 1,
        "--save-dir", tmp_path / "ckpt", "--no-save", "--disable-validation",
    )  # fmt: skip
    trained = json.loads(profile.read_text())
    model, _, task = D.build(
        mini_bin, "transformer_admin_iwslt_de_en", *options, *no_dropout, "--admin-profile-batches", 2
    )
    D.prepare_model(model, task)  # weights and batches both from the options' --seed 3

    def means(model):
        return [o["mean"] for stack in ("encoder", "decoder") for o in D.omega_summary(model)[stack]]

    assert means(model) == pytest.approx([row["omega"] for stack in ("encoder", "decoder") for row in trained[stack]])
    on_valid, _, _ = D.build(mini_bin, "transformer_admin_iwslt_de_en", *options, *no_dropout)
    profile_admin_(on_valid, [D.sample_batch(task, sentences=32)])
    assert means(on_valid) != pytest.approx(means(model), rel=1e-3)  # the batches matter


def test_profiling_at_initialisation_needs_a_batch_size(mini_bin):
    """Without --max-tokens or --batch-size fairseq would batch the whole training split."""
    model, _, task = D.build(mini_bin, "transformer_admin_iwslt_de_en", *SMALL, "--encoder-layers", 1)
    with pytest.raises(ValueError, match="--max-tokens or --batch-size"):
        D.prepare_model(model, task)
    assert all(o["mean"] == 1.0 for o in D.omega_summary(model)["encoder"])  # left unprofiled


def test_loss_and_scale_is_the_criterions_nll_and_a_final_layernorms_unit_rms(mini_bin):
    """nll_bits is fairseq's own NLL of the batch (label-smoothed criterion's nll_loss, in
    nats summed over tokens) in bits per token; behind a final LayerNorm at initialisation
    (weight 1, bias 0) every token's features have RMS 1."""
    import math

    args = D.training_args(
        mini_bin, "transformer_preln_iwslt_de_en", *SMALL, "--criterion", "label_smoothed_cross_entropy",
        "--label-smoothing", "0.1",
    )  # fmt: skip
    model, criterion, task = D.build_from_args(args)
    sample = D.sample_batch(task, sentences=8)
    measured = D.loss_and_scale(model, sample)
    model.eval()
    _, _, logged = criterion(model, sample)
    assert measured["nll_bits"] == pytest.approx(logged["nll_loss"].item() / logged["ntokens"] / math.log(2), rel=1e-5)
    assert measured["output_rms"] == pytest.approx(1.0, abs=1e-3)
    assert (
        0.5 * math.log2(len(task.target_dictionary)) < measured["nll_bits"] < 2 * math.log2(len(task.target_dictionary))
    )


def test_dependency_restores_the_layers(mini_bin):
    model, _, task = D.build(
        mini_bin, "transformer_preln_iwslt_de_en", *SMALL, "--encoder-layers", 2, "--decoder-layers", 2
    )
    sample = D.sample_batch(task, sentences=4)
    before = D.features(model, sample)
    D.dependency(model, sample)
    assert all("residual_connection" not in vars(layer) for layer in model.encoder.layers)
    assert (D.features(model, sample) == before).all()


def test_a_trained_checkpoint_is_measured_with_its_own_weights_and_options(mini_bin, tmp_path):
    """diagnose.py --checkpoints: an Admin checkpoint from fairseq-train loads with its
    trained weights and profiled omega (not profiled again) and its own depth, and is
    measured as a model built at initialisation is."""
    import torch
    from conftest import REPO, run_cli

    sys.path.insert(0, str(REPO / "scripts"))
    import diagnose

    save = tmp_path / "ckpt"
    run_cli(
        "fairseq-train", mini_bin, "--user-dir", REPO / "fairseq_layernorm_plugins", "--arch",
        "transformer_admin_iwslt_de_en", *SMALL, "--encoder-layers", "3", "--decoder-layers", "2", "--cpu",
        "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000", "--max-update", "2", "--save-dir", save,
        "--no-epoch-checkpoints", "--disable-validation",
    )  # fmt: skip
    state = torch.load(save / "checkpoint_last.pt", map_location="cpu", weights_only=False)["model"]
    model, _, _ = D.load(mini_bin, save / "checkpoint_last.pt")
    assert len(model.encoder.layers) == 3 and len(model.decoder.layers) == 2
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, state[name]), name
    assert not torch.equal(state["encoder.layers.2.omega"], torch.ones_like(state["encoder.layers.2.omega"]))

    out = tmp_path / "diag"
    diagnose.main(
        [str(mini_bin), "--out", str(out), "--sentences", "4", "--checkpoints", f"admin={save}/checkpoint_last.pt"]
    )
    written = json.loads((out / "diagnostics.json").read_text())
    assert written["command"].endswith(f"--checkpoints admin={save}/checkpoint_last.pt")  # as called
    results = written["results"]
    assert list(results) == ["admin"] and list(results["admin"]) == ["3"]
    assert [len(v) for v in results["admin"]["3"]["dependency"].values()] == [6, 6]  # 2 and 3 sub-layers a layer
    omega = results["admin"]["3"]["omega"]  # per sub-layer, bottom to top, from the trained weights
    for stack, layers in (("encoder", 3), ("decoder", 2)):
        rows = torch.cat([state[f"{stack}.layers.{i}.omega"] for i in range(layers)])
        assert [o["mean"] for o in omega[stack]] == pytest.approx(rows.mean(1).tolist())
        assert [o["min"] for o in omega[stack]] == rows.min(1).values.tolist()
        assert [o["max"] for o in omega[stack]] == rows.max(1).values.tolist()
    assert any(o["min"] < o["max"] for o in omega["encoder"])  # two updates moved the channels apart
    assert (out / "dependency.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(SystemExit):
        diagnose.parse([str(mini_bin), "--out", str(out), "--checkpoints", "no-label-here"])


def test_plots_give_every_model_its_own_colour():
    """A diagnostics plot of 11 models (init, and checkpoints at several updates) has no two
    lines alike: matplotlib's default cycle repeats after 10."""
    from fairseq_layernorm_plugins.experiments.figures import distinct_colours

    for n in (1, 10, 11, 20, 21, 40):
        colours = distinct_colours(n)
        assert len(colours) == n and len(set(colours)) == n, n

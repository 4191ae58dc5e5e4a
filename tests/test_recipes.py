"""Recipes (configs/) and the launcher: every recipe is a valid fairseq command line,
the batch split keeps tokens per update, the printed command is the config."""

import sys
import threading
import time

import pytest
from conftest import SHARED_DATA, parse

from fairseq_layernorm_plugins.recipes.config import RecipeError, fairseq_flags, list_recipes, load_recipe, merge
from fairseq_layernorm_plugins.runs.launch import Launch, batch_plan, run_logged

ALL = [(name, depth) for name in list_recipes() for depth in load_recipe(name).depths or [None]]


def parsed(launch, data_bin):
    """fairseq-train's parse of a launch's arguments (the data path replaced by ``data_bin``)."""
    argv = launch.fairseq_args()[1:]
    i = argv.index("--arch")
    return parse(data_bin, argv[i + 1], *(argv[:i] + argv[i + 2 :]))


@pytest.mark.parametrize("name, depth", ALL, ids=[f"{n}@{d}" for n, d in ALL])
def test_every_recipe_is_a_valid_fairseq_command_meaning_the_recipe(name, depth, request):
    recipe = load_recipe(name).with_depth(depth)
    groups = recipe.fairseq
    language_model = groups["task"]["_name"] == "language_modeling"
    data = {"language_modeling": "lm_data_bin", "speech_to_text": "speech_data"}.get(groups["task"]["_name"])
    data_bin = request.getfixturevalue(data or "tiny_data_bin")
    launch = Launch(recipe, str(data_bin), "/tmp/unused", gpus=4)
    args = parsed(launch, data_bin)
    assert args.arch == groups["model"]["_name"] and args.optimizer == groups["optimizer"]["_name"]
    assert args.lr_scheduler == groups["lr_scheduler"]["_name"] and args.lr == groups["optimization"]["lr"]
    assert args.dropout == groups["model"].get("dropout", 0.3 if language_model else None)  # wiki103 LM: 0.3
    for key, value in {**groups["lr_scheduler"], **groups["optimizer"]}.items():
        if key != "_name":
            assert str(getattr(args, key)) == str(value), key
    layers = [int(n) for n in recipe.data["depth"].replace("L", "").split("-")]
    if language_model:  # "16L": decoder layers only
        assert [args.decoder_layers] == layers and not hasattr(args, "encoder_layers")
    else:
        assert [args.encoder_layers, args.decoder_layers] == layers
    assert args.max_tokens * args.update_freq[0] * 4 == recipe.tokens_per_update
    assert args.fp16 == (recipe.data["precision"] == "fp16") and args.distributed_world_size == 4


@pytest.mark.parametrize("gpus, expected", [(1, (8196, 4)), (2, (8196, 2)), (4, (8196, 1)), (8, (4098, 1))])
def test_update_freq_keeps_admin_wmt14_tokens_per_update(gpus, expected):
    recipe = load_recipe("wmt14/admin/admin").with_depth("18L-18L")  # 4 GPUs x 8196 in the paper
    launch = Launch(recipe, "data-bin", "ckpt", gpus=gpus)
    assert launch.plan() == expected
    max_tokens, update_freq = expected
    argv = launch.fairseq_args()
    assert argv[argv.index("--max-tokens") + 1] == str(max_tokens) and argv[argv.index("--update-freq") + 1] == str(
        update_freq
    )
    assert argv.count("--max-tokens") == 1 and argv.count("--update-freq") == 1


@pytest.mark.parametrize("tokens, cap", [(4096, 4096), (458752, 3584), (4000, 4000), (32784, 8196)])
@pytest.mark.parametrize("workers", [1, 2, 4, 8])
def test_batch_plan_is_exact_and_fits_the_cap(tokens, cap, workers):
    max_tokens, update_freq = batch_plan(tokens, cap, workers)
    assert max_tokens <= cap and workers * max_tokens * update_freq == tokens
    assert update_freq == 1 or batch_plan(tokens, cap, workers * 2)[1] <= update_freq


def test_cpu_launch_is_fp32_and_gloo():
    recipe = load_recipe("iwslt14_mini/admin").with_depth()
    recipe.data["precision"] = "fp16"  # a GPU recipe's fp16: fp32 on a CPU unless asked for
    launch = Launch(recipe, "bin", "ckpt", cpu_workers=2)
    command = launch.command()
    assert command[1:4] == ["-m", "torch.distributed.run", "--nproc_per_node"] and command[4] == "2"
    assert "--fp16" not in command and "--bf16" not in command and "--cpu" in command
    assert (
        command[command.index("--distributed-backend") + 1] == "gloo"
        and command[command.index("--ddp-backend") + 1] == "legacy_ddp"
    )


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_cpu_launch_takes_the_precision_asked_for(precision):
    """fairseq's fp16 / bf16 paths train on a CPU (_compat): --precision is honoured there."""
    launch = Launch(load_recipe("iwslt14_mini/admin").with_depth(), "bin", "ckpt", cpu_workers=1, precision=precision)
    command = launch.command()
    assert f"--{precision}" in command and "--cpu" in command and launch.effective_precision == precision


def test_merge_rules():
    base = {
        "fairseq": {
            "model": {"_name": "a", "dropout": 0.3},
            "lr_scheduler": {"_name": "inverse_sqrt", "warmup_updates": 4000},
        },
        "depths": {"6L-6L": {}, "12L-12L": {}},
    }
    child = {
        "fairseq": {"model": {"_name": "b"}, "lr_scheduler": {"_name": "inverse_sqrt_nowarmup", "decay_period": 4000}},
        "depths": {"2L-2L": {}},
    }
    merged = merge(base, child)
    assert merged["fairseq"]["model"] == {"_name": "b", "dropout": 0.3}  # the arch changes, its options stay
    assert merged["fairseq"]["lr_scheduler"] == {
        "_name": "inverse_sqrt_nowarmup",
        "decay_period": 4000,
    }  # a new component
    assert merged["depths"] == {"2L-2L": {}}
    assert fairseq_flags(
        {
            "task": {"_name": "translation", "data": "bin"},
            "optimization": {"lr": [0.001], "update_freq": [2]},
            "checkpoint": {"no_epoch_checkpoints": True, "keep_last_epochs": None, "no_save": False},
        }
    ) == ["bin", "--task", "translation", "--lr", "0.001", "--update-freq", "2", "--no-epoch-checkpoints"]


def test_bad_recipes_name_the_file(tmp_path):
    (tmp_path / "broken.yaml").write_text("fairseq:\n  model: {_name: x\n")
    with pytest.raises(RecipeError, match=r"broken\.yaml:\d+: invalid YAML"):
        load_recipe(tmp_path / "broken.yaml")
    (tmp_path / "partial.yaml").write_text("fairseq: {}\n")
    with pytest.raises(RecipeError, match=r"partial\.yaml: missing 'tokens_per_update'"):
        load_recipe(tmp_path / "partial.yaml")
    with pytest.raises(RecipeError, match=r"no depth 7L-7L"):
        load_recipe("iwslt14/admin").with_depth("7L-7L")


def _args(name, depth, data_bin, gpus=4):
    return parsed(Launch(load_recipe(name).with_depth(depth), str(data_bin), "/tmp/unused", gpus=gpus), data_bin)


def test_admin_authors_released_commands(tiny_data_bin):
    """iwslt14/admin_scripts and wmt14/admin_scripts are Transformer-Clinic's released commands
    (tests/test_recipe_flags.py compares them flag by flag)."""
    for method in ("postln", "preln", "admin"):
        args = _args(f"iwslt14/admin_scripts/{method}", None, tiny_data_bin, gpus=1)
        assert (
            args.share_all_embeddings and args.optimizer == "radam" and args.lr == [7e-4] and args.max_update == 100000
        )
        assert (args.lr_scheduler, args.warmup_updates, args.warmup_init_lr) == ("inverse_sqrt", 6000, 1e-7)
        assert (args.dropout, args.attention_dropout, args.activation_dropout, args.weight_decay) == (
            0.3,
            0.1,
            0.1,
            1e-4,
        )
        assert args.fp16 and (args.fp16_scale_window, args.threshold_loss_scale) == (256, 0.03125)
        assert args.encoder_normalize_before == (method == "preln")  # the same schedule for all three
    for method in ("postln", "preln", "admin"):
        args = _args(f"wmt14/admin_scripts/{method}", "18L-18L", tiny_data_bin)
        assert (args.attention_dropout, args.activation_dropout, args.weight_decay) == (0.1, 0.1, 0.0)
        assert (args.max_tokens, args.update_freq, args.warmup_updates, args.lr) == (8192, [1], 8000, [1e-3])


def test_b2t_authors_settings(tiny_data_bin):
    """The B2T recipes take dropout 0.3, clip-norm 0 and fp32 from the authors' 2022 command;
    b2t_released/2022 adds that README's deep-model settings, without the later rescale."""
    assert _args("wmt14/b2t/b2t", "18L-18L", tiny_data_bin).dropout == 0.3
    deep = _args("wmt14/b2t_released/2022/b2t", "18L-18L", tiny_data_bin)
    assert deep.dropout == 0.35 and deep.clip_norm == 0.0 and not deep.b2t_weight_rescale and not deep.fp16
    deeper = _args("wmt14/b2t_released/2022/preln", "60L-12L", tiny_data_bin)
    assert deeper.dropout == 0.35 and deeper.clip_norm == 0.1 and not getattr(deeper, "b2t_weight_rescale", False)
    assert _args("wmt14/b2t_released/2022/b2t", "6L-6L", tiny_data_bin).dropout == 0.3


def test_dlcl_authors_wmt_runs(tiny_data_bin):
    """The DLCL paper's own WMT runs as its authors' scripts (wangqiangneu/dlcl c632ee2): the
    same command for both variants but for Adam's beta2 and their archs' dropouts; 30 or 25
    encoder layers over 6, and their own evaluation (last 5 epochs, beam 4, lenpen 0.6,
    compound-split BLEU)."""
    pre = _args("wmt14/dlcl_paper/dlcl", "30L-6L", tiny_data_bin)
    post = _args("wmt14/dlcl_paper/dlcl_postnorm", "25L-6L", tiny_data_bin)
    assert (pre.encoder_layers, pre.decoder_layers, post.encoder_layers, post.decoder_layers) == (30, 6, 25, 6)
    assert pre.encoder_normalize_before and pre.decoder_normalize_before
    assert not post.encoder_normalize_before and not post.decoder_normalize_before
    for args in (pre, post):
        assert args.lr == [0.002] and args.warmup_updates == 16000 and args.warmup_init_lr == 1e-7
        assert args.max_epoch == 20 and args.clip_norm == 0.0 and args.weight_decay == 0.0 and not args.fp16
        assert args.share_all_embeddings and args.encoder_embed_dim == 512 and args.encoder_ffn_embed_dim == 2048
        assert args.dropout == 0.1 and args.label_smoothing == 0.1 and args.init_style == "paper"
    assert (pre.adam_betas, pre.attention_dropout, pre.activation_dropout) == ("(0.9, 0.997)", 0.1, 0.1)
    assert (post.adam_betas, post.attention_dropout, post.activation_dropout) == ("(0.9, 0.98)", 0.0, 0.0)
    for name in ("dlcl", "dlcl_postnorm"):
        recipe = load_recipe(f"wmt14/dlcl_paper/{name}")
        assert recipe.tokens_per_update == 8 * 4096 * 2  # 8 GPUs x --max-tokens 4096 x --update-freq 2
        generate = recipe.data["generate"]
        assert (generate["beam"], generate["lenpen"], generate["average_last"]) == (4, 0.6, 5)
        assert generate["bleu"] == recipe.data["paper"]["compare"] == "compound_split"


def test_residual_authors_wmt_config(tiny_data_bin):
    """wmt14/residual is microsoft/ResiDual's hydra_config/wmt.yaml: Transformer base at 6L or
    12L, dropout 0.3/0.1/0.1, Adam lr 1e-3 with 4000 warm-up, wd 1e-4, 4096 x 16 tokens, 50k
    updates; their fairseq 0.12.2 layers' initialisation."""
    for depth, layers in (("6L-6L", 6), ("12L-12L", 12)):
        args = _args("wmt14/residual", depth, tiny_data_bin, gpus=1)
        assert (args.encoder_layers, args.decoder_layers, args.encoder_embed_dim, args.encoder_ffn_embed_dim) == (
            layers,
            layers,
            512,
            2048,
        )
        assert (args.dropout, args.attention_dropout, args.activation_dropout) == (0.3, 0.1, 0.1)
        assert args.lr == [0.001] and args.warmup_updates == 4000 and args.weight_decay == 0.0001
        assert args.max_tokens * args.update_freq[0] == 4096 * 16 and args.max_update == 50000
        assert args.clip_norm == 0.0 and args.share_all_embeddings and args.init_style == "fairseq"
        assert args.eval_bleu and args.eval_bleu_detok == "moses" and args.eval_bleu_remove_bpe == "@@ "


def test_b2t_2023_release(tiny_data_bin):
    """takase/b2t_connection README at 6d97ab8: 18L-18L fp16, clip 0.1, dropout 0.5, word dropout
    0.1/0.1 and the code's N^-0.5 rescale; 6L-6L dropout 0.3 without word dropout."""
    recipe = load_recipe("wmt14/b2t_released/2023/b2t")
    assert recipe.depths == ["6L-6L", "18L-18L", "100L-100L"] and recipe.data["paper"]["bleu"] == {"18L-18L": 27.52}
    shallow = _args("wmt14/b2t_released/2023/b2t", "6L-6L", tiny_data_bin)
    assert (shallow.dropout, shallow.clip_norm, shallow.fp16, shallow.b2t_weight_rescale) == (0.3, 0.1, True, True)
    assert not getattr(shallow, "enc_replace_rate", None) and not getattr(shallow, "dec_replace_rate", None)
    model = recipe.with_depth("18L-18L").fairseq["model"]
    assert (model["dropout"], model["enc_replace_rate"], model["dec_replace_rate"]) == (0.5, 0.1, 0.1)
    assert recipe.with_depth("100L-100L").fairseq["optimization"]["max_update"] == 25000


def test_b2t_table_5_side_by_side():
    """B2T Table 5 (6L-6L / 18L-18L mean SacreBLEU) for every method it compares that we offer."""
    expected = {
        "b2t": {"6L-6L": 26.53, "18L-18L": 27.30},
        "deepnet": {"6L-6L": 26.38, "18L-18L": 27.13},
        "tfixup": {"6L-6L": 26.43, "18L-18L": 26.94},
        "admin": {"6L-6L": 26.49, "18L-18L": 26.86},
        "dlcl": {"6L-6L": 26.52, "18L-18L": 26.90},
    }
    for method, numbers in expected.items():
        paper = load_recipe(f"wmt14/b2t/{method}").data["paper"]
        assert {depth: paper["bleu"][depth] for depth in numbers} == numbers, method
        assert paper["compare"] == "sacrebleu_mean"
    for method in ("admin", "dlcl"):  # Transformer-Clinic's and wangqiangneu/dlcl's Xavier FFN
        assert load_recipe(f"wmt14/b2t/{method}").fairseq["model"]["init_style"] == "paper"


def test_iwslt14_b2t_and_its_baseline_start_alike(tiny_data_bin):
    b2t, postln = (_args(f"iwslt14/{m}", None, tiny_data_bin) for m in ("b2t", "postln"))
    assert b2t.init_style == postln.init_style == "paper"


def test_admin_wmt14_paper_text_has_attention_and_activation_dropout(tiny_data_bin):
    """Admin App. D: "all dropout ratios (including activation dropout and attention dropout)
    are set to 0.1" on WMT14 En-De."""
    args = _args("wmt14/admin/admin", "6L-6L", tiny_data_bin)
    assert (args.dropout, args.attention_dropout, args.activation_dropout) == (0.1, 0.1, 0.1)


def test_tfixup_and_preln_iwslt14_as_their_authors(tiny_data_bin):
    """T-Fixup IWSLT14 in fp32, as an author says the paper's IWSLT'14 models were trained
    (layer6ai-labs/T-Fixup issue 1), though the released script passes --fp16."""
    tfixup = _args("iwslt14/tfixup", None, tiny_data_bin, gpus=1)
    assert (tfixup.max_epoch, tfixup.dropout, tfixup.fp16, tfixup.clip_norm, tfixup.keep_last_epochs) == (
        300,
        0.5,
        False,
        25.0,
        60,
    )
    preln = _args("iwslt14/preln", None, tiny_data_bin, gpus=1)
    assert (preln.weight_decay, preln.max_epoch, preln.keep_last_epochs) == (0.0, 15, -1)


def test_the_training_log_shows_each_line_while_training_runs(tmp_path):
    """train.log is written line by line, so that ``tail -f`` follows a run that takes hours:
    the child prints one line, then waits until the test has seen it in the log."""
    log, seen = tmp_path / "train.log", tmp_path / "seen"
    child = (
        "import pathlib, time\n"
        "print('| train_inner | update 25', flush=True)\n"
        f"for _ in range(600):\n    if pathlib.Path({str(seen)!r}).exists(): break\n    time.sleep(0.1)\n"
    )
    thread = threading.Thread(target=run_logged, args=([sys.executable, "-c", child], log, "t"), daemon=True)
    thread.start()
    deadline = time.time() + 30
    while time.time() < deadline and "update 25" not in (log.read_text() if log.exists() else ""):
        time.sleep(0.05)
    shown = "update 25" in log.read_text()
    seen.touch()
    thread.join(timeout=60)
    assert shown, "the line reached train.log only when the process ended"
    assert not thread.is_alive()


@pytest.mark.parametrize("setting", ["multi30k", "iwslt14_mini"])
def test_cpu_recipes_keep_what_the_main_job_and_grid_measured(setting):
    """The IWSLT14 recipes now follow their authors further (no weight decay for Pre-LN, B2T
    initialised as Post-LN, T-Fixup's fork biases and clipping); the CPU-scaled recipes keep the
    settings the README's main job and the stability grid were measured with."""
    recipes = {m: load_recipe(f"{setting}/{m}").fairseq for m in ("preln", "b2t", "tfixup", "postln")}
    assert recipes["preln"]["optimizer"]["weight_decay"] == 0.0001
    assert recipes["b2t"]["model"]["init_style"] == "fairseq"
    assert recipes["tfixup"]["model"]["tfixup_qkv_bias"] == "zero"
    assert all(r["optimization"]["clip_norm"] == 0.0 for r in recipes.values())


B2T_PAPER = SHARED_DATA.parent / "papers" / "b2t-takase2023-layer-norms-residuals.txt"
ROUGE_TABLES = {  # table number: {its row name: our recipe}
    "2": {"Post-LN": "postln", "Pre-LN": "preln", "B2T connection": "b2t"},
    "6": {"DLCL [32]": "dlcl", "T-Fixup [9]": "tfixup", "DeepNet [31]": "deepnet", "Admin [13]": "admin"},
    "10": {"+ w/o LN": "b2t_noln"},
}


def paper_rouge_tables(text):
    """{recipe: {depth: [R-1, R-2, R-L] or "failed"}} read from the B2T paper's Tables 2, 6, 10."""
    numbers = {}
    for table, rows in ROUGE_TABLES.items():
        block = text[text.index(f"Table {table}: F-1 based ROUGE") :].split("\n\n")[1]
        depth = None
        for line in block.splitlines():
            if line.startswith("Enc-Dec: "):
                depth = line.split()[1]
            name, _, rest = line.partition("\t")
            if name in rows:
                value = "failed" if "failed" in rest else [float(x) for x in rest.split()]
                numbers.setdefault(rows[name], {})[depth] = value
    return numbers


def test_gigaword_recipes_carry_the_papers_rouge_tables():
    """Each configs/gigaword recipe holds the B2T paper's R-1/R-2/R-L at 6L-6L and 18L-18L, as
    its Tables 2, 6 and 10 print them (read from the paper's text)."""
    if not B2T_PAPER.is_file():
        pytest.skip(f"{B2T_PAPER}: not here (../shared/papers)")
    tables = paper_rouge_tables(B2T_PAPER.read_text(encoding="utf-8"))
    assert sorted(tables) == sorted(n.split("/")[1] for n in list_recipes() if n.startswith("gigaword/"))
    for method, numbers in tables.items():
        recipe = load_recipe(f"gigaword/{method}")
        assert recipe.data["paper"]["rouge"] == numbers and recipe.depths == ["6L-6L", "18L-18L"], method


def test_gigaword_recipes_are_table_7(tiny_data_bin):
    """Table 7's summarisation column and Table 8's GPUs: d 512, FFN 2048, 8 heads, Adam (0.9, 0.98),
    lr 1e-3, inverse sqrt with 4k warm-up, 50k updates, 3584 tokens per GPU on 64 (6L-6L) and
    144 (18L-18L) GPUs; shared embeddings; scored by ROUGE. T-Fixup keeps its own schedule."""
    for name in (n for n in list_recipes() if n.startswith("gigaword/")):
        for depth, gpus in (("6L-6L", 64), ("18L-18L", 144)):
            recipe = load_recipe(name).with_depth(depth)
            assert recipe.tokens_per_update == gpus * 3584 and recipe.max_tokens == 3584
            args = _args(name, depth, tiny_data_bin, gpus=gpus)
            assert (args.encoder_embed_dim, args.encoder_ffn_embed_dim, args.encoder_attention_heads) == (512, 2048, 8)
            assert (args.max_tokens, args.update_freq, args.max_update) == (3584, [1], 50000)
            assert args.share_all_embeddings and args.adam_betas == "(0.9, 0.98)"
            assert recipe.data["generate"]["score"] == "rouge" == recipe.data["paper"]["compare"]
            if name != "gigaword/tfixup":
                assert (args.lr, args.lr_scheduler, args.warmup_updates, args.fp16) == (
                    [1e-3],
                    "inverse_sqrt",
                    4000,
                    False,
                )
    tfixup = _args("gigaword/tfixup", "18L-18L", tiny_data_bin, gpus=144)
    assert (tfixup.lr, tfixup.lr_scheduler, tfixup.decay_period, tfixup.fp16) == (
        [5e-4],
        "inverse_sqrt_nowarmup",
        4000,
        True,
    )
    assert _args("gigaword/b2t_noln", "18L-18L", tiny_data_bin).b2t_no_layer_norm


def test_a_dry_run_prints_the_papers_numbers_beside_the_command(capsys):
    from fairseq_layernorm_plugins import cli

    cli.train(["gigaword/b2t", "--depth", "18L-18L", "--dry-run", "--gpus", "8", "--data", "/data"])
    printed = capsys.readouterr().out.strip().splitlines()
    assert (
        printed[1]
        == "paper (B2T (Takase et al. 2023) Table 2; F1 ROUGE-1 / ROUGE-2 / ROUGE-L on the 1,951 test pairs): 39.61 / 20.28 / 36.66"
    )
    assert "--arch transformer_b2t_wmt_en_de" in printed[2] and "--encoder-layers 18" in printed[2]
    cli.train(["gigaword/postln", "--depth", "18L-18L", "--dry-run", "--gpus", "8", "--data", "/data"])
    assert capsys.readouterr().out.splitlines()[1].endswith(": failed")

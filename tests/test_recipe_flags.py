"""``fairseq-ln-train RECIPE --dry-run`` against the authors' own command lines, written out
here as their released files give them (with their shell variables filled in): every flag of
theirs is in our command with the same value, or is named below with why it is not; every
flag of ours that is not theirs is named below with why. On as many GPUs as the authors
used, so that --max-tokens and --update-freq compare as they are."""

import shlex

import pytest

from fairseq_layernorm_plugins import cli

CLINIC_IWSLT = (  # Transformer-Clinic nmt-experiments/iwslt14_de-en.md:92-105 (Admin), SEED=1111
    "fairseq-train ../data-bin/iwslt14.tokenized.de-en.joined -s de -t en "
    "--arch transformer_iwslt_de_en --share-all-embeddings "
    '--user-dir ../radam_fairseq --optimizer radam --adam-betas "(0.9,0.98)" '
    "--clip-norm 0.0 --lr 7e-4 --lr-scheduler inverse_sqrt "
    "--warmup-init-lr 1e-7 --warmup-updates 6000 --max-update 100000 "
    "--dropout 0.3 --attention-dropout 0.1 --relu-dropout 0.1 "
    "--weight-decay 0.0001 --criterion label_smoothed_cross_entropy "
    "--label-smoothing 0.1 --save-dir iwslt14deen/iwslt-admin-1111 "
    "--init-type adaptive --max-tokens 4096 "
    "--update-freq 1 --seed 1111 "
    "--log-format simple --fp16 --restore-file x.pt "
    "--fp16-scale-window 256 --threshold-loss-scale 0.03125 "
    "--log-interval 100"
)
CLINIC_WMT = (  # Transformer-Clinic nmt-experiments/wmt14_en-de.md:139-152 (Admin), lnum=18
    "fairseq-train ../data-bin/wmt14_en_de_joined_dict/ -s en -t de "
    "--arch transformer_wmt_en_de --share-all-embeddings "
    "--optimizer radam --adam-betas '(0.9, 0.98)' --clip-norm 0.0 "
    "--lr-scheduler inverse_sqrt --max-update 500000 "
    "--warmup-init-lr 1e-07 --warmup-updates 8000 --lr 0.001 --min-lr 1e-09 "
    "--criterion label_smoothed_cross_entropy --label-smoothing 0.1 "
    "--weight-decay 0.0 --attention-dropout 0.1 --relu-dropout 0.1 "
    "--max-tokens 8192 --update-freq 1 "
    "--save-dir wmt14ende/wmt-admin-18l --restore-file x.pt --seed 1111 "
    "--user-dir ../radam_fairseq --log-format simple --log-interval 500 "
    "--init-type adaptive --fp16 --fp16-scale-window 256 "
    "--encoder-layers 18 --decoder-layers 18 "
    "--threshold-loss-scale 0.03125"
)
TFIXUP_IWSLT = (  # layer6ai-labs/T-Fixup Train_IWSLT_TFixup_example.sh:13-37
    'python train.py "data-bin/iwslt14.tokenized.de-en" -a "transformer_iwslt_de_en" -s de -t en '
    "--optimizer adam --adam-betas '(0.9, 0.98)' --criterion label_smoothed_cross_entropy "
    "--label-smoothing 0.1 --lr-scheduler inverse_sqrt_nowarmup --lr 0.0005 --decay-period 4000 "
    "--dropout 0.5 --weight-decay 0.0001 --max-tokens 4000 --max-epoch 300 --dont-use-layernorm "
    "--Tfixup --share-decoder-input-output-embed --fp16 "
    "--tensorboard-logdir ./results/IWSLT/tensorboard/Tfixup_d5L5_cleanscheduler_fp16/ "
    "--save-dir ./results/IWSLT/checkpoints/Tfixup_d5L5_cleanscheduler_fp16/ "
    '--eval-bleu --eval-bleu-args \'{"beam": 4, "lenpen": 0.3}\' --eval-bleu-remove-bpe --eval-bleu-detok moses'
)
B2T_2022 = (  # takase/b2t_connection README.md:32-39 at c3dedea (2022), 6L-6L on 4 GPUs
    "python -u train.py pre-processed-data-dir "
    "--arch transformer_wmt_en_de --optimizer adam --adam-betas '(0.9, 0.98)' "
    "--clip-norm 0.0 --lr 0.001 --lr-scheduler inverse_sqrt --warmup-updates 4000 "
    "--warmup-init-lr 1e-07 --dropout 0.3 --weight-decay 0.0 --criterion label_smoothed_cross_entropy "
    "--label-smoothing 0.1 --max-tokens 3584 --min-lr 1e-09 --update-freq 32  --log-interval 100  --max-update 50000 "
    "--residual-bottom-to-top "
    "--share-all-embeddings --keep-last-epochs 10 --seed 1 --save-dir model-save-dir"
)
B2T_2023 = (  # takase/b2t_connection README.md:39-47 at 6d97ab8 (2023), 18L-18L on 8 GPUs
    "python -u train.py "
    "pre-processed-data-dir --source-lang en --target-lang de --fp16 "
    "--arch transformer_wmt_en_de --optimizer adam --adam-betas '(0.9, 0.98)' "
    "--clip-norm 0.1 --lr 0.001 --lr-scheduler inverse_sqrt --warmup-updates 4000 "
    "--warmup-init-lr 1e-07 --dropout 0.5 --weight-decay 0.0 --criterion label_smoothed_cross_entropy "
    "--label-smoothing 0.1 --max-tokens 3584 --min-lr 1e-09 --update-freq 16  --log-interval 100  --max-update 50000 "
    "--sampling-method worddrop --enc-replace-rate 0.1 --dec-replace-rate 0.1 --decay-val 1000 "
    "--share-all-embeddings --keep-last-epochs 10 --seed 1 --save-dir model-save-dir "
    "--encoder-layers 18 --decoder-layers 18 --residual-bottom-to-top"
)

RENAMED = {"-s": "--source-lang", "-t": "--target-lang", "-a": "--arch", "--relu-dropout": "--activation-dropout"}
# theirs, not ours: what each is and why it has no counterpart
NOT_CARRIED = {
    "--arch": "the method is our arch's (checked separately)",
    "--init-type": "Transformer-Clinic's method switch: our arch",
    "--dont-use-layernorm": "T-Fixup's method switch: our arch",
    "--Tfixup": "T-Fixup's method switch: our arch",
    "--residual-bottom-to-top": "B2T's method switch: our arch",
    "--user-dir": "their optimizer folder; ours is the plugin",
    "--save-dir": "the run directory (runs/<recipe>/<depth>.seed<S>)",
    "--restore-file": "x.pt, a file that does not exist: start from scratch, as ours",
    "--log-format": "logging only",
    "--log-interval": "logging only",
    "--tensorboard-logdir": "logging only",
    "--eval-bleu": "validation BLEU logged during training; scoring is fairseq-ln-evaluate's",
    "--eval-bleu-args": "as --eval-bleu",
    "--eval-bleu-remove-bpe": "as --eval-bleu",
    "--eval-bleu-detok": "as --eval-bleu",
    "--min-lr": "1e-9: never reached by an inverse-sqrt schedule in these runs (fairseq 0.12: --stop-min-lr)",
    "--decay-val": "not used by --sampling-method worddrop (their replace_input_tokens)",
    "--sampling-method": "worddrop: on whenever --enc/--dec-replace-rate > 0 (fairseq's multilingual task owns the name)",
    "--seed": "fairseq-ln-train --seed (checked separately)",
}
# ours, not theirs, in every recipe: why each changes nothing they set
OURS_EVERYWHERE = {
    "--task": "translation, fairseq's default",
    "--user-dir": "the plugin",
    "--save-dir": "the run directory",
    "--log-format": "logging only",
    "--log-interval": "logging only",
    "--seed": "checked separately",
    "--encoder-layers": "the arch's own depth, or the recipe's (theirs: the same flags where deeper)",
    "--decoder-layers": "as --encoder-layers",
    "--distributed-world-size": "their GPU count",
    "--source-lang": "theirs from the data-bin's file names",
    "--target-lang": "as --source-lang",
    "--update-freq": "1 where theirs is absent (fairseq's default)",
    "--init-style": "each arch's authors' initialisation (docs/fidelity.md)",
}


def flags(command):
    """{flag: value, or True for a switch} of a command line, the data path dropped."""
    words, out, i = shlex.split(command), {}, 2 if shlex.split(command)[0] == "python" else 1
    while i < len(words):
        word = words[i]
        if not word.startswith("-"):
            i += 1  # the data path
            continue
        has_value = i + 1 < len(words) and not words[i + 1].startswith("--") and words[i + 1] not in RENAMED
        out[RENAMED.get(word, word)] = words[i + 1] if has_value else True
        i += 2 if has_value else 1
    return out


def same(a, b):
    if a is True or b is True:
        return a == b
    try:
        return abs(float(a) - float(b)) <= 1e-12 * max(1.0, abs(float(a)))
    except ValueError:
        return a.replace(" ", "") == b.replace(" ", "")


def dry_run(capsys, recipe, gpus, depth=None, seed=1):
    argv = [recipe, "--dry-run", "--gpus", str(gpus), "--data", "/data", "--seed", str(seed)]
    cli.train(argv + (["--depth", depth] if depth else []))
    return flags(capsys.readouterr().out.strip().splitlines()[-1])


CASES = {
    # recipe, depth, GPUs, their command, {their flag: new value} (their other rows), our arch,
    # {our flag that is not theirs: (its value, why)}
    "clinic-iwslt-admin": (
        "iwslt14/admin_scripts/admin",
        None,
        1,
        CLINIC_IWSLT,
        {},
        "transformer_admin_iwslt_de_en",
        {
            "--share-decoder-input-output-embed": (True, "implied by --share-all-embeddings"),
            "--max-epoch": ("0", "no limit, fairseq's default"),
            "--keep-last-epochs": ("-1", "every epoch kept, fairseq's default"),
        },
    ),
    "clinic-iwslt-postln": (
        "iwslt14/admin_scripts/postln",
        None,
        1,
        CLINIC_IWSLT.replace("--init-type adaptive", "--init-type default"),
        {},
        "transformer_postln_iwslt_de_en",
        {
            "--share-decoder-input-output-embed": (True, "implied by --share-all-embeddings"),
            "--max-epoch": ("0", "no limit, fairseq's default"),
            "--keep-last-epochs": ("-1", "every epoch kept, fairseq's default"),
        },
    ),
    "clinic-iwslt-preln": (
        "iwslt14/admin_scripts/preln",
        None,
        1,
        CLINIC_IWSLT.replace("--init-type adaptive", "--init-type default")
        + " --encoder-normalize-before --decoder-normalize-before",
        {},
        "transformer_preln_iwslt_de_en",
        {
            "--share-decoder-input-output-embed": (True, "implied by --share-all-embeddings"),
            "--max-epoch": ("0", "no limit, fairseq's default"),
            "--keep-last-epochs": ("-1", "every epoch kept, fairseq's default"),
        },
    ),
    "clinic-iwslt-rezero": (  # iwslt14_de-en.md "## ReZero": the Admin command with --init-type rezero
        "iwslt14/admin_scripts/rezero",
        None,
        1,
        CLINIC_IWSLT.replace("--init-type adaptive", "--init-type rezero"),
        {},
        "transformer_rezero_iwslt_de_en",
        {
            "--share-decoder-input-output-embed": (True, "implied by --share-all-embeddings"),
            "--max-epoch": ("0", "no limit, fairseq's default"),
            "--keep-last-epochs": ("-1", "every epoch kept, fairseq's default"),
        },
    ),
    "clinic-wmt-admin-18": (
        "wmt14/admin_scripts/admin",
        "18L-18L",
        4,
        CLINIC_WMT,
        {},
        "transformer_admin_wmt_en_de",
        {
            "--dropout": ("0.1", "transformer_wmt_en_de's default, which theirs keeps"),
            "--max-epoch": ("0", "no limit (max-update ends the run)"),
            "--keep-last-epochs": ("-1", "every epoch kept, fairseq's default"),
        },
    ),
    "tfixup-iwslt": (
        "iwslt14/tfixup",
        None,
        1,
        # but for --fp16: an author says the IWSLT'14 models were trained in fp32 (T-Fixup issue 1)
        TFIXUP_IWSLT.replace(" --fp16 ", " ", 1),
        {},
        "transformer_tfixup_iwslt_de_en",
        {
            "--attention-dropout": ("0", "fairseq 0.9's default (their fairseq/models/transformer.py:941)"),
            "--activation-dropout": ("0", "fairseq 0.9's default (their fairseq/models/transformer.py:942)"),
            "--clip-norm": ("25", "fairseq 0.9's default (their fairseq/options.py:388); fairseq 0.12's is 0"),
            "--keep-last-epochs": ("60", "the windows scored end at epochs 250-300 (theirs keeps every epoch)"),
        },
    ),
    "b2t-2022-6L": (
        "wmt14/b2t_released/2022/b2t",
        "6L-6L",
        4,
        B2T_2022,
        {},
        "transformer_b2t_wmt_en_de",
        {},
    ),
    "b2t-2022-18L": (
        "wmt14/b2t_released/2022/b2t",
        "18L-18L",
        4,
        B2T_2022 + " --encoder-layers 18 --decoder-layers 18",
        {"--dropout": "0.35"},  # the README: "3.5 (or 4.0)" for models deeper than 6L-6L
        "transformer_b2t_wmt_en_de",
        {},
    ),
    "b2t-2022-60L-preln": (
        "wmt14/b2t_released/2022/preln",
        "60L-12L",
        4,
        B2T_2022.replace("--residual-bottom-to-top", "--encoder-normalize-before --decoder-normalize-before")
        + " --encoder-layers 60 --decoder-layers 12",
        {"--dropout": "0.35", "--clip-norm": "0.1"},  # the README: clip 0.1 deeper than 18L-18L
        "transformer_preln_wmt_en_de",
        {},
    ),
    "b2t-paper-6L-postln": (
        "wmt14/b2t/postln",
        "6L-6L",
        4,
        B2T_2022.replace(" --residual-bottom-to-top", ""),
        {},
        "transformer_postln_wmt_en_de",
        {},
    ),
    "b2t-2023-18L": (
        "wmt14/b2t_released/2023/b2t",
        "18L-18L",
        8,
        B2T_2023,
        {},
        "transformer_b2t_wmt_en_de",
        {"--b2t-weight-rescale": (True, "their 2023 code's rescaling_init, on whenever --residual-bottom-to-top is")},
    ),
}
NORMALIZE_BEFORE = ("--encoder-normalize-before", "--decoder-normalize-before")


@pytest.mark.parametrize("case", CASES)
def test_dry_run_prints_the_authors_flags(case, capsys):
    recipe, depth, gpus, theirs, changed, arch, extras = CASES[case]
    theirs = {**flags(theirs), **changed}
    seed = theirs.get("--seed", "1")
    ours = dry_run(capsys, recipe, gpus, depth, seed)
    assert ours["--arch"] == arch and ours["--seed"] == seed
    for flag, value in theirs.items():
        if flag in NOT_CARRIED or (flag in NORMALIZE_BEFORE and arch.startswith("transformer_preln")):
            continue  # Pre-LN: the arch sets both (tests/test_archs.py)
        assert flag in ours, f"{case}: their {flag} {value} is not in our command"
        assert same(ours[flag], value), f"{case}: {flag} is {ours[flag]} here, {value} in theirs"
    for flag, (value, _why) in extras.items():
        assert flag in ours and same(ours[flag], value), f"{case}: our {flag} is {ours.get(flag)}, not {value}"
    explained = {**OURS_EVERYWHERE, **extras}
    unexplained = [f"{f} {v}" for f, v in ours.items() if f not in theirs and f not in explained and f != "--arch"]
    assert not unexplained, f"{case}: ours only, with no reason given: {unexplained}"


def test_flag_parser():
    assert flags("python train.py d -s de --fp16 --lr 5e-4 --relu-dropout 0.1 -a x") == {
        "--source-lang": "de",
        "--fp16": True,
        "--lr": "5e-4",
        "--activation-dropout": "0.1",
        "--arch": "x",
    }

"""Shared fixtures: tiny binarised data, a CLI runner, the plugin's registry."""

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fairseq_layernorm_plugins  # noqa: F401  (registers the plugin for in-process tests)
from fairseq_layernorm_plugins.prepare.toy import write_reversal_task

REPO = Path(__file__).resolve().parents[1]
PLUGIN_DIR = REPO / "fairseq_layernorm_plugins"
SHARED_DATA = Path(os.environ.get("SHARED_DATA", REPO.parent / "shared" / "data"))
BIN = Path(sys.executable).parent  # the venv's fairseq-* entry points

# a model small enough that a CLI run takes seconds on 2 cores
TINY_MODEL = (
    "--encoder-layers 2 --decoder-layers 2 --encoder-embed-dim 32 --decoder-embed-dim 32 "
    "--encoder-ffn-embed-dim 64 --decoder-ffn-embed-dim 64 "
    "--encoder-attention-heads 2 --decoder-attention-heads 2"
).split()


def pytest_collection_modifyitems(items):
    """Test files with a test marked ``slow(minutes)`` first, longest first: with one worker
    per core and each file on one worker (scripts/test.sh), they start at once instead of last."""

    def minutes(item):
        marker = item.get_closest_marker("slow")
        return marker.args[0] if marker and marker.args else 0

    items.sort(key=lambda item: -minutes(item))


BUDGET_S = 60  # a test (its setup, call and teardown) over this on 2 cores is named at the end


def pytest_terminal_summary(terminalreporter):
    """Name every test over BUDGET_S seconds, longest first (docs/testing.md: the suite's budget)."""
    seconds = collections.Counter()
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) in ("setup", "call", "teardown"):
                seconds[report.nodeid] += report.duration
    over = sorted(((s, nodeid) for nodeid, s in seconds.items() if s > BUDGET_S), reverse=True)
    terminalreporter.section(f"tests over the {BUDGET_S} s budget: {len(over)}")
    for s, nodeid in over:
        terminalreporter.write_line(f"{s:6.0f} s  {nodeid}")


# fairseq's decoding and scoring commands, run in the test's own process (their cli_main, from
# argv on, as the console script runs it): they write no state a later call reads, and each
# saves the 3 s of a fresh interpreter importing torch and fairseq. fairseq-train and
# fairseq-preprocess keep a process of their own (fairseq keeps the best checkpoint's score
# on a function between runs) unless a test asks otherwise (IN_PROCESS_ON_REQUEST), as does
# any call with its own cwd or environment.
IN_PROCESS = {
    "fairseq-generate": "fairseq_cli.generate",
    "fairseq-eval-lm": "fairseq_cli.eval_lm",
    "fairseq-interactive": "fairseq_cli.interactive",
}


# on request (``run_cli(..., in_process=True)``), for tests that read what a run wrote and not the
# process around it: fairseq-train with its per-run state reset first (fresh_train_state), and
# fairseq-preprocess (its log file handler removed after the call)
IN_PROCESS_ON_REQUEST = {"fairseq-train": "fairseq_cli.train", "fairseq-preprocess": "fairseq_cli.preprocess"}


def run_cli(tool, *args, cwd=None, timeout=300, env=None, input_text=None, in_process=False):
    """Run a fairseq console script (``fairseq-train`` ...), ``input_text`` on its stdin; return
    its combined output (log lines as fairseq formats them).

    ``in_process=True`` runs ``fairseq-train`` and ``fairseq-preprocess`` through their
    ``cli_main`` in this process as well (IN_PROCESS_ON_REQUEST).

    On failure the test fails with the tail of the log rather than a bare exit code.
    """
    cmd = [str(BIN / tool), *map(str, args)]
    if in_process and tool in IN_PROCESS_ON_REQUEST and cwd is None and env is None:
        if tool == "fairseq-train":
            fresh_train_state()
            cmd = loading_in_this_process(cmd)
        code, out = _run_in_process(IN_PROCESS_ON_REQUEST[tool], cmd, input_text)
        fresh_train_state()  # and none left for a later test's in-process training
    elif tool in IN_PROCESS and cwd is None and env is None:
        code, out = _run_in_process(IN_PROCESS[tool], loading_in_this_process(cmd), input_text)
    else:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env, input=input_text)
        code, out = proc.returncode, proc.stdout + proc.stderr
    if code != 0:
        pytest.fail(f"{' '.join(cmd)} exited {code}:\n{out[-4000:]}")
    return out


def loading_in_this_process(cmd):
    """``cmd`` with ``--num-workers 0`` unless it names its own: the same batches, loaded in this
    process; a data-loading worker forked from it takes the 5 s of torch's join timeout to end."""
    return cmd if "--num-workers" in cmd else [*cmd, "--num-workers", "0"]


def fresh_train_state():
    """fairseq-train's state between runs, as a new process has it: the best validation score
    (``checkpoint_utils.save_checkpoint.best``) and ``--patience``'s best and count
    (``should_stop_early``) live in function attributes."""
    from fairseq import checkpoint_utils
    from fairseq_cli.train import should_stop_early

    vars(checkpoint_utils.save_checkpoint).pop("best", None)
    for name in ("best", "num_runs"):
        vars(should_stop_early).pop(name, None)


def _run_in_process(module, argv, input_text):
    """(exit status, output) of ``module``'s ``cli_main`` with ``argv``: its stdout, stderr and
    log records (INFO and up, in fairseq's format) in one buffer; a traceback fails it as an
    exit status 1 would."""
    import contextlib
    import importlib
    import io
    import logging
    import traceback
    from unittest import mock

    buffer = io.StringIO()
    own_logger = logging.getLogger(module)  # fairseq-preprocess adds a handler writing DESTDIR/preprocess.log
    own_handlers = own_logger.handlers[:]
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(logging.Formatter("%(asctime)s | %(levelname)s | %(name)s | %(message)s", "%Y-%m-%d %H:%M:%S"))
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    code = 0
    try:
        with (
            mock.patch.object(sys, "argv", argv),
            mock.patch.object(sys, "stdin", io.StringIO(input_text or "")),
            contextlib.redirect_stdout(buffer),
            contextlib.redirect_stderr(buffer),
        ):
            importlib.import_module(module).cli_main()
    except SystemExit as exit:  # sys.exit(N), or sys.exit("message"): status 1
        if isinstance(exit.code, str):
            buffer.write(exit.code + "\n")
        code = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
    except Exception:
        code = 1
        buffer.write(traceback.format_exc())
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        for added in own_logger.handlers[len(own_handlers) :]:
            own_logger.removeHandler(added)
            added.close()
    return code, buffer.getvalue()


def json_records(log, kind):
    """fairseq ``--log-format json`` lines of one kind (``train_inner``, ``train``, ``valid``)."""
    records = []
    for line in log.splitlines():
        if f"| {kind} | {{" in line:
            records.append(json.loads(line.split(f"| {kind} | ", 1)[1]))
    return records


@pytest.fixture(scope="session")
def tiny_data_bin(tmp_path_factory):
    """A fairseq data-bin (src -> tgt) made by the real ``fairseq-preprocess`` (its ``cli_main``,
    in this process)."""
    root = tmp_path_factory.mktemp("tiny")
    write_reversal_task(root)
    run_cli(
        "fairseq-preprocess",
        "--source-lang",
        "src",
        "--target-lang",
        "tgt",
        "--trainpref",
        root / "train",
        "--validpref",
        root / "valid",
        "--testpref",
        root / "test",
        "--destdir",
        root / "bin",
        "--workers",
        "1",
        in_process=True,
    )
    return root / "bin"


@pytest.fixture(scope="session")
def joined_data_bin(tmp_path_factory):
    """The reversal task with one dictionary for source and target (``--share-all-embeddings``),
    made by the real ``fairseq-preprocess --joined-dictionary`` (in this process)."""
    root = tmp_path_factory.mktemp("joined")
    write_reversal_task(root)
    run_cli(
        "fairseq-preprocess",
        *("--source-lang", "src", "--target-lang", "tgt", "--joined-dictionary"),
        *("--trainpref", root / "train", "--validpref", root / "valid", "--destdir", root / "bin"),
        *("--workers", "1"),
        in_process=True,
    )
    return root / "bin"


LM_WORDS = "the a one two three four five six seven eight nine ten red green blue cat dog sat ran on".split()


@pytest.fixture(scope="session")
def lm_data_bin(tmp_path_factory):
    """A word-level LM data-bin (``fairseq-preprocess --only-source``, as for WikiText): lines
    that count through a fixed word list from a varying start, so the next word is learnable
    (``fairseq-preprocess``'s ``cli_main``, in this process)."""
    root = tmp_path_factory.mktemp("lm")
    for split, lines in (("train", 400), ("valid", 40), ("test", 40)):
        text = [" ".join(LM_WORDS[(i * 7 + k) % len(LM_WORDS)] for k in range(6 + i % 9)) for i in range(lines)]
        (root / f"{split}.txt").write_text("\n".join(text) + "\n")
    run_cli(
        "fairseq-preprocess",
        "--only-source",
        *("--trainpref", root / "train.txt", "--validpref", root / "valid.txt", "--testpref", root / "test.txt"),
        *("--destdir", root / "bin", "--workers", "1"),
        in_process=True,
    )
    return root / "bin"


SPEECH_SPLITS = ("train-clean-100", "dev-clean", "test-clean", "dev-other", "test-other")


@pytest.fixture(scope="session")
def speech_data(tmp_path_factory):
    """fairseq speech_to_text data made by the real ``fairseq-ln-prepare librispeech`` from
    real LibriVox and command recordings in LibriSpeech's own layout, all four evaluation sets
    included (``tests/helpers/librispeech_fixture.py``; Debian's pocketsphinx-testdata)."""
    from helpers.librispeech_fixture import build_librispeech_fixture

    from fairseq_layernorm_plugins import cli

    root = tmp_path_factory.mktemp("speech")
    source = build_librispeech_fixture(root, other_sets=True)
    out = root / "prepared"
    splits = ["--splits", ",".join(SPEECH_SPLITS), "--vocab-size", "60", "--workers", "1"]
    cli.prepare(["librispeech", "--source", str(source), *splits, "--out", str(out)])  # exits 2 on an error
    return out


def error_line(stderr):
    """The one error line of a failed command (its last line), after checking there is no traceback."""
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], stderr[-3000:]
    return errors[0]


def absent(reason):
    """A system package or tool a test needs is not installed: skip with ``reason``, but fail
    under CI (``CI=true``), where ``.ci/run`` installs it."""
    pytest.fail(reason) if os.environ.get("CI") == "true" else pytest.skip(reason)


def plugin_archs(kind="translation"):
    """{arch name: model name} for every architecture this package registers of ``kind``:
    ``translation`` (the encoder-decoders), ``lm`` (the decoder-only language models), ``s2t``
    (the speech-to-text models) or ``all``."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY, ARCH_MODEL_REGISTRY

    from fairseq_layernorm_plugins.models.base import PluginTransformerModel
    from fairseq_layernorm_plugins.models.base_lm import PluginTransformerLanguageModel
    from fairseq_layernorm_plugins.models.base_s2t import PluginS2TTransformerModel

    bases = {
        "translation": PluginTransformerModel,
        "lm": PluginTransformerLanguageModel,
        "s2t": PluginS2TTransformerModel,
    }
    wanted = tuple(bases.values()) if kind == "all" else bases[kind]
    return {
        arch: ARCH_MODEL_NAME_REGISTRY[arch]
        for arch, model_cls in ARCH_MODEL_REGISTRY.items()
        if model_cls.__module__.startswith("fairseq_layernorm_plugins.") and issubclass(model_cls, wanted)
    }


def parse(data_bin, arch, *extra):
    """Parse a ``fairseq-train`` command line (arch defaults applied) in-process."""
    from fairseq_layernorm_plugins.diagnostics import training_args

    return training_args(data_bin, arch, *extra)


def build(data_bin, arch, *extra, seed=1):
    """(model, task, args) as ``fairseq-train`` would build them (the package's own builder)."""
    from fairseq_layernorm_plugins.diagnostics import build_from_args

    args = parse(data_bin, arch, *extra)
    model, _, task = build_from_args(args, seed)
    return model, task, args


def batch(task, n=8):
    """A collated batch of the first ``n`` validation sentences."""
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    return dataset.collater([dataset[i] for i in range(n)])


def ffn(layer, x):
    """A fairseq layer's feed-forward branch, ReLU, without dropout."""
    import torch

    return layer.fc2(torch.relu(layer.fc1(x)))


def shared_data(*parts):
    """A path under ../shared/data, or skip the test (with the reason) if it is absent."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not found (real-data tests need ../shared/data beside the repo)")
    return path


def hand_set_layer_norms(model, seed=7):
    """Give every LayerNorm of ``model`` its own gamma (around 1) and beta (around 0), so that an
    equation test in which a layer used the wrong LayerNorm, or none, fails."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.copy_(1 + 0.5 * torch.randn(m.weight.shape, generator=gen))
                m.bias.copy_(0.5 * torch.randn(m.bias.shape, generator=gen))
    return model


def generated(out, kind):
    """{sentence id: text} of ``fairseq-generate``'s lines of one kind: ``H`` (the best
    hypothesis, after its score) or ``T`` (the reference as fairseq read it)."""
    lines = {}
    for line in out.splitlines():
        if line.startswith(f"{kind}-"):
            fields = line.split("\t")
            lines[int(fields[0][len(kind) + 1 :])] = fields[-1] if len(fields) > 1 else ""
    return lines


def assert_bleu_line_is_sacrebleu(out, references=None):
    """``fairseq-generate``'s own score line (``BLEU4 = S, p1/p2/p3/p4 (BP, ratio, syslen,
    reflen)``) equals sacreBLEU recomputed from its H- lines against ``references`` (a list in
    sentence-id order; default: its T- lines), whitespace tokens, no smoothing. Returns sacreBLEU's result."""
    import re

    from sacrebleu.metrics import BLEU

    match = re.search(
        r"BLEU4 = ([\d.]+), ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) \(BP=([\d.]+), ratio=([\d.]+), "
        r"syslen=(\d+), reflen=(\d+)\)",
        out,
    )
    assert match, "no BLEU4 line in fairseq-generate's output"
    score, *precisions, bp, _, syslen, reflen = (float(g) for g in match.groups())
    hypotheses = generated(out, "H")
    ids = sorted(hypotheses)
    if references is None:
        targets = generated(out, "T")
        references = [targets[i] for i in ids]
    bleu = BLEU(tokenize="none", smooth_method="none", force=True).corpus_score(
        [hypotheses[i] for i in ids], [references]
    )
    assert (bleu.sys_len, bleu.ref_len) == (syslen, reflen)
    assert bleu.precisions == pytest.approx(precisions, abs=0.051) and bleu.bp == pytest.approx(bp, abs=5e-4)
    assert bleu.score == pytest.approx(score, abs=0.0051)
    return bleu

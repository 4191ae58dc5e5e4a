"""``fairseq-train`` in the test process: fairseq-train's own ``call_main(cfg, train.main)``
(what the console script does after parsing, so patches on fairseq's entry point are
exercised), its json log records and the trainer it built."""

import contextlib
import copy
import json
import logging

from conftest import PLUGIN_DIR, TINY_MODEL, fresh_train_state


class JsonRecords(logging.Handler):
    """Collects fairseq's ``--log-format json`` records: (tag, dict); other lines as text."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.records, self.lines = [], []

    def emit(self, record):
        message = record.getMessage()
        if record.name in ("train_inner", "train", "valid") and message.startswith("{"):
            self.records.append((record.name, json.loads(message)))
        else:
            self.lines.append(message)

    def of(self, tag):
        return [r for name, r in self.records if name == tag]


@contextlib.contextmanager
def captured_logs():
    root = logging.getLogger()
    handler, level = JsonRecords(), root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


@contextlib.contextmanager
def captured_trainers(keep_model_at_start=False):
    """The fairseq ``Trainer`` objects built inside the block; with ``keep_model_at_start``
    each holds an fp32 copy of its model as built (after Admin's profiling) as ``.start_model``."""
    from fairseq.trainer import Trainer

    trainers, init = [], Trainer.__init__

    def capturing_init(self, cfg, task, model, *args, **kwargs):
        init(self, cfg, task, model, *args, **kwargs)
        if keep_model_at_start:
            self.start_model = copy.deepcopy(model).float()
        trainers.append(self)

    Trainer.__init__ = capturing_init
    try:
        yield trainers
    finally:
        Trainer.__init__ = init


def fairseq_train(data_bin, save_dir, arch, *flags, updates, keep_model_at_start=False):
    """``fairseq-train`` in this process: returns its :class:`JsonRecords`, with the
    trainer as ``.trainer``, its model (in the precision it trained in) as ``.model`` and, with
    ``keep_model_at_start``, an fp32 copy of it before the first update as ``.start_model``."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.distributed import utils as distributed_utils
    from fairseq_cli import train

    argv = [
        str(data_bin),
        *("--user-dir", str(PLUGIN_DIR), "--arch", arch, *TINY_MODEL),
        *("--optimizer", "adam", "--lr", "2e-3", "--max-tokens", "500", "--max-update", str(updates)),
        *("--dropout", "0", "--seed", "1", "--cpu", "--num-workers", "0"),
        *("--save-dir", str(save_dir), "--no-epoch-checkpoints", "--log-format", "json", "--log-interval", "1"),
        *map(str, flags),
    ]
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), argv))
    fresh_train_state()  # as a new process starts: no best loss kept from an earlier run in this process
    with captured_logs() as logs, captured_trainers(keep_model_at_start) as trainers:
        distributed_utils.call_main(cfg, train.main)
    logs.trainer = trainers[-1]
    logs.model = trainers[-1].model
    logs.start_model = getattr(trainers[-1], "start_model", None)
    return logs

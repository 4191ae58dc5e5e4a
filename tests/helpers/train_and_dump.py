"""Run fairseq-train in this process (one rank of a data-parallel job) and, at the end,
write this rank's final model parameters to ``$DUMP_DIR/rank<N>.pt``.

Used by the data-parallel tests: fairseq saves checkpoints from rank 0 only, so this is
how a test sees every rank's parameters. Given the distributed flags (a SLURM task, started
by the package's launcher), it adds nothing; otherwise (a bare ``torchrun``) it adds them
from torchrun's env (gloo on CPU, docs/fairseq_notes.md)."""

import os
import sys

import torch
from fairseq.trainer import Trainer
from fairseq_cli import train

trainers = []


def capture_trainers(init):
    def capturing_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        trainers.append(self)

    return capturing_init


if __name__ == "__main__" and "--distributed-rank" not in sys.argv:
    rank, world = os.environ["RANK"], os.environ["WORLD_SIZE"]
    sys.argv = [
        sys.argv[0],
        *sys.argv[1:],
        "--distributed-init-method",
        "env://",
        "--distributed-world-size",
        world,
        "--distributed-rank",
        rank,
        "--distributed-no-spawn",
        "--distributed-backend",
        "gloo",
        "--ddp-backend",
        "legacy_ddp",
    ]
if __name__ == "__main__":
    import fairseq_layernorm_plugins  # noqa: F401  (installs Admin's hook; we wrap on top of it)

    Trainer.__init__ = capture_trainers(Trainer.__init__)
    train.cli_main()
    model = trainers[-1].model
    model = getattr(model, "module", model)
    torch.save(
        {k: v.detach().cpu() for k, v in model.state_dict().items()},
        os.path.join(os.environ["DUMP_DIR"], f"rank{torch.distributed.get_rank()}.pt"),
    )

"""``--optimizer radam``: RAdam (Liu et al. 2020, "On the Variance of the Adaptive
Learning Rate and Beyond"), the optimizer of Admin's recipes, as ``torch.optim.RAdam``
with fairseq's flags (``--adam-betas``, ``--adam-eps``, ``--weight-decay``).

Weight decay is decoupled from the adaptive update by default, as in the RAdam
authors' code used by Admin (Transformer-Clinic) and as fairseq's ``adam`` does;
``--radam-l2-weight-decay`` switches to torch's default (L2 added to the gradient).
Works under ``--fp16`` (fairseq's FP16Optimizer keeps fp32 master weights, flat or
not); ``--memory-efficient-fp16`` is not supported by torch's RAdam.
"""
import ast
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, List

import torch
from fairseq.dataclass import FairseqDataclass
from fairseq.optim import FairseqOptimizer, register_optimizer
from omegaconf import II, OmegaConf


@dataclass
class FairseqRAdamConfig(FairseqDataclass):
    adam_betas: Any = field(default=(0.9, 0.999), metadata={"help": "betas for RAdam"})
    adam_eps: float = field(default=1e-8, metadata={"help": "epsilon for RAdam"})
    weight_decay: float = field(default=0.0, metadata={"help": "weight decay"})
    radam_l2_weight_decay: bool = field(
        default=False,
        metadata={
            "help": "add weight decay to the gradient (L2, torch.optim.RAdam's default) "
            "instead of decoupling it as the RAdam authors' code and fairseq's adam do"
        },
    )
    lr: List[float] = II("optimization.lr")


def parse_betas(betas):
    """``"(0.9, 0.98)"`` (command line) or a list/tuple/ListConfig -> tuple of floats."""
    if isinstance(betas, str):
        betas = ast.literal_eval(betas)
    elif not isinstance(betas, (tuple, list)):
        betas = OmegaConf.to_container(betas)
    return tuple(float(b) for b in betas)


@register_optimizer("radam", dataclass=FairseqRAdamConfig)
class FairseqRAdam(FairseqOptimizer):
    def __init__(self, cfg: FairseqRAdamConfig, params):
        super().__init__(cfg)
        self._optimizer = torch.optim.RAdam(params, **self.optimizer_config)

    @property
    def optimizer_config(self):
        """Arguments of ``torch.optim.RAdam``; they also override those stored in a
        checkpoint on resume (so ``--lr`` etc. can change between runs)."""
        lr = self.cfg.lr[0] if isinstance(self.cfg.lr, Collection) else self.cfg.lr
        return {
            "lr": lr,
            "betas": parse_betas(self.cfg.adam_betas),
            "eps": self.cfg.adam_eps,
            "weight_decay": self.cfg.weight_decay,
            "decoupled_weight_decay": not self.cfg.radam_l2_weight_decay,
        }

    @property
    def supports_flat_params(self):
        return True  # element-wise: fairseq's fp16 wrapper may hand it one flat tensor

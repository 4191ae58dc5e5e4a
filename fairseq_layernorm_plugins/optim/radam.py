"""``--optimizer radam``: RAdam (Liu et al. 2020, "On the Variance of the Adaptive
Learning Rate and Beyond"), the optimizer of Admin's recipes, as ``torch.optim.RAdam``
with fairseq's flags (``--adam-betas``, ``--adam-eps``, ``--weight-decay``).

Weight decay is decoupled from the adaptive update by default, as in the RAdam
authors' code used by Admin (Transformer-Clinic) and as fairseq's ``adam`` does;
``--radam-l2-weight-decay`` switches to torch's default (L2 added to the gradient).

While the variance of the adaptive learning rate is intractable (rho_t < 5: the first 5
updates for any beta2 from 0.95 to 0.999), the authors' code updates the moments but moves
the parameters only by the decoupled weight decay; the paper's Algorithm 2 and
``torch.optim.RAdam`` take an un-adapted momentum step ``lr * m_hat`` instead. The default
is the authors' code, which every Admin result was trained with;
``--radam-sgd-while-intractable`` takes the paper's step (a deviation from Admin's recipe).
The authors rectify from rho_t >= 5, torch from rho_t > 5: they differ only at exactly 5.
Works under ``--fp16`` (fairseq's FP16Optimizer keeps fp32 master weights, flat or
not); ``--memory-efficient-fp16`` is not supported by torch's RAdam. ``--radam-foreach``
takes torch's multi-tensor step on every device (torch's default takes it for CUDA tensors
only, a per-parameter loop on CPU).
"""

import ast
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

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
    radam_sgd_while_intractable: bool = field(
        default=False,
        metadata={
            "help": "while rho_t < 5 (the first updates), step by lr * m_hat as the RAdam paper's Algorithm 2 and "
            "torch.optim.RAdam do, instead of leaving the parameters to weight decay as the authors' code used by Admin"
        },
    )
    radam_foreach: bool = field(
        default=False,
        metadata={
            "help": "step every parameter of a group at once with torch's multi-tensor (foreach) RAdam, on CPU too "
            "(torch already does so for CUDA tensors): the same update within float rounding, fewer kernel calls"
        },
    )
    lr: list[float] = II("optimization.lr")


def radam_rho(step, beta2):
    """rho_t = rho_inf - 2 t beta2^t / (1 - beta2^t), rho_inf = 2 / (1 - beta2) - 1 (Liu et al. 2020, Eq. 7)."""
    return 2 / (1 - beta2) - 1 - 2 * step * beta2**step / (1 - beta2**step)


class AuthorsRAdam(torch.optim.RAdam):
    """``torch.optim.RAdam`` whose updates while rho_t < 5 change a parameter only by
    decoupled weight decay, as the authors' RAdam in Transformer-Clinic (the moments and
    the step count still advance). fairseq steps every parameter of a group together, so
    the group's next step number is read off its first parameter with a gradient."""

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        frozen = []
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            state = self.state[params[0]]
            step = int(state["step"]) + 1 if "step" in state else 1
            if radam_rho(step, group["betas"][1]) < 5:
                frozen.append((group, group["lr"], params))
                group["lr"] = 0.0  # torch then updates the moments and leaves the parameters as they are
        super().step()
        for group, lr, params in frozen:
            group["lr"] = lr
            if group["weight_decay"] and group["decoupled_weight_decay"]:
                for p in params:
                    p.mul_(1 - lr * group["weight_decay"])
        return loss


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
        optimizer = torch.optim.RAdam if cfg.radam_sgd_while_intractable else AuthorsRAdam
        self._optimizer = optimizer(params, **self.optimizer_config)

    @property
    def optimizer_config(self):
        """Arguments of ``torch.optim.RAdam`` (on resume fairseq keeps a checkpoint's own unless
        ``--optimizer-overrides`` names them; ``foreach`` always follows this run, below)."""
        lr = self.cfg.lr[0] if isinstance(self.cfg.lr, Collection) else self.cfg.lr
        return {
            "lr": lr,
            "betas": parse_betas(self.cfg.adam_betas),
            "eps": self.cfg.adam_eps,
            "weight_decay": self.cfg.weight_decay,
            "decoupled_weight_decay": not self.cfg.radam_l2_weight_decay,
            "foreach": True if self.cfg.radam_foreach else None,  # None: torch's choice (foreach on CUDA)
        }

    def load_state_dict(self, state_dict, optimizer_overrides=None):
        super().load_state_dict(state_dict, optimizer_overrides)
        for group in self.param_groups:  # how to step (same update) is this run's choice, not the checkpoint's
            group["foreach"] = self.optimizer_config["foreach"]

    @property
    def supports_flat_params(self):
        return True  # element-wise: fairseq's fp16 wrapper may hand it one flat tensor

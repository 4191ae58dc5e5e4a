"""``--optimizer adam_foreach``: fairseq's ``adam``, stepping every parameter of a group at once.

fairseq's ``adam`` (without NVIDIA apex, which this package never needs) runs its update as a
Python loop of about ten tensor operations per parameter: an 18L-18L model has several hundred
parameters, so on a CPU or in fp32 on a GPU the step is mostly interpreter and kernel-launch
overhead. :class:`ForeachAdam` computes the same update, operation for operation (decoupled
weight decay, ``eps`` added to ``sqrt(v)`` and the bias corrections folded into the step size,
as fairseq's Adam), with ``torch._foreach_*`` kernels over lists of tensors.

Under ``--fp16`` / ``--bf16`` fairseq's FP16Optimizer already hands the optimizer one flat
fp32 tensor, so the step is one tensor either way; parameters that are not fp32 dense tensors
(``--memory-efficient-fp16``) and AMSGrad take fairseq's own loop. The optimizer state has
fairseq's names and types (``step``, ``exp_avg``, ``exp_avg_sq``), and the fairseq optimizer
keeps the class name ``FairseqAdam``, which fairseq's checkpoint check compares: a run can
resume with ``--optimizer adam`` from an ``adam_foreach`` checkpoint and the other way round.
"""

import math
from collections import defaultdict

import torch
from fairseq.optim import adam as fairseq_adam
from fairseq.optim import register_optimizer


class ForeachAdam(fairseq_adam.Adam):
    """fairseq's ``Adam`` (same arguments and state) with a multi-tensor step."""

    @torch.no_grad()
    def step(self, closure=None):
        groups = [(group, [p for p in group["params"] if p.grad is not None]) for group in self.param_groups]
        if any(
            g.get("amsgrad", False) or any(p.dtype != torch.float32 or p.grad.is_sparse for p in ps) for g, ps in groups
        ):
            return super().step(closure)  # fairseq's own loop
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group, params in groups:
            # parameters with the same step count share the bias corrections (fairseq steps all
            # of a group together; one that had no gradient in some update lags behind)
            by_step = defaultdict(list)
            for p in params:
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                by_step[state["step"]].append(p)
            beta1, beta2 = group["betas"]
            for step, ps in by_step.items():
                grads = [p.grad for p in ps]
                exp_avgs = [self.state[p]["exp_avg"] for p in ps]
                exp_avg_sqs = [self.state[p]["exp_avg_sq"] for p in ps]
                # m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2  (Kingma & Ba 2015, Alg. 1)
                torch._foreach_mul_(exp_avgs, beta1)
                torch._foreach_add_(exp_avgs, grads, alpha=1 - beta1)
                torch._foreach_mul_(exp_avg_sqs, beta2)
                torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
                denom = torch._foreach_sqrt(exp_avg_sqs)
                torch._foreach_add_(denom, group["eps"])
                # the bias corrections in the step size (Kingma & Ba 2015, end of Sec. 2), as fairseq's Adam
                step_size = group["lr"] * math.sqrt(1 - beta2**step) / (1 - beta1**step)
                if group["weight_decay"] != 0:  # decoupled (Loshchilov & Hutter 2019), before the update, as fairseq
                    torch._foreach_add_(ps, ps, alpha=-group["weight_decay"] * group["lr"])
                torch._foreach_addcdiv_(ps, exp_avgs, denom, value=-step_size)
        return loss


@register_optimizer("adam_foreach", dataclass=fairseq_adam.FairseqAdamConfig)
class FairseqAdam(fairseq_adam.FairseqAdam):
    """fairseq's ``adam`` (same flags) on :class:`ForeachAdam`; named as fairseq's class, which
    fairseq's checkpoint check compares, so runs move between the two with their state."""

    def __init__(self, cfg, params):
        super().__init__(cfg, params)
        if getattr(cfg, "tpu", False) or getattr(cfg, "fp16_adam_stats", False):
            raise ValueError("--optimizer adam_foreach: use --optimizer adam for --tpu or --fp16-adam-stats")
        self._optimizer = ForeachAdam(params, **self.optimizer_config)

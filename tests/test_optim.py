"""Optimizers and LR schedules, built from command-line flags through fairseq's registries."""

import copy
import io
import math

import pytest
import torch
from conftest import PLUGIN_DIR
from fairseq import optim, options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.optim.fp16_optimizer import FP16Optimizer
from fairseq.optim.lr_scheduler import build_lr_scheduler


def config(data_bin, *flags):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [str(data_bin), "--arch", "transformer_preln", "--cpu", *flags])
    return convert_namespace_to_omegaconf(args)


def reference_radam(p, grads, lr, beta1, beta2, eps, weight_decay, decoupled, sgd_while_intractable=True):
    """RAdam, Liu et al. 2020 Algorithm 2, written out independently of torch.optim.

    Decoupled weight decay as in the authors' code: p <- p (1 - lr wd) before the step.
    ``sgd_while_intractable=False``: the authors' Transformer-Clinic code, which takes no
    gradient step while rho_t < 5 (the moments still advance).
    """
    m, v = torch.zeros_like(p), torch.zeros_like(p)
    rho_inf = 2 / (1 - beta2) - 1
    for t, g in enumerate(grads, start=1):
        if decoupled:
            p = p * (1 - lr * weight_decay)
        else:
            g = g + weight_decay * p
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        m_hat = m / (1 - beta1**t)
        rho_t = rho_inf - 2 * t * beta2**t / (1 - beta2**t)
        if rho_t > 5:
            r = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
            p = p - lr * r * m_hat * math.sqrt(1 - beta2**t) / (v.sqrt() + eps)
        elif sgd_while_intractable:
            p = p - lr * m_hat
    return p


@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("sgd", [False, True])
@pytest.mark.parametrize("l2", [False, True])
def test_radam_matches_the_paper_algorithm(tiny_data_bin, l2, sgd, foreach):
    """Default: the authors' code (no gradient step while rho_t < 5, t <= 5 here);
    --radam-sgd-while-intractable: Algorithm 2's momentum step there; either with --radam-foreach."""
    flags = [
        "--optimizer",
        "radam",
        "--lr",
        "0.01",
        "--adam-betas",
        "(0.8, 0.95)",
        "--adam-eps",
        "1e-6",
        "--weight-decay",
        "0.1",
    ]
    cfg = config(
        tiny_data_bin,
        *flags,
        *(["--radam-l2-weight-decay"] if l2 else []),
        *(["--radam-sgd-while-intractable"] if sgd else []),
        *(["--radam-foreach"] if foreach else []),
    )
    torch.manual_seed(0)
    p0 = torch.randn(7, dtype=torch.float64)
    grads = [torch.randn(7, dtype=torch.float64) for _ in range(25)]  # beta2 0.95: rho_t > 5 from t = 6
    param = torch.nn.Parameter(p0.clone())
    opt = optim.build_optimizer(cfg.optimizer, [param])
    assert type(opt).__name__ == "FairseqRAdam" and opt.optimizer.defaults["foreach"] is (True if foreach else None)
    for g in grads:
        param.grad = g.clone()
        opt.step()
    expected = reference_radam(p0, grads, 0.01, 0.8, 0.95, 1e-6, 0.1, decoupled=not l2, sgd_while_intractable=sgd)
    torch.testing.assert_close(param.data, expected, rtol=1e-10, atol=1e-12)
    other = reference_radam(p0, grads, 0.01, 0.8, 0.95, 1e-6, 0.1, decoupled=not l2, sgd_while_intractable=not sgd)
    assert (param.data - other).abs().max() > 1e-4  # the two rules differ, and the test tells them apart


def step_alike(pairs, grads, second_misses=False):
    """One step of each (parameters, optimizer) pair on copies of the same gradients; the
    second parameter gets none when ``second_misses`` (its step count then lags)."""
    for params, opt in pairs:
        for i, (p, g) in enumerate(zip(params, grads)):
            p.grad = None if (i == 1 and second_misses) else g.clone()
        opt.step()


def test_radam_foreach_is_the_loop_over_many_parameters(tiny_data_bin):
    """--radam-foreach over several fp32 parameters, one of which misses its gradient in two
    updates: the loop's parameters and state within float rounding, and either loads the
    other's state (a run can resume across the switch)."""
    flags = ["--optimizer", "radam", "--lr", "0.01", "--adam-betas", "(0.9, 0.98)", "--weight-decay", "0.1"]
    torch.manual_seed(0)
    shapes = [(8, 4), (4,), (3, 5, 2)]
    loop = [torch.nn.Parameter(torch.randn(s)) for s in shapes]
    multi = [torch.nn.Parameter(p.detach().clone()) for p in loop]
    opt_loop = optim.build_optimizer(config(tiny_data_bin, *flags).optimizer, loop)
    opt_multi = optim.build_optimizer(config(tiny_data_bin, *flags, "--radam-foreach").optimizer, multi)
    for update in range(12):  # beta2 0.98: rectified from t = 6
        step_alike(((loop, opt_loop), (multi, opt_multi)), [torch.randn(s) for s in shapes], update in (6, 7))
    for p, q in zip(loop, multi):
        torch.testing.assert_close(q, p, rtol=1e-6, atol=1e-7)
    assert int(opt_multi.optimizer.state[multi[1]]["step"]) == int(opt_loop.optimizer.state[loop[1]]["step"]) == 10
    # each resumes from the other's state (copied, as a checkpoint is: state_dict() holds the live tensors)
    multi_state, loop_state = copy.deepcopy(opt_multi.state_dict()), copy.deepcopy(opt_loop.state_dict())
    opt_loop.load_state_dict(multi_state)
    opt_multi.load_state_dict(loop_state)
    assert opt_loop.param_groups[0]["foreach"] is None and opt_multi.param_groups[0]["foreach"] is True
    step_alike(((loop, opt_loop), (multi, opt_multi)), [torch.randn(s) for s in shapes])
    for p, q in zip(loop, multi):
        torch.testing.assert_close(q, p, rtol=1e-6, atol=1e-7)


def test_radam_under_fairseqs_fp16_wrapper(tiny_data_bin):
    """--fp16: fp32 master weights get RAdam's update, the fp16 model gets their copy. 12 updates
    with beta2 0.98 (rectified from t = 6): every weight moves by more than 10x the tolerance,
    so a wrapper that does not step, or does not copy back, fails."""
    cfg = config(
        tiny_data_bin,
        "--optimizer",
        "radam",
        "--lr",
        "0.05",
        "--adam-betas",
        "(0.9, 0.98)",
        "--fp16",
        "--fp16-no-flatten-grads",
        "--fp16-init-scale",
        "128",
    )
    torch.manual_seed(0)
    half = torch.nn.Linear(4, 3).half()
    full = torch.nn.Linear(4, 3).double()
    full.load_state_dict(half.state_dict())
    initial = [p.detach().double().clone() for p in half.parameters()]
    fp16_opt = FP16Optimizer.build_optimizer(cfg, list(half.parameters()))
    ref_opt = optim.build_optimizer(cfg.optimizer, list(full.parameters()))
    for _ in range(12):
        x = torch.randn(5, 4)
        fp16_opt.zero_grad()
        fp16_opt.backward(half(x.half()).float().pow(2).sum())  # scaled by 128 inside
        fp16_opt.step()
        ref_opt.zero_grad()
        full(x.double()).pow(2).sum().backward()
        ref_opt.step()
    atol = 3e-4  # fp16 rounding of weights below 1 is at most 2.4e-4
    for p, q, p0 in zip(half.parameters(), full.parameters(), initial):
        assert p.dtype == torch.float16
        assert (q - p0).abs().min() > 10 * atol  # RAdam really stepped, every weight
        torch.testing.assert_close(p.double(), q, rtol=0, atol=atol)
    assert fp16_opt.scaler.loss_scale == 128


def test_radam_state_survives_a_checkpoint(tiny_data_bin):
    """An optimizer restored from a checkpoint after 8 updates takes the uninterrupted run's
    next 4 updates bit for bit. The defaults (beta2 0.999) rectify from t = 6 (rho_6 = 5.99),
    so updates 6-12 move the parameters by amounts that depend on the moments and the step
    count: a restore that lost them (t restarting at 1: no step while rho_t < 5) shows."""
    cfg = config(tiny_data_bin, "--optimizer", "radam", "--lr", "0.1")
    torch.manual_seed(0)
    grads = [torch.randn(3) for _ in range(12)]
    a, b, fresh = (torch.nn.Parameter(torch.ones(3)) for _ in range(3))
    opt_a, opt_b, opt_fresh = (optim.build_optimizer(cfg.optimizer, [p]) for p in (a, b, fresh))
    for g in grads[:8]:
        a.grad = g.clone()
        opt_a.step()
    b.data.copy_(a.data)
    fresh.data.copy_(a.data)
    saved = io.BytesIO()
    torch.save(opt_a.state_dict(), saved)  # what a checkpoint does
    opt_b.load_state_dict(torch.load(io.BytesIO(saved.getvalue()), weights_only=False))
    for g in grads[8:]:
        for p, opt in ((a, opt_a), (b, opt_b), (fresh, opt_fresh)):
            p.grad = g.clone()
            opt.step()
    torch.testing.assert_close(b.data, a.data, rtol=0, atol=0)
    expected = reference_radam(torch.ones(3, dtype=torch.float64), [g.double() for g in grads], 0.1, 0.9, 0.999,
                               1e-8, 0.0, decoupled=True, sgd_while_intractable=False)  # fmt: skip
    torch.testing.assert_close(a.data.double(), expected, rtol=1e-5, atol=1e-6)
    assert (a.data - 1).abs().min() > 1e-3 and (a.data - fresh.data).abs().min() > 1e-3  # it moved; the state mattered


def schedule(data_bin, *flags):
    cfg = config(data_bin, "--optimizer", "adam", *flags)
    opt = optim.build_optimizer(cfg.optimizer, [torch.nn.Parameter(torch.zeros(1))])
    return build_lr_scheduler(cfg.lr_scheduler, opt), opt


def run_epochs(sched, epochs, updates_per_epoch, start_update=0):
    """Call the scheduler the way fairseq's trainer does; return {(epoch, update): lr}."""
    lrs, t = {}, start_update
    for epoch in epochs:
        sched.step_begin_epoch(epoch)
        for _ in range(updates_per_epoch):
            t += 1
            lrs[epoch, t] = sched.step_update(t)
        sched.step(epoch, val_loss=1.0)
    return lrs


def test_inverse_sqrt_nowarmup_values(tiny_data_bin):
    sched, opt = schedule(
        tiny_data_bin, "--lr", "5e-4", "--lr-scheduler", "inverse_sqrt_nowarmup", "--decay-period", "4000"
    )
    assert opt.get_lr() == pytest.approx(5e-4)  # starts at the peak: no warm-up
    assert sched.step_update(4000) == pytest.approx(5e-4 / math.sqrt(2))
    assert sched.step_update(12000) == pytest.approx(5e-4 / 2)
    assert sched.step_update(396000) == pytest.approx(5e-4 / 10)
    assert opt.get_lr() == pytest.approx(5e-5)


def test_epoch_decay_iwslt_recipe(tiny_data_bin):
    """Pre-LN IWSLT14: 5e-4 constant, x0.1 from epoch 8 on."""
    sched, opt = schedule(
        tiny_data_bin,
        "--lr",
        "5e-4",
        "--lr-scheduler",
        "epoch_decay_nowarmup",
        "--decay-epoch",
        "8",
        "--decay-factor",
        "0.1",
    )
    assert opt.get_lr() == pytest.approx(5e-4)
    lrs = run_epochs(sched, range(1, 11), updates_per_epoch=10)
    for (epoch, _), lr in lrs.items():
        assert lr == pytest.approx(5e-4 if epoch < 8 else 5e-5), epoch


def test_epoch_decay_then_inverse_sqrt(tiny_data_bin):
    """Pre-LN WMT14: decay at epoch k, then lr * factor * sqrt(t_k / t)."""
    flags = [
        "--lr",
        "1e-3",
        "--lr-scheduler",
        "epoch_decay_nowarmup",
        "--decay-epoch",
        "3",
        "--decay-factor",
        "0.5",
        "--inverse-sqrt-after-decay",
    ]
    sched, _ = schedule(tiny_data_bin, *flags)
    lrs = run_epochs(sched, range(1, 9), updates_per_epoch=10)  # epoch 3 begins after t_k = 20
    assert lrs[2, 20] == pytest.approx(1e-3)
    assert lrs[3, 20 + 1] == pytest.approx(5e-4 * math.sqrt(20 / 21))
    assert lrs[5, 45] == pytest.approx(5e-4 * math.sqrt(20 / 45))
    assert lrs[8, 80] == pytest.approx(5e-4 / 2)

    # resume from a checkpoint written after epoch 5, as fairseq's trainer does
    resumed, _ = schedule(tiny_data_bin, *flags)
    resumed.load_state_dict(sched_state_after(tiny_data_bin, flags, epochs=5, updates_per_epoch=10))
    resumed.step(5)
    resumed.step_update(50)
    lrs_resumed = run_epochs(resumed, range(6, 9), updates_per_epoch=10, start_update=50)
    for key, lr in lrs_resumed.items():
        assert lr == pytest.approx(lrs[key])


def sched_state_after(data_bin, flags, epochs, updates_per_epoch):
    sched, _ = schedule(data_bin, *flags)
    run_epochs(sched, range(1, epochs + 1), updates_per_epoch)
    return sched.state_dict()


def test_epoch_decay_resume_before_decay_epoch(tiny_data_bin):
    """A checkpoint from before the decay epoch: t_k is found after the resume."""
    flags = [
        "--lr",
        "1e-3",
        "--lr-scheduler",
        "epoch_decay_nowarmup",
        "--decay-epoch",
        "3",
        "--decay-factor",
        "1",
        "--inverse-sqrt-after-decay",
    ]
    resumed, _ = schedule(tiny_data_bin, *flags)
    resumed.load_state_dict(sched_state_after(tiny_data_bin, flags, epochs=2, updates_per_epoch=10))
    resumed.step(2)
    resumed.step_update(20)
    lrs = run_epochs(resumed, range(3, 5), updates_per_epoch=10, start_update=20)
    assert lrs[4, 40] == pytest.approx(1e-3 * math.sqrt(20 / 40))


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--lr-scheduler", "inverse_sqrt_nowarmup", "--decay-period", "0"], "decay-period"),
        (["--lr-scheduler", "epoch_decay_nowarmup", "--decay-epoch", "0"], "1-based"),
        (["--lr-scheduler", "epoch_decay_nowarmup", "--lr", "1e-3,5e-4"], "single --lr"),
    ],
)
def test_schedules_reject_bad_flags(tiny_data_bin, flags, message):
    with pytest.raises(ValueError, match=message):
        schedule(tiny_data_bin, *flags)


def adam_pair(data_bin, *flags):
    """Two sets of equal parameters, one under --optimizer adam, one under adam_foreach."""
    torch.manual_seed(0)
    stock = [torch.nn.Parameter(torch.randn(shape)) for shape in ((4, 3), (3,), (2, 2, 2))]
    foreach = [torch.nn.Parameter(p.detach().clone()) for p in stock]
    optimizers = [
        optim.build_optimizer(config(data_bin, "--optimizer", name, *flags).optimizer, params)
        for name, params in (("adam", stock), ("adam_foreach", foreach))
    ]
    return (stock, foreach), optimizers


def test_adam_foreach_is_fairseqs_adam_step_for_step(tiny_data_bin):
    """The same parameters and state as fairseq's per-parameter loop, bit for bit, with weight
    decay and a parameter that misses its gradient in some updates (its step count lags)."""
    (stock, foreach), (opt_stock, opt_foreach) = adam_pair(
        tiny_data_bin, "--lr", "0.01", "--adam-betas", "(0.9, 0.98)", "--weight-decay", "0.1"
    )
    assert type(opt_foreach).__name__ == type(opt_stock).__name__ == "FairseqAdam"  # fairseq's checkpoint check
    for update in range(6):
        step_alike(((stock, opt_stock), (foreach, opt_foreach)), [torch.randn_like(p) for p in stock], update in (2, 3))
    for p, q in zip(stock, foreach):
        assert torch.equal(p, q)
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(opt_stock.optimizer.state[p][key], opt_foreach.optimizer.state[q][key])
        assert opt_stock.optimizer.state[p]["step"] == opt_foreach.optimizer.state[q]["step"]
    assert opt_foreach.optimizer.state[foreach[1]]["step"] == 4


def test_adam_foreach_takes_fairseqs_loop_for_half_parameters(tiny_data_bin):
    """--memory-efficient-fp16 hands the optimizer fp16 parameters: fairseq's own step runs."""
    (stock, foreach), (opt_stock, opt_foreach) = adam_pair(tiny_data_bin, "--lr", "0.01")
    for params in (stock, foreach):
        for p in params:
            p.data = p.data.half()
    for params, opt in ((stock, opt_stock), (foreach, opt_foreach)):
        for p in params:
            p.grad = torch.ones_like(p)
        opt.step()
    assert all(torch.equal(p, q) and q.dtype == torch.float16 for p, q in zip(stock, foreach))


def test_adam_foreach_resumes_an_adam_run_and_back(tiny_data_bin, tmp_path):
    """fairseq-train: 4 updates with adam_foreach then 4 with adam (from its checkpoint) log the
    losses of 8 updates with adam alone."""
    from conftest import TINY_MODEL, json_records, run_cli

    def train(save, optimizer, updates, *extra):
        log = run_cli(
            "fairseq-train", tiny_data_bin, "--user-dir", PLUGIN_DIR, "--arch", "transformer_preln", *TINY_MODEL,
            "--optimizer", optimizer, "--lr", "0.005", "--max-tokens", "200", "--max-update", updates,
            "--save-dir", save, "--no-epoch-checkpoints", "--log-format", "json",
            "--log-interval", "1", "--seed", "3", "--cpu", "--no-progress-bar", "--dropout", "0", *extra,
        )  # fmt: skip
        return [r["loss"] for r in json_records(log, "train_inner")]

    reference = train(tmp_path / "a", "adam", 8)
    first = train(tmp_path / "b", "adam_foreach", 4)
    second = train(tmp_path / "b", "adam", 8)  # resumes from checkpoint_last.pt, at update 4
    assert first + second == reference and len(reference) == 8

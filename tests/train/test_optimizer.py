"""The executor's AdamW: the fused kernel where the parameters are on CUDA (as megatron takes a fused Adam on a
GPU), the single-tensor implementation elsewhere; both give the same step, and a torch_dist checkpoint
written and resumed with the fused kernel reproduces the uninterrupted curve (its `step` state must live on
the parameters' device). torch has a fused AdamW on CPU too, so both are proved here on any machine."""

from __future__ import annotations

import pytest
import torch

from packcfg.train import loop, optim
from packcfg.train.data import PackedParquet, write_packed_parquet
from packcfg.train.loop import TrainOptions, train
from packcfg.train.settings import OptimSettings

from .cases import greedy_packs, synthetic_samples, tiny_config
from .devices import ON_CUDA

STEPS, SAVE_AT = 5, 2


def _settings() -> OptimSettings:
    return OptimSettings.from_config({"optimizer": {"lr": 1e-2, "weight_decay": 0.1}}, 10)


def _params(device: str = "cpu") -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(0)
    shapes = [(64, 32), (32,), (16, 16, 2)]
    return [torch.nn.Parameter(torch.randn(s, generator=g).to(device)) for s in shapes]


def _two_steps(params: list[torch.nn.Parameter], fused: bool | None) -> list[torch.Tensor]:
    opt = optim.build_optimizer(torch.nn.Module(), _settings(), params, fused=fused)
    g = torch.Generator().manual_seed(1)
    for _ in range(2):
        for p in params:
            p.grad = torch.randn(p.shape, generator=g).to(p.device)
        opt.step()
    return [p.detach().cpu() for p in params]


def test_fused_only_for_parameters_on_cuda():
    opt = optim.build_optimizer(torch.nn.Module(), _settings(), _params())
    assert not opt.param_groups[0]["fused"] and opt.param_groups[0]["foreach"] is False
    if ON_CUDA:
        opt = optim.build_optimizer(torch.nn.Module(), _settings(), _params("cuda"))
        assert opt.param_groups[0]["fused"]


def test_fused_step_equals_the_single_tensor_step():
    fused, single = _two_steps(_params(), fused=True), _two_steps(_params(), fused=False)
    moved = [p.detach() for p in _params()]
    for a, b, start in zip(fused, single, moved, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
        assert not torch.equal(a, start)  # the step moved the weights: the comparison is not vacuous


def test_adam_step_state_lives_where_the_kernel_reads_it():
    params = _params()
    fused = optim.build_optimizer(torch.nn.Module(), _settings(), params, fused=True)
    single = optim.build_optimizer(torch.nn.Module(), _settings(), params, fused=False)
    for opt in (fused, single):
        step = optim.adam_step(opt, params[0], 3)
        assert step.dtype == torch.float32 and float(step) == 3.0 and step.device.type == "cpu"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "train.parquet"
    return write_packed_parquet(path, greedy_packs(synthetic_samples(40, seed=5), 64))


def _losses(tmp, data, iters: int, resume: bool = False) -> list[float]:
    config = tiny_config(
        train={"train_iters": iters, "global_batch_size": 4},
        scheduler={"lr_warmup_iters": 1, "lr_decay_iters": STEPS},
        checkpoint={"save": str(tmp / "ckpt"), "save_interval": SAVE_AT, "ckpt_format": "torch_dist"},
    )
    options = TrainOptions(units=PackedParquet(data), output_dir=tmp / "out", progress=False, resume=resume)
    return train(config, options).losses


def test_fused_adamw_resumes_a_torch_dist_checkpoint(tmp_path, data, monkeypatch):
    built: list[torch.optim.Optimizer] = []

    def fused_adamw(*args, **kwargs):
        built.append(optim.build_optimizer(*args, **kwargs, fused=True))
        return built[-1]

    monkeypatch.setattr(loop, "build_optimizer", fused_adamw)
    straight = _losses(tmp_path / "straight", data, STEPS)
    _losses(tmp_path / "resumed", data, SAVE_AT)
    resumed = _losses(tmp_path / "resumed", data, STEPS, resume=True)
    assert len(resumed) == STEPS - SAVE_AT
    assert len(built) == 3 and all(opt.param_groups[0]["fused"] for opt in built)
    assert (tmp_path / "resumed" / "ckpt" / f"iter_{SAVE_AT:07d}" / "metadata.json").is_file()  # torch_dist
    assert max(abs(a - b) for a, b in zip(resumed, straight[SAVE_AT:], strict=True)) < 1e-5

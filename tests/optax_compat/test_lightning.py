"""A real client: PyTorch Lightning's Trainer with our optimizers and a torch scheduler.

A tiny regression model trains on the CPU for two short epochs; the loss must fall, and a run
resumed from the checkpoint written after the first epoch must end on exactly the parameters of
the uninterrupted run (optimizer state, scheduler and step counts restored by Lightning).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator

import lightning
import pytest
import torch
from torch.nn.functional import mse_loss

import optax_compat as optax
import torchopt_fn

STEPS_PER_EPOCH = 12


def make_optax(params):
    tx = optax.chain(optax.clip_by_global_norm(1.0),
                     optax.inject_hyperparams(optax.adamw)(learning_rate=2e-2, weight_decay=1e-3))
    return optax.TorchOptimizer(params, tx)


def make_fused(params):
    tx = optax.chain(optax.clip_by_global_norm(1.0),
                     optax.inject_hyperparams(optax.adamw)(learning_rate=2e-2, weight_decay=1e-3))
    return optax.TorchOptimizer(params, tx, fused=True, fused_backend="aot_eager")


def make_torchopt(params):
    return torchopt_fn.AdamW(params, lr=2e-2, weight_decay=1e-3)


class Regression(lightning.LightningModule):
    """A 4 -> 16 -> 1 MLP fitting a fixed linear target."""

    def __init__(self, make_optimizer):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(),
                                       torch.nn.Linear(16, 1))
        self.make_optimizer = make_optimizer
        self.losses: list[float] = []

    def training_step(self, batch, batch_index):
        x, y = batch
        loss = mse_loss(self.net(x), y)
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        optimizer = self.make_optimizer(self.parameters())
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=5, gamma=0.7)
        return {"optimizer": optimizer,
                "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def data() -> torch.utils.data.DataLoader:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(STEPS_PER_EPOCH * 8, 4, generator=generator)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)


@contextlib.contextmanager
def determinism_given_back() -> Iterator[None]:
    """``Trainer(deterministic=True)`` switches the whole process to deterministic algorithms
    (torch's flag, Inductor's ``deterministic`` config, ``CUBLAS_WORKSPACE_CONFIG``) and leaves
    it so; this puts all three back as they were."""
    from torch._inductor import config

    algorithms = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    workspace = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    with (config.patch(deterministic=config.deterministic) if hasattr(config, "deterministic")
          else contextlib.nullcontext()):
        try:
            yield
        finally:
            torch.use_deterministic_algorithms(algorithms, warn_only=warn_only)
            if workspace is None:
                os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
            else:
                os.environ["CUBLAS_WORKSPACE_CONFIG"] = workspace


def fit(module, root, epochs, checkpoint=None, every_epoch=False):
    callbacks = ([lightning.pytorch.callbacks.ModelCheckpoint(
        dirpath=root, every_n_epochs=1, save_top_k=-1, filename="{epoch}")]
        if every_epoch else [])
    with warnings.catch_warnings(), determinism_given_back():
        trainer = lightning.Trainer(
            max_epochs=epochs, accelerator="cpu", devices=1, logger=False,
            enable_progress_bar=False, enable_model_summary=False,
            enable_checkpointing=every_epoch, callbacks=callbacks, default_root_dir=root,
            deterministic=True)
        warnings.filterwarnings("ignore", message=".*(num_workers|does not have many workers).*")
        trainer.fit(module, data(), ckpt_path=checkpoint)
    return trainer


@pytest.mark.parametrize("make_optimizer", [make_optax, make_fused, make_torchopt],
                         ids=["TorchOptimizer", "TorchOptimizer_fused", "torchopt_fn.AdamW"])
def test_trainer_loss_falls_and_checkpoint_resumes_to_the_same_numbers(make_optimizer, tmp_path):
    uninterrupted = Regression(make_optimizer)
    trainer = fit(uninterrupted, tmp_path, epochs=2, every_epoch=True)
    assert trainer.global_step == 2 * STEPS_PER_EPOCH
    losses = uninterrupted.losses
    assert sum(losses[-4:]) < 0.5 * sum(losses[:4])
    optimizer = trainer.optimizers[0]
    assert isinstance(optimizer, torch.optim.Optimizer)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(2e-2 * 0.7 ** 4)

    resumed = Regression(make_optimizer)
    resumed_trainer = fit(resumed, tmp_path / "resumed", epochs=2,
                          checkpoint=tmp_path / "epoch=0.ckpt")
    assert resumed_trainer.global_step == 2 * STEPS_PER_EPOCH
    assert resumed.losses == losses[STEPS_PER_EPOCH:]
    for p, q in zip(uninterrupted.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(p, q)

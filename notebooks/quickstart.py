"""Quick start: train a small MLP on built-in synthetic data with an Optax-style optimizer.

The optimizer is ``chain(clip_by_global_norm, adamw with a warmup-cosine schedule)``, written
exactly as with Optax, with ``import optax_compat as optax``. Run: ``python notebooks/quickstart.py``.
"""

import torch
from torch.func import functional_call, grad

import optax_compat as optax


def make_data(n: int = 512, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A noisy 2-D regression task: y = sin(3 x0) + x1^2."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 2, generator=generator) * 2 - 1
    y = torch.sin(3 * x[:, :1]) + x[:, 1:] ** 2 + 0.05 * torch.randn(n, 1, generator=generator)
    return x, y


def main(steps: int = 300) -> list[float]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    params = {name: p.detach() for name, p in model.named_parameters()}
    x, y = make_data()

    def loss_fn(params: dict) -> torch.Tensor:
        return torch.mean((functional_call(model, params, (x,)) - y) ** 2)

    schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=1e-2, warmup_steps=30, decay_steps=steps, end_value=1e-4)
    optimizer = optax.chain(optax.clip_by_global_norm(1.0),
                            optax.adamw(learning_rate=schedule, weight_decay=1e-4))
    opt_state = optimizer.init(params)
    loss_grad = grad(loss_fn)

    losses = []
    for step in range(steps):
        grads = loss_grad(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        if step % 50 == 0 or step == steps - 1:
            losses.append(loss_fn(params).item())
            print(f"step {step:4d}  loss {losses[-1]:.5f}")
    assert losses[-1] < 0.25 * losses[0], "the loss should fall"
    return losses


if __name__ == "__main__":
    main()

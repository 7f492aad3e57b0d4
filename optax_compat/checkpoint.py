"""Saving and loading optimizer states with ``torch.save`` / ``torch.load(weights_only=True)``.

A PyTorch extension (Optax checkpoints its states with Orbax): ``optax_compat`` states are trees
of NamedTuples, which ``weights_only`` unpickling refuses. :func:`state_to_dict` and
:func:`state_from_dict` convert them to plain dicts and back, checking the saved state against a
state of the running optimizer; :func:`save` and :func:`load` do the same through a file.

.. code-block:: python

    optax_compat.checkpoint.save(opt_state, "opt.pt")
    opt_state = optax_compat.checkpoint.load("opt.pt", tx.init(params))
"""

from optax_compat._runtime.checkpoint import (
    STATE_TYPE_KEY,
    load,
    save,
    state_from_dict,
    state_to_dict,
)

__all__ = ["STATE_TYPE_KEY", "load", "save", "state_from_dict", "state_to_dict"]

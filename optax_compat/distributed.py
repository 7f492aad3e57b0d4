"""Helpers for training with ``torch.distributed`` (FSDP2, DDP, ZeRO, DCP).

A PyTorch extension of Optax's API. Every transformation already runs on FSDP2's ``DTensor``
parameters; what is added here is the naming of state leaves that
``torch.distributed.checkpoint`` needs to save and reshard a state:

.. code-block:: python

    import torch.distributed.checkpoint as dcp
    from optax_compat.distributed import state_from_flat_dict, state_to_flat_dict

    dcp.save({"model": model.state_dict(), "opt": state_to_flat_dict(state)},
             checkpoint_id=path)

    state = tx.init(dict(model.named_parameters()))  # the layout to load into
    to_load = {"model": model.state_dict(), "opt": state_to_flat_dict(state)}
    dcp.load(to_load, checkpoint_id=path)  # fills the tensors in place, resharding
    state = state_from_flat_dict(state, to_load["opt"])
"""

from optax_compat._runtime.flat_state import state_from_flat_dict, state_to_flat_dict

__all__ = ["state_from_flat_dict", "state_to_flat_dict"]

import torch
import torch.nn as nn


class Model(nn.Module):
    """Applies Softmax over dim 1 of a (batch_size, num_features) tensor."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Returns softmax(x, dim=1), same shape as x."""
        return torch.softmax(x, dim=1)


batch_size = 4096
dim = 393216


def get_inputs():
    x = torch.rand(batch_size, dim)
    return [x]


def get_init_inputs():
    return []  # No special initialization inputs needed

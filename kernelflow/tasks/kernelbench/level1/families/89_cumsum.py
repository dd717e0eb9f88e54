import torch
import torch.nn as nn


class Model(nn.Module):
    """Inclusive cumulative sum along one dimension."""

    def __init__(self, dim):
        """dim: the dimension to scan along."""
        super(Model, self).__init__()
        self.dim = dim

    def forward(self, x):
        """Returns out[..., i] = sum of x[..., j] for j <= i along self.dim, same shape as x."""
        return torch.cumsum(x, dim=self.dim)


batch_size = 32768
input_shape = (32768,)
dim = 1


def get_inputs():
    return [torch.rand(batch_size, *input_shape)]


def get_init_inputs():
    return [dim]

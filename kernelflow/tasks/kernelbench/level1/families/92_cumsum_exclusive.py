import torch
import torch.nn as nn


class Model(nn.Module):
    """Exclusive cumulative sum along one dimension: each element is left out of its own sum."""

    def __init__(self, dim):
        """dim: the dimension to scan along."""
        super(Model, self).__init__()
        self.dim = dim

    def forward(self, x):
        """Returns out[..., i] = sum of x[..., j] for j < i along self.dim (out[..., 0] = 0), same shape as x."""
        zeros = torch.zeros_like(x.select(self.dim, 0).unsqueeze(self.dim))
        shifted = torch.cat((zeros, x), dim=self.dim).narrow(self.dim, 0, x.size(self.dim))
        return torch.cumsum(shifted, dim=self.dim)


batch_size = 32768
input_shape = (32768,)
dim = 1


def get_inputs():
    return [torch.rand(batch_size, *input_shape)]


def get_init_inputs():
    return [dim]

import torch
import torch.nn as nn


class Model(nn.Module):
    """Group normalisation of a (batch, features, dim1, dim2) tensor (affine weight 1, bias 0 at init)."""

    def __init__(self, num_features: int, num_groups: int):
        """num_features: size of dim 1; num_groups: how many equal groups of features are normalised together."""
        super(Model, self).__init__()
        self.gn = nn.GroupNorm(num_groups=num_groups, num_channels=num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Returns GroupNorm(x): per (batch, group), (x - mean) / sqrt(var + 1e-5), then weight and bias per feature."""
        return self.gn(x)


batch_size = 112
features = 64
num_groups = 8
dim1 = 512
dim2 = 512


def get_inputs():
    x = torch.rand(batch_size, features, dim1, dim2)
    return [x]


def get_init_inputs():
    return [features, num_groups]

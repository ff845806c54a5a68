"""Devices (foundation/devices.py): the ``device`` option resolved or refused, and a model's device."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from foundation.devices import model_device, resolve_device
from foundation.errors import InputError


def test_names_resolve_to_their_device():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if torch.cuda.is_available():
        assert resolve_device("cuda:0") == torch.device("cuda", 0)


@pytest.mark.parametrize("name", ["gpu", "mps", "cpu:x", ""])
def test_other_names_are_refused(name):
    with pytest.raises(InputError, match=f"option device={name!r}; expected 'auto', 'cpu'"):
        resolve_device(name)


def test_a_cuda_device_this_machine_lacks_is_refused():
    index = torch.cuda.device_count()  # one past the last
    with pytest.raises(InputError, match=f"option device='cuda:{index}': no such CUDA device"):
        resolve_device(f"cuda:{index}")


def test_a_models_device_is_its_parameters_or_the_inputs():
    x = torch.zeros(2, 3, device="meta")
    assert model_device(nn.Linear(3, 2), x) == torch.device("cpu")
    assert model_device(nn.ReLU(), x) == torch.device("meta")

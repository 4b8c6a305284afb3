"""exporter._dtypes: the one torch <-> numpy conversion."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

from exporter import _dtypes


def test_to_numpy_keeps_the_types_numpy_lacks_and_takes_plain_values():
    bf16 = _dtypes.to_numpy(torch.tensor([1.5, -2.0], dtype=torch.bfloat16))
    assert bf16.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(bf16.astype(np.float32), [1.5, -2.0])
    f8 = _dtypes.to_numpy(torch.tensor([0.5], dtype=torch.float8_e4m3fn))
    assert f8.dtype == ml_dtypes.float8_e4m3fn
    assert _dtypes.to_numpy(3).shape == () and _dtypes.to_numpy(3) == 3
    assert torch.equal(_dtypes.from_numpy(bf16), torch.tensor([1.5, -2.0], dtype=torch.bfloat16))


def test_graph_array_carries_complex_as_real_pairs():
    z = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
    pairs = _dtypes.graph_array(z)
    assert pairs.dtype == np.float32
    np.testing.assert_array_equal(pairs, [[1, 2], [3, -4]])
    np.testing.assert_array_equal(_dtypes.graph_array(torch.ones(2)), [1.0, 1.0])

"""Testing helpers: :mod:`numlab.testing.kernels`, a library of independently
written correct and contract-breaking kernels for the zoo graphs."""

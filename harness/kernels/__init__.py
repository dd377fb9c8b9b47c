"""The compiled kernels (Numba): each model's forward and exact backward, and the analysers'.

One module per model (``rnn``, ``attention``, ``lru``), each reading top to bottom: a
private compiled kernel, its backward right after it, then the public function that
checks its input and calls them. The models' modules are public as ``harness.<name>``.
Beside them, the analysers' compiled helpers: ``jacobian`` (the RNN's Jacobian
products), ``greedy`` (the list scheduler), ``vmath`` (vectorised tanh and exp) and
``blas`` (matrix products on the BLAS the kernels use).
"""

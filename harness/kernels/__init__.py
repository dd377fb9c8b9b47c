"""The compiled kernels (Numba): each model's forward and exact backward, and the analysers'.

One module per model, each reading top to bottom: a private compiled kernel, its backward
right after it, then the public function that checks its input and calls them. The models'
modules are public as ``harness.<name>``: ``rnn`` (the lessons' tanh RNN), ``attention``
(self-attention, materialised and tiled, and Bahdanau's additive alignment), ``lru`` (the
diagonal linear recurrence: sequential, Blelloch and chunked scans), ``lstm`` and ``gru``
(in ``torch.nn.LSTM``'s and ``GRU``'s layout), ``transformer`` (encoder and decoder layers in
``TransformerEncoderLayer``'s ``state_dict`` layout) and ``linear_attention`` (recurrent,
parallel and chunked). Beside them, the analysers' compiled helpers: ``jacobian`` (the
RNN's Jacobian products), ``greedy`` (the list scheduler), ``vmath`` (vectorised tanh and
exp) and ``blas`` (matrix products on the BLAS the kernels use).
"""

from harness.infra import signals

signals.watch_numba()       # a signal during a compilation waits for its end


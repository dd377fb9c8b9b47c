"""A user's PyTorch module through the harness's analysers (``harness depth --torch``).

The folder reads in the order a run goes:

* ``load``: import PyTorch and the user's factory, build the module and its inputs, call it
  (every mistake of the user's reported as theirs, one line naming their file and line);
* ``export``: ``torch.export`` the module at one T and decompose it to core ATen;
* ``interp``: run the exported graph's ATen nodes on the tracer's recording arrays
  (``harness.analysis.trace``), so that the depth tables read the module as they read a
  family's NumPy forward.
"""

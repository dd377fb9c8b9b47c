"""What every layer uses: ``config`` (every default), ``timing`` (the one timing policy),
``stats`` (fits and bootstrap intervals), ``files`` (output folders all new or all old),
``validate`` (argument checks), ``signals`` (clean exits on a signal), ``progress``,
``machine`` (what a measurement ran on) and ``workspace`` (the kernels' reused buffers).
"""

"""specviz's tests.

One torch thread per test process: two threads on a 2-core machine that also runs the app
server (or anything else) oversubscribe the cores, and OpenMP's spin-waiting then makes every
forward several times slower instead of faster.
"""

import torch

torch.set_num_threads(1)

"""Speed benchmark: the 64x64 RGBA DCGAN of `rgba64_wgangp.py` (width 16, z of 64, batch 64,
n_critic 5, lambda 10, BatchNorm in G only), with diagnostics off: the step is timed, not the
health statistics. The network and hyperparameters are read from that file, so they stay one.
"""

import os
import runpy


def get_config():
    here = os.path.dirname(os.path.abspath(__file__))
    c = runpy.run_path(os.path.join(here, "rgba64_wgangp.py"))["get_config"]()
    c.diagnostics.level = "off"
    return c

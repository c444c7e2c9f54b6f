"""Speed benchmark: the 64x64 RGBA DCGAN of `rgba64_wgangp.py` (width 16, z of 64, batch 64,
n_critic 5, lambda 10, BatchNorm in G only), with diagnostics off: the step is timed, not the
health statistics. The network and hyperparameters are read from that file, so they stay one.
"""

import importlib.util
import os


def get_config():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rgba64_wgangp.py")
    spec = importlib.util.spec_from_file_location("rgba64_wgangp", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    c = module.get_config()
    c.diagnostics.level = "off"
    return c

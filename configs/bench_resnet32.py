"""Speed benchmark: the WGAN-GP paper's CIFAR-10 ResNet of `cifar10_resnet.py` (width 128, z of
128, batch 64, n_critic 5, lambda 10, BatchNorm in G only), with diagnostics off: the step is
timed, not the health statistics. The network and hyperparameters are read from that file, so
they stay one.
"""

import importlib.util
import os


def get_config():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cifar10_resnet.py")
    spec = importlib.util.spec_from_file_location("cifar10_resnet", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    c = module.get_config()
    c.diagnostics.level = "off"
    return c

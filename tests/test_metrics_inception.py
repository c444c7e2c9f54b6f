"""The Flax FID Inception against an independent PyTorch build of the same network.

The PyTorch reference below is written from the architecture description (torchvision-style
Inception-v3 with pytorch-fid's FID blocks); both get identical random weights through
``convert_pytorch_fid_weights``. Skipped when PyTorch is not installed.
"""

import jax
import numpy as np
import pytest

from wgan_jax.metrics import inception

torch = pytest.importorskip("torch")
tnn = torch.nn
F = torch.nn.functional


class TorchConv(tnn.Module):
    def __init__(self, cin, cout, kernel, stride=1, padding=0):
        super().__init__()
        self.conv = tnn.Conv2d(cin, cout, kernel, stride=stride, padding=padding, bias=False)
        self.bn = tnn.BatchNorm2d(cout, eps=0.001)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


def _avg3(x):
    return F.avg_pool2d(x, 3, stride=1, padding=1, count_include_pad=False)


class TorchA(tnn.Module):
    def __init__(self, cin, pool):
        super().__init__()
        self.branch1x1 = TorchConv(cin, 64, 1)
        self.branch5x5_1 = TorchConv(cin, 48, 1)
        self.branch5x5_2 = TorchConv(48, 64, 5, padding=2)
        self.branch3x3dbl_1 = TorchConv(cin, 64, 1)
        self.branch3x3dbl_2 = TorchConv(64, 96, 3, padding=1)
        self.branch3x3dbl_3 = TorchConv(96, 96, 3, padding=1)
        self.branch_pool = TorchConv(cin, pool, 1)

    def forward(self, x):
        b5 = self.branch5x5_2(self.branch5x5_1(x))
        bd = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        return torch.cat([self.branch1x1(x), b5, bd, self.branch_pool(_avg3(x))], 1)


class TorchB(tnn.Module):
    def __init__(self, cin):
        super().__init__()
        self.branch3x3 = TorchConv(cin, 384, 3, stride=2)
        self.branch3x3dbl_1 = TorchConv(cin, 64, 1)
        self.branch3x3dbl_2 = TorchConv(64, 96, 3, padding=1)
        self.branch3x3dbl_3 = TorchConv(96, 96, 3, stride=2)

    def forward(self, x):
        bd = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        return torch.cat([self.branch3x3(x), bd, F.max_pool2d(x, 3, stride=2)], 1)


class TorchC(tnn.Module):
    def __init__(self, cin, c7):
        super().__init__()
        self.branch1x1 = TorchConv(cin, 192, 1)
        self.branch7x7_1 = TorchConv(cin, c7, 1)
        self.branch7x7_2 = TorchConv(c7, c7, (1, 7), padding=(0, 3))
        self.branch7x7_3 = TorchConv(c7, 192, (7, 1), padding=(3, 0))
        self.branch7x7dbl_1 = TorchConv(cin, c7, 1)
        self.branch7x7dbl_2 = TorchConv(c7, c7, (7, 1), padding=(3, 0))
        self.branch7x7dbl_3 = TorchConv(c7, c7, (1, 7), padding=(0, 3))
        self.branch7x7dbl_4 = TorchConv(c7, c7, (7, 1), padding=(3, 0))
        self.branch7x7dbl_5 = TorchConv(c7, 192, (1, 7), padding=(0, 3))
        self.branch_pool = TorchConv(cin, 192, 1)

    def forward(self, x):
        b7 = self.branch7x7_3(self.branch7x7_2(self.branch7x7_1(x)))
        bd = x
        for i in range(1, 6):
            bd = getattr(self, f"branch7x7dbl_{i}")(bd)
        return torch.cat([self.branch1x1(x), b7, bd, self.branch_pool(_avg3(x))], 1)


class TorchD(tnn.Module):
    def __init__(self, cin):
        super().__init__()
        self.branch3x3_1 = TorchConv(cin, 192, 1)
        self.branch3x3_2 = TorchConv(192, 320, 3, stride=2)
        self.branch7x7x3_1 = TorchConv(cin, 192, 1)
        self.branch7x7x3_2 = TorchConv(192, 192, (1, 7), padding=(0, 3))
        self.branch7x7x3_3 = TorchConv(192, 192, (7, 1), padding=(3, 0))
        self.branch7x7x3_4 = TorchConv(192, 192, 3, stride=2)

    def forward(self, x):
        b7 = x
        for i in range(1, 5):
            b7 = getattr(self, f"branch7x7x3_{i}")(b7)
        b3 = self.branch3x3_2(self.branch3x3_1(x))
        return torch.cat([b3, b7, F.max_pool2d(x, 3, stride=2)], 1)


class TorchE(tnn.Module):
    def __init__(self, cin, max_pool):
        super().__init__()
        self.max_pool = max_pool
        self.branch1x1 = TorchConv(cin, 320, 1)
        self.branch3x3_1 = TorchConv(cin, 384, 1)
        self.branch3x3_2a = TorchConv(384, 384, (1, 3), padding=(0, 1))
        self.branch3x3_2b = TorchConv(384, 384, (3, 1), padding=(1, 0))
        self.branch3x3dbl_1 = TorchConv(cin, 448, 1)
        self.branch3x3dbl_2 = TorchConv(448, 384, 3, padding=1)
        self.branch3x3dbl_3a = TorchConv(384, 384, (1, 3), padding=(0, 1))
        self.branch3x3dbl_3b = TorchConv(384, 384, (3, 1), padding=(1, 0))
        self.branch_pool = TorchConv(cin, 192, 1)

    def forward(self, x):
        b3 = self.branch3x3_1(x)
        b3 = torch.cat([self.branch3x3_2a(b3), self.branch3x3_2b(b3)], 1)
        bd = self.branch3x3dbl_2(self.branch3x3dbl_1(x))
        bd = torch.cat([self.branch3x3dbl_3a(bd), self.branch3x3dbl_3b(bd)], 1)
        pooled = F.max_pool2d(x, 3, stride=1, padding=1) if self.max_pool else _avg3(x)
        return torch.cat([self.branch1x1(x), b3, bd, self.branch_pool(pooled)], 1)


class TorchFIDInception(tnn.Module):
    def __init__(self):
        super().__init__()
        self.Conv2d_1a_3x3 = TorchConv(3, 32, 3, stride=2)
        self.Conv2d_2a_3x3 = TorchConv(32, 32, 3)
        self.Conv2d_2b_3x3 = TorchConv(32, 64, 3, padding=1)
        self.Conv2d_3b_1x1 = TorchConv(64, 80, 1)
        self.Conv2d_4a_3x3 = TorchConv(80, 192, 3)
        self.Mixed_5b = TorchA(192, 32)
        self.Mixed_5c = TorchA(256, 64)
        self.Mixed_5d = TorchA(288, 64)
        self.Mixed_6a = TorchB(288)
        self.Mixed_6b = TorchC(768, 128)
        self.Mixed_6c = TorchC(768, 160)
        self.Mixed_6d = TorchC(768, 160)
        self.Mixed_6e = TorchC(768, 192)
        self.Mixed_7a = TorchD(768)
        self.Mixed_7b = TorchE(1280, max_pool=False)
        self.Mixed_7c = TorchE(2048, max_pool=True)
        self.fc = tnn.Linear(2048, 1008)

    def forward(self, x):
        """NCHW images in [-1, 1] of any size: pytorch-fid's resize, then the network."""
        x = F.interpolate(x, size=(299, 299), mode="bilinear", align_corners=False)
        x = self.Conv2d_2b_3x3(self.Conv2d_2a_3x3(self.Conv2d_1a_3x3(x)))
        x = F.max_pool2d(x, 3, stride=2)
        x = F.max_pool2d(self.Conv2d_4a_3x3(self.Conv2d_3b_1x1(x)), 3, stride=2)
        for name in ["5b", "5c", "5d", "6a", "6b", "6c", "6d", "6e", "7a", "7b", "7c"]:
            x = getattr(self, f"Mixed_{name}")(x)
        pool = F.adaptive_avg_pool2d(x, (1, 1)).flatten(1)
        return pool, self.fc(pool)


def _randomised(net):
    """Random weights with BN statistics far from identity, so every tensor matters."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in net.named_parameters():
            if name.endswith("conv.weight"):
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=gen) * (2.0 / fan_in) ** 0.5)
            elif name.endswith("bn.weight"):
                p.copy_(0.5 + torch.rand(p.shape, generator=gen))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
        for name, b in net.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(0.1 * torch.randn(b.shape, generator=gen))
            elif name.endswith("running_var"):
                b.copy_(0.5 + torch.rand(b.shape, generator=gen))
    return net.eval()


@pytest.fixture(scope="module")
def torch_net():
    torch.set_num_threads(1)
    return _randomised(TorchFIDInception())


def test_bilinear_resize_matches_torch_interpolate():
    rng = np.random.default_rng(0)
    for size_in, size_out in [(32, 299), (8, 19), (64, 299), (500, 299), (37, 11)]:
        img = rng.standard_normal((2, size_in, size_in + 3, 2)).astype(np.float32)
        ref = F.interpolate(
            torch.from_numpy(img).permute(0, 3, 1, 2),
            size=(size_out, size_out),
            mode="bilinear",
            align_corners=False,
        ).permute(0, 2, 3, 1)
        got = np.asarray(inception.resize_bilinear(img, size_out))
        np.testing.assert_allclose(got, ref.numpy(), atol=5e-5)  # float32 rounding


def test_conversion_rejects_incomplete_state_dict(torch_net):
    state = dict(torch_net.state_dict())
    del state["Mixed_6c.branch7x7_2.conv.weight"]
    with pytest.raises(ValueError, match="missing"):
        inception.convert_pytorch_fid_weights(state)
    state = dict(torch_net.state_dict())
    state["fc.weight"] = state["fc.weight"][:10]
    with pytest.raises(ValueError, match="fc"):
        inception.convert_pytorch_fid_weights(state)


def test_npz_export_converts_to_the_same_variables(torch_net, tmp_path):
    state = torch_net.state_dict()
    inception.export_state_dict_npz(state, tmp_path / "w.npz")
    from_npz = inception.convert_pytorch_fid_weights(tmp_path / "w.npz")
    direct = inception.convert_pytorch_fid_weights(state)
    jax_tree = jax.tree_util
    assert jax_tree.tree_structure(from_npz) == jax_tree.tree_structure(direct)
    for a, b in zip(jax_tree.tree_leaves(from_npz), jax_tree.tree_leaves(direct), strict=True):
        np.testing.assert_array_equal(a, b)
    kernel = direct["params"]["Mixed_7c"]["branch3x3_2a"]["conv"]["kernel"]
    weight = state["Mixed_7c.branch3x3_2a.conv.weight"].numpy()
    np.testing.assert_array_equal(kernel[0, 2, 5, 7], weight[7, 5, 0, 2])


def test_flax_port_matches_torch_reference(torch_net, tmp_path):
    path = tmp_path / "fid_inception.pth"
    torch.save(torch_net.state_dict(), path)
    extractor = inception.InceptionExtractor.from_pytorch_fid_weights(path, batch_size=3)
    rng = np.random.default_rng(0)
    images = np.tanh(rng.standard_normal((3, 32, 32, 3))).astype(np.float32)
    with torch.no_grad():
        pool_ref, logits_ref = torch_net(torch.from_numpy(images).permute(0, 3, 1, 2))
    pool, probs = extractor.features_and_probs(images)
    assert pool.shape == (3, 2048) and probs.shape == (3, 1008)
    pool_ref = pool_ref.numpy()
    np.testing.assert_allclose(pool, pool_ref, rtol=1e-4, atol=1e-4 * np.abs(pool_ref).max())
    # Random weights make features mostly image-independent: compare what the images change too.
    centred, centred_ref = pool - pool.mean(0), pool_ref - pool_ref.mean(0)
    np.testing.assert_allclose(centred, centred_ref, atol=1e-2 * np.abs(centred_ref).max())
    probs_ref = torch.softmax(logits_ref.double(), dim=1).numpy()
    np.testing.assert_allclose(probs, probs_ref, rtol=1e-3, atol=1e-6)

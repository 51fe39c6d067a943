#!/usr/bin/env python3
"""Writes cohort-sim model descriptions (workload files with "layers") of the
three networks of Horovod's headline benchmark: VGG-16, ResNet-101 and
Inception V3 at 224x224 (299x299 for Inception V3), batch 64 per GPU.

Per layer: its trainable tensors (conv/fc weights, biases or batch-norm
gamma and beta) computed from the published architectures, and its forward
multiply-adds as its share of the backward pass. The step's compute time is
batch / (images per second on one GPU), split 1:2 between forward and
backward (backward computes two products per forward one).

Published inputs (see bench/README.md, "Horovod's headline"):
  - images/s on one NVIDIA Tesla P100, synthetic data, batch 64, TensorFlow
    tf_cnn_benchmarks (tensorflow.org performance benchmarks, DGX-1 table,
    May 2017): Inception V3 142, ResNet-50 219, ResNet-152 91.8, VGG16 154.
  - ResNet-101 is not in that table: its time per image is interpolated
    linearly in FLOPs between ResNet-50 and ResNet-152, with the FLOPs of
    He et al. 2015, Table 1 (3.8, 7.6 and 11.3 x 10^9).

Usage: bench/sim/cnn_models.py OUTDIR
"""
import json
import sys

BATCH = 64
RATE = {"inception_v3": 142.0, "vgg16": 154.0}
# ResNet-101 from ResNet-50 and ResNet-152 (per-image time linear in FLOPs).
T50, T152 = 1 / 219.0, 1 / 91.8
F50, F101, F152 = 3.8, 7.6, 11.3
RATE["resnet101"] = 1 / (T50 + (T152 - T50) * (F101 - F50) / (F152 - F50))


class Net:
    def __init__(self, name):
        self.name = name
        self.layers = []

    def conv(self, name, cin, cout, kh, kw, hout, wout, bias=False, bn=True):
        params = [kh * kw * cin * cout]
        if bias:
            params.append(cout)
        if bn:
            params += [cout, cout]  # gamma, beta
        macs = kh * kw * cin * cout * hout * wout
        self.layers.append({"name": name, "params": params, "backward_weight": macs / 1e6})

    def fc(self, name, cin, cout):
        self.layers.append({"name": name, "params": [cin * cout, cout], "backward_weight": cin * cout / 1e6})

    def total_params(self):
        return sum(sum(l["params"]) for l in self.layers)

    def total_macs(self):
        return sum(l["backward_weight"] for l in self.layers) * 1e6


def vgg16():
    n = Net("vgg16")
    size, cin = 224, 3
    for stage, (width, convs) in enumerate([(64, 2), (128, 2), (256, 3), (512, 3), (512, 3)]):
        for i in range(convs):
            n.conv(f"conv{stage + 1}_{i + 1}", cin, width, 3, 3, size, size, bias=True, bn=False)
            cin = width
        size //= 2
    n.fc("fc6", 512 * 7 * 7, 4096)
    n.fc("fc7", 4096, 4096)
    n.fc("fc8", 4096, 1000)
    return n


def resnet101():
    n = Net("resnet101")
    n.conv("conv1", 3, 64, 7, 7, 112, 112)
    size, cin = 56, 64
    for stage, (width, blocks) in enumerate([(64, 3), (128, 4), (256, 23), (512, 3)]):
        for b in range(blocks):
            stride = 2 if (b == 0 and stage > 0) else 1
            out = size // stride
            p = f"layer{stage + 1}.{b}"
            n.conv(p + ".conv1", cin, width, 1, 1, out, out)  # stride on the 3x3 or 1x1: same params
            n.conv(p + ".conv2", width, width, 3, 3, out, out)
            n.conv(p + ".conv3", width, width * 4, 1, 1, out, out)
            if b == 0:
                n.conv(p + ".downsample", cin, width * 4, 1, 1, out, out)
            cin = width * 4
            size = out
    n.fc("fc", 2048, 1000)
    return n


def inception_v3():
    n = Net("inception_v3")
    c = n.conv
    c("Conv2d_1a_3x3", 3, 32, 3, 3, 149, 149)
    c("Conv2d_2a_3x3", 32, 32, 3, 3, 147, 147)
    c("Conv2d_2b_3x3", 32, 64, 3, 3, 147, 147)
    c("Conv2d_3b_1x1", 64, 80, 1, 1, 73, 73)
    c("Conv2d_4a_3x3", 80, 192, 3, 3, 71, 71)

    def a(p, cin, pool, s=35):
        c(p + ".branch1x1", cin, 64, 1, 1, s, s)
        c(p + ".branch5x5_1", cin, 48, 1, 1, s, s)
        c(p + ".branch5x5_2", 48, 64, 5, 5, s, s)
        c(p + ".branch3x3dbl_1", cin, 64, 1, 1, s, s)
        c(p + ".branch3x3dbl_2", 64, 96, 3, 3, s, s)
        c(p + ".branch3x3dbl_3", 96, 96, 3, 3, s, s)
        c(p + ".branch_pool", cin, pool, 1, 1, s, s)
        return 64 + 64 + 96 + pool

    cin = a("Mixed_5b", 192, 32)
    cin = a("Mixed_5c", cin, 64)
    cin = a("Mixed_5d", cin, 64)
    # Mixed_6a (reduction to 17x17).
    c("Mixed_6a.branch3x3", cin, 384, 3, 3, 17, 17)
    c("Mixed_6a.branch3x3dbl_1", cin, 64, 1, 1, 35, 35)
    c("Mixed_6a.branch3x3dbl_2", 64, 96, 3, 3, 35, 35)
    c("Mixed_6a.branch3x3dbl_3", 96, 96, 3, 3, 17, 17)
    cin = 384 + 96 + cin

    def cc(p, c7, s=17):
        c(p + ".branch1x1", 768, 192, 1, 1, s, s)
        c(p + ".branch7x7_1", 768, c7, 1, 1, s, s)
        c(p + ".branch7x7_2", c7, c7, 1, 7, s, s)
        c(p + ".branch7x7_3", c7, 192, 7, 1, s, s)
        c(p + ".branch7x7dbl_1", 768, c7, 1, 1, s, s)
        c(p + ".branch7x7dbl_2", c7, c7, 7, 1, s, s)
        c(p + ".branch7x7dbl_3", c7, c7, 1, 7, s, s)
        c(p + ".branch7x7dbl_4", c7, c7, 7, 1, s, s)
        c(p + ".branch7x7dbl_5", c7, 192, 1, 7, s, s)
        c(p + ".branch_pool", 768, 192, 1, 1, s, s)

    for p, c7 in [("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)]:
        cc(p, c7)
    # Mixed_7a (reduction to 8x8).
    c("Mixed_7a.branch3x3_1", 768, 192, 1, 1, 17, 17)
    c("Mixed_7a.branch3x3_2", 192, 320, 3, 3, 8, 8)
    c("Mixed_7a.branch7x7x3_1", 768, 192, 1, 1, 17, 17)
    c("Mixed_7a.branch7x7x3_2", 192, 192, 1, 7, 17, 17)
    c("Mixed_7a.branch7x7x3_3", 192, 192, 7, 1, 17, 17)
    c("Mixed_7a.branch7x7x3_4", 192, 192, 3, 3, 8, 8)
    cin = 320 + 192 + 768

    def e(p, cin, s=8):
        c(p + ".branch1x1", cin, 320, 1, 1, s, s)
        c(p + ".branch3x3_1", cin, 384, 1, 1, s, s)
        c(p + ".branch3x3_2a", 384, 384, 1, 3, s, s)
        c(p + ".branch3x3_2b", 384, 384, 3, 1, s, s)
        c(p + ".branch3x3dbl_1", cin, 448, 1, 1, s, s)
        c(p + ".branch3x3dbl_2", 448, 384, 3, 3, s, s)
        c(p + ".branch3x3dbl_3a", 384, 384, 1, 3, s, s)
        c(p + ".branch3x3dbl_3b", 384, 384, 3, 1, s, s)
        c(p + ".branch_pool", cin, 192, 1, 1, s, s)
        return 2048

    cin = e("Mixed_7b", cin)
    cin = e("Mixed_7c", cin)
    n.fc("fc", 2048, 1000)
    return n


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    for net in (vgg16(), resnet101(), inception_v3()):
        step = BATCH / RATE[net.name]
        doc = {
            "name": net.name,
            "source": "bench/sim/cnn_models.py: architecture tensors and MACs; %.1f images/s on one P100 at batch %d"
            % (RATE[net.name], BATCH),
            "forward_s": round(step / 3, 6),
            "backward_s": round(2 * step / 3, 6),
            "bytes_per_param": 4,
            "layers": net.layers,
        }
        with open(f"{out}/{net.name}.json", "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        print(f"{net.name}: {net.total_params():,} parameters, {net.total_macs() / 1e9:.2f} GMACs/image, "
              f"{len(net.layers)} layers, step {step * 1e3:.1f} ms")


if __name__ == "__main__":
    main()

"""Horovod's PyTorch MNIST example (examples/pytorch/pytorch_mnist.py), written
from its documented steps with ``import cohort.torch as hvd``, on Fashion-MNIST
from Debian's dataset-fashion-mnist (torchvision is not needed: the IDX files
are read here). Trains, evaluates on the test set averaged over the ranks, and
exits non-zero when the accuracy is below --min-accuracy:

    cohortrun -np 2 python3 tests/python/hvd_mnist.py [--fp16-allreduce] [--min-accuracy 0.8]

The defaults make the check of the ctest (--min-accuracy 0.8, 2 ranks, one
thread each, about 20 s on a 2-core machine): the whole training set for 2
epochs, batches of 32 per rank at learning rate 0.0125 x size() with momentum
0.9 (the example's own defaults, 64, 0.01 x size() and 0.5, need several
epochs on Fashion-MNIST, which is harder than MNIST). Measured on the whole
test set: 82.75% at 2 ranks and 83.20% at 3 (81.3% and 80.6% after the first
epoch); on the test set's first 4000 images, seeds 42, 1 and 2 gave 82.75%,
83.15% and 81.85% at 2 ranks. A run
is deterministic for a given number of ranks (the initial weights and the
dropout masks are seeded, DistributedSampler's order too), so 80% leaves a
margin of about two points for another seed or another PyTorch's kernels.
The C++ example's cnn (examples/fashion_mnist) reaches 85% after 2 epochs.
"""

import argparse
import gzip
import os
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data.distributed

import cohort.torch as hvd

parser = argparse.ArgumentParser(description="Horovod's PyTorch MNIST example on cohort, Fashion-MNIST")
parser.add_argument("--batch-size", type=int, default=32, help="input batch size per rank for training")
parser.add_argument("--test-batch-size", type=int, default=1000, help="input batch size for testing")
parser.add_argument("--epochs", type=int, default=2, help="number of epochs to train")
parser.add_argument("--lr", type=float, default=0.0125, help="learning rate (scaled by hvd.size())")
parser.add_argument("--momentum", type=float, default=0.9, help="SGD momentum")
parser.add_argument("--seed", type=int, default=42, help="random seed")
parser.add_argument("--log-interval", type=int, default=500, help="batches between training status lines")
parser.add_argument("--fp16-allreduce", action="store_true", help="use fp16 compression during allreduce")
parser.add_argument("--gradient-predivide-factor", type=float, default=1.0,
                    help="apply gradient predivide factor in optimizer")
parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist",
                    help="where Debian's dataset-fashion-mnist keeps the IDX files")
parser.add_argument("--train-images", type=int, default=0, help="train on the first N images (0: all)")
parser.add_argument("--test-images", type=int, default=0, help="test on the first N images (0: all)")
parser.add_argument("--min-accuracy", type=float, default=0.0, help="exit 1 when the test accuracy is below")


def read_idx(path):
    """An IDX file (gzip) as a uint8 tensor of its dimensions."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError(f"{path}: not an IDX file of unsigned bytes")
    dims = struct.unpack(f">{ndim}I", data[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


class FashionMNIST(torch.utils.data.Dataset):
    """(image [1, 28, 28] normalized as the example normalizes MNIST, label) pairs."""

    MEAN, STD = 0.2860, 0.3530  # of Fashion-MNIST's training images

    def __init__(self, data_dir, train, limit):
        prefix = "train" if train else "t10k"
        images = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
        labels = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
        if limit:
            images, labels = images[:limit], labels[:limit]
        self.images = ((images.float() / 255.0 - self.MEAN) / self.STD).unsqueeze(1)
        self.labels = labels.long()

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.images[i], self.labels[i]


class Net(nn.Module):
    """The example's network."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def main(args):
    def train(epoch):
        model.train()
        # Horovod: set epoch to sampler for shuffling.
        train_sampler.set_epoch(epoch)
        for batch_idx, (data, target) in enumerate(train_loader):
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            optimizer.step()
            if batch_idx % args.log_interval == 0 and hvd.rank() == 0:
                print(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_sampler)} "
                      f"({100.0 * batch_idx / len(train_loader):.0f}%)]\tLoss: {loss.item():.6f}", flush=True)

    def metric_average(val, name):
        # Horovod: average metric values across workers.
        return hvd.allreduce(torch.tensor(val), name=name).item()

    def test():
        model.eval()
        test_loss, correct = 0.0, 0.0
        with torch.no_grad():
            for data, target in test_loader:
                output = model(data)
                test_loss += F.nll_loss(output, target, reduction="sum").item()
                pred = output.max(1, keepdim=True)[1]
                correct += pred.eq(target.view_as(pred)).float().sum().item()
        # Horovod: use test_sampler to determine the number of examples in this worker's partition.
        test_loss = metric_average(test_loss / len(test_sampler), "avg_loss")
        accuracy = metric_average(correct / len(test_sampler), "avg_accuracy")
        if hvd.rank() == 0:
            print(f"\nTest set: Average loss: {test_loss:.4f}, Accuracy: {100.0 * accuracy:.2f}%\n", flush=True)
        return accuracy

    # Horovod: initialize library.
    hvd.init()
    torch.manual_seed(args.seed)
    # Horovod: limit # of CPU threads to be used per worker.
    torch.set_num_threads(1)

    train_dataset = FashionMNIST(args.data_dir, train=True, limit=args.train_images)
    # Horovod: use DistributedSampler to partition the training data.
    train_sampler = torch.utils.data.distributed.DistributedSampler(train_dataset, num_replicas=hvd.size(),
                                                                    rank=hvd.rank())
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size, sampler=train_sampler)
    test_dataset = FashionMNIST(args.data_dir, train=False, limit=args.test_images)
    # Horovod: use DistributedSampler to partition the test data.
    test_sampler = torch.utils.data.distributed.DistributedSampler(test_dataset, num_replicas=hvd.size(),
                                                                   rank=hvd.rank())
    test_loader = torch.utils.data.DataLoader(test_dataset, batch_size=args.test_batch_size, sampler=test_sampler)

    model = Net()
    # Horovod: scale learning rate by the number of workers.
    optimizer = optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=args.momentum)
    # Horovod: broadcast parameters & optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    # Horovod: (optional) compression algorithm.
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    # Horovod: wrap optimizer with DistributedOptimizer.
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression, op=hvd.Average,
                                         gradient_predivide_factor=args.gradient_predivide_factor)

    accuracy = 0.0
    for epoch in range(1, args.epochs + 1):
        train(epoch)
        accuracy = test()
    return accuracy


if __name__ == "__main__":
    args = parser.parse_args()
    accuracy = main(args)
    if accuracy < args.min_accuracy:
        print(f"hvd_mnist: test accuracy {100 * accuracy:.2f}% is below {100 * args.min_accuracy:.2f}%",
              file=sys.stderr)
        sys.exit(1)

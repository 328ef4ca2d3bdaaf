"""PyTorch's counterpart of `cnn_mpi --model cifar --backend threads` on the CPU, for the CPU benchmark
(docs/PERFORMANCE.md): the cifar preset (conv3x3:32 relu maxpool2 conv3x3:64 relu maxpool2 conv3x3:64
relu fc:64 relu fc:10) on 1x28x28 images held in memory, Adam lr 0.001, eager steps (the fastest
PyTorch mode on a CPU: torch.compile needs a C++ toolchain per shape and does not batch better here).
Prints images/s per batch size, the median of 3 timed passes over N images after 3 warm-up steps.
Usage: THREADS=2 python3 tools/torch_cifar_cpu.py [N] [BATCH,...]     (Debian: apt-get install python3-torch)"""
import os, sys, time, torch, torch.nn as nn, torch.nn.functional as F

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
batches = [int(b) for b in sys.argv[2].split(",")] if len(sys.argv) > 2 else [256]
torch.set_num_threads(int(os.environ.get("THREADS", "2")))
torch.manual_seed(0)
X = torch.rand(N, 1, 28, 28)
Y = torch.randint(0, 10, (N,))


class Cifar(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2, self.conv3 = nn.Conv2d(1, 32, 3), nn.Conv2d(32, 64, 3), nn.Conv2d(64, 64, 3)
        self.fc1, self.fc2 = nn.Linear(64 * 3 * 3, 64), nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)    # 32 x 13 x 13
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)    # 64 x 5 x 5
        x = F.relu(self.conv3(x)).flatten(1)           # 64 x 3 x 3
        return self.fc2(F.relu(self.fc1(x)))


def images_per_s(batch):
    net = Cifar()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(x), y).backward()
        opt.step()

    for _ in range(3):
        step(X[:batch], Y[:batch])
    steps = N // batch
    start = time.perf_counter()
    for i in range(steps):
        step(X[i * batch:(i + 1) * batch], Y[i * batch:(i + 1) * batch])
    return steps * batch / (time.perf_counter() - start)


print(f"torch={torch.__version__} threads={torch.get_num_threads()} N={N}", flush=True)
for batch in batches:
    rates = sorted(images_per_s(batch) for _ in range(3))
    print(f"cifar batch={batch} images_per_s={rates[1]:.0f} (runs {rates[0]:.0f}..{rates[2]:.0f})", flush=True)

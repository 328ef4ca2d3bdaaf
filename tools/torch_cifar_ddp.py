"""PyTorch DDP (NCCL) training of the cifar preset's model, the multi-GPU twin of
../shared/anchors/torch_cifar_best.py (issue 28): conv32-pool-conv64-pool-conv64-fc64-fc10, ReLU, Adam
(lr 1e-3), torch.compile, channels_last, bf16 autocast ("bf16") or TF32 ("tf32"). Adam is fused: the
anchor's capturable state serves only its CUDA graph, and without one it ran slower (284.8 against
266.6 ms/epoch at 1 GPU, 92.4 against 75.4 at 4; nvidia-h100-x4, 2026-11-26).

One process per GPU (spawned, NCCL, NVLink multicast off), weak scaling: a fixed batch per rank (512 by
default), an epoch of 50000 CIFAR-shaped random images on the devices, 50000/world on each rank, so an
epoch at W ranks is 1/W of the steps of one rank. The last step of an epoch takes what is left (at 512
per rank: 97 steps of 512 and one of 336 on one rank; 12 of 512 and one of 106 on each of 8), which is
how cnn_mpi splits the same epoch with --batch 512*W (src/data/sampler.cpp: the last global batch
split evenly over the ranks), so both take the same number of steps of the same sizes on every rank.
Automatic dynamic shapes are off: the short last batch gets its own static compiled graph (during the
warm-up epoch) instead of turning every step into a dynamic-shape graph.

Differences from the single-GPU anchor, and why:
- No CUDA graph. The anchor captures forward, backward and Adam in one graph; whether DDP's step
  (compiled with dynamo's DDP optimizer, which splits the graph at bucket boundaries so the
  allreduce overlaps the backward) can be captured whole is doubtful, so every step is launched
  eagerly from the compiled pieces, and the host's launch gaps are part of DDP's time here (not
  measured: torch_cifar_best.py with and without its graph at batch 512 would say how much).
- The model is wrapped in DistributedDataParallel first and the wrapper is compiled
  (torch.compile(DDP(model))), the order PyTorch's notes on DDP with torch.compile use.
- Warm-up is one whole untimed epoch (compiles both batch shapes, lets DDP rebuild its buckets after
  the first step), then 3 timed epochs; the median is printed.

Prints a header line, then one line per world size:
  world=W batch_per_rank=512 global_batch=512W precision=bf16 graph=no ms_per_epoch=X
Usage: torch_cifar_ddp.py [--worlds 1,2,4] [--precision bf16|tf32] [--batch-per-rank 512]
       (default worlds: 1, 2, 4, 8 up to the number of visible GPUs)"""
import argparse, os, sys, time
os.environ.setdefault("NCCL_NVLS_ENABLE", "0"); os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")
import torch, torch._dynamo, torch.nn as nn, torch.nn.functional as F
import torch.distributed as dist, torch.multiprocessing as mp

IMAGES = 50000


def net(dev):
    return nn.Sequential(nn.Conv2d(3, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Conv2d(64, 64, 3), nn.ReLU(), nn.Flatten(), nn.Linear(1024, 64),
                         nn.ReLU(), nn.Linear(64, 10)).to(dev).to(memory_format=torch.channels_last)


def worker(rank, world, port, bs, precision, q):
    os.environ["MASTER_ADDR"] = "127.0.0.1"; os.environ["MASTER_PORT"] = str(port)
    dev = torch.device("cuda", rank)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
    torch.backends.cuda.matmul.allow_tf32 = True; torch.backends.cudnn.allow_tf32 = True
    torch._dynamo.config.automatic_dynamic_shapes = False
    torch.manual_seed(rank)
    n = IMAGES // world
    X = torch.rand(n, 3, 32, 32, device=dev).to(memory_format=torch.channels_last)
    Y = torch.randint(0, 10, (n,), device=dev)
    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    m = nn.parallel.DistributedDataParallel(net(dev), device_ids=[rank])
    opt = torch.optim.Adam(m.parameters(), lr=1e-3, fused=True); fwd = torch.compile(m)
    starts = range(0, n, bs)  # the last step takes the rest (n % bs images) when bs does not divide n

    def step(x, y):
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=(precision == "bf16")):
            loss = F.cross_entropy(fwd(x), y)
        loss.backward(); opt.step()

    def epoch():
        for i in starts: step(X[i:i + bs], Y[i:i + bs])

    epoch()  # warm-up: compiles, autotunes, builds DDP's buckets
    times = []
    for _ in range(3):
        torch.cuda.synchronize(); dist.barrier(); t = time.perf_counter()
        epoch()
        torch.cuda.synchronize(); dist.barrier(); times.append((time.perf_counter() - t) * 1e3)
    if rank == 0: q.put((world, sorted(times)[1]))
    dist.destroy_process_group()


def world_list(text):
    return [int(w) for w in text.split(",")]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--worlds", type=world_list,
                   help="comma-separated world sizes (default: 1,2,4,8 up to the GPU count)")
    p.add_argument("--precision", choices=["bf16", "tf32"], default="bf16")
    p.add_argument("--batch-per-rank", type=int, default=512)
    a = p.parse_args()
    G = torch.cuda.device_count()
    worlds = a.worlds or [w for w in (1, 2, 4, 8) if w <= G]
    if not worlds or min(worlds) < 1 or max(worlds) > G:
        p.error(f"world sizes {worlds} need 1 to {G} GPUs (visible: {G})")
    if a.batch_per_rank < 1:
        p.error("--batch-per-rank must be at least 1")
    print(f"torch={torch.__version__} gpus={G} {torch.cuda.get_device_name(0)} "
          f"ddp+compile+channels_last, no graph", flush=True)
    ctx = mp.get_context("spawn"); port = 29600
    for world in worlds:
        q = ctx.Queue()
        try:
            mp.start_processes(worker, args=(world, port, a.batch_per_rank, a.precision, q), nprocs=world,
                               start_method="spawn")
        except Exception as e:  # one world size failing (a rank's exception) leaves the others to run
            why = str(e).strip().splitlines()[-1] if str(e).strip() else repr(e)
            print(f"FAILED world={world}: {why}", file=sys.stderr, flush=True)
            continue
        finally:
            port += 1
        w, ms = q.get(timeout=60)
        print(f"world={w} batch_per_rank={a.batch_per_rank} global_batch={a.batch_per_rank * w} "
              f"precision={a.precision} graph=no ms_per_epoch={ms:.2f}", flush=True)


if __name__ == "__main__":
    main()

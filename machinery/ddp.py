"""
Data parallelism for graft_min.py under torchrun, in plain torch.distributed (nanoGPT's way).

    python graft_min.py ...                                   one process: every helper is a no-op
    torchrun --standalone --nproc_per_node N graft_min.py ... N processes (gloo on a CPU, NCCL on CUDA)

Every rank holds both models with the same weights. The step's shared prompt batch is cut into N
contiguous shards (`shard`); both models' groups of a prompt live on the same rank, so peer texts
never cross ranks. What is decided over the whole batch (Eq. 4's selection, balancing and ties)
is decided on counts gathered from every rank (`combine`, in rank order = batch order). Eq. 10's
token-mean is over the global minibatch: its divisor is summed over ranks (`total`) and so are
the gradients (`sum_gradients`) before clipping and AdamW, so the weights stay equal on every rank.
Rank 0 (`is_main`) alone writes the run folder.
"""

import datetime
import os

import torch
import torch.distributed as dist

_device = torch.device("cpu")  # where collectives put their tensors: this rank's GPU under NCCL


def launched():
    """True when torchrun (or another launcher that sets RANK) started this process."""
    return "RANK" in os.environ


def init(device):
    """Join the process group when launched by torchrun; returns the device this rank computes on
    (cuda:LOCAL_RANK for a CUDA device, else `device`). Without torchrun: `device`, nothing joined."""
    global _device
    if not launched() or dist.is_initialized():
        return device
    if device.startswith("cuda"):
        device = rank_device()
        _device = torch.device(device)
    dist.init_process_group("nccl" if device.startswith("cuda") else "gloo", timeout=datetime.timedelta(minutes=60))
    return device


def rank_device():
    """cuda:LOCAL_RANK, made this process's current CUDA device (torch.cuda.set_device): one GPU per rank."""
    device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
    torch.cuda.set_device(device)
    return device


def close():
    if dist.is_initialized():
        dist.destroy_process_group()


def rank():
    return dist.get_rank() if dist.is_initialized() else 0


def world_size():
    return dist.get_world_size() if dist.is_initialized() else 1


def is_main():
    return rank() == 0


def barrier():
    if world_size() > 1:
        dist.barrier()


def shard(items):
    """This rank's contiguous share of `items` and the index of its first item: (part, start).
    Shares differ by at most one item when len(items) does not divide by the world size."""
    r, w = rank(), world_size()
    start, end = r * len(items) // w, (r + 1) * len(items) // w
    return items[start:end], start


def gather(obj):
    """[obj of rank 0, obj of rank 1, ...]: any picklable object, from every rank to every rank."""
    if world_size() == 1:
        return [obj]
    out = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def combine(values):
    """A dict of per-rank values -> the same dict over all ranks, on every rank: lists are
    concatenated and tensors catted along dim 0 (rank order), numbers summed, other values
    (strings, None) taken from rank 0. With one process the dict itself is returned."""
    if world_size() == 1:
        return values
    parts = gather(values)
    out = {}
    for key, value in values.items():
        every = [p[key] for p in parts]
        if isinstance(value, list):
            out[key] = [x for v in every for x in v]
        elif isinstance(value, torch.Tensor):
            out[key] = torch.cat(every)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = sum(every)
        else:
            out[key] = value
    return out


def total(x):
    """x summed over ranks (a Python number, float or int as given)."""
    if world_size() == 1:
        return x
    t = torch.tensor([x], dtype=torch.float64, device=_device)
    dist.all_reduce(t)
    return type(x)(t.item())


def maximum(x):
    """The largest of the ranks' integers x."""
    if world_size() == 1:
        return x
    t = torch.tensor([x], dtype=torch.int64, device=_device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def sum_gradients(parameters):
    """Sum each parameter's .grad over ranks, in place. A parameter without a gradient on some
    ranks gets zeros there first; one without a gradient on every rank keeps none (AdamW skips it,
    as it would in one process)."""
    if world_size() == 1:
        return
    params = list(parameters)
    has = torch.tensor([p.grad is not None for p in params], dtype=torch.int64, device=_device)  # [n_params]
    dist.all_reduce(has, op=dist.ReduceOp.MAX)
    for p, any_rank in zip(params, has.tolist()):
        if any_rank:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad)

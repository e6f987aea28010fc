"""Object collectives (broadcast, all-gather of picklable objects) whose tensors outlive the process group.

``torch.distributed.broadcast_object_list`` and ``all_gather_object`` pickle into tensors
that only the call holds. When it returns, the Python side lets go of them while one of
gloo's worker threads may still hold the finished work, and with it the last reference:
that thread must then take the GIL to free the tensors' Python objects. Until torch 2.8
(pytorch/pytorch#154976) the process group's destructor joins those threads *holding*
the GIL, so a ``destroy_process_group()`` reached in that window never returns. On a
loaded machine it is reached there often enough to hang a command now and then: 3 and 4 of
20 two-process launches under torch 2.2 on a busy 2-core machine, none of 53 with the
collectives here (benchmarks/README.md, section 15).

The collectives here keep every tensor they hand to the backend in :data:`_HELD` until the
group is gone (:func:`release_held`, called by :mod:`posviz.train.processes` right after
``destroy_process_group``). A worker thread then only drops a reference, and needs no GIL.
"""

from __future__ import annotations

import pickle
from typing import Any

#: Every tensor handed to a collective here, kept until the process group is destroyed.
_HELD: list[Any] = []


def _device() -> Any:
    """Where the default group's collectives take their tensors: the current GPU under NCCL, else the CPU."""
    import torch
    import torch.distributed as dist

    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _held(tensor: Any) -> Any:
    _HELD.append(tensor)
    return tensor


def _encode(obj: Any, device: Any) -> Any:
    import torch

    data = bytearray(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))  # never empty: a pickle has a header
    return _held(torch.frombuffer(data, dtype=torch.uint8).to(device))


def _decode(tensor: Any, size: int) -> Any:
    return pickle.loads(tensor[:size].cpu().numpy().tobytes())


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """``obj`` of process ``src``, in every process (a collective: every process calls it; the others' ``obj`` is ignored).

    Parameters
    ----------
    obj
        Picklable; read in process ``src`` only.
    src
        The rank that sends.
    """
    import torch
    import torch.distributed as dist

    device = _device()
    sending = dist.get_rank() == src
    payload = _encode(obj, device) if sending else None
    size = _held(torch.tensor([payload.numel() if payload is not None else 0], dtype=torch.long, device=device))
    dist.broadcast(size, src)
    if payload is None:
        payload = _held(torch.empty(int(size.item()), dtype=torch.uint8, device=device))
    dist.broadcast(payload, src)
    return obj if sending else _decode(payload, int(size.item()))


def all_gather_objects(obj: Any) -> list[Any]:
    """Every process's ``obj``, in rank order, in every process (a collective: every process calls it).

    Parameters
    ----------
    obj
        Picklable.
    """
    import torch
    import torch.distributed as dist

    device, world = _device(), dist.get_world_size()
    payload = _encode(obj, device)
    size = _held(torch.tensor([payload.numel()], dtype=torch.long, device=device))
    sizes = [_held(torch.zeros(1, dtype=torch.long, device=device)) for _ in range(world)]
    dist.all_gather(sizes, size)
    lengths = [int(s.item()) for s in sizes]
    padded = _held(torch.zeros(max(lengths), dtype=torch.uint8, device=device))
    padded[: payload.numel()] = payload
    parts = [_held(torch.empty(max(lengths), dtype=torch.uint8, device=device)) for _ in range(world)]
    dist.all_gather(parts, padded)
    return [_decode(part, length) for part, length in zip(parts, lengths, strict=True)]


def release_held() -> None:
    """Let go of the tensors kept by the collectives here; call once the process group is destroyed."""
    _HELD.clear()

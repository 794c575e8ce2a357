"""torchrun (python -m torch.distributed.run), for the multi-process test.

Debian 12's PyTorch 1.13 predates Python 3.11, and its torchrun fails there before starting any process
(AttributeError: 'NoneType' object has no attribute 'get', in torch.distributed.elastic.multiprocessing.api.to_map,
when no --redirects is given). This passes the default it meant, and then runs torchrun as it is.
"""
import sys

import torch.distributed.elastic.multiprocessing as mp
import torch.distributed.elastic.multiprocessing.api as api
from torch.distributed.run import main

_to_map = api.to_map


def to_map(value, nprocs):
    return _to_map(api.Std.NONE if value is None else value, nprocs)


api.to_map = to_map
mp.to_map = to_map

if __name__ == "__main__":
    sys.exit(main())

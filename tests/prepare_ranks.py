"""One rank of a two-process gloo run that builds the SFT trainer and trains it, for test_data_prep.py: the
process group is formed first, with a collective timeout shorter than rank 0's preparation of the data
(rank 0 waits `delay` seconds before it starts: the preparation of a larger file). The other rank must
wait for the data on the cache's files, with no collective in flight, or the timeout ends it.

    RANK=r LOCAL_RANK=r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=p python prepare_ranks.py CONFIG DELAY TIMEOUT
"""

from __future__ import annotations

import datetime
import os
import sys
import time


def main(config: str, delay: float, timeout: float) -> None:
    import torch.distributed as dist

    from autotrain.config.load import load_config
    from autotrain.trainers import build_trainer
    from autotrain.training.plan import resolve_plan

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout))
    cfg = load_config(config, []).config
    if dist.get_rank() == 0:
        time.sleep(delay)
    trainer, _ = build_trainer(cfg, resolve_plan(cfg), [])
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    print(f"rank {dist.get_rank()} trained {trainer.state.global_step} steps, loss {losses[-1]:.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]))
    os._exit(0)  # gloo's threads torn down at exit abort the process now and then; the work is done

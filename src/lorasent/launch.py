"""Several processes for one model stage, through ``accelerate launch``.

``lorasent baseline|train|evaluate`` runs in one process unless params.yaml asks for
more (``base.num_processes`` > 1) or, for train, names an accelerate config file
(``train.accelerate_config``: FSDP, several machines). Then the command runs
``accelerate launch`` (torch distributed, started by torchrun: RCCL on ROCm, NCCL on
CUDA, gloo on the CPU), which runs the same stage in each process, and waits for it;
``dvc.yaml`` keeps one command per stage.

In the launched processes:

- training is data parallel through ``Trainer`` (FSDP when the config file says so),
  the schedule counting optimiser steps over all processes;
- scoring (baseline, evaluate, validation) hands out its length-sorted batches to the
  processes in turn and gathers the scores back in input order, so every process
  scores the same batches a single process would, and the metrics are the same;
- only the main process (rank 0) writes files.

Baseline and evaluate score with the whole model in each process (data parallel on one
machine); ``train.accelerate_config`` is for training only. ``LORASENT_ACCELERATE_ARGS``
adds arguments to ``accelerate launch`` on one machine, such as ``--machine_rank=1`` on
the second machine of a multi-machine training. Under a config file the rendezvous gives
up after :data:`RENDEZVOUS_TIMEOUT_S` (torchrun's ``--rdzv_conf timeout=``; one in
``LORASENT_ACCELERATE_ARGS`` replaces it), and a machine other than the main one first
waits that long for the main machine's port, failing in one line if nobody listens.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from lorasent.errors import LorasentError

EXTRA_ARGS_ENV = "LORASENT_ACCELERATE_ARGS"
# seconds a machine waits for the others to meet (torch's static rendezvous: 600 unless
# told); a machine other than the main one waits as long for the main one's port first
RENDEZVOUS_TIMEOUT_S = 60


def is_launched() -> bool:
    """Whether this process was started by ``accelerate launch`` or torchrun, which set
    ``WORLD_SIZE`` in every process they start."""
    return "WORLD_SIZE" in os.environ


def needs_launch(num_processes: int, config: str | None = None) -> bool:
    """Whether a stage should start ``accelerate launch`` rather than run here."""
    return (num_processes > 1 or config is not None) and not is_launched()


def launch_command(stage: str, params_path: str | Path, num_processes: int,
                   config: str | None = None) -> list[str]:
    """The ``accelerate launch`` command line that runs ``lorasent <stage>`` in
    ``num_processes`` processes (``base.num_processes``), or as the accelerate config file
    ``config`` says (``train.accelerate_config``; ``num_processes`` > 1 overrides its
    count).

    Without a config file: one machine, torch distributed (accelerate's ``--multi_gpu``
    launcher, which is torchrun; on a machine without GPUs its processes use gloo), on a
    free port, so that experiments run at once (``dvc queue start -j N``) do not meet.
    Precision stays ``base.precision``'s (accelerate's mixed precision is off).

    Raises:
        LorasentError: ``config`` names no file.
    """
    cmd = [sys.executable, "-m", "accelerate.commands.launch"]
    if config is not None:
        if not Path(config).is_file():
            raise LorasentError(f"train.accelerate_config: {config} is not a file; name an "
                                "accelerate config (see configs/accelerate/) or set it to null")
        cmd += ["--config_file", str(config), "--rdzv_conf", f"timeout={RENDEZVOUS_TIMEOUT_S}"]
    else:
        cmd += ["--multi_gpu", "--num_machines", "1", "--mixed_precision", "no",
                "--dynamo_backend", "no", "--main_process_port", str(_free_port())]
    if num_processes > 1:
        cmd += ["--num_processes", str(num_processes)]
    cmd += shlex.split(os.environ.get(EXTRA_ARGS_ENV, ""))
    return cmd + ["-m", "lorasent.cli", stage, "--params", str(params_path)]


def launch(stage: str, params_path: str | Path, num_processes: int,
           config: str | None = None) -> int:
    """Run ``lorasent <stage>`` under ``accelerate launch``; returns its exit status."""
    cmd = launch_command(stage, params_path, num_processes, config)
    if config is not None:
        wait_for_main_machine(cmd)
    print(f"lorasent {stage}: {' '.join(shlex.quote(c) for c in cmd)}", file=sys.stderr,
          flush=True)
    return subprocess.run(cmd).returncode


def wait_for_main_machine(cmd: list[str]) -> None:
    """On a machine other than the main one (``machine_rank`` > 0) of a multi-machine
    ``accelerate launch`` command line ``cmd``: wait until the main machine's
    ``main_process_ip:main_process_port`` accepts a connection, for the rendezvous
    timeout of ``cmd`` at most (no-op on the main machine and on one machine).

    Raises:
        LorasentError: nobody listened there in time (one line: where, and what to do).
    """
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import launch_command_parser
    from torch.distributed.elastic.rendezvous.utils import _parse_rendezvous_config

    args = launch_command_parser().parse_args(cmd[3:])  # accelerate's reading of its args
    config = load_config_from_file(args.config_file)
    rank, machines, ip, port = (
        getattr(args, name) if getattr(args, name) is not None else getattr(config, name)
        for name in ("machine_rank", "num_machines", "main_process_ip", "main_process_port"))
    if machines <= 1 or rank == 0:
        return
    timeout = int(_parse_rendezvous_config(args.rdzv_conf or "").get(
        "timeout", RENDEZVOUS_TIMEOUT_S))
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((ip, int(port)), timeout=2):
                return
        except OSError:
            if time.monotonic() >= deadline:
                raise LorasentError(
                    f"machine rank {rank}: nobody listens at the main machine's "
                    f"{ip}:{port} after {timeout} s; start the train stage on the main "
                    "machine (rank 0) first, and check main_process_ip, main_process_port "
                    "and that the port is open between the machines") from None
            time.sleep(0.5)


def init_processes(device: str) -> None:
    """Join the process group of a launched run (no-op otherwise): accelerate's
    ``PartialState`` picks the backend (gloo when ``device`` resolves to the CPU) and,
    on GPUs, this process's device."""
    if is_launched():
        from accelerate import PartialState

        from lorasent.environment import resolve_device

        PartialState(cpu=resolve_device(device).type == "cpu")


def rank_and_world() -> tuple[int, int]:
    """``(rank, number of processes)``; ``(0, 1)`` outside a launched run."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def is_main() -> bool:
    """Whether this process writes the outputs (rank 0, or the only process)."""
    return rank_and_world()[0] == 0


def barrier() -> None:
    """Wait until every process of a launched run gets here (no-op in one process)."""
    import torch.distributed as dist

    if rank_and_world()[1] > 1:
        dist.barrier()


def gather(obj: Any) -> list[Any]:
    """Every process's ``obj``, in rank order (``[obj]`` in one process)."""
    import torch.distributed as dist

    _, world = rank_and_world()
    if world == 1:
        return [obj]
    found: list[Any] = [None] * world
    dist.all_gather_object(found, obj)
    return found


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

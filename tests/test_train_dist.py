"""Multi-GPU training on the CPU: a real 2-process gloo DDP job through torchrun."""

import pytest
import torch
from fakes.datasets import mnist5k_dir

from dlbench.data import load_dataset
from dlbench.records.train import TrainConfig
from dlbench.training.loop import train_run
from dlbench.training.mlperf import check_log
from dlbench.training.runner import TorchrunRunner

pytestmark = pytest.mark.slow


def _cfg(data_dir, **kw):
    d = dict(dataset="mnist5k", model="tiny_mlp", batch_size=64, target=0.85, max_epochs=4,
             data_dir=data_dir, throughput_steps=3, device="cpu")
    d.update(kw)
    return TrainConfig(**d)


def test_ddp_on_two_gloo_processes_and_a_run_that_fails_in_the_job(tmp_path):
    data_dir = mnist5k_dir(tmp_path)
    # The job's second run names a model no rank can build: it fails after the first finished.
    cfgs = [_cfg(data_dir, gpus=2, seed=0), _cfg(data_dir, gpus=2, seed=1, model="no_such_net")]
    ok, failed = TorchrunRunner(timeout_s=240, pg_timeout_s=120).run_setup(cfgs, {"host": "t"})

    assert ok.ok, ok.error
    assert ok.world == 2 and ok.backend == "gloo" and len(ok.rank_hosts) == 2
    assert ok.samples_per_epoch == 4000 and ok.launch_env["NCCL_NVLS_ENABLE"] == "0"
    path = tmp_path / "ddp.log"
    path.write_text(ok.mllog)
    assert check_log(path).passed
    # both ranks measured the side figures: all samples over the slower rank's time
    assert len(ok.pipeline["per_rank"]) == 2 and ok.pipeline["samples"] == 2 * 3 * 64
    # 2 ranks x 64 see the same samples per step as 1 process x 128: the same training
    data = load_dataset("mnist5k", data_dir)
    one = train_run(_cfg(data_dir, batch_size=128, seed=0, throughput_steps=0), data,
                    torch.device("cpu"), mllog=False)
    assert ok.eval_accuracy == pytest.approx(tuple(one["eval_accuracy"]), abs=0.005)
    assert ok.train_loss == pytest.approx(tuple(one["train_loss"]), rel=1e-3)

    # the failure is a record with the rank's error, and the finished run was kept
    assert failed.status == "error" and failed.config.seed == 1
    assert "no_such_net" in failed.error and "rank " in failed.error

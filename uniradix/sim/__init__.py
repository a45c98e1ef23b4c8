"""Workloads, trace loaders, the scheduler and the replayer behind `uniradix replay`."""

from uniradix.sim.batch import ModelRunner
from uniradix.sim.replay import ReplayOptions, ReplayResult, run_replay
from uniradix.sim.request_spec import RequestSpec
from uniradix.sim.scheduler import Scheduler
from uniradix.sim.scheduler_config import SchedulerConfig
from uniradix.sim.workloads import WORKLOADS, generate_workload

__all__ = [
    "WORKLOADS",
    "ModelRunner",
    "ReplayOptions",
    "ReplayResult",
    "RequestSpec",
    "Scheduler",
    "SchedulerConfig",
    "generate_workload",
    "run_replay",
]

"""How long a job is: total training samples from --samples, or --epochs with --dataset-size,
or the stated default; conflicts and absurd sizes are one-line usage errors naming the flags.

A job is bounded at MAX_SAMPLES (ten billion samples: pre-training a 7B decoder on 15
trillion tokens at sequence 4096 is 3.7 billion), so a typo such as an extra six zeros is an
error rather than a plan priced in billions of dollars.
"""

from __future__ import annotations

import math

from orchestrator.errors import UsageError
from orchestrator.sizing.job import JobSpec

DEFAULT_SAMPLES = 100_000  # when neither --samples nor --epochs/--dataset-size is given
MAX_SAMPLES = 10_000_000_000


def job_samples(job: JobSpec) -> tuple[int, bool]:
    """Total training samples for the job and whether the default was assumed."""
    if job.samples is not None and job.epochs is not None:
        raise UsageError(
            f"--samples {job.samples} and --epochs {job.epochs:g} both set the job's length;"
            " give one (--epochs with --dataset-size)"
        )
    if job.epochs is not None and job.dataset_size is None:
        raise UsageError(
            f"--epochs {job.epochs:g} needs --dataset-size N (samples in the dataset);"
            " or give --samples"
        )
    if job.dataset_size is not None and job.epochs is None and job.samples is None:
        raise UsageError(f"--dataset-size {job.dataset_size} needs --epochs E")
    if job.samples is not None and job.dataset_size is not None:
        raise UsageError(
            f"--samples {job.samples} and --dataset-size {job.dataset_size} are two ways to size"
            " the job; give --samples, or --epochs with --dataset-size"
        )
    if job.samples is not None:
        samples, flags = job.samples, f"--samples {job.samples}"
    elif job.epochs is not None and job.dataset_size is not None:
        samples = max(1, math.ceil(job.epochs * job.dataset_size))
        flags = f"--epochs {job.epochs:g} --dataset-size {job.dataset_size}"
    else:
        return DEFAULT_SAMPLES, True
    if samples > MAX_SAMPLES:
        raise UsageError(
            f"{flags} is {samples:,} samples, more than the {MAX_SAMPLES:,} orch plans for;"
            " check the number"
        )
    return samples, False

"""Synthesis as a Ray Job: submit it over the cluster's job API, follow its status and log, and return
the summary the run wrote under `out`.

Each complete log line of the job goes to `progress` (in a Prefect task, the flow run's log) as it
appears. A job that fails or is stopped raises `RayJobFailed` with Ray's message and the job's last
log lines; a follower that is interrupted stops its job first. Nothing is lost either way: the run
resumes from its published shards when submitted again.
"""

from __future__ import annotations

import contextlib
import time

from dualview_core.synthesis import job_spec
from dualview_core.config import SynthesisConfig
from tasks.synthesis.record_store import RecordStore
from tasks.progress import Progress


class RayJobFailed(RuntimeError):
    """The submitted synthesis job ended FAILED or STOPPED."""


def run_as_job(seeds: str, seed_options: dict | None, out: str, out_options: dict | None, cfg: SynthesisConfig,
               progress: Progress = print) -> dict:
    from ray.job_submission import JobSubmissionClient

    job = cfg.ray_job
    if job is None:
        raise ValueError("run_as_job needs a config with ray_job set")
    spec = job_spec.job_spec(seeds, seed_options, out, out_options, cfg)  # refuses credentials before submitting
    client = JobSubmissionClient(job.address)
    job_id = client.submit_job(entrypoint=job_spec.entrypoint(spec), submission_id=job_spec.submission_id(spec["out"], time.time()),
                               metadata={"dualview.out": spec["out"]})
    progress(f"synthesis: submitted as Ray job {job_id} to {job.address}")
    seen = 0
    try:
        while True:
            status = client.get_job_status(job_id).value  # read before the log: a finished job's log is complete
            log = client.get_job_logs(job_id)
            lines, seen = job_spec.new_lines(log, seen, finished=status in job_spec.TERMINAL)
            for line in lines:
                progress(line)
            if status in job_spec.TERMINAL:
                break
            time.sleep(job.poll_s)
    except BaseException:
        with contextlib.suppress(Exception):  # the cluster may be what went away
            client.stop_job(job_id)
        raise
    if status != job_spec.SUCCEEDED:
        raise RayJobFailed(job_spec.failure(job_id, status, client.get_job_info(job_id).message, log, job.tail_lines))
    progress(f"synthesis: Ray job {job_id} succeeded")
    return RecordStore(spec["out"], spec["out_options"]).manifest()["summary"]

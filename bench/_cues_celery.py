"""The Celery peer of bench/cues.py part (d): a no-op task and an end marker, Redis broker.

The worker (`celery -A bench._cues_celery worker --pool=solo`) and the producer in the bench
process both read the broker URL, queue name and prefetch from the environment the bench sets.
"""

from __future__ import annotations

import os
import time

from celery import Celery

BROKER_ENV = "CB_BENCH_CELERY_BROKER"
QUEUE_ENV = "CB_BENCH_CELERY_QUEUE"
PREFETCH_ENV = "CB_BENCH_CELERY_PREFETCH"  # the solo worker's prefetch multiplier

app = Celery("cbbench", broker=os.environ.get(BROKER_ENV), backend=os.environ.get(BROKER_ENV))
app.conf.update(
    task_default_queue=os.environ.get(QUEUE_ENV, "cbbench"),
    task_ignore_result=True,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    worker_prefetch_multiplier=int(os.environ.get(PREFETCH_ENV, "4")),
)


@app.task(name="cbbench.noop")  # type: ignore[untyped-decorator]
def noop() -> None:
    """The unit of work: nothing."""


@app.task(name="cbbench.mark", ignore_result=False)  # type: ignore[untyped-decorator]
def mark() -> float:
    """Sent after the no-ops: the solo worker runs it last, so its time ends the measurement."""
    return time.time()

"""`vitviz stats --ray`: the same statistics as stats.py, scheduled by Ray Data over a cluster (or a local Ray).

The file list becomes a Ray dataset; `map_batches` hands batches of paths to a pool of `StatsWorker` actors,
each holding the model once (one per GPU, or CPU workers). A worker reads its files with vitviz's own loader,
runs them through stats.py's batched forward, and returns the batch's float64 sums and the files it skipped.
The driver adds the sums, which is exact whatever the batches: the table equals the single-process one. Ray
retries a batch whose worker dies, and reports progress with its own bars. Install with
`pip install "vitviz[ray]"`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .stats import Sums, Table


class RayUnavailableError(RuntimeError):
    """Ray did not start here, or its cluster could not be reached."""


def start(address: str | None, workers: int | None) -> None:
    """Connect to the Ray cluster at `address`, or start a local Ray with `workers` CPUs (2 by default); a
    RayUnavailableError with the first line of Ray's own message where it cannot."""
    import ray

    try:
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(num_cpus=workers or 2, log_to_driver=False)
    except Exception as exc:  # Ray 2.60 raises a bare Exception when its node times out, ConnectionError and others
        ray.shutdown()  # the processes that did start
        where = f"the Ray cluster at {address} could not be reached" if address else "a local Ray did not start"
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RayUnavailableError(f"{where} ({reason.rstrip('.')})") from exc


class StatsWorker:
    """One Ray actor: the model, loaded once, and the statistics of each batch of paths it is given."""

    def __init__(self, model: str, device: str, longest: int | None, batch: int, threads: int):
        import torch

        from .models import load_model

        torch.set_num_threads(threads)
        self.model = load_model(model, device=device)
        self.longest, self.batch = longest, batch

    def __call__(self, paths: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from .stats import over_images

        skipped: list[str] = []
        files = [Path(p) for p in paths["path"]]
        try:
            table, _ = over_images(
                self.model,
                files,
                self.longest,
                self.batch,
                on_skip=lambda p, e: skipped.append(f"{p}: {e}"),
                progress_bar=False,
            )
            sums = Sums.of_table(table)
        except ValueError:
            if len(skipped) < len(files):
                raise
            # no file of this batch could be read: each is named in `skipped`
            sums = Sums.of(self.model.name, np.zeros((0, 2, self.model.num_layers, self.model.num_heads)))
        return {
            "images": np.array([sums.images]),
            "total": sums.total[None],
            "squares": sums.squares[None],
            "skipped": np.array(["\n".join(skipped)], dtype=object),
        }


def over_images(
    model: str,
    files: list[Path],
    longest: int | None = None,
    batch: int = 4,
    address: str | None = None,
    workers: int | None = None,
    device: str = "auto",
    on_skip=lambda path, reason: None,
) -> tuple[Table, int]:
    """(the table over the images that could be read, how many were skipped), as `stats.over_images`, on Ray.

    model: a name `load_model` takes (each worker loads it). address: a Ray cluster's ("auto" for the one this
    machine belongs to); None starts a local Ray with `workers` CPUs. workers: model replicas, one per GPU
    where the device is a GPU (default: every GPU of the cluster, else 2). on_skip(path, reason) names each
    file a worker could not read."""
    import ray

    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    if not ray.is_initialized():
        start(address, workers)
    gpus = int(ray.cluster_resources().get("GPU", 0)) if device != "cpu" else 0
    workers = workers or gpus or 2
    cpus = max(1, int(ray.cluster_resources().get("CPU", workers)) // workers)
    ds = ray.data.from_items([{"path": str(p)} for p in files])
    partial = ds.map_batches(
        StatsWorker,
        fn_constructor_kwargs=dict(
            model=model, device="cuda" if gpus else "cpu", longest=longest, batch=batch, threads=cpus
        ),
        batch_size=batch,  # one forward batch per call where the files share a size: every worker gets some
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=workers),
        num_cpus=cpus,
        num_gpus=1 if gpus else 0,
    )
    sums, skipped = None, 0
    for row in partial.iter_rows():
        for line in filter(None, str(row["skipped"]).split("\n")):
            path, _, reason = line.partition(": ")
            on_skip(path, reason)
            skipped += 1
        part = Sums(model, int(row["images"]), np.asarray(row["total"]), np.asarray(row["squares"]))
        sums = part if sums is None else sums + part
    if sums is None:
        raise ValueError("no image could be read")
    table = sums.table()
    return table, skipped

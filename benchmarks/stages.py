"""Where a server's CPU goes, by stage: py-spy samples the server's Python threads (`record`), and `table` sorts the
samples' stacks into the stages of a student's work (decoding, the forward, the dense head's second forward, the
fusions, the thresholds, the rolls, the Explorer's layers, the drawing, Gradio and its web server), in CPU-seconds.

py-spy sees Python threads only, and counts a thread in every sample where it is not idle: running, or ready to
run and waiting for a core, or inside a torch call whose worker threads do the work. So the samples give each
stage's share of the server's busy Python time, and the table gives each stage that share of the server's measured
CPU-seconds (from /proc): an apportioning, not a per-stage clock. torch's worker threads have no Python stack and
are counted with the stage whose thread called them.

`python -m benchmarks.stages PROFILE.txt [--total-cpu-s S]` prints the table of a recorded file again.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import signal
import subprocess
from pathlib import Path

RATE = 50  # samples a second per thread

# (stage, markers): a stack belongs to the first stage one of whose markers it holds (py-spy frames read
# "function (file:line)"); the innermost work is named first, so a rollout inside a view counts as the rollout
STAGES = (
    ("the site's build (at the lowest priority)", ("vitviz/site/", "vitviz/app/site.py", "torch/onnx/")),
    ("the background warm", ("Server._warmer", "warm_step")),
    ("the dense head's second forward", ("dense_maps_of", "dense_map_of", "VitModel.dense_map ")),
    ("thresholds", ("discard_thresholds", "percent_thresholds", "_threshold (torch")),
    ("rolls (rollout)", ("rollouts (vitviz/maps.py", "rollout (vitviz/maps.py", "_roll ", "PendingRoll")),
    ("fusions", ("ForwardFusions", "_fused_layers", "fused (vitviz/")),
    ("decoding", ("vitviz/preprocess.py",)),
    ("the forward", ("VitModel.forward", "vitviz/capture.py", "vitviz/forward_hooks.py", "transformers/")),
    ("the Explorer's layers", ("vitviz/explorer.py", "vitviz/app/tabs/explorer.py")),
    ("the statistics and maps", ("vitviz/maps.py", "vitviz/derived.py", "vitviz/analysis.py", "vitviz/inside.py")),
    ("drawing", ("vitviz/render.py", "vitviz/views/", "vitviz/plots.py", "vitviz/app/pictures.py", "cv2", "PIL/")),
    ("the lesson and sentences", ("vitviz/lesson.py", "vitviz/sentences.py")),
    ("Gradio and its web server", ("gradio/", "starlette/", "uvicorn/", "fastapi/", "anyio/", "h11/", "httptools")),
)


def record(pid: int, out: Path) -> subprocess.Popen:
    """Start py-spy on process `pid`, writing raw collapsed stacks to `out` until `stop`."""
    spy = shutil.which("py-spy")
    if spy is None:
        raise SystemExit("the profile needs py-spy: pip install py-spy")
    cmd = [spy, "record", "--pid", str(pid), "--rate", str(RATE), "--format", "raw", "--output", str(out)]
    return subprocess.Popen([*cmd, "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop(proc: subprocess.Popen) -> None:
    """Stop py-spy, which writes its file as it ends."""
    proc.send_signal(signal.SIGINT)
    proc.wait(60)


# Innermost frames that wait rather than work: an event loop in epoll, a worker on its queue, the main thread in
# Gradio's launch. py-spy counts them as active (it does not know their system calls as idle); left in, the web
# server's idle loop would take a share of the CPU apportioned.
WAITS = (
    "Selector.select (selectors.py",
    "Condition.wait (threading.py",
    "Event.wait (threading.py",
    "Blocks.block_thread (gradio/blocks.py",
    "Queue.get (queue.py",
)


def waiting(stack: str) -> bool:
    """Whether a sampled stack (frames joined by ";", outermost first) is a thread waiting for work."""
    innermost = stack.rsplit(";", 1)[-1]
    return any(w in innermost for w in WAITS)


def stage_of(stack: str) -> str:
    for name, markers in STAGES:
        if any(m in stack for m in markers):
            return name
    return "other"


def seconds_by_stage(path: Path, rate: int = RATE) -> dict[str, float]:
    """The sampled thread-seconds of each stage in a py-spy raw file ("stack count" per line)."""
    out: collections.Counter[str] = collections.Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit() and not waiting(stack):
            out[stage_of(stack)] += int(count) / rate
    return dict(out)


def table(path: Path, total_cpu_s: float | None = None, rate: int = RATE) -> str:
    """The stages as a Markdown table, largest first: each one's share of the samples, and that share of the
    server's CPU-seconds where `total_cpu_s` is given."""
    by = seconds_by_stage(path, rate)
    sampled = max(sum(by.values()), 1e-9)
    rows = ["| stage | share of the samples | CPU-s |", "|---|---:|---:|"]
    for name, s in sorted(by.items(), key=lambda kv: -kv[1]):
        cpu = f"{s / sampled * total_cpu_s:.1f}" if total_cpu_s is not None else "–"
        rows.append(f"| {name} | {s / sampled:.0%} | {cpu} |")
    if total_cpu_s is not None:
        rows.append(f"| **the server** | {sampled:.0f} thread-s sampled | **{total_cpu_s:.1f}** |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("profile", type=Path)
    parser.add_argument("--total-cpu-s", type=float, default=None)
    args = parser.parse_args(argv)
    print(table(args.profile, args.total_cpu_s))


if __name__ == "__main__":
    main()

"""Fuzz campaigns across cores: a run's episodes, for every config and seed asked for,
as independent tasks on worker processes; findings merged by signature, each shrunk once.

An episode is a fresh cache and a generator seeded by (seed, episode), so it gives the
same steps wherever it runs: a campaign's findings do not depend on how many jobs ran
it, and the first finding in plan order is the one a single process would have stopped
at. Workers are forked (torch already imported), run one torch thread each
(``checked_loop``), and report their steps through a queue, so the driver shows one
progress bar for the whole campaign.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import math
import multiprocessing
import queue
import time
from collections.abc import Callable, Iterable
from typing import Optional

from .config import MAX_SEED, FuzzConfig, default_jobs  # noqa: F401  (default_jobs: re-exported)
from .fuzz import EPISODE_STEPS, FuzzResult, episode_config, run_episode, shrink_result

REPORT_EVERY = 256  # steps between a worker's progress reports (a queue put costs the worker ~50 µs)


@dataclasses.dataclass(frozen=True)
class EpisodeTask:
    """One episode of one config and seed: the unit a worker runs."""

    config: FuzzConfig  # the episode's own (an option sweep's row applied)
    seed: int
    episode: int
    steps: int
    full_checks: bool = False


class EpisodeCrash(RuntimeError):
    """An episode raised instead of running or failing a check: which one it was."""


def plan(configs: Iterable[FuzzConfig], seeds: Iterable[int], steps: int, episode_steps: int = EPISODE_STEPS,
         option_sets: Optional[list] = None, full_checks: bool = False) -> list[EpisodeTask]:
    """``steps`` per config and seed, cut into episodes as ``fuzz()`` cuts them."""
    tasks = []
    for config in configs:
        for seed in seeds:
            for episode in range(math.ceil(steps / episode_steps)):
                size = min(episode_steps, steps - episode * episode_steps)
                tasks.append(EpisodeTask(episode_config(config, option_sets, episode), seed, episode, size, full_checks))
    return tasks


def signature(result: FuzzResult) -> tuple:
    """Two findings are one when the same check fails on the same components with the
    same faults on (whatever the page size, seed or step)."""
    finding = result.finding
    return (result.config.faults, result.config.components, finding.kind, finding.name)


@dataclasses.dataclass
class CampaignResult:
    jobs: int
    tasks: int  # planned
    results: list[FuzzResult]  # the tasks that ran, in plan order
    seconds: float  # fuzzing, not shrinking
    findings: list[FuzzResult] = dataclasses.field(default_factory=list)  # one per signature, first in plan order
    interrupted: bool = False
    seeds_run: int = 0  # run_seeds_until: the seeds it got through

    @property
    def steps_run(self) -> int:
        return sum(r.steps_run for r in self.results)

    @property
    def ops_per_second(self) -> float:
        return self.steps_run / self.seconds if self.seconds else 0.0

    def per_config(self) -> list[dict]:
        """What each config ran, in plan order: its steps, episodes and the episodes
        that failed (a config's figure in a sweep's report)."""
        rows: dict[str, dict] = {}
        for result in self.results:
            label = result.config.label()
            row = rows.setdefault(label, {"config": label, "steps": 0, "episodes": 0, "failed_episodes": 0})
            row["steps"] += result.steps_run
            row["episodes"] += 1
            row["failed_episodes"] += result.finding is not None
        return list(rows.values())


def run_campaign(tasks: list[EpisodeTask], jobs: int, time_budget: Optional[float] = None,
                 on_steps: Optional[Callable[[int], None]] = None, shrink_budget: Optional[float] = 60.0,
                 shrink: bool = True, first: bool = False, ray: Optional[str] = None,
                 episode: Callable[..., FuzzResult] = run_episode,
                 shrinker: Callable[[FuzzResult, Optional[float]], FuzzResult] = shrink_result) -> CampaignResult:
    """Run every task (``jobs`` processes; 1: here, one after another), merge the
    findings by signature and shrink each once (in parallel too). ``time_budget``: no
    episode runs past it. ``first``: stop at the first failure in plan order (the tasks
    after it are skipped, or their results dropped), so the run is the same on any
    number of jobs. Ctrl-C stops the campaign and keeps what finished. ``ray``: the
    tasks run on a Ray cluster at that address (``ray_pool.LOCAL``: a local one)
    instead, on as many workers as it has CPUs. ``episode`` and ``shrinker`` (module-level
    functions, so a worker can be sent them) replace ``run_episode`` and
    ``shrink_result``: the differential campaign against SGLang runs its own."""
    start = time.monotonic()
    deadline = None if time_budget is None else time.time() + time_budget
    report = on_steps or (lambda n: None)
    results: dict[int, FuzzResult] = {}
    interrupted = False
    if ray is not None:
        from .ray_pool import RayPool

        pool = RayPool(ray)
        jobs = pool.workers
    else:
        jobs = max(1, min(jobs, len(tasks)))
        pool = _pool(jobs) if jobs > 1 else None
    try:
        try:
            if pool is None:
                for k, task in enumerate(tasks):
                    results[k] = _run_task(task, deadline, report, episode)
                    if first and results[k].finding is not None:
                        break
            else:
                results.update(_run_parallel(pool, tasks, deadline, report, first, episode))
        except _Interrupted as stop:
            results.update(stop.results)
            interrupted = True
        except KeyboardInterrupt:
            interrupted = True
        done = [results[k] for k in sorted(results)]
        seconds = time.monotonic() - start  # the fuzzing's, without the shrinking
        findings = merge(done)[:1] if first else merge(done)
        if shrink and findings and not interrupted:
            findings = _shrink_all(pool, findings, shrink_budget, shrinker)
    finally:
        if pool is not None:
            pool.shutdown(wait=not interrupted, cancel_futures=True)
    return CampaignResult(jobs, len(tasks), done, seconds, findings, interrupted)


def merge(results: list[FuzzResult]) -> list[FuzzResult]:
    """The first result (in plan order) of each failure signature."""
    first: dict[tuple, FuzzResult] = {}
    for result in results:
        if result.finding is not None:
            first.setdefault(signature(result), result)
    return list(first.values())


def map_in_workers(fn: Callable, items: list, jobs: int, ray: Optional[str] = None) -> list:
    """``[fn(item) for item in items]`` on ``jobs`` worker processes (1: here) or on
    Ray, in order: for work coarser than an episode (a fault's whole detection)."""
    if ray is not None:
        from .ray_pool import RayPool

        pool = RayPool(ray)
        try:
            return pool.map(fn, items)
        finally:
            pool.shutdown(cancel_futures=True)
    jobs = max(1, min(jobs, len(items)))
    if jobs == 1:
        return [fn(item) for item in items]
    pool = _pool(jobs)
    try:
        return list(pool.map(fn, items))
    finally:
        pool.shutdown(cancel_futures=True)


# ---- the processes -------------------------------------------------------------------------------

_progress: Optional[multiprocessing.Queue] = None  # in a worker: where its steps are reported


def _pool(jobs: int) -> concurrent.futures.ProcessPoolExecutor:
    # fork where there is one: a worker starts in milliseconds with torch already imported (a
    # spawned one takes seconds to import it). Each runs torch on one thread (checked_loop), as
    # PyTorch's own forked DataLoader workers do.
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    progress = context.Queue()
    pool = concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context, initializer=_start_worker,
                                                  initargs=(progress,))
    pool.progress = progress  # type: ignore[attr-defined]
    return pool


def _start_worker(progress: multiprocessing.Queue) -> None:
    global _progress
    _progress = progress


def _worker_task(k: int, task: EpisodeTask, deadline: Optional[float], episode: Callable = run_episode) -> FuzzResult:
    """Task ``k`` in a worker: its steps so far reported as ``(k, steps)``."""
    done = 0

    def report(n: int) -> None:
        nonlocal done
        done += n
        if _progress is not None:
            _progress.put((k, done))

    return _run_task(task, deadline, report, episode)


def _run_task(task: EpisodeTask, deadline: Optional[float], report: Callable[[int], None],
              episode: Callable = run_episode) -> FuzzResult:
    """One episode; its steps reported every ``REPORT_EVERY`` and at its end."""
    budget = None if deadline is None else deadline - time.time()
    if budget is not None and budget <= 0:
        return FuzzResult(task.config, task.seed, 0, 0.0, task.episode)
    reported = 0

    def on_step(n: int) -> None:
        nonlocal reported
        if n - reported >= REPORT_EVERY:
            report(n - reported)
            reported = n

    try:
        result = episode(task.config, task.seed, task.episode, task.steps, budget, on_step,
                         full_checks=task.full_checks)
    except Exception as exc:  # a bug, not a finding: say which episode, so it can be run again alone
        raise EpisodeCrash(f"{task.config.label()}, seed {task.seed}, episode {task.episode}: "
                           f"{type(exc).__name__}: {exc}") from exc
    if result.steps_run > reported:
        report(result.steps_run - reported)
    if result.finding is None:  # its steps are needed only to shrink or write a finding: not kept (or sent)
        result.run_steps, result.raw_steps = [], []
    return result


def _run_parallel(pool, tasks: list[EpisodeTask], deadline: Optional[float], report: Callable[[int], None],
                  first: bool = False, episode: Callable = run_episode) -> dict[int, FuzzResult]:
    """Every task's result by its index. ``first``: once task k fails, the tasks after
    it that have not started are cancelled, and any result after the earliest failure
    is dropped (every task before it still runs to its end)."""
    futures = {pool.submit(_worker_task, k, task, deadline, episode): k for k, task in enumerate(tasks)}
    results: dict[int, FuzzResult] = {}
    shown = [0] * len(tasks)  # steps reported per task; a finished task's are its result's
    cutoff = len(tasks)  # with ``first``: the earliest failing task so far
    pending = set(futures)
    try:
        while pending:
            finished, pending = concurrent.futures.wait(pending, timeout=0.2,
                                                        return_when=concurrent.futures.FIRST_COMPLETED)
            _drain(pool.progress, shown, results, report)
            for future in finished:
                k = futures[future]
                if future.cancelled() or k > cutoff:  # (a cancelled Ray task ends with an error instead)
                    continue
                results[k] = future.result()  # a worker's crash is the campaign's
                report(results[k].steps_run - shown[k])  # its last reports may still be on their way
                shown[k] = results[k].steps_run
                if first and results[k].finding is not None and k < cutoff:
                    cutoff = k
                    for later, j in futures.items():
                        if j > k:
                            later.cancel()  # only those not started: a running episode ends on its own
        for k in [k for k in results if k > cutoff]:  # ran before the failure was known: not this run's
            del results[k]
    except KeyboardInterrupt:
        for future, k in futures.items():  # keep what finished
            if future.done() and not future.cancelled() and future.exception() is None:
                results[k] = future.result()
        raise _Interrupted(results) from None
    return results


class _Interrupted(KeyboardInterrupt):
    def __init__(self, results: dict[int, FuzzResult]) -> None:
        super().__init__()
        self.results = results


def _drain(progress: multiprocessing.Queue, shown: list[int], finished: dict, report: Callable[[int], None]) -> None:
    """Report what the workers said they ran since; a finished task's late words are moot."""
    while True:
        try:
            k, steps = progress.get_nowait()
        except queue.Empty:
            return
        if k not in finished and steps > shown[k]:
            report(steps - shown[k])
            shown[k] = steps


def _shrink_all(pool, findings: list[FuzzResult], budget: Optional[float], shrinker: Callable) -> list[FuzzResult]:
    if pool is None:
        return [shrinker(result, budget) for result in findings]
    return list(pool.map(shrinker, findings, [budget] * len(findings)))


def run_seeds_until(tasks_for: Callable[[int], list[EpisodeTask]], first_seed: int, jobs: int, time_budget: float,
                    on_steps: Optional[Callable[[int], None]] = None, shrink_budget: Optional[float] = 60.0,
                    first: bool = False, **kwargs) -> CampaignResult:
    """``run_campaign`` over seed after seed (``tasks_for(seed)``'s episodes each) until
    ``time_budget`` is spent, or, with ``first``, until a seed finds something; the
    findings of every seed merged and shrunk once at the end. ``seeds_run`` says how
    many seeds ran."""
    deadline = time.monotonic() + time_budget
    results: list[FuzzResult] = []
    seconds, seed, interrupted, ran = 0.0, first_seed, False, 0
    while time.monotonic() < deadline and seed <= MAX_SEED:
        left = deadline - time.monotonic()
        round_ = run_campaign(tasks_for(seed), jobs, left, on_steps, shrink=False, first=first, **kwargs)
        results += [r for r in round_.results if r.steps_run]
        seconds += round_.seconds
        ran += 1
        seed += 1
        if round_.interrupted:
            interrupted = True
            break
        if first and round_.findings:
            break
    findings = merge(results)[:1] if first else merge(results)
    if findings and not interrupted:
        shrinker = kwargs.get("shrinker", shrink_result)
        findings = _shrink_all(None, findings, shrink_budget, shrinker)
    return CampaignResult(max(1, jobs), len(results), results, seconds, findings, interrupted, seeds_run=ran)

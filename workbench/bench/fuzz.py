"""``urc bench --fuzz``: the unfaulted cache under the fuzzer at scale — N ops per scale
config (Full p1/p4/p16, Full+SWA (1,4)/(4,2)/(16,16), Full+Mamba p1/p4, Full+SWA+Mamba),
every step checked, in episodes of 2,000 on a fresh cache. Reports ops per second and
any failure (which ``urc fuzz`` with the same config and seed reproduces and shrinks).
Each config runs in its own interpreter, so one can be rerun alone; a line is printed
as each finishes (a long run keeps what finished)."""

from __future__ import annotations

import json
import subprocess
import sys


def fuzz_report(ops: int, seed: int = 0, emit=print) -> list[dict]:
    from ..model.fuzzing.sweep import SCALE_CONFIGS

    rows = []
    for index, config in enumerate(SCALE_CONFIGS):
        proc = subprocess.run([sys.executable, "-m", "workbench.bench.fuzz", str(index), str(ops), str(seed)],
                              capture_output=True, text=True)
        row = json.loads(proc.stdout) if proc.returncode == 0 else {
            "config": config.label(), "error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
        rows.append(row)
        emit(row)
    return rows


def one_config(index: int, ops: int, seed: int) -> dict:
    from ..model.fuzzing.fuzz import fuzz
    from ..model.fuzzing.sweep import SCALE_CONFIGS

    config = SCALE_CONFIGS[index]
    result = fuzz(config, seed, ops)
    finding = result.finding
    return {"config": config.label(), "ops": result.steps_run, "seconds": round(result.seconds, 1),
            "ops_per_second": round(result.ops_per_second), "episodes": result.episode + 1,
            "finding": None if finding is None else f"{finding.check} at step {finding.step} of episode "
                                                    f"{result.episode}: {finding.message}"}


def jobs_report(ops: int, seed: int = 0, rounds: int = 2, emit=print) -> list[dict]:
    """How a campaign scales with worker processes: the same ``ops`` steps (one seed per
    core, episodes of 2,000) on one job and on every core, alternating ``rounds`` times in
    the same minutes (these machines drift), best of each, for the cheapest and the
    dearest config. Beside it, the machine's own ceiling: as many separate interpreters
    fuzzing at once for 10 s against one alone (shared caches, a VM's cores)."""
    from ..model.fuzzing.campaign import default_jobs, plan, run_campaign
    from ..model.fuzzing.sweep import SCALE_CONFIGS

    cores = default_jobs()
    rows = []
    for index in (0, 8):
        config = SCALE_CONFIGS[index]
        tasks = plan([config], range(seed, seed + cores), max(1, ops // cores))
        best: dict[int, float] = {}
        ceiling = 0.0
        for _ in range(rounds):
            for jobs in sorted({1, cores}):
                campaign = run_campaign(tasks, jobs, shrink=False)
                best[jobs] = max(best.get(jobs, 0.0), campaign.ops_per_second)
            ceiling = max(ceiling, _separate(index, seed, cores) / _separate(index, seed, 1))
        row = {"config": config.label(), "ops": sum(t.steps for t in tasks), "cores": cores,
               "ops_per_second": {str(j): round(v) for j, v in best.items()},
               "speedup": round(best[cores] / best[1], 2), "separate_processes_speedup": round(ceiling, 2)}
        rows.append(row)
        emit(row)
    return rows


CEILING_SECONDS = 10.0


def _separate(index: int, seed: int, processes: int) -> float:
    """Steps per second of ``processes`` separate interpreters fuzzing at once."""
    command = [sys.executable, "-m", "workbench.bench.fuzz", "--for", str(CEILING_SECONDS), str(index), str(seed)]
    procs = [subprocess.Popen(command[:-1] + [str(seed + k)], stdout=subprocess.PIPE, text=True)
             for k in range(processes)]
    return sum(int(p.communicate()[0]) for p in procs) / CEILING_SECONDS


def steps_for(index: int, seed: int, seconds: float) -> int:
    """Steps one fuzz of scale config ``index`` runs in ``seconds`` (after start-up)."""
    from ..model.fuzzing.fuzz import fuzz
    from ..model.fuzzing.sweep import SCALE_CONFIGS

    return fuzz(SCALE_CONFIGS[index], seed, 10**9, time_budget=seconds).steps_run


if __name__ == "__main__":
    if sys.argv[1] == "--for":  # the ceiling's separate interpreters
        print(steps_for(int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[2])))
    else:
        print(json.dumps(one_config(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))))

"""``urc fuzz``: its options and what it prints (the model is ``model/fuzzing/``).

Three modes: ``--list-faults`` prints the catalogue; ``--faults all`` fuzzes every fault
and prints the detection table; otherwise one fuzz run on one config, which on the
first failure shrinks it and writes a ready-to-commit scenario file (exit 1), or says
how many steps passed (exit 0).
"""

from __future__ import annotations

import functools
import json
import sys
from typing import Optional

from cache.tiers.hicache_config import WRITE_POLICIES

from ..model.scenarios.errors import printable
from ..model.scenarios.scenario import ScenarioError
from ..model.ops.spec import BASE, sglang_components
from .common import component_sets


def add_parser(command) -> None:
    fuzz = command("fuzz", "random op sequences, checked after every step; a failure is shrunk to a scenario file",
                   "Generate random op sequences (inserts, matches, locks, evictions, request flows) for a config, "
                   "check invariants, fingerprints and - with faults on - a fault-free twin's results after every "
                   "step; shrink the first failure to a minimal scenario that fails `urc run` the same way and "
                   "passes with faults = [].")
    fuzz.add_argument("--config", choices=component_sets(), metavar="COMPONENTS",
                      help="the cache's components: " + " | ".join(component_sets()) + " (default full; with no "
                           "config option at all, the configs are swept: see docs/how-to/fuzz.md)")
    fuzz.add_argument("--page-size", type=int, metavar="N", help="page size (default 1)")
    fuzz.add_argument("--sliding-window", type=int, metavar="N", help="SWA window (default 4)")
    fuzz.add_argument("--kv-size", type=int, metavar="N", help="Full pool tokens (default 48 pages)")
    fuzz.add_argument("--swa-kv-size", type=int, metavar="N", help="SWA pool tokens (default 3/4 of --kv-size)")
    fuzz.add_argument("--mamba-size", type=int, metavar="N", help="Mamba state slots (default 4)")
    fuzz.add_argument("--hicache", choices=WRITE_POLICIES,
                      metavar="POLICY", help="turn the host tier on with this write policy (write_through | "
                      "write_through_selective | write_back) and draw its ops too: load_back, evict_host, flush")
    fuzz.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                      help="a model option of the cache's [config] (repeatable; VALUE in TOML, a bare word as a "
                           "string: eviction_policy=lfu, mamba_max_states_per_path=2); see docs/reference/config.md, the config "
                           "reference")
    fuzz.add_argument("--sweep-options", action="store_true",
                      help="run the episodes through every option set the fuzzer knows for these components "
                           "(eviction policies, EAGLE, the Mamba and SWA options), one set per episode")
    fuzz.add_argument("--seed", type=int, default=0, metavar="S", help="the seed: a run is the same for a seed")
    fuzz.add_argument("--seeds", type=int, default=None, metavar="K",
                      help="fuzz K seeds, S to S+K-1, each for --steps (default 1; with --time-budget: seed after "
                           "seed until the budget is spent)")
    fuzz.add_argument("--steps", type=int, metavar="N", help="steps to run per config and seed (default 10,000 "
                      "on one config, in episodes of 2,000 on a fresh cache; swept: 2,000, or 3,000 in episodes of "
                      "300 with a fault)")
    fuzz.add_argument("--jobs", type=int, metavar="N",
                      help="worker processes the episodes run on (default, and at most without --force: the usable "
                           "cores); the findings do not depend on it: each episode's steps come from its seed and "
                           "number alone")
    fuzz.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                      help="run the episodes as Ray tasks instead: on the cluster at ADDRESS (ray://host:10001, or "
                           "auto), or with no address on a local Ray instance over this machine's cores; results and "
                           "shrunk reproductions come back here (needs: pip install 'unified-cache-workbench[ray]')")
    fuzz.add_argument("--against", choices=("sglang",),
                      help="differential fuzzing: run every generated episode on SGLang 0.5.23's cache too, in "
                           "lockstep (results every step, states every 8), and shrink any divergence — or an assert "
                           "SGLang raises on a valid sequence — to a scenario `urc run FILE --against sglang` "
                           "replays (unfaulted configs; needs SGLang 0.5.23, CPU only: make bridge-setup)")
    fuzz.add_argument("--first", action="store_true",
                      help="stop at the first failure (in the order the episodes are planned: config, seed, episode); "
                           "the episodes after it are skipped, and the result is still the same on any --jobs")
    fuzz.add_argument("--time-budget", type=float, metavar="SEC",
                      help="stop after this many seconds; without --seeds, draw seed after seed until then (with "
                           "--first: until one finds a failure)")
    fuzz.add_argument("--fault", action="append", default=[], metavar="NAME",
                      help="turn on a fault from the catalogue (repeatable; see --list-faults)")
    fuzz.add_argument("--faults", choices=("all", "new"),
                      help="all: fuzz every fault in turn and print the detection table; new: only the faults "
                           "-o DIR's detections.json has no row for, merged into it (with --force)")
    fuzz.add_argument("--list-faults", action="store_true", help="print the fault catalogue, one fault per line")
    fuzz.add_argument("-o", "--output", metavar="OUT.toml",
                      help="where to write the shrunk scenario (default: fuzz-FAULT-seedS.toml here); with --faults "
                           "all: a directory for one FAULT.toml per flagged fault and detections.json")
    fuzz.add_argument("--trace", metavar="OUT.jsonl",
                      help="also write the failing run, unshrunk, as a JSONL trace (urc tui --follow / urc tui)")
    fuzz.add_argument("--force", action="store_true",
                      help="overwrite existing output files, and start more --jobs than there are usable cores")
    fuzz.add_argument("--shrink-budget", type=float, default=60.0, metavar="SEC",
                      help="seconds the shrinker may take (default 60)")
    fuzz.add_argument("--full-checks", action="store_true", help="the full invariant sweep after every step")
    fuzz.add_argument("--json", action="store_true", help="print the result (or the detection table) as JSON")


def run(args) -> int:
    from ..model.fuzzing.config import FuzzConfig, check_plan, default_jobs  # light: checked before torch loads

    if args.list_faults:
        return _list_faults()
    for name in ("steps", "seeds", "jobs", "page_size", "sliding_window", "kv_size", "swa_kv_size", "mamba_size"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            raise ScenarioError(f"--{name.replace('_', '-')} must be a positive int (got {value})")
    args.until_budget = args.seeds is None and args.time_budget is not None  # seed after seed
    args.seeds = args.seeds or 1
    check_plan(args.seed, args.seeds)
    if args.ray is not None and args.jobs is not None:
        raise ScenarioError("--ray runs on the cluster's CPUs: leave out --jobs")
    if args.jobs is not None and args.jobs > default_jobs() and not args.force:  # each job is a process
        raise ScenarioError(f"--jobs {args.jobs} is more than the {default_jobs()} usable cores: give at most "
                            f"{default_jobs()}, or add --force to start {args.jobs} processes anyway")
    for name in ("time_budget", "shrink_budget"):
        value = getattr(args, name)
        if value is not None and not 0 < value:  # also refuses nan
            raise ScenarioError(f"--{name.replace('_', '-')} must be a positive number of seconds (got {value})")
    if args.against and (args.fault or args.faults):
        raise ScenarioError("--against sglang compares the fixed caches: SGLang's side runs no fault (leave out "
                            "--fault/--faults)")
    if args.faults:
        if args.fault or args.trace:
            raise ScenarioError(f"--faults {args.faults} runs the catalogue: leave out --fault and --trace")
        if args.faults == "new" and not args.output:
            raise ScenarioError("--faults new adds rows to a detection run: give its directory with -o")
        return _detection_table(args)
    options = parse_options(args.option)
    if all(getattr(args, flag) is None for flag in CONFIG_FLAGS):  # no config given: sweep them
        _check_fault_names(args.fault)
        from ..model.fuzzing.sweep import FAULT_EPISODE, against_configs, sweep_configs

        swept = against_configs() if args.against else sweep_configs(tuple(args.fault))
        configs = [c.with_options(options) for c in swept]
        episode = FAULT_EPISODE if args.fault else None
        steps = args.steps or (10 * FAULT_EPISODE if args.fault else 2_000)
    else:
        configs = [FuzzConfig(tuple((args.config or BASE).split(",")), args.page_size or 1, args.sliding_window or 4,
                              args.kv_size, args.swa_kv_size, args.mamba_size, tuple(args.fault),
                              args.hicache).with_options(options)]
        episode, steps = None, args.steps or 10_000
    for config in configs:
        _check_config(config)
    if args.against:
        configs = _bridged(configs)
    return _fuzz_once(configs, args, steps, episode)


def _bridged(configs: list) -> list:
    """The configs SGLang's side can run (its components, its storage rules); none is
    bad input, said before fuzzing."""
    from ..bridge.sglang_env import BridgeError, sglang_api
    from ..bridge.sglang_storage import unbridged_storage_field

    try:
        sglang_api(False)  # imported here, once (~14 s): forked workers inherit it
    except BridgeError as exc:
        raise ScenarioError(f"--against sglang: {exc}") from None
    kept = [c for c in configs if set(c.components) <= set(sglang_components())
            and not unbridged_storage_field(c.scenario_config())]
    if not kept:
        raise ScenarioError(f"--against sglang: SGLang has no cache for {configs[0].label()}")
    return kept


CONFIG_FLAGS = ("config", "page_size", "sliding_window", "kv_size", "swa_kv_size", "mamba_size", "hicache")


def _check_fault_names(names: list[str]) -> None:
    """Unknown faults are bad input before a sweep (each swept config carries what they need)."""
    from cache.components import COMPONENT_REGISTRY  # names only: no torch
    from cache.faults import check_fault_names

    try:
        check_fault_names(names, COMPONENT_REGISTRY)
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None


_KINDS = {int: "an int", str: "a string", bool: "true or false", list: "a list", dict: "a table"}


def parse_options(given: list[str]) -> dict:
    """``NAME=VALUE`` pairs: NAME a field of the config reference, VALUE a TOML value of
    the type a scenario's [config] takes (values are checked by ``CacheConfig``). A bare
    word is a string: the shell drops the quotes of eviction_policy="lfu"."""
    import re
    import tomllib

    from cache.config.reference import FIELD_NAMES, did_you_mean

    from ..model.scenarios.errors import shown
    from ..model.scenarios.fields import CONFIG_FIELDS
    from ..model.scenarios.inputs import TooLarge, toml_loads

    options = {}
    for item in given:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ScenarioError(f"--option {item!r}: give NAME=VALUE")
        if name not in FIELD_NAMES:
            raise ScenarioError(f"--option {shown(name)}: not a [config] field{did_you_mean(name)}; see the config "
                                "reference (docs/reference/config.md)")
        try:
            value = toml_loads(f"v = {text}")["v"]
        except (TooLarge, RecursionError) as exc:  # 5,000 nines; 5,000 ['s
            said = str(exc) if isinstance(exc, TooLarge) else "a value is nested too deeply"
            raise ScenarioError(f"--option {name}: {said}") from None
        except tomllib.TOMLDecodeError:
            if not re.fullmatch(r"[A-Za-z_][\w.-]*", text.strip()):
                raise ScenarioError(f"--option {name}: {shown(text)} is not a TOML value (a number, true/false, "
                                    "a quoted string, a [list] or an {inline table})") from None
            value = text.strip()  # a bare word: lfu, priority
        want = CONFIG_FIELDS.get(name)
        if want is not None and (not isinstance(value, want) or (want is int and isinstance(value, bool))):
            raise ScenarioError(f"--option {name}: must be {_KINDS.get(want, want.__name__)} (got {shown(value)})")
        options[name] = value
    return options


def _list_faults() -> int:
    from cache.faults import catalogue

    for fault in catalogue().values():
        needs = "+".join((BASE,) + tuple(c for c in fault.components if c != BASE))
        print(f"{fault.name}\t{needs}\t{fault.source}\t{fault.summary}")
    return 0


def _check_config(config) -> None:
    """A config the cache refuses (or an unknown fault) is bad input, said before fuzzing."""
    from cache.config.cache_config import CacheConfig

    cfg = config.scenario_config()
    try:
        CacheConfig.of(**{**cfg, "components": tuple(cfg["components"]), "faults": tuple(cfg.get("faults", ()))})
    except (ValueError, TypeError) as exc:
        raise ScenarioError(f"config cannot be built: {exc}") from None
    longest = config.longest_prompt()
    pools = [("--kv-size", cfg["kv_size"])] + ([("--swa-kv-size", cfg["swa_kv_size"])] if "swa_kv_size" in cfg else [])
    for option, size in pools:
        if size < longest:  # most prompts would be refused: the fuzzer would test nothing but refusals
            raise ScenarioError(f"{option} {size} cannot admit the fuzzer's prompts: they run up to {longest} tokens "
                                f"(16 pages and the window); give at least {longest}")


def _where(path: str) -> tuple[str, str]:
    """A path's real folder and name: two names for one file that does not exist yet."""
    import os

    return os.path.realpath(os.path.dirname(path) or "."), os.path.basename(path)


def _fuzz_once(configs: list, args, steps: int, episode_steps: Optional[int]) -> int:
    """One config (or a sweep of them) as a campaign; the first finding written to -o."""
    from ..model.scenarios.outputs import check_output

    config = configs[0]
    label = "+".join(config.faults) or "unfaulted"
    output = args.output or f"fuzz-{label}-seed{args.seed}.toml"
    check_output(output, (), args.force, "-o")  # the outputs, before torch loads
    if args.trace:
        check_output(args.trace, (), args.force, "--trace")
        if _where(args.trace) == _where(output):
            raise ScenarioError(f"--trace {args.trace}: the same file as -o; give each its own name")
    from ..model.fuzzing.campaign import default_jobs, plan, run_campaign
    from ..model.fuzzing.config import check_plan
    from ..model.fuzzing.fuzz import EPISODE_STEPS
    from ..model.fuzzing.options import option_sets_for
    from ..model.timeline.fmt import plural
    from ..render.report import progress
    from .common import EXIT_INTERRUPTED

    seeds = range(args.seed, args.seed + args.seeds)
    check_plan(args.seed, args.seeds, len(configs), -(-steps // (episode_steps or EPISODE_STEPS)))
    def tasks_for(seeds) -> list:
        """Every config's episodes for these seeds (each config through its own option sets)."""
        return [task for c in configs
                for task in plan([c], seeds, steps, episode_steps or EPISODE_STEPS,
                                 option_sets=option_sets_for(c.components) if args.sweep_options else None,
                                 full_checks=args.full_checks)]

    sets = option_sets_for(configs[-1].components) if args.sweep_options else None
    jobs = args.jobs or default_jobs()
    what = config.label() if len(configs) == 1 else f"{len(configs)} configs swept"
    if getattr(args, "until_budget", False):
        from ..model.fuzzing.campaign import run_seeds_until

        campaign = run_seeds_until(lambda seed: tasks_for([seed]), args.seed, jobs, args.time_budget, None,
                                   args.shrink_budget, first=args.first, ray=args.ray, **_differential(args))
        seeds = range(args.seed, args.seed + max(1, campaign.seeds_run))
        args.seeds = len(seeds)
    else:
        tasks = tasks_for(seeds)
        with progress(sum(t.steps for t in tasks), f"fuzz {what}", minimum=2000) as advance:
            campaign = run_campaign(tasks, jobs, args.time_budget, advance, args.shrink_budget, first=args.first,
                                    ray=args.ray, **_differential(args))
    rate = f"{campaign.ops_per_second:,.0f} ops/s, {plural(campaign.jobs, 'job')}"
    which = f"seed {args.seed}" if args.seeds == 1 else f"seeds {args.seed}-{seeds[-1]}"
    stopped = "STOPPED (interrupted): " if campaign.interrupted else ""
    if not campaign.findings:
        swept = f", {len(sets)} option sets in turn" if sets else ""
        nothing = "no divergence from SGLang 0.5.23" if args.against else "no failure"
        _say_or_json(args, {"config": what, "configs": [c.label() for c in configs], "seed": args.seed,
                            "seeds": args.seeds, "steps": campaign.steps_run,
                            "ops_per_second": round(campaign.ops_per_second), "jobs": campaign.jobs, "finding": None,
                            "option_sets": len(sets) if sets else 0, "interrupted": campaign.interrupted,
                            "against": args.against, "per_config": campaign.per_config()},
                     f"{stopped}{nothing} in {campaign.steps_run:,} steps ({what}{swept}, {which}; {rate})")
        return EXIT_INTERRUPTED if campaign.interrupted else 0
    if campaign.interrupted:  # found, but not shrunk: say what was found, write nothing
        first = campaign.findings[0]
        print(f"{stopped}{first.finding.check} at step {first.finding.step} of seed {first.seed}'s episode "
              f"{first.episode} ({first.config.label()}); rerun without interrupting to shrink it")
        return EXIT_INTERRUPTED
    names = [output]  # the first: the output checked up front; the others: fresh names
    for k, result in enumerate(campaign.findings[1:], 1):
        names.append(_fresh_name(f"fuzz-{label}-seed{result.seed}.toml" if not args.output else output, names))
    summaries = [_write_finding(result, name, args, trace=k == 0)
                 for k, (result, name) in enumerate(zip(campaign.findings, names))]
    texts = [summary.pop("text") for summary in summaries]
    for summary in summaries:
        summary.update(steps=campaign.steps_run, ops_per_second=round(campaign.ops_per_second), jobs=campaign.jobs,
                       per_config=campaign.per_config())
    if args.json:
        print(json.dumps({**summaries[0], "more_findings": summaries[1:]} if len(summaries) > 1 else summaries[0],
                         indent=1))
    else:
        print(printable("\n".join(texts), lines=True))
        print(f"  {campaign.steps_run:,} steps ({what}, {which}; {rate}); {plural(len(summaries), 'distinct failure')}")
    return 1


def _differential(args) -> dict:
    """With --against sglang: the campaign's episode and shrinker that run SGLang too."""
    if not args.against:
        return {}
    from ..bridge.differential_fuzz import differential_episode, shrink_divergence

    return {"episode": differential_episode, "shrinker": shrink_divergence}


def _fresh_name(name: str, taken: list[str]) -> str:
    """``name`` if no file has it and this run has not used it, else NAME-2, NAME-3, …,
    the first free one: a campaign's further failures never overwrite a file."""
    import os

    stem, ext = os.path.splitext(name)
    candidate, n = name, 1
    while candidate in taken or os.path.exists(candidate):
        n += 1
        candidate = f"{stem}-{n}{ext}"
    return candidate


def _write_finding(result, output: str, args, trace: bool) -> dict:
    """Write one shrunk finding (and, for the first, the unshrunk run with --trace);
    its summary, with the words ``text`` says it in."""
    from ..model.fuzzing.fuzz import repro_scenario
    from ..model.scenarios.outputs import open_output
    from ..model.scenarios.writer import scenario_jsonl, scenario_toml

    finding, config = result.finding, result.config  # with --sweep-options: the episode's options
    label = "+".join(config.faults) or "unfaulted"
    if trace and args.trace:
        from ..model.scenarios.scenario import scenario_from_records

        header = {"schema": 1, "scenario": {"name": f"fuzz-{label}-seed{result.seed}-run", "source": "urc fuzz"},
                  "config": config.scenario_config()}
        with open_output(args.trace, (), args.force, "--trace") as stream:
            stream.write(scenario_jsonl(scenario_from_records(header, result.run_steps)))
    diverged = finding.kind == "divergence"  # urc fuzz --against sglang
    if diverged:
        from ..bridge.differential_fuzz import divergence_scenario

        scenario = divergence_scenario(result, f"fuzz-against-sglang-seed{result.seed}")
    else:
        scenario = repro_scenario(result)
    with open_output(output, (), args.force, "-o") as stream:
        stream.write(scenario_toml(scenario))
    fired = result.first_fired
    where = f"step {finding.step} of episode {result.episode}" + (f" (the fault first acted at step {fired})"
                                                                  if fired is not None else "")
    wrote = f"wrote {output}" + (f" and the failing run to {args.trace}" if trace and args.trace else "")
    return {
        "config": config.label(), "seed": result.seed, "episode": result.episode, "check": finding.check,
        "message": finding.message, "flagged_step": finding.step, "first_faulty_step": fired,
        "shrunk_steps": len(result.shrunk), "shrink_runs": result.shrink_runs, "output": output,
        "trace": args.trace if trace else None,
        "text": "\n".join([
            f"FAIL {config.label()}, seed {result.seed}: {finding.check} at {where}",
            f"  {finding.message}",
            f"  shrunk to {len(result.shrunk)} steps ({result.shrink_runs} runs); {wrote}",
            f"  replay: urc run {output} --against sglang" if diverged else
            f"  replay: urc run {output}   (with faults = [] it passes)",
        ]),
    }


def _detection_table(args) -> int:
    from pathlib import Path

    from cache.faults import catalogue

    from ..model.fuzzing.campaign import default_jobs, map_in_workers
    from ..model.fuzzing.fuzz import detect_fault, repro_scenario
    from ..model.scenarios.outputs import check_output, open_output
    from ..model.timeline.fmt import plural
    from ..model.scenarios.writer import scenario_toml
    from ..render.detections import check_detection_row, detection_text

    folder = Path(args.output) if args.output else None
    if folder is not None and not folder.is_dir():
        raise ScenarioError(f"-o {folder}: with --faults {args.faults}, -o names an existing directory")
    faults = list(catalogue().values())
    kept: dict[str, dict] = {}
    if args.faults == "new":
        try:
            kept = {row["fault"]: row for row in json.loads((folder / "detections.json").read_text(encoding="utf-8"))
                    if check_detection_row(row)}
        except (OSError, ValueError, TypeError, KeyError, RecursionError) as exc:
            raise ScenarioError(f"-o {folder}: no readable detections.json to add to ({exc})") from None
        faults = [f for f in faults if f.name not in kept]
    if folder is not None:
        for name in [f"{f.name}.toml" for f in faults] + ["detections.json"]:
            check_output(str(folder / name), (), args.force, "-o")
    rows = []
    jobs = args.jobs or default_jobs()
    if sys.stderr.isatty():
        print(f"fuzzing {len(faults)} faults on {plural(min(jobs, len(faults)), 'job')} …", file=sys.stderr, flush=True)
    detections = map_in_workers(functools.partial(detect_fault, shrink_budget=args.shrink_budget), faults, jobs,
                                ray=args.ray)
    for fault, detection in zip(faults, detections):
        rows.append(detection.row())
        if folder is not None and detection.flagged:
            with open_output(str(folder / f"{fault.name}.toml"), (), args.force, "-o") as stream:
                stream.write(scenario_toml(repro_scenario(detection.result, name=f"fuzz-{fault.name}")))
    if kept:  # the new rows among the kept ones, in catalogue order
        found = {row["fault"]: row for row in rows}
        rows = [found.get(name) or kept[name] for name in catalogue() if name in found or name in kept]
    if folder is not None:
        with open_output(str(folder / "detections.json"), (), args.force, "-o") as stream:
            stream.write(json.dumps(rows, indent=1) + "\n")
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(printable(detection_text(rows), lines=True))  # rows kept from an earlier detections.json
    return 0 if all(r["flagged"] for r in rows) else 1


def _say_or_json(args, data: dict, text: str) -> None:
    print(json.dumps(data, indent=1) if args.json else printable(text, lines=True))

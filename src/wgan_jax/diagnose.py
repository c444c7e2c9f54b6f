"""`python -m wgan_jax.diagnose --workdir DIR [--json]`: a plain-language health report of a run.

Reads WORKDIR/config.json (loss, penalty, penalty_target, penalty_weight, learning rates,
model.critic_norm and the `health` thresholds; defaults when absent), metrics.jsonl (replayed
through the health rules of `wgan_jax.health`, the source of truth for those rules) and
events.jsonl (for the trainer's other events, e.g. guard rollbacks and resumes), and says
whether the run is healthy, when each problem started, the evidence, and what to do, including
which kept checkpoint had the best evaluation score.

Exit status: 0 healthy, 1 problems found, 2 bad input (missing workdir, unreadable files, no
metrics), reported as one `error: ...` line on stderr.

Events in events.jsonl whose `severity` is "info" (or whose rule is one of `INFO_RULES`) are
listed as notes and do not make a run unhealthy.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TypeGuard

from wgan_jax import cli, fs, health, run_config
from wgan_jax.errors import UserError
from wgan_jax.metrics import ranking
from wgan_jax.records import EVENTS_FILE, METRICS_FILE, json_safe, read_jsonl

INFO_RULES = ("info", "resume", "checkpoint", "best_checkpoint", "early_stopping", "finished")
TITLES = {
    "nonfinite": "Non-finite values (NaN/inf)",
    "exploding_gradients": "Exploding gradients",
    "vanishing_gradients": "Vanishing generator gradients",
    "discriminator_overpowering": "Discriminator overpowering the generator",
    "penalty_off_target": "Gradient penalty off target",
    "mode_collapse": "Mode collapse",
    "eval_regression": "Evaluation score got worse",
    "loss_spike": "Loss spikes",
    "dead_units": "Dead units",
    "saturation": "Saturated outputs",
}


def _load_config(workdir: str) -> tuple[dict, list[str]]:
    config = run_config.read_config_dict(workdir)
    if config is None:
        return {}, ["no config.json: assumed loss='wasserstein', penalty='gp' and default "
                    "health thresholds"]
    if "loss" not in config and isinstance(config.get("config"), dict):
        config = config["config"]
    return config, []


def _load_rows(workdir: str) -> tuple[list[dict], list[dict]]:
    if not fs.isdir(workdir):
        raise UserError(f"workdir {workdir} does not exist or is not a directory")
    metrics = fs.join(workdir, METRICS_FILE)
    if not fs.exists(metrics):
        raise UserError(f"no {METRICS_FILE} in {workdir}; has the run logged any step yet?")
    try:
        rows = [r for r in read_jsonl(metrics) if isinstance(r.get("step"), (int, float))]
        events_path = fs.join(workdir, EVENTS_FILE)
        events = read_jsonl(events_path) if fs.exists(events_path) else []
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read the logs in {workdir}: {e}") from None
    if not rows:
        raise UserError(f"{metrics} holds no metric rows")
    for number, event in enumerate(events, 1):
        evidence = event.get("evidence")
        if evidence is not None and not isinstance(evidence, dict):
            raise UserError(
                f"{fs.join(workdir, EVENTS_FILE)}: event {number} (rule "
                f"{str(event.get('rule'))[:40]!r}, step {str(event.get('step'))[:20]}) has "
                f"evidence that is not a JSON object: {json.dumps(evidence)[:60]}")
    return rows, events


def _checkpoint_steps(workdir: str) -> list[int]:
    directory = fs.join(workdir, "checkpoints")
    if not fs.isdir(directory):
        return []
    return sorted(int(name) for name in fs.listdir(directory)
                  if name.isdigit() and fs.isdir(fs.join(directory, name)))


def _best_eval(rows: Sequence[Mapping], config: Mapping, checkpoints: list[int]) -> dict | None:
    """The best value of the run's selection metric, and the kept checkpoint closest to it."""
    keys = {k for r in rows for k in r}
    wanted = (config.get("eval") or {}).get("metric") if isinstance(config.get("eval"),
                                                                    dict) else None
    metric = ranking.choose_metric(keys, str(wanted or ""))
    if not metric:
        return None
    best = None
    for r in rows:
        v = r.get(metric)
        if _finite(v) and (best is None or ranking.is_better(metric, v, best[0])):
            best = (float(v), int(r["step"]))
    if best is None:
        return None
    result = {"metric": metric, "value": best[0], "step": best[1], "checkpoint": None}
    if checkpoints:
        # At evaluation time checkpoints are saved at (or shortly after) the eval step: prefer
        # an exact match, else the newest kept checkpoint not after the best step.
        if best[1] in checkpoints:
            result["checkpoint"] = best[1]
        else:
            earlier = [s for s in checkpoints if s <= best[1]]
            result["checkpoint"] = earlier[-1] if earlier else None
    return result


def _sort_step(v: Any) -> float:
    """A step to sort by; -1 (first) when it is missing or not a number."""
    return float(v) if _finite(v) else -1.0


def _finite(v: Any) -> TypeGuard[float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _tailored_advice(rule: str, evidence: Mapping, config: Mapping) -> list[str]:
    """Advice that names this run's own config values."""
    advice = []
    raw_model = config.get("model")
    model: Mapping[str, Any] = raw_model if isinstance(raw_model, dict) else {}
    critic_norm = model.get("critic_norm")
    loss, penalty = config.get("loss"), config.get("penalty")
    critic_lr, generator_lr = config.get("critic_lr"), config.get("generator_lr")
    weight = config.get("penalty_weight")
    if rule in ("discriminator_overpowering", "exploding_gradients", "vanishing_gradients",
                "mode_collapse"):
        if critic_norm == "batch":
            advice.append("Remove BatchNorm from the critic: set model.critic_norm='layer' "
                          "(or 'none'); BatchNorm lets the critic separate real and fake batches.")
        if loss in ("logistic", "hinge", "rpgan"):
            advice.append(f"Switch from loss='{loss}' to loss='wasserstein' with penalty='gp' "
                          "(penalty_weight=10, n_critic=5, Adam betas 0/0.5 and 0.9).")
        if _finite(critic_lr) and critic_lr > 0:
            advice.append(f"Lower critic_lr from {critic_lr:g} to {critic_lr / 2:g}"
                          + (f" (generator_lr is {generator_lr:g})." if _finite(generator_lr)
                             else "."))
    if rule == "exploding_gradients" and evidence.get("metric") == "grad_norm/generator" and (
            _finite(generator_lr) and generator_lr > 0):
        advice.append(f"Lower generator_lr from {generator_lr:g} to {generator_lr / 2:g}.")
    if rule == "penalty_off_target" and _finite(weight):
        if _finite(evidence.get("interp_mean")) and evidence["interp_mean"] > evidence.get(
                "target", 1.0):
            advice.append(f"Raise penalty_weight from {weight:g} to {min(10.0, weight * 10):g}.")
    if rule == "discriminator_overpowering" and penalty in ("none", "clip") and loss == (
            "wasserstein"):
        advice.append(f"penalty='{penalty}' does not bound the critic well: use penalty='gp'.")
    return advice


def _coverage(rows: Sequence[Mapping], loss: str, penalty: str) -> tuple[list[str], list[str]]:
    """(rules whose metrics were logged, rules that could not run for lack of metrics)."""
    keys = {k for r in rows for k in r}

    def has(*names: str) -> bool:
        return any(k == n or k.startswith(n + "/") for n in names for k in keys)

    needs = {
        "nonfinite": True,
        "exploding_gradients": has("grad_norm/critic", "grad_norm/generator"),
        "vanishing_gradients": has("grad_norm/generator"),
        "discriminator_overpowering": (has("critic_loss") and has("generator_loss"))
        if loss in ("logistic", "hinge", "rpgan") else has("wasserstein_estimate"),
        "loss_spike": has("critic_loss"),
        "mode_collapse": has("diversity", "eval/modes"),
        "eval_regression": any(health.is_eval_score(k) for k in keys),
        "dead_units": has("dead_units"),
        "saturation": has("saturated"),
    }
    if penalty in ("gp", "lp"):
        needs["penalty_off_target"] = has("input_grad_norm/interp_mean")
    checked = [TITLES[r].lower() for r, ok in needs.items() if ok]
    unchecked = [TITLES[r].lower() for r, ok in needs.items() if not ok]
    return checked, unchecked


def diagnose(workdir: str) -> dict:
    """Builds the report (a JSON-serialisable dict); raises `UserError` on bad input."""
    rows, file_events = _load_rows(workdir)
    config, notes = _load_config(workdir)
    loss = str(config.get("loss", "wasserstein"))
    penalty = str(config.get("penalty", "gp"))
    monitor = _monitor(config, loss, penalty)
    # Replayed in file order: after an in-run rollback the steps go back and the retried steps
    # follow the abandoned ones, which is the order the run lived through.
    replayed = [e for r in rows for e in monitor.update(r)]
    ongoing = {key.split(":")[0] for key in monitor.active()}
    last_step = int(rows[-1]["step"])
    problems_by_rule, info = _sort_events(file_events, replayed)

    checkpoints = _checkpoint_steps(workdir)
    best = _best_eval(rows, config, checkpoints)
    checked, unchecked = _coverage(rows, loss, penalty)
    train_rows = sum(1 for r in rows if "critic_loss" in r)
    if train_rows < 2 * monitor.cfg["window"]:
        notes.append(f"only {train_rows} training rows: trend rules need about "
                     f"{2 * monitor.cfg['window']} (log more often with a smaller log_every)")
    problems = [_problem(rule, events, config, best, rule in ongoing)
                for rule, events in problems_by_rule.items()]
    problems.sort(key=lambda p: _sort_step(p["first_step"]))
    shown = ("critic_loss", "generator_loss", "wasserstein_estimate", "gradient_penalty")
    last_train: Mapping[str, Any] = next(
        (r for r in reversed(rows) if any(k in r for k in shown)), {})
    last = {k: last_train[k] for k in shown if k in last_train}
    return {
        "workdir": fs.abspath(workdir),
        "healthy": not problems,
        "loss": loss,
        "penalty": penalty,
        "rows": len(rows),
        "first_step": int(min(r["step"] for r in rows)),
        "last_step": last_step,
        "last_values": last,
        "problems": problems,
        "best_eval": best,
        "checkpoints": checkpoints,
        "checked": checked,
        "not_checked": unchecked,
        "notes": notes + [str(e.get("message", e.get("rule"))) for e in info],
    }


def _monitor(config: Mapping[str, Any], loss: str, penalty: str) -> health.HealthMonitor:
    """The health rules as the run's config set them, to replay its metrics through."""
    target = config.get("penalty_target", 1.0)
    health_config = config.get("health") if isinstance(config.get("health"), dict) else {}
    weight = config.get("penalty_weight")
    return health.HealthMonitor(health_config, loss=loss, penalty=penalty,
                                penalty_target=target if _finite(target) else 1.0,
                                penalty_weight=weight if _finite(weight) else None)


def _sort_events(
    file_events: list[dict], replayed: list[dict]
) -> tuple[dict[str, list[dict]], list[dict]]:
    """(problem events by rule, info events), each (rule, step) once.

    Health-rule events are taken from the replay (the metrics are the source of truth, judged
    with this run's config); events.jsonl contributes the trainer's other events (rollbacks,
    resumes, unreadable checkpoints, ...).
    """
    recorded = [e for e in file_events if e.get("rule") not in TITLES]
    seen: set[tuple[str, Any]] = set()
    problems_by_rule: dict[str, list[dict]] = {}
    info: list[dict] = []
    for event in recorded + replayed:
        rule = str(event.get("rule", "unknown"))
        key = (rule, event.get("step"))
        if key in seen:
            continue
        seen.add(key)
        if event.get("severity") == "info" or rule in INFO_RULES:
            info.append(event)
        else:
            problems_by_rule.setdefault(rule, []).append(event)
    return problems_by_rule, info


def _problem(rule: str, events: list[dict], config: Mapping[str, Any], best: dict | None,
             ongoing: bool) -> dict:
    """One problem of the report: a rule's first and latest episode, with advice (a rollback
    to the best checkpoint when one came before the problem)."""
    events.sort(key=lambda e: _sort_step(e.get("step")))
    first, latest = events[0], events[-1]
    advice = [str(first.get("advice", "")).strip()] if first.get("advice") else []
    advice += _tailored_advice(rule, first.get("evidence") or {}, config)
    best = best or {}
    rollback = best.get("checkpoint") is not None and _finite(first.get("step"))
    if rule == "eval_regression":
        rollback = rollback and best["checkpoint"] != (first.get("evidence") or {}).get(
            "best_step")
    elif rollback:
        rollback = best["checkpoint"] <= first["step"]
    if rollback:
        advice.append(f"Roll back to checkpoint {best['checkpoint']} "
                      f"(checkpoints/{best['checkpoint']}), which had the best "
                      f"{best['metric']} = {best['value']:.4g}.")
    return {
        "rule": rule,
        "title": TITLES.get(rule, rule.replace("_", " ").capitalize()),
        "first_step": first.get("step"),
        "last_step": latest.get("step"),
        "episodes": len(events),
        "ongoing": ongoing,
        "message": first.get("message", ""),
        "latest_message": latest.get("message", "") if latest is not first else "",
        "evidence": first.get("evidence", {}),
        "advice": advice,
    }


def _fmt_value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return ", ".join(_fmt_value(x) for x in v)
    return str(v)


def format_report(report: Mapping) -> str:
    """The report as short plain text."""
    lines = [
        f"wgan_jax diagnosis of {report['workdir']}",
        f"  loss={report['loss']}, penalty={report['penalty']}; {report['rows']} metric rows, "
        f"steps {report['first_step']}..{report['last_step']}",
    ]
    problems = report["problems"]
    if report["healthy"]:
        last = ", ".join(f"{k}={_fmt_value(v)}" for k, v in report["last_values"].items())
        lines.append("HEALTHY: no problems found." + (f" Last values: {last}." if last else ""))
    else:
        lines.append(f"PROBLEMS FOUND: {len(problems)}")
    for i, p in enumerate(problems, 1):
        when = f"started at step {p['first_step']}"
        if p["episodes"] > 1:
            when += f", {p['episodes']} episodes, the last at step {p['last_step']}"
        if p["ongoing"]:
            when += f"; still present at the last step {report['last_step']}"
        lines.append("")
        lines.append(f"{i}. {p['title']}: {when}.")
        if p["message"]:
            lines.append(f"   {p['message']}")
        evidence = {k: v for k, v in (p["evidence"] or {}).items() if v is not None}
        if evidence:
            lines.append("   Evidence: " + ", ".join(
                f"{k}={_fmt_value(v)}" for k, v in evidence.items()))
        if p["advice"]:
            lines.append("   What to do:")
            lines.extend(f"   - {a}" for a in p["advice"])
    best = report.get("best_eval")
    if best:
        lines.append("")
        where = (f"kept checkpoint: checkpoints/{best['checkpoint']}"
                 if best.get("checkpoint") is not None else "no checkpoint kept for it")
        lines.append(f"Best evaluation: {best['metric']} = {best['value']:.4g} at step "
                     f"{best['step']} ({where}).")
    if report.get("not_checked"):
        lines.append("")
        lines.append("Not checked (metrics not logged; diagnostics.level='full' logs more, "
                     "eval_every > 0 adds eval/*): " + ", ".join(report["not_checked"]) + ".")
    if report.get("notes"):
        lines.append("")
        lines.extend(f"Note: {n}" for n in report["notes"])
    return "\n".join(lines)


def run(workdir: str, as_json: bool) -> int:
    """Prints the report of `workdir`; returns the exit status (0 healthy, 1 problems, 2 error)."""
    try:
        report = diagnose(workdir)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: cannot read {workdir}: {e}", file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps(json_safe(report), indent=2, allow_nan=False))
    else:
        print(format_report(report))
    return 0 if report["healthy"] else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = cli.ArgumentParser(
        prog="python -m wgan_jax.diagnose",
        description="Plain-language health report of a wgan_jax run directory.",
    )
    parser.add_argument("--workdir", required=True, help="the run's working directory")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    return run(args.workdir, args.json)


if __name__ == "__main__":
    sys.exit(main())

"""`robotrl bench policy`: the table of `robotrl.inference.evaluation.evaluate`'s results."""

from __future__ import annotations


def summary_rows(results: dict) -> list[tuple[str, object]]:
    r = results
    return [
        ("policy", r["policy_type"]),
        ("inputs", ", ".join(r["inputs"])),
        ("task / scenario", f"{r['task']} / {r['scenario']}"),
        ("episodes (seeds)", f"{r['episodes']} ({r['seeds'][0]}..{r['seeds'][1]})"),
        (
            "execution",
            f"synchronous, {r['execute_steps']} of {r['horizon']} rows per chunk"
            + (", RTC prefix" if r.get("rtc_prefix") else ""),
        ),
        ("success", f"{r['successes']}/{r['episodes']} = {r['success_rate']:.1%}"),
        ("Wilson 95% interval", f"[{r['wilson95_low']:.1%}, {r['wilson95_high']:.1%}]"),
        ("mean return", round(r["mean_return"], 3)),
        ("mean episode ticks", round(r["mean_ticks"], 1)),
        ("safety clamps", r["safety_clamps"]),
        ("chunk time p50 / p95 (ms)", f"{r['chunk_ms_p50']:.1f} / {r['chunk_ms_p95']:.1f}"),
        ("latent age (ticks: chunks)", ", ".join(f"{k}: {v}" for k, v in r["latent_age_ticks"].items()) or "-"),
    ]

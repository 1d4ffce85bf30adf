//! The criticality experiment (the paper's Table 5): `criticality` ranks the operators by
//! their mean recovery from injected faults in restart-all mode.

use std::time::Duration;

use super::{f64_field, u64_field, Runner};
use crate::results::{CritRow, Criticality};

pub(super) fn criticality(runner: &mut Runner) -> Result<Criticality, String> {
    let plan = runner.opts.plan.clone();
    let ops = if plan.crit_operators.is_empty() {
        7
    } else {
        plan.crit_operators.len()
    };
    let bar = runner.progress.experiment("criticality", 1);
    bar.set_length(ops as u64 + 1);
    let mut args = vec!["--faults".to_owned(), plan.crit_faults.to_string()];
    if !plan.crit_operators.is_empty() {
        args.push("--operators".into());
        args.push(plan.crit_operators.join(","));
    }
    if let Some(n) = plan.crit_records {
        args.push("--records".into());
        args.push(n.to_string());
    }
    let bin = runner.opts.bins.criticality.clone();
    let b2 = bar.clone();
    let (_run, j, cmd) = runner.run(
        &bar,
        "ranking operators",
        &bin,
        &args,
        Duration::from_secs(1800),
        move |line| {
            // One line per operator measured: "criticality: <uid>: N faults, ...".
            if line.starts_with("criticality: ") && line.contains(" faults, ") {
                b2.inc(1);
            }
        },
    )?;
    bar.finish_with_message("done");
    let who = cmd.as_str();
    let mut ranking = Vec::new();
    for o in j["operators"]
        .as_array()
        .ok_or_else(|| format!("{who}: no `operators` in its JSON"))?
    {
        ranking.push(CritRow {
            rank: u64_field(o, "rank", who)?,
            uid: o["uid"].as_str().unwrap_or_default().to_owned(),
            faults: u64_field(o, "faults", who)?,
            mean_recovery_ms: f64_field(o, "mean_recovery_ms", who)?,
            p50_recovery_ms: f64_field(o, "p50_recovery_ms", who)?,
            max_recovery_ms: f64_field(o, "max_recovery_ms", who)?,
            duplicates: u64_field(o, "duplicates", who)?,
            missing: u64_field(o, "missing", who)?,
        });
    }
    Ok(Criticality {
        faults: plan.crit_faults,
        records: j["records"].as_u64().unwrap_or(0),
        checkpoint_interval_ms: j["checkpoint_interval_ms"].as_u64().unwrap_or(0),
        ranking,
        skipped: j["skipped"].as_array().cloned().unwrap_or_default(),
        total_seconds: j["total_seconds"].as_f64().unwrap_or(f64::NAN),
        command: cmd,
        raw: j,
    })
}

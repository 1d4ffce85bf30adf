//! Buffer-queue backups over REST: `GET /jobs/{id}/backups`, each backed-up subtask's queue,
//! filtering, promotions and lag.

use actix_web::{HttpRequest, HttpResponse};
use serde_json::{json, Value};

use super::request::*;

/// `GET /jobs/{id}/backups`.
pub(super) async fn backups(state: State, req: HttpRequest) -> Answer {
    let job = job_of(&state, &req)?;
    let list: Vec<Value> = job
        .backup_metrics()
        .iter()
        .map(|b| {
            json!({
                "uid": b.uid, "subtask": b.subtask,
                "queueEntries": b.queue_entries, "queueBytes": b.queue_bytes,
                "filteredBatches": b.filtered, "filteredRecords": b.filtered_records,
                "added": b.added, "claimed": b.claimed,
                "promotions": b.promotions, "backupReplacements": b.backup_replacements,
                "lastFailoverMs": b.last_failover.map(|d| d.as_secs_f64() * 1000.0),
                "lastReprocessedBatches": b.last_reprocessed,
                "backupLag": b.backup_lag, "degraded": b.degraded,
            })
        })
        .collect();
    Ok(HttpResponse::Ok().json(json!({ "backups": list })))
}

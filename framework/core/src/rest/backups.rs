//! Buffer-queue backups over REST: `GET /jobs/{id}/backups`, each backed-up subtask's queue,
//! filtering, promotions and lag.

use super::request::{job_of, Answer, State};
use crate::api_types::{Backup, Backups};
use actix_web::{HttpRequest, HttpResponse};

/// `GET /jobs/{id}/backups`.
pub(super) async fn backups(state: State, req: HttpRequest) -> Answer {
    let job = job_of(&state, &req)?;
    let backups = job
        .backup_metrics()
        .iter()
        .map(|b| Backup {
            uid: b.uid.clone(),
            subtask: b.subtask as u64,
            queue_entries: b.queue_entries,
            queue_bytes: b.queue_bytes,
            filtered_batches: b.filtered,
            filtered_records: b.filtered_records,
            added: b.added,
            claimed: b.claimed,
            promotions: b.promotions,
            backup_replacements: b.backup_replacements,
            last_failover_ms: b.last_failover.map(|d| d.as_secs_f64() * 1000.0),
            last_reprocessed_batches: b.last_reprocessed,
            backup_lag: b.backup_lag,
            degraded: b.degraded,
        })
        .collect();
    Ok(HttpResponse::Ok().json(Backups { backups }))
}

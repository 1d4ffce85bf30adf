//! The REST API's JSON, once: the request and answer bodies of the REST server (`rest`), as
//! serde types that the server serializes and its clients (`weirctl`, its control agent)
//! deserialize. Field names are Flink's where Flink has the call (`jid`, `state`,
//! `start-time`, `backpressureLevel`, `end_to_end_duration`: Flink mixes kebab, camel and snake
//! case, and so do these types, field by field); the fields Weir adds are named as Weir's
//! other fields are.
//!
//! Every answer type reads a Flink cluster's answer too: a field Flink does not send takes
//! its default (`#[serde(default)]` on every answer type; `Option` where "absent" means
//! something), and fields Flink sends that these types lack are ignored.
//!
//! The types are grouped by resource: the cluster, jobs, vertices, metrics, failures and
//! backups (`jobs`); checkpoint statistics and settings (`checkpoints`); the calls that
//! change a job, savepoints, rescale, replace and live settings (`operations`); all are
//! re-exported here. The request bodies (`SavepointRequest`, `StopRequest`,
//! `ParallelismRequest`, `ReplaceRequest`) are what clients send; the server reads the same
//! fields one by one, to answer a bad one with a message that names it.
//!
//! It owns shapes only: no HTTP (the server is `rest`, behind the `rest` feature; this module
//! compiles with serde alone), no route (the route table is `rest`'s, with `ROUTES`), and no
//! conversion from the job's types (the server's handlers build these values).

use serde::{Deserialize, Serialize};

mod checkpoints;
mod jobs;
mod operations;

pub use self::checkpoints::*;
pub use self::jobs::*;
pub use self::operations::*;

// ---- Errors ------------------------------------------------------------------------------

/// Every error answer: `{"errors": ["..."]}` (Flink's shape).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct ErrorBody {
    /// The messages (Flink's carry Java stack traces).
    pub errors: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Flink answer, with fields these types lack and without Weir's, parses.
    #[test]
    fn flink_answers_parse() {
        let overview: JobsOverview = serde_json::from_str(
            r#"{"jobs":[{"jid":"a1","name":"n","state":"RUNNING","start-time":1,"end-time":-1,
            "duration":5,"last-modification":2,"tasks":{"running":2,"total":2},"pending-operators":0}]}"#,
        )
        .unwrap();
        assert_eq!(overview.jobs[0].jid, "a1");
        let job: JobDetails = serde_json::from_str(
            r#"{"jid":"a1","name":"n","state":"RUNNING","vertices":[{"id":"v","name":"Source",
            "parallelism":2,"status":"RUNNING","metrics":{"read-records":3,"accumulated-backpressured-time":0}}]}"#,
        )
        .unwrap();
        assert_eq!(job.vertices[0].metrics.read_records, 3);
        assert_eq!(job.vertices[0].backpressure_level, None);
        let stats: CheckpointingStatistics = serde_json::from_str(
            r#"{"counts":{"completed":4,"failed":0},"latest":{"completed":{"id":4,
            "end_to_end_duration":12,"state_size":7,"checkpointed_size":7},"failed":null}}"#,
        )
        .unwrap();
        assert_eq!(stats.counts.completed, 4);
        assert_eq!(
            stats.latest.completed.map(|c| c.end_to_end_duration),
            Some(12)
        );
    }

    /// Every answer Flink 2.3 gave in the recorded fixtures parses into its type.
    #[test]
    fn the_recorded_flink_answers_parse() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/tests/fixtures/flink-2.3");
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            let text = read(&name);
            let parsed = match name.as_str() {
                n if n.starts_with("overview") => {
                    serde_json::from_str::<JobsOverview>(&text).map(drop)
                }
                n if n.starts_with("job") => serde_json::from_str::<JobDetails>(&text).map(drop),
                n if n.starts_with("checkpoints") => {
                    serde_json::from_str::<CheckpointingStatistics>(&text).map(drop)
                }
                n if n.starts_with("backpressure") => {
                    serde_json::from_str::<VertexBackpressure>(&text).map(drop)
                }
                n if n.starts_with("metrics") => {
                    serde_json::from_str::<Vec<Metric>>(&text).map(drop)
                }
                n if n.starts_with("subtasks-metrics") => {
                    serde_json::from_str::<Vec<AggregatedMetric>>(&text).map(drop)
                }
                "stop-trigger.json" => serde_json::from_str::<TriggerId>(&text).map(drop),
                n if n.starts_with("stop-") => {
                    serde_json::from_str::<OperationStatus>(&text).map(drop)
                }
                "unknown-job.json" => serde_json::from_str::<ErrorBody>(&text).map(drop),
                _ => continue,
            };
            parsed.unwrap_or_else(|e| panic!("{name}: {e}"));
            seen += 1;
        }
        assert!(seen >= 20, "only {seen} fixtures read");
    }

    /// An exception entry of each kind reads back as it was written.
    #[test]
    fn exception_entries_round_trip() {
        for recovery in [
            Recovery::Promotion {
                uid: "map".into(),
                subtask: 1,
                batches_replayed: 2,
                batches_reprocessed: 3,
            },
            Recovery::Restart {
                attempt: 1,
                restart_delay_ms: None,
            },
        ] {
            let entry = ExceptionEntry {
                stacktrace: "boom".into(),
                recovery: Some(recovery),
                ..ExceptionEntry::default()
            };
            let json = serde_json::to_value(&entry).unwrap();
            assert_eq!(
                serde_json::from_value::<ExceptionEntry>(json).unwrap(),
                entry
            );
        }
    }

    /// The names are Flink's, field by field.
    #[test]
    fn field_names_are_flinks() {
        let v = serde_json::to_value(OperationStatus::completed(OperationResult {
            failure_cause: Some(FailureCause {
                class: "c".into(),
                stack_trace: "s".into(),
                serialized_throwable: None,
            }),
            ..OperationResult::default()
        }))
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({"status": {"id": "COMPLETED"},
                "operation": {"failure-cause": {"class": "c", "stack-trace": "s"}}})
        );
        let v = serde_json::to_value(TriggerId {
            request_id: "x".into(),
        })
        .unwrap();
        assert_eq!(v, serde_json::json!({"request-id": "x"}));
        let v = serde_json::to_value(StopRequest::new("/d")).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"targetDirectory": "/d", "drain": false})
        );
    }
}

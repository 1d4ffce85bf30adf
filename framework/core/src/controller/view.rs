//! What the outside reads of a job: one immutable [`JobView`] that the controller alone
//! publishes, whole, after each change (the way a `tokio::sync::watch` channel has one
//! writer). Readers ([`Views`]) take the current value, an `Arc`, and read it without
//! holding any lock: what they see is always one consistent moment of the job (its status,
//! settings, vertices and statistics together), never half of a change.
//!
//! Publishing is copy-on-write: the controller's [`ViewWriter::update`] changes the value in
//! place when no reader holds it, and a copy otherwise. It does not decide what is published
//! (the controller's states do) nor carry commands (`command`).

use std::collections::BTreeMap;

use crate::backup::BackupGroup;
use crate::checkpoint::coordinator::CheckpointStats;
use crate::controller::deployment::ActorEntry;
use crate::controller::JobStatus;
use crate::failure::{FailureRecord, PromotionRecord};
use crate::metrics::JobMetrics;
use std::sync::Arc;

use crate::sync::{lock, Mutex};

/// A job as the controller last published it.
#[derive(Clone, Default)]
pub(crate) struct JobView {
    /// How many times the controller has published (0: the view the job started with).
    pub(crate) version: u64,
    /// The job's status, in Flink's words.
    pub(crate) status: JobStatus,
    /// When the job ended, ms since the Unix epoch.
    pub(crate) ended_ms: Option<u64>,
    /// The current deployment's subtasks (replaced on restart and promotion).
    pub(crate) actors: Vec<ActorEntry>,
    /// The backup groups of the current deployment.
    pub(crate) backups: Vec<Arc<dyn BackupGroup>>,
    /// The job's metrics over the last metrics interval.
    pub(crate) metrics: Option<JobMetrics>,
    /// The checkpoint statistics.
    pub(crate) checkpoints: Option<CheckpointStats>,
    /// Every failure that restarted or ended the job, oldest first.
    pub(crate) failures: Vec<FailureRecord>,
    /// Every backup promoted in place of its failed primary, oldest first.
    pub(crate) promotions: Vec<PromotionRecord>,
    /// The job's vertices at their current parallelism.
    pub(crate) vertices: Vec<crate::plan::VertexInfo>,
    /// Readings operators publish beside their counters.
    pub(crate) gauges: crate::metrics::GaugesByUid,
    /// Rescales so far.
    pub(crate) rescales: crate::rescale::RescaleStats,
    /// The job's checkpoint settings now.
    pub(crate) checkpoint_config: crate::checkpoint::CheckpointConfig,
    /// Every live setting's value now, by name.
    pub(crate) settings: BTreeMap<String, String>,
    /// Every settings change asked for (applied or refused), oldest first.
    pub(crate) settings_history: Vec<crate::settings::ChangeRecord>,
}

/// The controller's end: the only writer of the job's view. Not `Clone`.
pub(crate) struct ViewWriter {
    cell: Arc<Mutex<Arc<JobView>>>,
}

/// A reader's end: cloneable, usable from any thread.
#[derive(Clone)]
pub(crate) struct Views {
    cell: Arc<Mutex<Arc<JobView>>>,
}

/// A view's writer and a reader of it, starting from `first`.
pub(crate) fn channel(first: JobView) -> (ViewWriter, Views) {
    let cell = Arc::new(Mutex::new(Arc::new(first)));
    (ViewWriter { cell: cell.clone() }, Views { cell })
}

impl ViewWriter {
    /// Publishes the view `change` makes of the current one (one new version).
    pub(crate) fn update<R>(&self, change: impl FnOnce(&mut JobView) -> R) -> R {
        let mut current = lock(&self.cell);
        let view = Arc::make_mut(&mut current);
        view.version += 1;
        change(view)
    }

    /// The view as last published.
    pub(crate) fn load(&self) -> Arc<JobView> {
        lock(&self.cell).clone()
    }
}

impl Views {
    /// The view as last published: one moment of the job, whole.
    pub(crate) fn load(&self) -> Arc<JobView> {
        lock(&self.cell).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_keep_the_moment_they_loaded_and_see_each_publication_whole() {
        let (writer, reader) = channel(JobView::default());
        let before = reader.load();
        writer.update(|v| {
            v.settings.insert("a".into(), "1".into());
            v.settings.insert("b".into(), "1".into());
        });
        // The earlier moment is unchanged: the update copied it.
        assert!(before.settings.is_empty());
        assert_eq!(before.version, 0);
        let after = reader.load();
        assert_eq!(after.version, 1);
        assert_eq!(after.settings.len(), 2);
        drop((before, after));
        // No reader holds it: changed in place.
        writer.update(|v| v.status = JobStatus::Running);
        assert_eq!(reader.load().version, 2);
        assert_eq!(writer.load().status, JobStatus::Running);
    }
}

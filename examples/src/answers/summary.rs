//! What a run produced: its [`Summary`] (counts from the job result and handles) and the part
//! files in the output directory ([`prepare_output_dir`], [`read_part_files`]).
//!
//! Owns reading results after (and clearing old output before) a run. It does not build the
//! job (`graph`) nor count levels itself (`counts`).

use std::collections::BTreeMap;
use std::fmt;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use weir::JobResult;

use super::graph::CleaningHandles;
use super::uid;

/// What a run of the job did, from its result and handles.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Lines read by `source`.
    pub records_read: u64,
    /// Lines sent to the side output (`malformed`).
    pub malformed: u64,
    /// Answers dropped by `filter` (empty or spam).
    pub dropped: u64,
    /// Lines written by `sink`.
    pub written: u64,
    /// Written lines per level.
    pub per_level: BTreeMap<String, u64>,
    /// Job wall time in seconds.
    pub seconds: f64,
}

impl Summary {
    /// The summary of a completed job.
    pub fn new(result: &JobResult, handles: &CleaningHandles) -> Self {
        let op = |u: &str| result.operator(u);
        let filter = op(uid::FILTER);
        Summary {
            records_read: op(uid::SOURCE).map_or(0, |o| o.records_out),
            malformed: op(uid::MALFORMED).map_or(0, |o| o.records_in),
            dropped: filter.map_or(0, |o| o.records_in - o.records_out),
            written: op(uid::SINK).map_or(0, |o| o.records_in),
            per_level: handles.level_counts.totals(),
            seconds: result.duration.as_secs_f64(),
        }
    }

    /// Input records per second.
    pub fn records_per_sec(&self) -> f64 {
        if self.seconds > 0.0 {
            self.records_read as f64 / self.seconds
        } else {
            0.0
        }
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "records read:   {:>12}", self.records_read)?;
        for (level, n) in &self.per_level {
            writeln!(f, "  level {level:<8}{n:>12}")?;
        }
        writeln!(f, "written:        {:>12}", self.written)?;
        writeln!(
            f,
            "dropped:        {:>12}  (empty or [spam] content)",
            self.dropped
        )?;
        writeln!(f, "malformed:      {:>12}  (side output)", self.malformed)?;
        write!(
            f,
            "time:           {:>12.3} s  ({:.0} records/s)",
            self.seconds,
            self.records_per_sec()
        )
    }
}

/// Makes `dir` and removes the part files an earlier run of this job (or of the windowed
/// job, with its `late` folder) left there (a run with a higher parallelism leaves more of
/// them).
pub fn prepare_output_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    remove_part_files(dir, &[uid::SINK, uid::MALFORMED, uid::WINDOW_SINK])?;
    let late = dir.join(super::LATE_DIR);
    if late.is_dir() {
        remove_part_files(&late, &[uid::LATE])?;
    }
    Ok(())
}

/// Removes the files `part-{uid}-*` of `uids` in `dir`.
fn remove_part_files(dir: &Path, uids: &[&str]) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let ours = uids.iter().any(|u| name.starts_with(&format!("part-{u}-")));
        if ours && entry.file_type()?.is_file() {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// Every line of the part files `part-{uid}-*` in `dir` (files in name order).
pub fn read_part_files(dir: &Path, uid: &str) -> std::io::Result<Vec<String>> {
    let prefix = format!("part-{uid}-");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    files.sort();
    let mut lines = Vec::new();
    for f in files {
        for line in std::io::BufReader::new(std::fs::File::open(f)?).lines() {
            lines.push(line?);
        }
    }
    Ok(lines)
}

//! Where each fault goes: which operator injects it ([`Injector`]), which records each
//! operator sees ([`Sees`]), and the subtask, record count and target record of a fault at a
//! given input position ([`Layout`], [`Placement`]).

use weir::source::SourceContext;
use weir_examples::answers::{answer_json, clean_line, default_levels, uid, Thresholds};
use weir_examples::rng::SplitMix64;

use crate::recovery_support::{Expected, KeptRecord};

use super::CriticalityOptions;

/// Who injects an operator's fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Injector {
    /// The framework's [`FaultPlan`].
    Plan,
    /// [`FaultySink`].
    HarnessSink,
}

impl Injector {
    pub(super) fn of(op: &str) -> Self {
        if op == uid::SINK {
            Injector::HarnessSink
        } else {
            Injector::Plan
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Injector::Plan => "fault_plan",
            Injector::HarnessSink => "harness_sink",
        }
    }
}

/// What becomes of each input record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Class {
    Malformed,
    Dropped,
    Kept,
}

/// Which records an operator sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sees {
    All,
    Parsed,
    Kept,
}

impl Sees {
    pub(super) fn of(op: &str) -> Self {
        match op {
            uid::FILTER => Sees::Parsed,
            uid::MAP | uid::SINK => Sees::Kept,
            _ => Sees::All,
        }
    }

    pub(super) fn sees(self, c: Class) -> bool {
        match self {
            Sees::All => true,
            Sees::Parsed => c != Class::Malformed,
            Sees::Kept => c == Class::Kept,
        }
    }
}

/// The input: what becomes of each record, and which subtask reads it.
pub(super) struct Layout<'a> {
    pub(super) class: Vec<Class>,
    pub(super) expected: &'a Expected,
    pub(super) records: u64,
    pub(super) parallelism: usize,
}

/// Where one fault goes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Placement {
    pub(super) subtask: usize,
    /// The operator's record (per subtask, from the start of the run) to fail at.
    pub(super) local_record: u64,
    /// The answer id whose reprocessing ends recovery.
    pub(super) target_id: u64,
}

impl<'a> Layout<'a> {
    pub(super) fn new(opts: &CriticalityOptions, expected: &'a Expected) -> Result<Self, String> {
        let mut class = vec![Class::Dropped; opts.records as usize];
        for k in &expected.kept {
            class[k.index as usize] = Class::Kept;
        }
        if expected.malformed > 0 {
            let levels = Thresholds::from_vec(default_levels());
            for (i, c) in class.iter_mut().enumerate() {
                if *c != Class::Kept
                    && clean_line(answer_json(opts.answers_seed, i as u64), &levels).is_err()
                {
                    *c = Class::Malformed;
                }
            }
        }
        if expected.kept.is_empty() {
            return Err(format!(
                "none of the {} generated answers reaches the sink: use more --records",
                opts.records
            ));
        }
        Ok(Layout {
            class,
            expected,
            records: opts.records,
            parallelism: opts.parallelism,
        })
    }

    pub(super) fn share(&self, subtask: usize) -> std::ops::Range<u64> {
        SourceContext {
            subtask,
            parallelism: self.parallelism,
        }
        .share_of(self.records)
    }

    pub(super) fn subtask_of(&self, i: u64) -> usize {
        (0..self.parallelism)
            .find(|&s| self.share(s).contains(&i))
            .unwrap_or(0)
    }

    /// The first kept answer at or after input record `i`, read by the same subtask.
    pub(super) fn target_after(&self, i: u64) -> Option<&'a KeptRecord> {
        let end = self.share(self.subtask_of(i)).end;
        let kept = &self.expected.kept;
        kept.get(kept.partition_point(|k| k.index < i))
            .filter(|k| k.index < end)
    }

    /// `n` random input positions that have a kept answer after them in their subtask.
    pub(super) fn positions(&self, n: usize, seed: u64) -> Result<Vec<u64>, String> {
        let mut rng = SplitMix64::new(seed);
        let mut out = Vec::with_capacity(n);
        let mut tries = 0u64;
        while out.len() < n {
            tries += 1;
            if tries > 1000 + 100 * n as u64 {
                return Err(format!(
                    "cannot place {n} faults in {} records: too few kept answers",
                    self.records
                ));
            }
            let i = rng.below(self.records);
            if self.target_after(i).is_some() {
                out.push(i);
            }
        }
        Ok(out)
    }

    /// Where a fault of `op` at input `position` goes: the first record at or after it that
    /// `op` sees, as a record count of `op`'s subtask.
    pub(super) fn place(&self, op: &str, position: u64) -> Result<Placement, String> {
        let sees = Sees::of(op);
        let subtask = self.subtask_of(position);
        let share = self.share(subtask);
        let class = |i: u64| self.class[i as usize];
        let at = (position..share.end)
            .find(|&i| sees.sees(class(i)))
            .ok_or_else(|| format!("no record after input record {position} reaches `{op}`"))?;
        let before = (share.start..at).filter(|&i| sees.sees(class(i))).count() as u64;
        // `connect` counts the broadcast thresholds too: all of them come first.
        let offset = if op == uid::CONNECT {
            default_levels().len() as u64
        } else {
            0
        };
        let target = self
            .target_after(at)
            .ok_or_else(|| format!("no kept answer after input record {position}"))?;
        Ok(Placement {
            subtask,
            local_record: before + offset,
            target_id: target.id,
        })
    }
}
